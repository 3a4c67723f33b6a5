"""Run-to-run noise, measured by the tune itself: how far apart repeats of the
same config land (A/A pairs), and whether two configs' medians are further
apart than that, given how often each was measured.

On a shared machine the spread between two runs of one config is larger than
the spread of the chunks inside one window, so the only honest yardstick is a
repeat. The confirm phase (tune/strategy.py) makes repeats; the pick uses them:
a costlier config must beat a cheaper one by more than the noise allows.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Sequence

from feedprof.analyse import stats
from feedprof.store.reasons import BusyMachine
from feedprof.store import Trial, TrialState

Z = 1.5  # medians apart by this many standard errors are told apart
BUSY_CORES = 0.25  # other processes using this many cores on average: the machine is busy


def relative_spread(scores: Sequence[float]) -> Optional[float]:
    """Half the range of repeated scores over their median (0.05 = ±5 %)."""
    if len(scores) < 2:
        return None
    mid = stats.median(scores)
    return 0.5 * (max(scores) - min(scores)) / mid if mid else None


def repeat_noise(score_groups: Sequence[Sequence[float]]) -> Optional[float]:
    """The run-to-run noise of this tune: the median relative spread over the
    configs measured more than once (None: nothing was repeated)."""
    spreads = [s for s in (relative_spread(g) for g in score_groups) if s is not None]
    return stats.median(spreads) if spreads else None


def told_apart(slower: Sequence[float], faster: Sequence[float], noise: float) -> bool:
    """Is ``faster``'s median above ``slower``'s by more than the noise allows?
    The margin shrinks with the square root of the repeats of the less measured one."""
    a, b = stats.median(slower), stats.median(faster)
    if not a or b is None or b <= a:
        return False
    n = max(1, min(len(slower), len(faster)))
    return (b - a) / a > Z * noise / math.sqrt(n)


def other_cores(trials: Sequence[Trial]) -> Optional[float]:
    """The cores other processes used on average while ``trials`` ran (None: not measured)."""
    return stats.mean([t.other_cpu_cores for t in trials
                       if t.state == TrialState.OK and t.other_cpu_cores is not None])


def is_busy(trials: Sequence[Trial]) -> bool:
    """Did other processes take enough of the CPUs while ``trials`` ran to make their figures noisier?"""
    mean = other_cores(trials)
    return mean is not None and mean >= BUSY_CORES


def busy_machine(trials: Sequence[Trial], cpus: int) -> Optional[BusyMachine]:
    """Other processes' share of the CPUs while the trials ran, if it was worth saying."""
    mean = other_cores(trials)
    if mean is None or not is_busy(trials):
        return None
    by_name: Dict[str, float] = {}
    for t in trials:
        for p in (t.run.other_processes if t.run is not None else ()):
            by_name[p.name] = by_name.get(p.name, 0.0) + p.cpu_cores
    busiest = tuple(sorted(by_name, key=lambda name: -by_name[name])[:3])
    return BusyMachine(other_cores=mean, cpus=cpus, busiest=busiest)
