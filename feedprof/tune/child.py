"""Bootstrap inside a trial process: run the user's unmodified script with its
loaders instrumented, measure the training loader's window, then end it.

NOTE [ Trial child ]

    python -m feedprof.tune.child spec.json
      ├─ post-import hooks: torch.utils.data ─► frameworks.torch.install(ctl)
      ├─ sys.argv = [script, *args]; sys.path[0] = script's dir; run as __main__
      │     each loader: ctl.plan (inject? by call site) ─► ctl.created ─► ctl.iterate
      │     each batch:  WatchedIterator ─► ctl.after_batch ─► window measured?
      │                     yes: write result.json, raise StopTrial (a BaseException,
      │                          so the script's `except Exception` does not swallow it)
      └─ result.json (a store.Run without samples) ─► the parent adds samples and host

The child never waits for its loader workers: the parent kills the whole
process group once the child is done, so nothing outlives a trial.
"""
from __future__ import annotations

import os
import runpy
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from feedprof.codec import dumps, write_text_atomic
from feedprof.record.clock import MONOTONIC
from feedprof.record.steps import StepRecorder, WatchedIterator, infer_batch_size
from feedprof.store import Outcome, Run, Window
from feedprof.tune.protocol import MODE_CEILING, MODE_INJECT, TrialSpec, site_matches
from feedprof.tune.replay import ReplayCache, ReplayIterator
from feedprof.tune.userframes import failure_hint, script_traceback, user_call_chain


class StopTrial(BaseException):
    """The window is measured: unwind the script (not an error)."""


@dataclass
class Plan:
    framework: str
    chain: Tuple[str, ...]
    ordinal: int
    is_target: Optional[bool]  # None: no target was named (observe mode)
    inject: Optional[Dict[str, Any]]
    replay: bool


class _StepView:
    """What after_batch needs of an iterator, for steps timed from a callback."""

    def __init__(self, rec: StepRecorder):
        self.recorder = rec


@dataclass
class LoaderHandle:
    """What the controller knows of one loader object (kept on the object)."""

    plan: Plan
    info: Dict[str, Any]
    ref: Any  # weak reference to the loader, or None
    rec: Optional[StepRecorder] = None


