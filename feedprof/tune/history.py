"""What every offline strategy shares: the proposal it makes, the protocol the tuner asks it
through, and the trials told so far, turned into the evidence the search reads (tune/search.py
``Evidence`` and ``TrialEvidence``; the online search's is tune/online_strategy.py RunEvidence, of
the real run's windows). A strategy keeps nothing but the trials, so resuming is telling the saved
trials again. GridStrategy, the simplest strategy, lives here too; the ladder is strategy.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Protocol, Sequence, Tuple

from feedprof.analyse import noise, rules
from feedprof.analyse.ceiling import read_ceiling
from feedprof.analyse.evidence import config_key
from feedprof.analyse.from_trials import TrialMeasurements
from feedprof.analyse.limits import failure_kind, usable, worker_cap
from feedprof.analyse.measured import (Measured, batches_per_epoch, cpu_use, measured_configs, score, sound,
                                       sustained, window_spread)
from feedprof.analyse.recommend import figures
from feedprof.store import ConfigEvidence, Phase, Role, Trial, TrialState
from feedprof.store.reasons import MeasuredAgain, Reason, WorkersCapped
from feedprof.tune.evidence import Next, Reading
from feedprof.tune.space import EPOCH_SPAN_EXTRA_BATCHES, Config, Space, Variant, job_cores

SHORT_EPOCH_S = 10.0  # epochs this short at the compute ceiling: worker start-up is a real share
DIP = 0.15  # a rung this far below a rung beneath it breaks the curve: measured again before believed
AGAIN_WINDOW_FACTOR = 2.0  # a trial measured again gets this many times the usual window
CONFIRM_WINDOW_FACTOR = 2.0  # a confirming window, in usual windows
BUSY_WINDOW_FACTOR = 1.5  # ... times this on a busy machine (noise.is_busy)
BOUNDARY_EPOCH_S = 10.0  # epochs this short at a config's rate: its confirming window crosses a boundary


@dataclass(frozen=True)
class Proposal:
    """The next trial: its config, why it runs, and its window where not the usual one."""

    config: Config
    role: Role
    phase: Phase
    window_factor: float = 1.0  # times the usual window: measured again, or confirming
    min_window_batches: Optional[int] = None  # at least this many batches (across an epoch boundary)
    optional: bool = False  # only if the budget allows it: the tune is complete without it

    @classmethod
    def of(cls, step: Next) -> "Proposal":
        return cls(step.config, step.role, step.phase, step.window_factor, step.min_window_batches, step.optional)


class Strategy(Protocol):
    """What the tuner needs of a search strategy."""

    def tell(self, trial: Trial) -> None:
        """Record a trial (measured, failed or rejected)."""

    def ask(self) -> Optional[Proposal]:
        """The next config to measure, from the trials told so far; None: done."""

    @property
    def notes(self) -> List[Reason]:
        """How the search went, as of the last ask."""


def ok_trials(trials: Sequence[Trial]) -> List[Trial]:
    return [t for t in trials if t.role != Role.CEILING and t.state == TrialState.OK and score(t) is not None]


class TrialHistory:
    """The trials told so far, as the search reads them: each config's trials pooled into its
    evidence (analyse/measured.py), the one believed per config, the worker cap they set
    (analyse/limits.py), and what only trials tell (repeats, phases, the machine's other load).
    ``stages``: the phases whose trials a question reads (none: every trial)."""

    def __init__(self, space: Space, tolerance: float = rules.OFFLINE.pick_tolerance):
        self.space = space
        self.tolerance = tolerance
        self.trials: List[Trial] = []
        self._notes: List[Reason] = []
        self._cap: Tuple[int, Optional[WorkersCapped]] = (-1, None)

    def tell(self, trial: Trial) -> None:
        self.trials.append(trial)

    @property
    def notes(self) -> List[Reason]:
        return list(self._notes)

    @property
    def baseline(self) -> Optional[Config]:
        return self.space.baseline

    @property
    def cpu_cap(self) -> int:
        return self.space.cpu_cap

    @property
    def max_workers(self) -> int:
        return self.space.max_primary

    # -- the trials ---------------------------------------------------------------------

    def in_phases(self, *phases: Phase) -> List[Trial]:
        """The trials of these phases (none: every trial)."""
        return [t for t in self.trials if t.phase in phases] if phases else list(self.trials)

    def same_as(self, trial: Trial) -> List[Trial]:
        """Every trial of ``trial``'s config in its role (it, and any repeats)."""
        key = self.space.key(trial.config)
        return [t for t in self.trials if t.role == trial.role and self.space.key(t.config) == key]

    def first_of_each(self) -> List[Trial]:
        """The first measured trial of each config in each role (confirmations aside)."""
        firsts: Dict[tuple, Trial] = {}
        for t in self.trials:
            if t.role != Role.CONFIRM and t.state == TrialState.OK:
                firsts.setdefault((t.role, self.space.key(t.config)), t)
        return list(firsts.values())

    def believed_trial(self, config: Config, trials: Sequence[Trial]) -> Optional[Trial]:
        """The trial of ``config`` among ``trials`` that is believed, whatever its state: the last
        one whose window did not spread, else the first."""
        key = self.space.key(config)
        of = [t for t in trials if t.role != Role.CEILING and self.space.key(t.config) == key]
        return next((t for t in reversed(of) if t.state == TrialState.OK and sound(t)), of[0] if of else None)

    def cap(self) -> Optional[WorkersCapped]:
        """The most workers that are safe, and why (analyse/limits.py), for the trials told so far."""
        if self._cap[0] != len(self.trials):
            self._cap = (len(self.trials), worker_cap(self.trials, self.space.workers))
        return self._cap[1]

    def usable(self, trials: Sequence[Trial]) -> List[Trial]:
        """Measured trials within the worker cap, of configs that never died: what the search builds on."""
        return usable(ok_trials(trials), self.cap(), self.space.workers, history=self.trials)

    def pooled(self, *stages: Phase) -> List[Measured]:
        return measured_configs(self.usable(self.in_phases(*stages)))

    def _pooled_of(self, config: Config, *stages: Phase) -> Optional[Measured]:
        key = config_key(config)
        return next((m for m in self.pooled(*stages) if config_key(m.config) == key), None)

    def reading(self, trial: Trial) -> Reading:
        sp, s = self.space, score(trial)
        bps, high = trial.batches_per_s, trial.batches_per_s_high
        return Reading(config=dict(trial.config), count=sp.primary_of(trial.config), ended=trial.state.value, rate=s,
                       steady_rate=bps, rate_high=s * (high / bps) if s and bps and high else s,
                       wait_fraction=trial.data_wait_fraction, cpu_bound=sp.cpu_bound(trial),
                       job_cores=job_cores(cpu_use(trial)), start_s=trial.time_to_first_batch_s,
                       own=trial.role == Role.BASELINE)

    # -- Evidence (tune/search.py) ------------------------------------------------------

    def judged(self, *stages: Phase) -> List[ConfigEvidence]:
        return [m.evidence for m in self.pooled(*stages)]

    def ceiling(self) -> Optional[float]:
        """The compute ceiling, where it bounds the configs that really loaded (analyse/ceiling.py)."""
        return read_ceiling(self.trials).batches_per_s

    def worker_cap(self) -> Optional[int]:
        cap = self.cap()
        return cap.max_workers if cap is not None else None

    def failures(self) -> List[Tuple[Config, str]]:
        return [(dict(t.config), kind) for t in self.trials
                if t.role != Role.CEILING and (kind := failure_kind(t)) is not None]

    def most_workers_ran(self) -> int:
        return max((self.space.primary_of(t.config) for t in ok_trials(self.trials)), default=-1)

    def pending(self, current: Optional[Config], notes: List[Reason]) -> Optional[Next]:
        return measure_again(self, notes)

    def believed(self, config: Config, *stages: Phase) -> Optional[Reading]:
        trial = self.believed_trial(config, self.in_phases(*stages))
        return self.reading(trial) if trial is not None else None

    def rungs(self, base: Config, *stages: Phase) -> List[Reading]:
        sp = self.space
        return [self.reading(t) for t in self.usable(self.in_phases(*stages))
                if sp.key(t.config) == sp.key(sp.with_primary(base, sp.primary_of(t.config)))]

    def tried(self, config: Config, *stages: Phase) -> bool:
        return self.believed_trial(config, self.in_phases(*stages)) is not None

    def supply_per_worker(self, count: int, *stages: Phase) -> float:
        """From the fastest config measured with ``count`` workers (the most per worker: the
        lowest floor; where its loop barely waited, no bound at all)."""
        sp = self.space
        slower = max((m for m in self.pooled(*stages) if sp.primary_of(m.config) == count), key=lambda m: m.score,
                     default=None)
        if slower is None:
            return float("inf")
        e, in_loop = slower.evidence, sp.loads_in_loop(slower.config)
        return rules.supply_per_worker((e.steady_rate if in_loop else e.rate) or 0.0, count, in_loop, e.wait_fraction)

    # -- TrialEvidence: what only trials tell --------------------------------------------

    def ceiling_tried(self) -> bool:
        return any(t.role == Role.CEILING for t in self.trials)

    def ladder_base(self) -> Config:
        return self.space.ladder_base(self.space.baseline, self.short_epochs())

    def short_epochs(self) -> bool:
        """Would an epoch last under SHORT_EPOCH_S at the compute ceiling?"""
        ceiling = self.ceiling()
        base = next((t for t in self.trials if t.role == Role.BASELINE), None)
        run = base.run if base is not None else None
        if not ceiling or run is None:
            return False
        rec = run.loader(run.window.loader_id)
        bpe = rec.batches_per_epoch if rec is not None else None
        return bool(bpe) and bpe / ceiling <= SHORT_EPOCH_S

    def measured_in(self, *stages: Phase) -> int:
        return len(self.in_phases(*stages))

    def busy(self) -> bool:
        """Read from the search's trials alone (before any confirming window), so that what the
        confirm step decided stays decided as its own windows come in."""
        return noise.is_busy([t for t in self.trials if t.role != Role.CONFIRM])

    def spread(self, config: Config, *stages: Phase) -> float:
        m = self._pooled_of(config, *stages)
        return m.spread if m is not None else 0.0

    def confirm_window(self, config: Config, *stages: Phase) -> Tuple[float, Optional[int]]:
        """Longer than a search window (longer still on a busy machine), and across an epoch
        boundary where an epoch is short enough at the config's rate."""
        factor = CONFIRM_WINDOW_FACTOR * (BUSY_WINDOW_FACTOR if self.busy() else 1.0)
        m = self._pooled_of(config, *stages)
        bpe = batches_per_epoch(m.latest) if m is not None else None
        if m is not None and bpe and m.score and bpe / m.score <= BOUNDARY_EPOCH_S:
            return factor, bpe + EPOCH_SPAN_EXTRA_BATCHES
        return factor, None

    def recommended(self) -> Tuple[Optional[Config], Optional[Config]]:
        f = figures(TrialMeasurements(self.trials, self.space), self.space, self.tolerance)
        if f is None:
            return None, None
        own = self._pooled_of(f.baseline.config) if f.baseline is not None else None
        return dict(f.chosen.config), dict(own.config) if own is not None else None

    def confirm_rates(self, config: Config) -> List[Optional[float]]:
        m = self._pooled_of(config)
        return [sustained(t) for t in (m.trials if m is not None else ()) if t.role == Role.CONFIRM]

    def reports(self, config: Config) -> int:
        key = config_key(config)
        return sum(t.phase == Phase.REPORT and config_key(t.config) == key for t in self.trials)

    def variants(self, config: Config, *stages: Phase) -> List[Variant]:
        m = self._pooled_of(config, *stages)
        return self.space.secondary(m.latest, self.tolerance, self.in_phases(*stages)) if m is not None else []


def measure_again(h: TrialHistory, notes: List[Reason]) -> Optional[Next]:
    """The last trial, measured again in a longer window, if its window spread or (a ladder rung)
    it reads well below a rung beneath it; once. What was measured again so far is said again."""
    for first in h.first_of_each():
        note = _again_note(h, first)
        if len(h.same_as(first)) > 1 and note.why:
            notes.append(note)
    last = h.trials[-1] if h.trials else None
    if last is None or last.state != TrialState.OK or last.role == Role.CONFIRM:
        return None
    if len(h.same_as(last)) > 1:
        return _beside(h, last)
    note = _again_note(h, last)
    if not note.why:
        return None
    notes.append(note)
    return Next(dict(last.config), "again", last.phase, last.role, window_factor=AGAIN_WINDOW_FACTOR)


def _beside(h: TrialHistory, rung: Trial) -> Optional[Next]:
    """A rung measured again for a dip that still reads below the best rung beneath it: that rung
    is measured again too, beside it, so the two are compared in windows side by side (a shared
    machine's load drifts between trials minutes apart)."""
    sp, again = h.space, h.same_as(rung)
    if rung.phase != Phase.LADDER or len(again) != 2 or _again_note(h, again[0]).why != "dip":
        return None
    n, s = sp.primary_of(rung.config), score(rung)
    best = max((m for m in h.pooled(Phase.BASELINE, Phase.LADDER) if sp.primary_of(m.config) < n),
               key=lambda m: m.score, default=None)
    if best is None or s is None or s >= best.score or len(best.trials) > 1:
        return None
    first = best.trials[0]
    return Next(dict(best.config), "again", first.phase, first.role, window_factor=AGAIN_WINDOW_FACTOR)


def _again_note(h: TrialHistory, trial: Trial) -> MeasuredAgain:
    """Why ``trial`` is (or was) measured again: why="" if it needs not be."""
    why = "spread" if not sound(trial) else "dip" if _dips(h, trial) else ""
    return MeasuredAgain(config=dict(trial.config), why=why, spread=window_spread(trial) or 0.0,
                         ceiling=trial.role == Role.CEILING)


def _dips(h: TrialHistory, trial: Trial) -> bool:
    """A ladder rung that reads more than DIP below a rung beneath it."""
    if trial.phase != Phase.LADDER:
        return False
    n, s = h.space.primary_of(trial.config), score(trial)
    below = [m.score for m in h.pooled(Phase.BASELINE, Phase.LADDER) if h.space.primary_of(m.config) < n]
    return bool(below) and s is not None and s < max(below) * (1 - DIP)


class GridStrategy(TrialHistory):
    """Every config of a fixed list, in order, each measured once (no ceiling)."""

    def __init__(self, space: Space, configs: Iterable[Config]):
        super().__init__(space)
        self.configs = [space.legalize(dict(c)) for c in configs]

    def ask(self) -> Optional[Proposal]:
        done = self.in_phases(Phase.GRID, Phase.BASELINE)
        for config in self.configs:
            if self.believed_trial(config, done) is None:
                return Proposal(config, Role.SEARCH, Phase.GRID)
        return None
