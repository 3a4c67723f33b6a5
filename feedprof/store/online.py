"""What an online tune (``feedprof tune --online``) records of the real run:
its windows, the configs it switched to, and the pools that failed. Figures
derived from a window (its rate, its wait) are properties, not copies."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple


@dataclass(frozen=True)
class OnlineWindow:
    """One stretch of the real run under one config (t in seconds from the run's start)."""

    rank: int
    config: Dict[str, Any]
    batches: int
    samples: int
    wait_s: float
    t_start_s: float
    t_end_s: float
    workers_cpu_s: Optional[float] = None  # CPU time of the pool's workers over the window
    load_cpu_s: float = 0.0  # the loop thread's CPU time inside next() (at 0 workers: the loading itself)
    epoch: int = 0
    span_s: Optional[float] = None  # its stretches' time, when it spans an epoch boundary (else the clock's)

    @property
    def wall_s(self) -> float:
        return max(self.span_s if self.span_s is not None else self.t_end_s - self.t_start_s, 1e-9)

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.wall_s

    @property
    def wait_fraction(self) -> float:
        return min(1.0, self.wait_s / self.wall_s)

    @property
    def ceiling_batches_per_s(self) -> Optional[float]:
        """The rate were data always ready: the window's batches over its time not waiting."""
        busy_s = self.wall_s - self.wait_s
        return self.batches / busy_s if busy_s > 0 else None

    @property
    def load_cpu_fraction(self) -> Optional[float]:
        """Of the time the loop waited, the share its own thread computed (0 workers: near 1 when
        loading is CPU-bound, near 0 when it waits on I/O)."""
        return self.load_cpu_s / self.wait_s if self.wait_s > 0 else None

    @property
    def workers_cpu_cores(self) -> Optional[float]:
        return None if self.workers_cpu_s is None else self.workers_cpu_s / self.wall_s


@dataclass(frozen=True)
class OnlineFailure:
    """A pool that broke while a config was explored; the run went on without it."""

    rank: int
    config: Dict[str, Any]
    kind: str  # killed | hung | error | memory
    error: str
    t_s: float
    signals: Tuple[int, ...] = ()  # what ended its dead workers (9: SIGKILL, the OOM killer; 7: SIGBUS, /dev/shm)
    taken_bytes: Optional[int] = None  # kind memory: what the job had taken, against budget_bytes
    budget_bytes: Optional[int] = None


@dataclass(frozen=True)
class OnlineWarmup:
    """A new pool filling: ``warm_batches`` delivered ``warm_s`` after the first was asked for.
    ``per_epoch``: the script's loader starts its workers anew every epoch, so the run pays
    this again at each epoch's start."""

    rank: int
    config: Dict[str, Any]
    warm_batches: int
    warm_s: float
    restart: bool  # an epoch's start (not a switch)
    per_epoch: bool
    batches_per_epoch: int
    t_s: float


@dataclass(frozen=True)
class OnlineSwitch:
    """The tuned loader started serving ``config`` at ``t_s`` (on ``rank``)."""

    rank: int
    t_s: float
    config: Dict[str, Any]
    why: str = ""  # the strategy's step: baseline, climb, refine, confirm, settled, recovered ...


@dataclass(frozen=True)
class OnlineLoaderMode:
    """How a loader was handled online (codes.SwitchAt): mid_epoch (switched at batch boundaries),
    epoch (between epochs only: an IterableDataset with --allow-resharding), none (``why_not``
    says why), or follows: another loader that waited most of an epoch took the settled config
    (``why_not`` holds the share it waited)."""

    loader_id: int
    mode: str
    why_not: str = ""


@dataclass(frozen=True)
class OnlineRecord:
    explore_budget_s: float = 0.0
    explored_s: float = 0.0  # from the first window to the settling decision (or the end)
    settled_at_s: Optional[float] = None
    settled_config: Dict[str, Any] = field(default_factory=dict)
    windows: Tuple[OnlineWindow, ...] = ()
    switches: Tuple[OnlineSwitch, ...] = ()
    failures: Tuple[OnlineFailure, ...] = ()
    warmups: Tuple[OnlineWarmup, ...] = ()
    loaders: Tuple[OnlineLoaderMode, ...] = ()
    workers_changed: bool = False  # the run's own workers' randomness (augmentation) was not the script's
    switch_at: str = "mid_epoch"  # where the tuned loader switched (codes.SwitchAt: "epoch" for an IterableDataset)
    exit_code: Optional[int] = None  # the job's own