class Controller:
    def __init__(self, spec: TrialSpec, clock: Any = MONOTONIC):
        self.spec = spec
        self.now = clock.now_s
        self.script_dir = os.path.dirname(os.path.abspath(spec.script))
        self.recorders: List[StepRecorder] = []
        self._slots: Dict[Tuple[str, ...], List[LoaderHandle]] = {}
        self._replay = ReplayCache()
        self.window: Optional[Window] = None
        self.done = False
        self.stop_requested = False  # window measured off the main thread: stop at the next safe point
        self._callback_handles: List[LoaderHandle] = []
        self.notes: List[str] = []
        self._lock = threading.Lock()  # tf.data pulls batches from its own threads
        self._events = open(spec.events_path, "a", encoding="utf-8")

    # -- events -----------------------------------------------------------

    def emit(self, event: str, **fields: Any) -> None:
        import json

        self._events.write(json.dumps({"event": event, "t_s": self.now() - self.spec.origin_s, **fields}) + "\n")
        self._events.flush()

    def user_chain(self) -> Tuple[str, ...]:
        """The script's frames, if the adapter's caller is the script's own code."""
        return user_call_chain(self.script_dir, skip=3, direct=True)

    def injection(self, framework: str) -> Optional[Dict[str, Any]]:
        """Knobs to inject into every part of a pipeline built by the script's own
        code (tf.data: which pipeline is the training one is known only when it
        is iterated, after it is built)."""
        spec = self.spec
        if spec.mode in (MODE_INJECT, MODE_CEILING) and spec.inject and spec.framework in (None, framework):
            return dict(spec.inject)
        return None

    def timed_by_callback(self, handle: "LoaderHandle") -> None:
        """A loader fit pulls inside its compiled train function: its steps are
        timed by the fit callback that starts next."""
        self._callback_handles.append(handle)

    def claim_callback_handles(self) -> List["LoaderHandle"]:
        handles, self._callback_handles = self._callback_handles, []
        return handles

    def note(self, text: str) -> None:
        """Something the user should read in the summary (said once)."""
        if text not in self.notes:
            self.notes.append(text)

    def check_stop(self) -> None:
        """A safe point on the main thread (a Keras callback): end the script if the
        window was measured elsewhere."""
        if self.stop_requested and threading.current_thread() is threading.main_thread():
            raise StopTrial

    # -- called by framework adapters ------------------------------------

    def plan(self, framework: str) -> Plan:
        """At a loader's construction: is it the one being tuned, and what to inject.

        Every loader built at the target's call site gets the knobs: scripts
        often build a fresh DataLoader each epoch at the same line.
        """
        chain = user_call_chain(self.script_dir, skip=3)
        spec = self.spec
        is_target: Optional[bool] = None
        if not chain:  # built by framework code on the user's behalf (Keras's own DataLoader...)
            return Plan(framework=framework, chain=chain, ordinal=0, is_target=False, inject=None, replay=False)
        if spec.target_chain is not None:
            is_target = tuple(spec.target_chain) == chain and spec.framework in (None, framework)
        elif spec.target_site is not None:
            is_target = site_matches(spec.target_site, chain)
        injecting = spec.mode in (MODE_INJECT, MODE_CEILING) and bool(is_target)
        return Plan(framework=framework, chain=chain, ordinal=0, is_target=is_target,
                    inject=dict(spec.inject) if injecting and spec.inject else None,
                    replay=spec.mode == MODE_CEILING and bool(is_target))

    def created(self, plan: Plan, info: Dict[str, Any], loader: Any = None) -> "LoaderHandle":
        self.emit("loader", framework=plan.framework, site=plan.chain[-1] if plan.chain else "",
                  call_chain=list(plan.chain), is_target=plan.is_target)
        try:
            ref = weakref.ref(loader) if loader is not None else None
        except TypeError:  # a type without weak references: always treated as alive
            ref = None
        return LoaderHandle(plan=plan, info=info, ref=ref)

    def _bind(self, handle: "LoaderHandle") -> StepRecorder:
        """The recorder for a loader's first iteration. A loader built where an
        earlier one was, once that one is gone (re-created every epoch),
        continues its record; loaders alive together keep separate records."""
        plan = handle.plan
        slots = self._slots.setdefault(plan.chain, [])
        for slot in slots:
            previous = slot.ref() if slot.ref is not None else handle
            if previous is None:
                slot.ref = handle.ref
                slot.rec.info["instances"] = slot.rec.info.get("instances", 1) + 1
                return slot.rec
        rec = StepRecorder(loader_id=len(self.recorders), framework=plan.framework,
                           warmup_batches=self.spec.warmup_batches, origin_s=self.spec.origin_s)
        rec.gap_is_teardown = bool(handle.info.get("gap_is_teardown"))
        rec.info.update(handle.info)
        rec.info.update(site=handle.info.get("site") or (plan.chain[-1] if plan.chain else ""),
                        call_chain=plan.chain, ordinal=len(slots), injected=bool(plan.inject),
                        replayed=plan.replay, is_target=plan.is_target, instances=1)
        self.recorders.append(rec)
        slots.append(LoaderHandle(plan=plan, info=handle.info, ref=handle.ref, rec=rec))
        return rec

    def iterate(self, handle: "LoaderHandle", make_iter: Callable[[], Iterator],
                replay: Optional[bool] = None) -> Iterator:
        """``replay=False``: the framework replays its batch itself (Keras replays
        at __getitem__, so its worker pool is left idle, not bypassed)."""
        if handle.rec is None:
            handle.rec = self._bind(handle)
        rec = handle.rec
        rec.epoch_started(self.now())
        if rec.info.get("replayed") if replay is None else replay:
            return ReplayIterator(rec, make_iter, self._replay, rec.info.get("batches_per_epoch"),
                                  self.after_batch, self.now)
        return WatchedIterator(make_iter(), rec, after=self.after_batch, now=self.now)

    def after_batch(self, it: Any, batch: Any) -> None:
        rec: StepRecorder = it.recorder
        if rec.deliveries == 1:
            if rec.info.get("batch_size") is None:
                rec.info["batch_size"] = infer_batch_size(batch)
            self.emit("first_batch", loader_id=rec.loader_id)
        spec = self.spec
        if spec.full or self.done or rec.info.get("is_target") is False:
            return
        steady = rec.steady_batches
        # Seconds are counted on the wall clock from the window's start, epoch
        # start-ups included: with short epochs those are a real share of the
        # time (what persistent_workers saves) and must be inside the window.
        window_s = 0.0 if rec.t_steady_start is None else rec.t_last - rec.t_steady_start
        if steady >= spec.window_batches:
            reason = f"{steady} batches"
        elif window_s >= spec.window_seconds and steady >= spec.min_window_batches:
            reason = f"{window_s:.1f} s"
        else:
            return
        with self._lock:
            if self.done:
                return
            self.done = True
            self.window = self._window_of(rec, reason)
            self.write_result("ok", "window measured")
            self.emit("window_done", loader_id=rec.loader_id)
        if threading.current_thread() is threading.main_thread():
            raise StopTrial
        # Off the main thread (a tf.data generator): raising here would come back as a
        # TensorFlow error. The main thread stops at its next safe point (check_stop).
        self.stop_requested = True

    def epoch_begins(self, handle: "LoaderHandle") -> None:
        """An epoch of a loader whose steps are timed from the training loop."""
        if handle.rec is None:
            handle.rec = self._bind(handle)
        handle.rec.epoch_started(self.now())

    def timed_step(self, handle: "LoaderHandle", t_end_s: float, n_steps: int = 1) -> None:
        """Steps whose batches are pulled where Python cannot see them (inside a
        compiled train function), timed by their end: their wall time is the gap
        from the previous end (``n_steps`` of them under steps_per_execution);
        their data wait is not observable."""
        if handle.rec is None:
            self.epoch_begins(handle)
        rec = handle.rec
        rec.info["wait_observable"] = False
        rec.batch(t_end_s, t_end_s, n_steps)
        self.after_batch(_StepView(rec), None)

    # -- results ------------------------------------------------------------

    def _window_of(self, rec: StepRecorder, reason: str) -> Window:
        o = self.spec.origin_s
        return Window(loader_id=rec.loader_id,
                      t_start_s=None if rec.t_steady_start is None else rec.t_steady_start - o,
                      t_end_s=None if rec.t_last is None else rec.t_last - o, reason=reason)

    def training_recorder(self) -> Optional[StepRecorder]:
        candidates = [r for r in self.recorders if r.info.get("is_target") is not False]
        return max(candidates or self.recorders, key=lambda r: r.batches, default=None)

    def write_result(self, state: str, message: str, tb: str = "", exit_code: Optional[int] = None) -> None:
        if self.window is None:
            rec = self.training_recorder()
            if rec is not None:
                reason = "full run" if self.spec.full else "script ended"
                self.window = self._window_of(rec, reason)
                if not self.spec.full and state == "ok":
                    self.notes.append(
                        f"the script ended before the window was measured ({rec.steady_batches} of "
                        f"{self.spec.window_batches} steady-state batches): figures cover what there was")
        from feedprof.session import cuda_in_use

        run = Run(kind="trial", script=self.spec.script, argv=tuple(self.spec.argv),
                  loaders=tuple(r.snapshot() for r in self.recorders),
                  window=self.window or Window(reason="no loader"),
                  outcome=Outcome(state=state, message=message, exit_code=exit_code, traceback=tb),
                  cuda_used=cuda_in_use(), notes=tuple(self.notes),
                  modules=tuple(m for m in HEAVY_MODULES if m in sys.modules))
        write_text_atomic(self.spec.result_path, dumps(run))


