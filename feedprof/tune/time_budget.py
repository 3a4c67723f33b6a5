"""The tune's wall-clock budget (--budget): what has been spent (a resumed tune's earlier time
too), what is left for trials (the results and the report are written after them), what a trial
costs, and the window and time limit each trial is given (tune/tuner.py asks)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

from feedprof.analyse import stats
from feedprof.record.clock import Clock
from feedprof.store import Trial, TrialState
from feedprof.trial.options import TrialOptions
from feedprof.tune.history import Proposal
from feedprof.tune.job import TuneOptions

if TYPE_CHECKING:
    from feedprof.trial.zygote import Zygote

BUDGET_MARGIN = 1.0  # start a trial only if this share of what it should take is left
FINISH_RESERVE_S = 5.0  # of the budget, kept for starting up and for writing the results and the report
BASELINE_TIMEOUT_MIN_S = 60.0  # the baseline may take the whole budget, and at least this long
TRIAL_TIMEOUT_FACTOR = 4.0  # a later trial may take this many times the baseline's wall time,
TRIAL_TIMEOUT_MIN_S = 30.0  # and at least this long
TIMEOUT_OVER_BUDGET_S = 3.0  # a trial's limit may pass the budget by this much (the budget is the user's promise)
EPOCH_SPAN_WINDOW_FACTOR = 3  # a trial that spans an epoch boundary measures this many windows
FIRST_RUNGS = 2  # a tune that tried nothing: the budget to suggest has room for this many of the ladder's rungs
REST_OF_CLIMB = 3  # a climb the budget ended: room for its next rung, one refinement and a confirmation


@dataclass
class TimeBudget:
    """What the tune's clock allows; ``spent_before_s``: a resumed tune's earlier time."""

    clock: Clock
    opts: TuneOptions
    started_s: float
    spent_before_s: float = 0.0

    def elapsed(self) -> float:
        return self.clock.now_s() - self.started_s + self.spent_before_s

    def remaining(self) -> float:
        """What is left of the budget for trials: the process started before the tuner did, and
        writing the results and the report comes after."""
        return self.opts.budget_s - FINISH_RESERVE_S - self.elapsed()

    def typical_trial_s(self, trials: Sequence[Trial], proposal: Optional[Proposal] = None,
                        loader_found: bool = True) -> float:
        """What a trial costs, from the median of the successful ones so far (a timed-out trial
        says nothing about the next one), and what a longer window asked for adds."""
        typical = stats.median([t.duration_s for t in trials if t.state == TrialState.OK and t.duration_s]) or 0.0
        factor = proposal.window_factor if proposal is not None else 1.0
        typical += (factor - 1) * self.opts.window_seconds
        extra = proposal.min_window_batches if proposal is not None else None
        if extra and loader_found:
            best = max((t for t in trials if t.state == TrialState.OK and t.batches_per_s), default=None,
                       key=lambda t: t.batches_per_s)
            if best is not None:  # a longer window: the extra batches at the best rate so far
                typical += extra / best.batches_per_s
        return typical

    def allows(self, trials: Sequence[Trial], proposal: Proposal, loader_found: bool = True) -> bool:
        """Is there time left for the trial ``proposal`` asks for (its typical time)?"""
        return self.remaining() >= BUDGET_MARGIN * self.typical_trial_s(trials, proposal, loader_found)

    def planned(self, trials: Sequence[Trial]) -> Optional[int]:
        """A rough 'of n' for the progress line: trials the budget still allows."""
        per = self.typical_trial_s(trials)
        if not per:
            return None
        return len(trials) + 1 + max(0, math.floor((self.remaining() - per) / per))

    def needed_s(self, trials: Sequence[Trial], steps: int = FIRST_RUNGS) -> Optional[float]:
        """The --budget with room for ``steps`` more trials after what was spent (as the search decides
        it: a trial starts only if its typical time is left), a round figure: by default, for a tune
        that tried no setting, the ladder's first rungs."""
        trial_s = self.typical_trial_s(trials) or None
        if trial_s is None:
            return None
        needed = self.elapsed() + steps * BUDGET_MARGIN * trial_s + FINISH_RESERVE_S
        return 10.0 * math.ceil(needed / 10.0)

    def trial_timeout_s(self, baseline: Trial) -> float:
        """A trial after the baseline: a multiple of the baseline's time, within the budget."""
        limit = self.opts.trial_timeout_s or max(TRIAL_TIMEOUT_MIN_S, TRIAL_TIMEOUT_FACTOR * baseline.duration_s)
        return min(limit, max(TIMEOUT_OVER_BUDGET_S, self.remaining() + TIMEOUT_OVER_BUDGET_S))

    def baseline_timeout_s(self) -> float:
        """The baseline may take the whole budget, and at least BASELINE_TIMEOUT_MIN_S."""
        return self.opts.trial_timeout_s or max(BASELINE_TIMEOUT_MIN_S, self.opts.budget_s)


def window_of(opts: TuneOptions, proposal: Proposal) -> Dict[str, Any]:
    """The trial's window where the proposal asks for a longer one than the usual: ``window_factor``
    times it (measured again, or confirming the pick), or across an epoch boundary
    (``min_window_batches``: persistent_workers, say)."""
    out: Dict[str, Any] = {}
    factor = proposal.window_factor
    if factor != 1.0:
        out.update(window_seconds=factor * opts.window_seconds, window_batches=int(factor * opts.window_batches))
    if proposal.min_window_batches is not None:
        out["min_window_batches"] = proposal.min_window_batches
        out["window_batches"] = max(out.get("window_batches", opts.window_batches), proposal.min_window_batches)
        out["window_seconds"] = max(EPOCH_SPAN_WINDOW_FACTOR, factor) * opts.window_seconds
    return out


def trial_options(opts: TuneOptions, window: Dict[str, Any], timeout_s: Optional[float], remaining_s: float,
                  zygote: Optional["Zygote"] = None) -> TrialOptions:
    """One trial's options: the tune's window (or ``window``'s), its time limit, the fork server."""
    base = TrialOptions(window_batches=opts.window_batches, window_seconds=opts.window_seconds,
                        min_window_batches=opts.min_window_batches, warmup_batches=opts.warmup_batches,
                        interval_s=opts.interval_s, gpu=opts.gpu, timeout_s=timeout_s,
                        loader_timeout_s=opts.loader_timeout_s, capture_output=True, zygote=zygote,
                        queue_timeout_s=max(1.0, remaining_s))  # a Slurm step's wait: the budget's
    return dataclasses.replace(base, **window)


