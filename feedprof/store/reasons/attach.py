"""What `feedprof attach` found in a job it did not start (trial/attach.py): advice from the wait it
sampled, and where each process of a loop that did not advance waits."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Tuple

from feedprof.store.attached import ProcessWait
from feedprof.store.reasons.base import Reason


@dataclass(frozen=True)
class AttachAdvice(Reason):
    """The loop waited ``wait_share`` of its samples with ``workers`` workers: ``predicted_workers``
    is the count that wait predicts reaches the compute ceiling (predicted: nothing was measured with
    it), and ``command`` the job's own command line, for `feedprof tune --online` to measure it."""

    code: ClassVar[str] = "attach_advice"
    workers: int = 0
    wait_share: float = 0.0
    predicted_workers: int = 0
    command: Tuple[str, ...] = ()
    cwd: str = ""  # the job's working directory


@dataclass(frozen=True)
class LoopStopped(Reason):
    """The loop did not get a batch during the window: where each of its processes waits."""

    code: ClassVar[str] = "loop_stopped"
    waits: Tuple[ProcessWait, ...] = ()


@dataclass(frozen=True)
class NoLoaderSeen(Reason):
    """No sample of the training thread was inside a PyTorch loader's ``__next__``: no wait to read
    (a loop of another framework, one outside its training loop, or one iterating no DataLoader)."""

    code: ClassVar[str] = "no_loader_seen"
    samples: int = 0
