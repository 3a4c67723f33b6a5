"""The contract between the trial controller (trial/controller.py) and the
framework adapters (torch.py, keras.py, tf_keras.py, tfdata.py).

An adapter patches its framework where loaders are built and iterated, and
tells the controller what it saw; the controller decides what to inject and
times the batches. Everything an adapter may call is on ``Controller``;
everything it may say about a loader is a ``LoaderInfo`` (record/steps.py).

    adapter, at construction:   plan = ctl.plan(framework, caller_frame)
                                 ... build the loader with plan.inject ...
                                 handle = ctl.created(plan, LoaderInfo(...), loader)
    adapter, at iteration:       return ctl.iterate(handle, make_iterator)
    adapter, inside Keras fit:   ctl.timed_by_callback(handle); the fit callback calls
                                 ctl.epoch_begins / ctl.timed_step / ctl.check_stop

``caller`` is the frame of whoever called the patched framework function:
the controller reads the user's call chain from it (which loader is it?).

Online mode (``feedprof tune --online``): switching is an adapter capability.
A framework whose loaders can change their settings inside the real run has a
``Switcher`` (frameworks/__init__.switcher_for); the controller asks it, for
every framework alike, whether a loader can switch and for its ``OnlineLoader``:

    controller, first epoch:     why_not = switcher.switch_capable(loader, allowed)
                                 online = switcher.online_loader(loader, tuning, ...)
    controller, every epoch:     tuning.consider(online); the script iterates online.epoch()
    adapter, where its framework builds the loop's iterator itself (Keras fit):
                                 online = ctl.switching(handle)

A switcher that switches at a batch boundary serves the epoch's feed of batch
indices (drawn once, as the unmodified loader draws it) through one ``Pool``
per config: a switch takes back what the old pool took but never delivered
(``undelivered``), closes it, and opens the next on what is left
(frameworks/switching.py drives such pools; torch's map-style DataLoader has
its own driver, frameworks/torch_online.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Tuple

from feedprof.store.reasons import Reason
from feedprof.record.steps import LoaderInfo, StepRecorder
from feedprof.store.codes import SwitchAt


@dataclass(frozen=True)
class Plan:
    """The controller's decision for one loader, at its construction."""

    framework: str
    chain: Tuple[str, ...]  # the user's frames that built it, outermost first
    is_target: Optional[bool]  # None: no target was named (observe mode)
    inject: Optional[Dict[str, Any]]  # knobs to build it with (None: its own)
    replay: bool  # compute ceiling: replay one cached batch
    built_in: Tuple[str, ...] = ()  # library frames between the chain's last and the construction


@dataclass
class LoaderHandle:
    """What the controller knows of one loader object (kept on the object)."""

    plan: Plan
    info: LoaderInfo
    ref: Optional[Callable[[], object]]  # a weak reference to the loader (None: it takes none)
    rec: Optional[StepRecorder] = None
    online: Optional["OnlineLoader"] = None  # online mode: the loader served by switching pools
    switch_checked: bool = False  # online mode: asked once whether it can switch (online stays None if not)
    tick: Optional[Callable[[], None]] = None  # told each step timed from a fit callback (tf.data: AUTOTUNE read)


@dataclass(frozen=True)
class SwitchAllowed:
    """What the user allowed a switch to change beyond speed (``feedprof tune --online`` flags)."""

    resharding: bool = False  # --allow-resharding: an IterableDataset's samples follow the worker count


class Pool(Protocol):
    """One config's workers (processes, threads, or the loop's own thread) serving a feed of
    batch indices: it takes indices from the feed, in order, and delivers their batches in order."""

    config: Dict[str, Any]

    def next_batch(self, hang_after_s: Optional[float], now: Callable[[], float]) -> Any:
        """The next batch in the feed's order (``hang_after_s``: give up waiting, raise PoolHung)."""

    def undelivered(self, again: int = 0) -> List[Any]:
        """What it took from the feed and never delivered, in order (and the last ``again`` it did
        deliver: a batch whose error is to be raised again from the script's own settings)."""

    def close(self) -> None:
        """Its workers end (what they still fetch is dropped)."""

    def worker_pids(self) -> List[int]: ...

    def worker_signals(self) -> List[int]:
        """The signals that ended its dead workers."""


