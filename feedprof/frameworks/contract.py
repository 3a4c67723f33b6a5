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
"""
from __future__ import annotations

from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Tuple

from feedprof.store.reasons import Reason
from feedprof.record.steps import LoaderInfo, StepRecorder


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
    ref: Any  # weak reference to the loader, or None
    rec: Optional[StepRecorder] = None
    online: Any = None  # online mode: the loader's frameworks/torch_online.OnlineLoader


class Controller(Protocol):
    def now(self) -> float:
        """The trial's clock (seconds, machine-wide monotonic)."""

    def plan(self, framework: str, caller: FrameType) -> Plan:
        """At a loader's construction: is it the one being tuned, and what to inject."""

    def created(self, plan: Plan, info: LoaderInfo, loader: Any = None) -> LoaderHandle:
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
