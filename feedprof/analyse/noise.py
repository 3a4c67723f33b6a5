"""Run-to-run noise, measured by the tune itself, one model for both searches: how far apart
repeated measurements of one config land (offline its trials, online its windows of the run), and
whether two configs' rates are further apart than that allows (``margin``, ``told_apart``).

On a shared machine the spread between two runs of one config is larger than the spread of the
chunks inside one window, so the only honest yardstick is a repeat. Offline the confirm phase
(tune/search.py, confirm) makes repeats and the recommendation reads them (a costlier config must beat a
cheaper one by more than the margin); online every config is measured in several windows, and the
margin is the least tolerance of the pick (rules.pick_tolerance). Where the two differ, it is
the z of rules.Mode (``noise_z``), with its reason.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Sequence

from feedprof.analyse import stats
from feedprof.store.reasons import BusyMachine
from feedprof.store import Trial, TrialState

BUSY_CORES = 0.25  # other processes using this many cores on average: the machine is busy


def relative_spread(scores: Sequence[float]) -> Optional[float]:
    """Half the range of repeated scores over their median (0.05 = ±5 %)."""
    if len(scores) < 2:
        return None
    mid = stats.median(scores)
    return 0.5 * (max(scores) - min(scores)) / mid if mid else None


def margin(score_groups: Sequence[Sequence[float]], z: float) -> Optional[float]:
    """How far apart two configs' rates must be to be told apart in this run: ``z`` times the
    typical relative half-range of one config's measurements, each shrunk by the square root of the
    measurements behind its median (the upper median over the configs measured more than once;
    None: none was). More repeats sharpen it."""
    shrunk = sorted(s / math.sqrt(len(g)) for g in score_groups if (s := relative_spread(g)) is not None)
    return z * shrunk[len(shrunk) // 2] if shrunk else None


def told_apart(slower: Sequence[float], faster: Sequence[float], margin: float) -> bool:
    """Is ``faster``'s median above ``slower``'s by more than ``margin`` (a share of it)?"""
    a, b = stats.median(slower), stats.median(faster)
    if not a or b is None or b <= a:
        return False
    return (b - a) / a > margin


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