class OnlineLoader(Protocol):
    """A loader served by switching pools: what the controller hands the script each epoch and
    what trial/online_child.OnlineTuning reads of it."""

    framework: str
    switch_at: SwitchAt
    loader_id: int
    chain: Tuple[str, ...]  # where the script builds it: a loader rebuilt there takes its place
    length: int  # batches per epoch (0: unknown)
    script_config: Dict[str, Any]  # its own settings, in the form decisions come in
    own_persistent: bool  # its own workers outlive an epoch (else they start anew each epoch)
    served: Optional[Dict[str, Any]]  # the config of the last pool started
    pool: Optional[Pool]  # the pool serving now
    epochs: int
    epoch_batches: Optional[int]  # what the loop had of its last epoch that ended (None: none yet)
    rng_moved: bool  # a switch moved the script's random draws (said with each order check)
    own_iterators: int  # iterators handed the script's own settings while an epoch was live

    hold_why: str  # why it is no longer switched ("": it may be)

    @property
    def epoch_number(self) -> int:
        """The epoch the loop is in, counted from 1 over every loader built at its place."""

    def kept(self) -> Dict[str, Any]:
        """The config a held loader keeps for the rest of the run."""

    def loads_in_loop(self, config: Dict[str, Any]) -> bool:
        """Whether ``config`` loads each batch in the loop's own thread (loading written for workers
        never moves there: its draws would come from the script's own random streams)."""

    def ready_to_switch(self) -> bool:
        """Whether a config other than the script's may serve it yet (torch first watches whether
        loading draws from the script's random streams)."""

    def inherit(self, old: "OnlineLoader") -> None:
        """The script built the loader again at the same place: take over what ``old`` learnt."""

    def busy(self) -> bool:
        """An epoch of it is live and unfinished: another iter() gets the script's own iterator."""

    def own_iterator(self) -> None:
        """A second live iterator was handed the script's own (counted, and said)."""

    def epoch(self) -> Iterator:
        """What the script's iteration of the loader gets for one epoch."""

    def close(self) -> None:
        """The run is over: no worker outlives it."""

    def release(self) -> None:
        """Another loader is tuned now: its pool ends; an epoch still going goes on with a new one."""


class Tuning(Protocol):
    """The online tuning as an OnlineLoader sees it (trial/online_child.py OnlineTuning): which
    config to serve, and what happened, told as it happens."""

    allow_rng_change: bool  # --allow-rng-change: switch even where that moves the script's draws
    now: Callable[[], float]

    def register(self, ol: OnlineLoader) -> None: ...

    def counts(self, loader_id: int) -> List[int]:
        """[epochs, iterators] of the loaders built at ``loader_id``'s place, numbered on."""

    def config_for(self, ol: OnlineLoader) -> Dict[str, Any]: ...

    def hang_limit_s(self, ol: OnlineLoader, config: Dict[str, Any]) -> Optional[float]: ...

    def safe_config(self, ol: OnlineLoader, failed: Dict[str, Any]) -> Dict[str, Any]: ...

    def switched(self, ol: OnlineLoader, config: Dict[str, Any], restart: bool = False) -> None: ...

    def failed(self, ol: OnlineLoader, config: Dict[str, Any], kind: str, exc: BaseException,
               signals: Optional[List[int]] = None, replayed: Optional[int] = None) -> None: ...

    def delivered(self, ol: OnlineLoader, t_req_s: float, t_got_s: float, batch: object,
                  cpu_s: float = 0.0) -> None: ...

    def epoch_ended(self, ol: OnlineLoader, left: bool = False) -> None: ...

    def order_checked(self, ol: OnlineLoader, check: Dict[str, Any]) -> None: ...

    def randomness(self, ol: OnlineLoader, where: str, streams: Tuple[str, ...], moved: bool) -> None: ...

    def carried(self, ol: OnlineLoader, carried: bool, why: str, epoch: int) -> None: ...

    def held(self, ol: OnlineLoader, why: str, detail: str) -> None: ...

    def other_iterator(self, ol: OnlineLoader, seconds: float) -> None:
        """Time the loop spent in another live iterator of ``ol`` (a probe batch, zip(loader,
        loader)): torch's own, with the script's settings, whatever ``ol`` serves."""


