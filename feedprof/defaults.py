"""Every default a user can change, in one place: the CLI, the Python API,
the Keras callback and the trial runner all read them from here."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WindowDefaults:
    """How much of a run is measured before the script is ended."""

    batches: int  # steady-state batches, or
    seconds: float  # this much steady-state wall time (with at least min_batches), whichever first
    min_batches: int
    warmup_batches: int  # excluded after each run's first batch


# feedprof profile: one long look at the script's own settings.
PROFILE_WINDOW = WindowDefaults(batches=200, seconds=30.0, min_batches=10, warmup_batches=5)
# feedprof tune: many short looks, each long enough for a spread over chunks.
TUNE_WINDOW = WindowDefaults(batches=2000, seconds=2.0, min_batches=30, warmup_batches=5)

INTERVAL_S = 0.2  # sampling period: 5 Hz, NVML's own averaging makes faster pointless
LOADER_TIMEOUT_S = 120.0  # no batch from any loader within this: the trial ends as a timeout
TUNE_BUDGET_S = 120.0  # wall-clock budget of a whole tune
RAY_TUNE_BUDGET_S = 300.0  # ... of a Ray Train job's, whose every trial starts Ray anew (10-30 s before a batch)
ATTACH_RATE_HZ = 20  # attach: stack samples a second per process (600 in its 30 s; 50 cost a job whose CPUs were full 5-13 %)
EXPLORE_S = 60.0  # tune --online: exploring stops after this long, from the run's first window
TOLERANCE = 0.03  # tune --tolerance: configs within this share of the fastest count as equally fast
MAX_WORKERS_LEAST = 32  # --max-workers: the most workers tried, by default max(this, 2 x the usable CPUs)


def max_workers(cpu_cap: int) -> int:
    """The most workers a tune tries where --max-workers does not say (offline and online alike)."""
    return max(MAX_WORKERS_LEAST, 2 * cpu_cap)
