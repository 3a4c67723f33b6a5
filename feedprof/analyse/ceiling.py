"""The compute ceiling an offline tune measured, where it is one.

A ceiling trial replays one cached batch, so loading costs nothing: its rate is the most any loader
setting can reach. A replay that runs slower than a config that really loaded is no such bound: the
step itself ran slower in it (measured: a Trainer job's replay ran 26 batches at 13 it/s, then 1.3
it/s with the training process at 100 % of a CPU, below the script's own 1.7-2.0), and taking it for
the ceiling told the search that no loader setting could help a job 16 workers made 10x faster. Such
a ceiling is a failed measurement, said with its figures, and both the search (tune/strategy.py) and
the recommendation (analyse/from_trials.py) go without it: by the loop's data wait.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from feedprof.analyse.measured import score, sound
from feedprof.store import Role, Trial, TrialState
from feedprof.store.reasons import CeilingBelowLoading

# A replay this much slower than real loading is not a bound: beyond the run-to-run noise of a busy
# machine (about 7 % between identical windows), and far inside the failures seen (0.65-0.76).
BELOW_LOADING = 0.15


@dataclass(frozen=True)
class CeilingReading:
    """The ceiling's rate (None: not measured, or not a bound) and why it is not a bound."""

    batches_per_s: Optional[float] = None
    failed: Optional[CeilingBelowLoading] = None


def ceiling_trial(trials: Sequence[Trial]) -> Optional[Trial]:
    """The ceiling trial that measured (the last whose window held, else the first)."""
    ok = [t for t in trials if t.role == Role.CEILING and t.state == TrialState.OK]
    return next((t for t in reversed(ok) if sound(t)), ok[0] if ok else None)


def read_ceiling(trials: Sequence[Trial]) -> CeilingReading:
    """The compute ceiling of these trials, checked against every config that really loaded."""
    trial = ceiling_trial(trials)
    rate = score(trial)
    if rate is None:
        return CeilingReading()
    loading = [t for t in trials if t.role != Role.CEILING and score(t) is not None]
    fastest = max(loading, key=score, default=None)
    if fastest is None or rate >= (1 - BELOW_LOADING) * score(fastest):
        return CeilingReading(batches_per_s=rate)
    return CeilingReading(failed=CeilingBelowLoading(
        ceiling_batches_per_s=rate, loading_batches_per_s=score(fastest), loading_config=dict(fastest.config),
        main_cpu_pct=trial.main_cpu_pct))