class OwnIterator:
    """A second live iterator of a switched loader, as torch gives it (the script's settings),
    timed: its start (workers forked) and each batch are the loop's time, never the switched
    loader's, so the tuning leaves them out of that loader's windows (Tuning.other_iterator)."""

    def __init__(self, ol: OnlineLoader, tuning: "Tuning", make_iter: Callable[[], Iterator[Any]]):
        self._ol, self._tuning, self._now = ol, tuning, tuning.now
        t0 = self._now()
        self._it = make_iter()
        tuning.other_iterator(ol, self._now() - t0)

    def __iter__(self) -> "OwnIterator":
        return self

    def __next__(self) -> Any:
        t0 = self._now()
        try:
            return next(self._it)
        finally:
            self._tuning.other_iterator(self._ol, self._now() - t0)

    def __len__(self) -> int:
        return len(self._it)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:  # (the script may read torch's iterator's own attributes)
        return getattr(self._it, name)


class Switcher(Protocol):
    """A framework's capability to change its loaders' settings inside the real run."""

    framework: str

    def switch_capable(self, loader: Any, allowed: SwitchAllowed) -> Optional[str]:
        """None where the loader can switch, else why not (a reason code, render/online.py words it)."""

    def online_loader(self, loader: Any, tuning: Tuning, loader_id: int, script_config: Dict[str, Any],
                      chain: Tuple[str, ...], allowed: SwitchAllowed) -> OnlineLoader:
        """The loader's OnlineLoader (``tuning`` says which config to serve and is told every batch)."""


class Controller(Protocol):
    def now(self) -> float:
        """The trial's clock (seconds, machine-wide monotonic)."""

    def plan(self, framework: str, caller: FrameType) -> Plan:
        """At a loader's construction: is it the one being tuned, and what to inject."""

    def created(self, plan: Plan, info: LoaderInfo, loader: object = None) -> LoaderHandle:
        """The loader is built (with ``info.config`` in effect)."""

    def iterate(self, handle: LoaderHandle, make_iter: Callable[[], Iterator],
                replay: Optional[bool] = None) -> Iterator:
        """An epoch starts: the iterator to hand the script (timed, or replaying)."""

    def user_chain(self, caller: FrameType, direct: bool = True) -> Tuple[str, ...]:
        """The script's frames, if ``caller`` is the script's own code (else ());
        ``direct=False``: the script's frames further out too (a library call made by the script)."""

    def injection(self, framework: str) -> Optional[Dict[str, Any]]:
        """Knobs for every part of a pipeline the script builds (tf.data)."""

    def timed_by_callback(self, handle: LoaderHandle) -> None:
        """This loader is pulled inside a compiled train function: the fit callback times it."""

    def claim_callback_handles(self) -> List[LoaderHandle]:
        """At train begin: the loaders this fit call trains on."""

    def epoch_begins(self, handle: LoaderHandle) -> None: ...

    def timed_step(self, handle: LoaderHandle, t_end_s: float) -> None:
        """A step of a callback-timed loader ended at ``t_end_s``."""

    def check_stop(self) -> None:
        """A safe point on the main thread: ends the script if the window is measured."""

    def note(self, reason: Reason) -> None:
        """Something the user should read in the summary (said once)."""

    def switching(self, handle: LoaderHandle) -> Optional[OnlineLoader]:
        """Online mode: the loader's OnlineLoader (made at the first ask, its mode said in an
        event), or None where it is not switched; None outside online mode."""
