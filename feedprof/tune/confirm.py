"""The confirm phase of the ladder (strategy.py): the pick and its closest
rival re-measured, interleaved, while they are within noise; then the pick
in a longer window measured after it was chosen, and the script's own
settings beside it (the pick's figure and speedup are reported from those:
analyse/measured.reported).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

from feedprof.analyse import noise, rules
from feedprof.analyse import stats
from feedprof.analyse.evidence import config_key
from feedprof.analyse.measured import Measured, batches_per_epoch, measured_configs, pick, score, sustained
from feedprof.analyse.from_trials import TrialMeasurements
from feedprof.analyse.recommend import figures
from feedprof.store.reasons import Reason, RivalsRemeasured
from feedprof.store import Phase, Role, Trial
from feedprof.tune.history import TrialHistory, Proposal
from feedprof.tune.space import EPOCH_SPAN_EXTRA_BATCHES

CONFIRM_MARGIN = (0.10, 0.30)  # a rival this close (or within twice the measured spread) is re-measured
CONFIRM_ROUNDS = 2  # at most this many re-measurements of each of the two (interleaved, longer windows)
CONFIRM_WINDOW_FACTOR = 2.0  # the pick's confirmation window, in usual windows
BOUNDARY_EPOCH_S = 10.0  # epochs this short at the pick's rate: its confirmation crosses a boundary
CONFIRM_AGREE = 0.10  # the pick's confirmation windows agree when each is this close to their median
CONFIRM_PICK_WINDOWS = 3  # at most this many, where the budget allows more than one
# On a busy machine (noise.is_busy: other processes' load drifts between and inside windows)
# the rivals get one more round and every confirming window is longer: configs that the
# load makes indistinguishable are measured until they separate or are shown equal.
BUSY_EXTRA_ROUNDS = 1
BUSY_WINDOW_FACTOR = 1.5  # times the confirming window


class Confirmation:
    """The confirm steps of a search over ``history``: ``ok`` gives the measured trials it may
    build on (within the worker cap), ``tol`` is its pick's tolerance, ``rounds`` the most
    re-measurements of the pick and its rival."""

    def __init__(self, history: TrialHistory, ok: Callable[[Sequence[Trial]], List[Trial]], tol: float,
                 rounds: int):
        self.history, self._ok, self.tol, self.confirm_rounds = history, ok, tol, rounds

    @property
    def trials(self) -> List[Trial]:
        return self.history.trials

    @property
    def space(self) -> Any:
        return self.history.space

    def rivals(self, notes: List[Reason]) -> Optional[Proposal]:
        """Re-measure the pick and its strongest rival, interleaved, when they are
        within noise: round after round until the repeats tell them apart, or
        show them equal within tolerance, or confirm_rounds are done."""
        before = self._ok([t for t in self.trials if t.role != Role.CONFIRM])
        chosen = pick(before, self.space.cost, self.tol)
        configs = measured_configs(before)
        if chosen is None or len(configs) < 2:
            return None
        rival = max((m for m in configs if config_key(m.config) != config_key(chosen.config)), key=lambda m: m.score)
        spread = max(chosen.relative_spread, rival.relative_spread)
        margin = min(CONFIRM_MARGIN[1], max(CONFIRM_MARGIN[0], 2 * spread))
        if min(chosen.score, rival.score) < max(chosen.score, rival.score) * (1 - margin):
            return None
        done = sum(t.phase == Phase.CONFIRM for t in self.trials)
        rounds = done // 2
        busy = self._busy()
        notes.append(RivalsRemeasured(pick=dict(chosen.config), rival=dict(rival.config), margin=margin,
                                      repeats=rounds + (done % 2 == 1) or 1, busy=busy))
        if any(t.phase == Phase.REPORT for t in self.trials):
            return None  # the figures are being measured: the choice is made
        most_rounds = self.confirm_rounds + (BUSY_EXTRA_ROUNDS if busy else 0)
        if done % 2 == 0 and (rounds >= most_rounds or (rounds and self._settled(chosen, rival))):
            return None
        # the rival first, the pick last: closest to the end of the tune
        nxt = rival if done % 2 == 0 else chosen
        return Proposal(dict(nxt.config), Role.CONFIRM, Phase.CONFIRM, self._confirm_window(nxt))

    def pick(self, notes: List[Reason]) -> Optional[Proposal]:
        """One window of what will be recommended, measured after it was chosen:
        its figure is reported from it (measured.reported), not from the best
        of the windows it was chosen on. Across an epoch boundary where an
        epoch is short enough: the time between epochs is then in it too.
        Then one of the script's own settings beside it: the speedup is a
        ratio of two windows measured side by side, not minutes apart on a
        machine whose load drifts. Then the pick again while its windows
        disagree (_confirms_agree), where the budget has room."""
        measurements = TrialMeasurements(self.trials, self.space)
        f = figures(measurements, self.space, self.tol)
        if f is None:
            return None
        chosen = measurements.measured[config_key(f.chosen.config)]
        base = next((m for m in measured_configs(self._ok(self.trials))
                     if f.baseline is not None and config_key(m.config) == config_key(f.baseline.config)), None)
        for m in (chosen, base):
            if m is not None and not any(t.role == Role.CONFIRM for t in m.trials) and not self._reports(m):
                return Proposal(dict(m.config), Role.CONFIRM, Phase.REPORT, self._confirm_window(m))
        if self._reports(chosen) < CONFIRM_PICK_WINDOWS and not self._confirms_agree(chosen):
            # one more window, where the budget has room for it
            return Proposal(dict(chosen.config), Role.CONFIRM, Phase.REPORT, self._confirm_window(chosen),
                            optional=True)
        return None

    def _reports(self, m: Measured) -> int:
        """The figure windows of ``m``'s config so far, whatever became of them (one that
        failed is not asked for again and again)."""
        return sum(t.phase == Phase.REPORT and config_key(t.config) == config_key(m.config) for t in self.trials)

    @staticmethod
    def _confirms_agree(m: Measured) -> bool:
        """Do the pick's confirmation windows agree (or are there enough of
        them)? On a shared machine two adjacent windows of one config can
        differ by a quarter; the figure is their median, so a third window
        settles which of two that disagree was the outlier."""
        rates = [sustained(t) for t in m.trials if t.role == Role.CONFIRM]
        rates = [r for r in rates if r]
        if len(rates) >= CONFIRM_PICK_WINDOWS or not rates:
            return True
        mid = stats.median(rates)
        return len(rates) > 1 and all(abs(r - mid) <= CONFIRM_AGREE * mid for r in rates)

    def _busy(self) -> bool:
        """Was the machine busy while the search ran (before any confirming window)?
        Read from the search's trials alone, so that what the confirm step decided
        stays decided as its own windows come in."""
        return noise.is_busy([t for t in self.trials if t.role != Role.CONFIRM])

    def _confirm_window(self, m: Measured) -> Dict[str, Any]:
        """A confirming window: longer than a search window (longer still on a busy
        machine), and across an epoch boundary where an epoch is short enough at
        the config's rate."""
        factor = CONFIRM_WINDOW_FACTOR * (BUSY_WINDOW_FACTOR if self._busy() else 1.0)
        overrides: Dict[str, Any] = {"window_factor": factor}
        bpe = batches_per_epoch(m.latest)
        if bpe and m.score and bpe / m.score <= BOUNDARY_EPOCH_S:
            overrides["min_window_batches"] = bpe + EPOCH_SPAN_EXTRA_BATCHES
        return overrides

    def _settled(self, chosen: Measured, rival: Measured) -> bool:
        """With the repeats so far: told apart either way, or equal within
        tolerance as precisely as more rounds could say."""
        groups = {config_key(m.config): [score(t) for t in m.trials] for m in measured_configs(self._ok(self.trials))}
        a, b = groups[config_key(chosen.config)], groups[config_key(rival.config)]
        margin = noise.margin([a, b], rules.OFFLINE.noise_z)
        if margin is None:
            return False
        precise = margin <= self.tol
        return noise.told_apart(a, b, margin) or noise.told_apart(b, a, margin) or precise
