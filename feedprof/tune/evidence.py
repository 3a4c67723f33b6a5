"""What the search (tune/search.py) reads and what it answers, the typed seam between it and its
two drivers: their measurements as ``Evidence`` (offline tune/history.py TrialHistory over trials,
online tune/online_strategy.py RunEvidence over the real run's windows), and the ``Next`` step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Protocol, Tuple

from feedprof.store import ConfigEvidence, Phase, Role, TrialState
from feedprof.store.reasons import Reason
from feedprof.tune.space import Config, Space, Variant


@dataclass(frozen=True)
class Next:
    """The search's next step: measure ``config``, or (``final``) settle on it."""

    config: Config
    why: str  # the step (a code): baseline, measuring, again, ceiling, pools, climb, refine, secondary, confirm,
    # figure; final: settled, budget, not_input_bound
    phase: Phase = Phase.SEARCH  # the step, as a trial records it
    role: Role = Role.SEARCH
    final: bool = False
    window_factor: float = 1.0  # a longer window than the usual: measured again, or confirming
    min_window_batches: Optional[int] = None  # a window that crosses an epoch boundary
    optional: bool = False  # only if the budget allows it: the search is complete without it
    held: str = ""  # online, why="held": what held the loader (its hold's code), said as it happens
    predicted_workers: Optional[int] = None  # held: the count the script's own settings' wait predicts


@dataclass(frozen=True)
class Reading:
    """One measurement of a config as the climb reads it: offline the trial believed (the last
    whose window did not spread), online the config's windows."""

    config: Config
    count: int  # the space's primary knob (workers)
    ended: str = TrialState.OK  # how it ended (a TrialState value)
    rate: Optional[float] = None  # what configs are ranked by (per-epoch costs charged)
    steady_rate: Optional[float] = None  # before per-epoch costs
    rate_high: Optional[float] = None  # its fastest stretch (offline the window's fastest chunk; online its rate)
    wait_fraction: Optional[float] = None
    cpu_bound: Optional[bool] = None  # the space's CPU rule on it
    job_cores: Optional[float] = None  # the job's own CPU (training process and workers)
    start_s: Optional[float] = None  # its time to the first batch (workers starting)
    own: bool = False  # the script's own settings measured as they are (its CPU is no rung's verdict)


class Evidence(Protocol):
    """What a driver's measurements say, as the search reads them (offline tune/history.py
    TrialHistory, online tune/online_strategy.py RunEvidence). ``stages``: the steps whose
    measurements a question reads (offline a trial's phase; online windows have none: all)."""

    space: Space
    baseline: Optional[Config]  # the script's own settings (None: not seen yet)
    cpu_cap: int  # the CPUs a CPU-bound loader may use (per rank)
    max_workers: int

    def judged(self, *stages: Phase) -> List[ConfigEvidence]:
        """Each config measured well enough to be judged, first measured first."""

    def ceiling(self) -> Optional[float]:
        """The compute ceiling, batches/s (None: not measured)."""

    def worker_cap(self) -> Optional[int]:
        """The most workers what failed (and what duplicated, or restarts each epoch) allows."""

    def failures(self) -> List[Tuple[Config, str]]:
        """Each config that failed, and how (rules.FAILURE_KINDS)."""

    def most_workers_ran(self) -> int:
        """The most workers a config measured without failing (-1: none)."""

    def pending(self, current: Optional[Config], notes: List[Reason]) -> Optional[Next]:
        """The config to measure (again) before anything is judged on it, if any."""

    def believed(self, config: Config, *stages: Phase) -> Optional[Reading]:
        """What ``config`` measured, as the search believes it (None: not measured)."""

    def rungs(self, base: Config, *stages: Phase) -> List[Reading]:
        """Every measurement of ``base`` with only its primary knob changed, in order."""

    def tried(self, config: Config, *stages: Phase) -> bool:
        """Was ``config`` measured (or did it fail)? It is not proposed again."""

    def supply_per_worker(self, count: int, *stages: Phase) -> float:
        """Batches/s one worker can supply at most, from what ``count`` workers measured
        (rules.supply_per_worker; inf: no bound known)."""


class TrialEvidence(Evidence, Protocol):
    """What only isolated trials tell: the ceiling's replay, repeats of a config and the stage
    each was measured in, the machine's other load (read where Mode says: offline's steps)."""

    def ceiling_tried(self) -> bool: ...

    def ladder_base(self) -> Config:
        """The config the ladder varies the primary knob of (persistent workers on short epochs)."""

    def measured_in(self, *stages: Phase) -> int:
        """How many trials those stages ran (whatever became of them)."""

    def busy(self) -> bool:
        """Did other processes' load make the search's measurements noisier (noise.is_busy)?"""

    def spread(self, config: Config, *stages: Phase) -> float:
        """How far ``config``'s measurements spread: its windows' chunks and its repeats."""

    def confirm_window(self, config: Config, *stages: Phase) -> Tuple[float, Optional[int]]:
        """A confirming window of ``config``: (times the usual, least batches)."""

    def recommended(self) -> Tuple[Optional[Config], Optional[Config]]:
        """(what the recommendation would advise, the script's own settings) as measured so far."""

    def confirm_rates(self, config: Config) -> List[Optional[float]]:
        """The stopwatch rate of each confirming trial of ``config``."""

    def reports(self, config: Config) -> int:
        """Figure windows of ``config`` so far, whatever became of them."""

    def variants(self, config: Config, *stages: Phase) -> List[Variant]:
        """The other knobs worth a trial at ``config`` (the space's secondary)."""