def _install(adapter: str, ctl: Controller) -> None:
    """Instrument a framework the script just imported (a failure to do so is a
    note, never an error in the user's script)."""
    import importlib

    try:
        importlib.import_module(f"feedprof.frameworks.{adapter}").install(ctl)
        if adapter in ("keras", "tf_keras") and "tensorflow" in sys.modules:
            from feedprof.frameworks import tfdata

            tfdata.install_keras_adapter(ctl)
    except (ImportError, AttributeError) as exc:  # a framework version we do not know
        ctl.note(f"could not instrument {adapter} ({type(exc).__name__}: {exc}); its loaders are not measured")


HEAVY_MODULES = ("torch", "torch._dynamo", "tensorflow", "keras", "tf_keras", "jax")


def run_script(spec: TrialSpec) -> int:
    """Run the script under the controller; the exit code the child ends with."""
    from feedprof.frameworks import hooks
    from feedprof.frameworks import torch as torch_fw

    ctl = Controller(spec)
    ctl.emit("started", pid=os.getpid())
    hooks.when_imported("torch.utils.data", lambda _m: torch_fw.install(ctl))
    hooks.when_imported("tensorflow", lambda _m: _install("tfdata", ctl))
    hooks.when_imported("keras", lambda _m: _install("keras", ctl))
    hooks.when_imported("tf_keras", lambda _m: _install("tf_keras", ctl))
    script = os.path.abspath(spec.script)
    sys.argv = [spec.script, *spec.argv]
    sys.path[0] = os.path.dirname(script)
    try:
        runpy.run_path(script, run_name="__main__")
    except StopTrial:
        return -1  # result already written; exit at once, the parent reaps the workers
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            if not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
            ctl.write_result("failed", f"the script called sys.exit({exc.code!r})", exit_code=code)
            return code
        ctl.write_result("ok", "the script called sys.exit(0)", exit_code=0)
        return 0
    except KeyboardInterrupt:
        ctl.write_result("interrupted", "interrupted", exit_code=130)
        return 130
    except BaseException as exc:  # the script's own error: reported as the script's
        tb = script_traceback(exc)
        sys.stderr.write(tb)
        message = f"{type(exc).__name__}: {exc}".strip()
        hint = failure_hint(exc)
        if hint:
            sys.stderr.write(f"feedprof: {hint}\n")
            message = f"{message} ({hint})"
        ctl.write_result("failed", message, tb=tb, exit_code=1)
        return 1
    ctl.write_result("ok", "the script ended", exit_code=0)
    return 0


def run_spec_file(path: str) -> int:
    """Run the trial described in ``path`` (cold, or forked by the zygote)."""
    with open(path, encoding="utf-8") as fh:
        spec = TrialSpec.from_json(fh.read())
    return run_script(spec)


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    code = run_spec_file(argv[0])
    sys.stdout.flush()
    sys.stderr.flush()
    if code == -1:
        os._exit(0)
    sys.exit(code)


if __name__ == "__main__":
    main()
