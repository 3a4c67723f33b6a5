"""Beyond the knobs: what the best loader settings leave between the job and its compute ceiling,
which part of a batch's time that is, and what would close it (analyse/beyond.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from feedprof.store.reasons.base import Config, Reason

# What holds a config back, by the part of its batch time that keeps it from the step alone:
#   waiting           the loop blocks on a loader whose code mostly waits (I/O, sleep, a lock)
#   cores             the loop blocks on a loader whose code computes, and the workers fill the CPUs
#   workers           the loop blocks on a loader whose code computes, with CPU time to spare
#   training_process  the training process's own loading work (receiving batches, collating at 0 workers)
#   the step itself runs slower beside the workers, and most of that is
#     contention        waiting for a CPU (the workers took the cores)
#     step_work         more CPU work in each step (fresh batches to touch and copy, shared caches and memory bandwidth)
#     step_waits        waiting on something that is neither (the device, a copy to it, a lock)
#     step_slower       (not told apart: the training process's CPU was not sampled in both runs)
BOUNDS = ("waiting", "cores", "workers", "training_process", "contention", "step_work", "step_waits", "step_slower")


@dataclass(frozen=True)
class GapExplained(Reason):
    """``config`` runs ``fraction_short`` short of what its step alone allows (``step_alone_s`` a
    batch, measured by ``step_alone_from``), and the gap is these measured parts, seconds a batch;
    ``bound``: the one that binds ("" where none is a real share)."""

    code: ClassVar[str] = "gap_explained"
    config: Config = field(default_factory=dict)
    fraction_short: float = 0.0
    batch_s: float = 0.0
    step_alone_s: Optional[float] = None
    step_alone_from: str = ""
    blocked_s: Optional[float] = None
    loop_loading_s: Optional[float] = None
    slowdown_s: Optional[float] = None
    slowdown_runq_s: Optional[float] = None  # the slowdown's parts (store/batch_time.py), where told apart
    slowdown_cpu_s: Optional[float] = None
    slowdown_wait_s: Optional[float] = None
    bound: str = ""
    loading_cpu_share: Optional[float] = None  # of the loading code's time: computing (what splits "blocked")


@dataclass(frozen=True)
class PartNotMeasured(Reason):
    """A part of a batch's time that this run could not measure, and why: ``part`` "step_alone"
    (``why`` "no_ceiling": no replay bounded anything and the script's own settings had workers;
    "profile_with_workers": a single run with workers has nothing to compare its step with),
    "loop_loading" (the framework pulls batches out of sight), "loading_profile" (no loading call
    was seen: a loader that is not profiled, or workers started by spawn)."""

    code: ClassVar[str] = "part_not_measured"
    part: str = ""
    why: str = ""


@dataclass(frozen=True)
class Remedy(Reason):
    """What would close the gap where ``bound`` binds. ``kind``: "own_cores", "pin_memory",
    "receive_less", "smaller_copy", "cheaper_line", "cache_line", "device_line", "thread_workers",
    "more_prefetch". ``measured_batches_per_s``: a trial ran it (``config``); otherwise
    ``predicted_batches_per_s`` is the rate the measured parts predict (None: no prediction).
    ``site``/``function``: the user's line it concerns, ``seconds_per_batch``: what that costs."""

    code: ClassVar[str] = "remedy"
    kind: str = ""
    bound: str = ""
    predicted_batches_per_s: Optional[float] = None
    measured_batches_per_s: Optional[float] = None
    from_batches_per_s: Optional[float] = None  # the rate it improves on
    config: Config = field(default_factory=dict)
    site: str = ""
    function: str = ""
    share: Optional[float] = None  # of the loading code's time (a line), or of a batch's (a part)
    seconds_per_batch: Optional[float] = None
