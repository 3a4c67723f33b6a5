"""The trial's controller: what each loader of the script gets, the training
loader timed, the window measured, the result written (the adapters' side of
it is frameworks/contract.py; the process around it is child.py).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
import weakref
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Tuple

from feedprof.store.codec import dumps, write_text_atomic
from feedprof.frameworks.contract import LoaderHandle, OnlineLoader, OwnIterator, Plan, SwitchAllowed
from feedprof.analyse.diagnose import workers_of
from feedprof.store.reasons import Reason, WindowNotReached
from feedprof.record.digest import digests_wanted
from feedprof.record.clock import MONOTONIC, Clock
from feedprof.record.loadprof import PROFILER
from feedprof.record.pools import POOLS
from feedprof.record.ranks import cuda_device
from feedprof.record.steps import Binding, LoaderInfo, StepRecorder, WatchedIterator, infer_batch_size
from feedprof.store.codes import PoolRole
from feedprof.store import Outcome, RankInfo, Run, RunKind, SwitchAt, TrialState, Window, WindowEnd, knobs
from feedprof.trial.protocol import Mode, TrialSpec, site_matches
from feedprof.trial.replay import ReplayCache, ReplayIterator
from feedprof.trial.window import WindowStart, window_full, window_of
from feedprof.trial.online_child import OnlineTuning
from feedprof.record.userframes import library_frames, user_call_chain



class StopTrial(BaseException):
    """The window is measured: unwind the script (not an error)."""



class Recorded(Protocol):
    """An iterator of batches (a WatchedIterator, a ReplayIterator, a callback's steps) with its recorder."""

    recorder: StepRecorder


class _StepView:
    """What after_batch needs of an iterator, for steps timed from a callback."""

    def __init__(self, rec: StepRecorder):
        self.recorder = rec


class Controller:
    """The trial's side of frameworks/contract.Controller: decides what each
    loader gets, times the training loader, and ends the script once measured."""

    def __init__(self, spec: TrialSpec, clock: Clock = MONOTONIC, rank: Optional[RankInfo] = None):
        self.spec = spec
        # A rank of a multi-process job (hosted.py) is never ended alone: the others
        # would hang in a collective. It writes its window and trains on; the
        # parent ends the whole job once every rank has its window.
        self.rank = rank
        self.hosted = rank is not None
        self.now = clock.now_s
        self.cpu = clock.thread_cpu_s
        self.script_dir = os.path.dirname(os.path.abspath(spec.script))
        self.recorders: List[StepRecorder] = []
        self._slots: Dict[Tuple[str, ...], List[LoaderHandle]] = {}
        self._replay = ReplayCache()
        self.window: Optional[Window] = None
        self.done = False
        self.stop_requested = False  # window measured off the main thread: stop at the next safe point
        self._callback_handles: List[LoaderHandle] = []
        self.settle = WindowStart(spec.origin_s)  # where the window starts: after start-up, once steady
        self.result_written = False
        self.notes: List[Reason] = []
        self._lock = threading.Lock()  # tf.data pulls batches from its own threads
        self._events = open(spec.events_path, "a", encoding="utf-8")
        # where the loading code spends its time, in this process and its loader workers (record/loadprof.py)
        PROFILER.configure(os.path.dirname(os.path.abspath(spec.result_path)), self.script_dir, os.getpid())
        POOLS.configure(os.path.dirname(os.path.abspath(spec.result_path)), os.getpid())
        self.online: Optional[OnlineTuning] = None
        self.switch_allowed = SwitchAllowed(resharding=spec.allow_resharding)
        if spec.mode == Mode.ONLINE:
            self.online = OnlineTuning(spec.decision_path, self.emit, self.now, spec.origin_s,
                                       spec.window_seconds, spec.min_window_batches,
                                       allow_rng_change=spec.allow_rng_change)

    # -- events -----------------------------------------------------------

    def emit(self, event: str, **fields: Any) -> None:
        import json

        self._events.write(json.dumps({"event": event, "t_s": self.now() - self.spec.origin_s, **fields}) + "\n")
        self._events.flush()

    def user_chain(self, caller: FrameType, direct: bool = True) -> Tuple[str, ...]:
        """The script's frames, if the adapter's caller is the script's own code
        (``direct=False``: or further out, for a library call the script made)."""
        return user_call_chain(self.script_dir, caller, direct=direct)

    def injection(self, framework: str) -> Optional[Dict[str, Any]]:
        """Knobs to inject into every part of a pipeline built by the script's own
        code (tf.data: which pipeline is the training one is known only when it
        is iterated, after it is built)."""
        spec = self.spec
        if spec.mode in (Mode.INJECT, Mode.CEILING) and spec.inject and spec.framework in (None, framework):
            return dict(spec.inject)
        return None

    def timed_by_callback(self, handle: LoaderHandle) -> None:
        """A loader fit pulls inside its compiled train function: its steps are
        timed by the fit callback that starts next."""
        self._callback_handles.append(handle)

    def claim_callback_handles(self) -> List[LoaderHandle]:
        handles, self._callback_handles = self._callback_handles, []
        return handles

    def note(self, reason: Reason) -> None:
        """Something the user should read in the summary (said once)."""
        if reason not in self.notes:
            self.notes.append(reason)

    def check_stop(self) -> None:
        """A safe point on the main thread (a Keras callback): end the script if the
        window was measured elsewhere."""
        if self.stop_requested and not self.hosted and threading.current_thread() is threading.main_thread():
            raise StopTrial

    # -- called by framework adapters ------------------------------------

    def plan(self, framework: str, caller: FrameType) -> Plan:
        """At a loader's construction: is it the one being tuned, and what to inject.

        Every loader built at the target's call site gets the knobs: scripts
        often build a fresh DataLoader each epoch at the same line.
        """
        chain = user_call_chain(self.script_dir, caller)
        spec = self.spec
        is_target: Optional[bool] = None
        if not chain:  # built by framework code on the user's behalf (Keras's own DataLoader...)
            return Plan(framework=framework, chain=chain, is_target=False, inject=None, replay=False)
        if spec.target_chain is not None:
            is_target = tuple(spec.target_chain) == chain and spec.framework in (None, framework)
        elif spec.target_site is not None:
            is_target = site_matches(spec.target_site, chain)
        injecting = spec.mode in (Mode.INJECT, Mode.CEILING) and bool(is_target)
        return Plan(framework=framework, chain=chain, is_target=is_target,
                    inject=dict(spec.inject) if injecting and spec.inject else None,
                    replay=spec.mode == Mode.CEILING and bool(is_target),
                    built_in=library_frames(self.script_dir, caller))

    def created(self, plan: Plan, info: LoaderInfo, loader: object = None) -> LoaderHandle:
        info.in_flight = info.in_flight or knobs.in_flight(plan.framework, info.config)
        self.emit("loader", framework=plan.framework, site=plan.chain[-1] if plan.chain else "",
                  call_chain=list(plan.chain), is_target=plan.is_target)
        try:
            ref = weakref.ref(loader) if loader is not None else None
        except TypeError:  # a type without weak references: always treated as alive
            ref = None
        return LoaderHandle(plan=plan, info=info, ref=ref)

    def _bind(self, handle: LoaderHandle) -> StepRecorder:
        """The recorder for a loader's first iteration. A loader built where an
        earlier one was, once that one is gone (re-created every epoch),
        continues its record; loaders alive together keep separate records."""
        plan = handle.plan
        slots = self._slots.setdefault(plan.chain, [])
        for slot in slots:
            previous = slot.ref() if slot.ref is not None else handle
            if previous is None:
                slot.ref = handle.ref
                slot.rec.binding.instances += 1
                return slot.rec
        binding = Binding(site=handle.info.site or (plan.chain[-1] if plan.chain else ""), call_chain=plan.chain,
                          built_in=plan.built_in, ordinal=len(slots), injected=bool(plan.inject), replayed=plan.replay,
                          is_target=plan.is_target)
        # the warm-up covers what the loader holds in flight: batches made
        # during start-up, handed over at once, are not its steady rate
        rec = StepRecorder(loader_id=len(self.recorders), framework=plan.framework,
                           warmup_batches=max(self.spec.warmup_batches, handle.info.in_flight),
                           origin_s=self.spec.origin_s, info=handle.info, binding=binding)
        if handle.info.iterable and not plan.replay:  # does each worker yield the same records?
            rec.digests_wanted = digests_wanted(workers_of(handle.info.config) or 0)
        self.recorders.append(rec)
        slots.append(LoaderHandle(plan=plan, info=handle.info, ref=handle.ref, rec=rec))
        return rec

    def iterate(self, handle: LoaderHandle, make_iter: Callable[[], Iterator],
                replay: Optional[bool] = None) -> Iterator:
        """``replay=False``: the framework replays its batch itself (Keras replays
        at __getitem__, so its worker pool is left idle, not bypassed)."""
        if handle.online and handle.online.busy():  # a second live iterator: the script's own, as torch gives it
            handle.online.own_iterator()
            if self.online is None:
                return make_iter()
            return OwnIterator(handle.online, self.online, make_iter)
        if handle.rec is None:
            handle.rec = self._bind(handle)
        rec = handle.rec
        rec.epoch_started(self.now())
        if rec.binding.replayed if replay is None else replay:
            return ReplayIterator(rec, make_iter, self._replay, rec.info.batches_per_epoch,
                                  self.after_batch, self.now)
        if self.online is not None:
            make_iter = self._online_epoch(handle, make_iter)
        return WatchedIterator(make_iter(), rec, after=self.after_batch, now=self.now, cpu=self.cpu)

    def _online_epoch(self, handle: LoaderHandle, make_iter: Callable[[], Iterator]) -> Callable[[], Iterator]:
        """Online mode: a loader whose framework can switch it is served by its OnlineLoader
        (frameworks/contract.Switcher); any other keeps its own iterator."""
        online = self.switching(handle)
        if online is None:
            return make_iter
        self.online.consider(online)
        return lambda: online.epoch(make_iter)

    def switching(self, handle: LoaderHandle) -> Optional[OnlineLoader]:
        """Online mode: the loader's OnlineLoader, made at the first ask (its mode said in an
        event), or None where it is not switched; None outside online mode."""
        if self.online is None or handle.plan.is_target is False:
            return None
        if not handle.switch_checked:
            handle.switch_checked = True
            if handle.rec is None:
                handle.rec = self._bind(handle)
            handle.online = self._online_loader(handle)
        return handle.online

    def _online_loader(self, handle: LoaderHandle) -> Optional[OnlineLoader]:
        """The loader's OnlineLoader from its framework's Switcher, or None (said in an event) where
        it cannot switch, or where building one failed: the run then goes on with its own iterator."""
        from feedprof.frameworks import switcher_for

        loader = handle.ref() if handle.ref is not None else None
        framework = handle.plan.framework
        online: Optional[OnlineLoader] = None
        try:
            switcher = switcher_for(framework)
            if switcher is None:
                why_not: Optional[str] = f"framework:{framework}"
            elif loader is None:
                why_not = "gone"
            else:
                why_not = switcher.switch_capable(loader, self.switch_allowed)
                if why_not is None:
                    online = switcher.online_loader(loader, self.online, handle.rec.loader_id,
                                                    handle.info.script_config, handle.plan.chain, self.switch_allowed)
        except Exception as exc:  # noqa: BLE001 - feedprof's side must never end the job
            why_not, online = f"failed: {type(exc).__name__}: {exc}"[:200], None
        self.emit("online_loader", loader_id=handle.rec.loader_id, framework=framework,
                  mode=online.switch_at if online is not None else SwitchAt.NONE, why_not=why_not or "")
        return online

    def after_batch(self, it: Recorded, batch: object) -> None:
        rec: StepRecorder = it.recorder
        if rec.digests_wanted:
            rec.fingerprint(batch)
        if rec.deliveries == 1:
            if rec.info.batch_size is None:
                rec.info.batch_size = infer_batch_size(batch)
            self.emit("first_batch", loader_id=rec.loader_id)
        if self.spec.full or self.done or rec.binding.is_target is False:
            return
        end = window_full(rec, self.spec)
        if end is None or not self.settle.settled(rec):
            return
        with self._lock:
            if self.done:
                return
            self.done = True
            self.window = window_of(rec, end, self.spec.origin_s)
            self.write_result(TrialState.OK)
            self.emit("window_done", loader_id=rec.loader_id)
        if self.hosted:
            return
        if threading.current_thread() is threading.main_thread():
            raise StopTrial
        # Off the main thread (a tf.data generator): raising here would come back as a
        # TensorFlow error. The main thread stops at its next safe point (check_stop).
        self.stop_requested = True

    def epoch_begins(self, handle: LoaderHandle) -> None:
        """An epoch of a loader whose steps are timed from the training loop."""
        if handle.rec is None:
            handle.rec = self._bind(handle)
        handle.rec.epoch_started(self.now())

    def timed_step(self, handle: LoaderHandle, t_end_s: float, n_steps: int = 1) -> None:
        """Steps whose batches are pulled where Python cannot see them (inside a
        compiled train function), timed by their end: their wall time is the gap
        from the previous end (``n_steps`` of them under steps_per_execution);
        their data wait is not observable."""
        if handle.rec is None:
            self.epoch_begins(handle)
        rec = handle.rec
        rec.info.wait_observable = False
        rec.batch(t_end_s, t_end_s, n_steps)
        self.after_batch(_StepView(rec), None)

    # -- results ------------------------------------------------------------

    def training_recorder(self) -> Optional[StepRecorder]:
        candidates = [r for r in self.recorders if r.binding.is_target is not False]
        return max(candidates or self.recorders, key=lambda r: r.batches, default=None)

    def write_result(self, state: TrialState, cause: Optional[Reason] = None, tb: str = "",
                     exit_code: Optional[int] = None) -> None:
        if self.online is not None:
            self.online.finish()
        if self.window is None:
            rec = self.training_recorder()
            if rec is not None:
                self.window = window_of(rec, WindowEnd.FULL_RUN if self.spec.full else WindowEnd.SCRIPT_ENDED,
                                        self.spec.origin_s)
                if not self.spec.full and state in (TrialState.OK, TrialState.FAILED):  # kept when it failed later
                    self.notes.append(WindowNotReached(steady_batches=rec.steady_batches,
                                                       window_batches=self.spec.window_batches))
        from feedprof.record.cuda import cuda_in_use

        if self.rank is not None:
            self.rank = dataclasses.replace(self.rank, **cuda_device())
        run = Run(kind=RunKind.TRIAL, script=self.spec.script, argv=tuple(self.spec.argv),
                  loaders=tuple(r.snapshot() for r in self.recorders),
                  window=self.window or Window(end=WindowEnd.NO_LOADER),
                  outcome=Outcome(state=state, cause=cause, exit_code=exit_code, traceback=tb),
                  cuda_used=cuda_in_use(), notes=tuple(self.notes),
                  modules=tuple(m for m in HEAVY_MODULES if m in sys.modules), rank=self.rank)
        write_text_atomic(self.spec.result_path, dumps(run))
        PROFILER.flush()  # this process's loading, up to now (the parent reads it with the result)
        POOLS.write(PoolRole.TRAINING)  # its thread pools as they ran (record/pools.py)
        self.result_written = True


HEAVY_MODULES = ("torch", "torch._dynamo", "tensorflow", "keras", "tf_keras", "jax", "lightning",
                 "pytorch_lightning", "transformers.trainer")
