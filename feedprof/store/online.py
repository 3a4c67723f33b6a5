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
    # the loop's time in another live iterator of the loader (a probe batch, zip(loader, loader)):
    # torch's own with the script's settings, whatever config the window measures, so left out of span_s
    other_s: float = 0.0
    pool_threads: Optional[int] = None  # the most threads one pool of its workers ran (record/pools.py; None: not read)

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
    epoch: Optional[int] = None  # the tuned loader's epoch when it failed (1: the first)
    replayed_batches: Optional[int] = None  # an IterableDataset's: its epoch started again with the script's own
    #   settings (a dataset's iterator cannot go on where dead workers were), so the loop had these batches again


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
class OnlineOrderCheck:
    """One epoch of one loader as the loop had it, checked batch by batch against what the
    script's sampler gave (frameworks/torch_ledger.py). Digests: 8 bytes of BLAKE2b over the
    indices delivered, and over as many as given."""

    rank: int
    loader_id: int
    epoch: int
    iterator: int = 1  # which iter() of the loader this epoch was (the script's own iterators counted too)
    given_batches: int = 0  # taken from the sampler (prefetched ones included)
    delivered_batches: int = 0
    given_digest: str = ""
    delivered_digest: str = ""
    same: bool = False  # every batch the loop had was the sampler's next, and torch's counts agreed
    ended: str = ""  # exhausted | left (the loop broke out, or iterated the loader anew) | run_end
    problem: str = ""  # the first thing that did not match
    rng_moved: bool = False  # by its end, a switch had moved draws of the script's random streams
    own_iterators: int = 0  # the script's own iterators of this loader (torch's, untouched) so far

    @property
    def as_written(self) -> bool:
        """The same samples in the same order as the run as written: checked, and nothing moved
        the random draws the sampler's order comes from."""
        return self.same and not self.rng_moved


@dataclass(frozen=True)
class OnlineRandomness:
    """Draws from the script's random streams that switching this loader moves
    (frameworks/torch_rng.py). ``where``: rng_loading (its fetch or collate draws in the
    script's own process, at 0 workers), rng_sampler (its sampler draws lazily while the loop
    draws too), or rng_workers (the script's own workers draw as they load, augmentation: with
    other workers the draws fall otherwise; said only once a switch moved them)."""

    rank: int
    loader_id: int
    where: str
    streams: Tuple[str, ...] = ()  # torch, numpy, random
    t_s: float = 0.0  # when they were seen
    epoch: int = 0
    allowed: bool = False  # --allow-rng-change: the loader was switched anyway
    moved_at_s: Optional[float] = None  # when a switch moved them (None: never)
    target: bool = True  # the tuned loader (else one that followed it)


# The torch versions whose DataLoaders online mode switches, (major, minor) both ends included: a
# loader of any other torch is observed, and its OnlineLoaderMode says torch_version:<version>
# (frameworks/torch_support.py checks it; render/online.py words it).
TORCH_SWITCHED = ((2, 5), (2, 14))
CHECK_FAILED = "check_failed"  # OnlineHold.why: a count or a batch did not match
PERSISTENT_FIRST_EPOCH = "persistent_first_epoch"  # OnlineHold.why: new workers would fork with today's dataset
ITERABLE_RANKS = "iterable_ranks"  # OnlineHold.why: an IterableDataset in a job of several ranks (a failed pool's
#   epoch starts again on its rank alone, and the ranks' steps would no longer pair up)


@dataclass(frozen=True)
class OnlineHold:
    """From ``t_s`` on the loader was not switched, and kept ``config``. ``why``: rng_loading |
    rng_sampler (OnlineRandomness), check_failed (``detail`` says what did not match; the
    script's own settings from then on), persistent_first_epoch (new workers would see the
    dataset as the main process has it then, the script's own workers as it was when they
    started: the workers in force are kept)."""

    rank: int
    loader_id: int
    why: str
    config: Dict[str, Any]
    t_s: float
    detail: str = ""
    target: bool = True  # the tuned loader (else one that followed it)
    epoch: int = 0


@dataclass(frozen=True)
class OnlineCarry:
    """Whether feedprof's own worker pools lived on across a loader's epochs where the script's
    loader starts its workers anew every epoch (frameworks/torch_carry.py). ``carried``: from
    ``epoch`` on, a pool served the next epoch because the dataset's state was the one its workers
    forked with (checked at each epoch start); else ``why`` (dataset_changed | workers_draw) its
    workers restarted every epoch from then on, as the script's own do."""

    rank: int
    loader_id: int
    carried: bool
    epoch: int
    t_s: float
    why: str = ""
    target: bool = True


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
    workers_changed: bool = False  # a config other than the script's own served the tuned loader
    switch_at: str = "mid_epoch"  # where the tuned loader switched (codes.SwitchAt: "epoch" for an IterableDataset)
    exit_code: Optional[int] = None  # the job's own
    target_loader_id: Optional[int] = None  # the loader tuned (rank 0's)
    order_checks: Tuple[OnlineOrderCheck, ...] = ()  # per loader, per epoch (and iterator), per rank
    randomness: Tuple[OnlineRandomness, ...] = ()
    holds: Tuple[OnlineHold, ...] = ()
    carries: Tuple[OnlineCarry, ...] = ()  # per loader and rank: its pools outlived its epochs, or not from then on
