"""Search strategies: the next config to measure, as a function of the trials
told so far (Optuna's sampler is the model: ``tell`` records, ``ask`` reads the
history). Nothing is kept between asks but the history itself, so resuming a
tune is "tell the saved trials, then ask".

NOTE [ Search, not grid ]  (LadderStrategy; each step below is one function)

    baseline (the script's own settings, run by the tuner)
      └► ceiling: one cached batch replayed, so loading costs nothing
          └► ladder 0, 2, 4, 8, ... (and the CPU count) over the primary knob
               stop when: throughput reaches the ceiling (within tolerance)
                          a rung gains less than MIN_GAIN over the rungs below
                            (the first such rung is forgiven while the loop
                            still waits and the CPUs have room)
                          the next rung passes the CPU count and the workers are
                            CPU-bound (beyond it only I/O-bound workers pay off)
                          a trial fails, is killed or rejected
          (while the CPUs have room: jump straight to the rung predicted to reach
           what the ceiling and the CPU budget allow, instead of doubling)
              └► refine: binary search between the best rung and the rung below
                         it, for the cheapest config within tolerance
                  └► secondary knobs at the best config (space.secondary)
                      └► confirm: the pick and its strongest rival within noise are
                           measured again, interleaved; configs are ranked by the
                           median over their trials (run-to-run drift on a shared
                           machine is larger than the spread inside one window)

Every trial carries the phase that proposed it, and each step reads only the
trials of the phases before it and its own: a trial measured later (a confirm
repeat of a rung) never changes what an earlier step decided.

GridStrategy proposes a fixed list of configs in order (the benchmark's grid).
Strategies never run anything: the tuner asks, runs the trial, tells.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Protocol, Sequence, Set

from feedprof.analyse import noise
from feedprof.analyse.limits import usable, worker_cap
from feedprof.analyse.recommend import Measured, config_key, measured_configs, pick, score
from feedprof.store.reasons import (CpusSaturated, FlatRung, JumpedAhead, LadderStoppedByTrial, MaxWorkersReached,
                              PastCpuCount, ReachedCeiling, Reason, RivalsRemeasured, WorkersCapped, said_once)
from feedprof.store import Phase, Role, Trial, TrialState
from feedprof.tune.space import Config, Space, job_cores

MIN_GAIN = 0.05  # a rung must beat the rungs below by this much to keep climbing
SHORT_EPOCH_S = 10.0  # epochs this short at the compute ceiling: worker start-up is a real share
MAX_REFINE = 3
CONFIRM_MARGIN = (0.10, 0.30)  # a rival this close (or within twice the measured spread) is re-measured
CONFIRM_ROUNDS = 3  # at most this many re-measurements of each of the two (interleaved)
JUMP_MIN_WAIT = 0.5  # jump only while the loop mostly waits: the loader is the limit


@dataclass
class Proposal:
    config: Config
    role: Role
    phase: Phase
    overrides: Dict[str, Any] = field(default_factory=dict)  # trial option overrides (runner.TrialOptions)


class Strategy(Protocol):
    """What the tuner needs of a search strategy."""

    def tell(self, trial: Trial) -> None:
        """Record a trial (measured, failed or rejected)."""

    def ask(self) -> Optional[Proposal]:
        """The next config to measure, from the trials told so far; None: done."""

    @property
    def notes(self) -> List[Reason]:
        """How the search went, as of the last ask."""


def _in(trial: Trial, phases: Iterable[Phase]) -> bool:
    # Files of schema version 1 did not record phases: their trials count everywhere.
    return trial.phase in phases or trial.phase == Phase.SEARCH


class _History:
    """The trials told so far, and the questions every strategy asks of them."""

    def __init__(self, space: Space):
        self.space = space
        self.trials: List[Trial] = []
        self._notes: List[Reason] = []

    def tell(self, trial: Trial) -> None:
        self.trials.append(trial)

    @property
    def notes(self) -> List[Reason]:
        return list(self._notes)

    def of(self, *phases: Phase) -> List[Trial]:
        return [t for t in self.trials if _in(t, phases)]

    def measured(self, config: Config, trials: Sequence[Trial]) -> Optional[Trial]:
        """The first trial of ``config`` among ``trials``, whatever its state."""
        key = self.space.key(config)
        return next((t for t in trials if t.role != Role.CEILING and self.space.key(t.config) == key), None)


def ok_trials(trials: Sequence[Trial]) -> List[Trial]:
    return [t for t in trials if t.role != Role.CEILING and t.state == TrialState.OK and score(t) is not None]


class GridStrategy(_History):
    """Every config of a fixed list, in order, each measured once (no ceiling)."""

    def __init__(self, space: Space, configs: Iterable[Config]):
        super().__init__(space)
        self.configs = [space.legalize(dict(c)) for c in configs]

    def ask(self) -> Optional[Proposal]:
        done = self.of(Phase.GRID, Phase.BASELINE)
        for config in self.configs:
            if self.measured(config, done) is None:
                return Proposal(config, Role.SEARCH, Phase.GRID)
        return None


class LadderStrategy(_History):
    def __init__(self, space: Space, tol: float = 0.03, min_gain: float = MIN_GAIN,
                 confirm_rounds: int = CONFIRM_ROUNDS):
        super().__init__(space)
        self.tol = tol
        self.min_gain = min_gain
        self.confirm_rounds = confirm_rounds
        self.cap: Optional[WorkersCapped] = None  # from the history, at every ask (analyse/limits.py)

    def _ok(self, trials: Sequence[Trial]) -> List[Trial]:
        """Measured trials within the worker cap: what the steps may build on."""
        return usable(ok_trials(trials), self.cap, self.space.workers, history=self.trials)

    def ask(self) -> Optional[Proposal]:
        notes: List[Reason] = []
        self.cap = worker_cap(self.trials, self.space.workers)
        steps = (self._ceiling, self._ladder, self._refine, self._secondary, self._confirm)
        proposal = next((p for p in (step(notes) for step in steps) if p is not None), None)
        self._notes = said_once(notes)
        return proposal

    # -- what the history says ------------------------------------------------

    def ceiling(self) -> Optional[float]:
        c = next((t for t in self.trials if t.role == Role.CEILING and t.state == TrialState.OK), None)
        return score(c) if c else None

    def best(self, *phases: Phase) -> Optional[Measured]:
        return pick(self._ok(self.of(*phases) if phases else self.trials), self.space.cost, self.tol)

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

    def _base(self) -> Config:
        return self.space.ladder_base(self.space.baseline, self.short_epochs())

    # -- ceiling --------------------------------------------------------------

    def _ceiling(self, notes: List[Reason]) -> Optional[Proposal]:
        if any(t.role == Role.CEILING for t in self.trials):
            return None
        return Proposal(self.space.ceiling_config(), Role.CEILING, Phase.CEILING)

    # -- ladder -------------------------------------------------------------

    def _ladder(self, notes: List[Reason]) -> Optional[Proposal]:
        """Walk the rungs up; the first one not measured yet is the proposal."""
        sp = self.space
        history = self.of(Phase.BASELINE, Phase.LADDER)
        rungs = sp.rungs(sp.max_primary)
        flat = 0
        i = 0
        while i < len(rungs):
            n = rungs[i]
            if self.cap is not None and n > self.cap.max_workers:
                return self._below_cap(history)
            below = [t for t in self._rung_trials(history) if sp.primary_of(t.config) < n]
            if n > sp.cpu_cap and self._past_cpu_cap_blocked(below, notes):
                return None
            done = self.measured(sp.with_primary(self._base(), n), history)
            if done is None:
                jump = self._jump_target(below)
                if jump is not None and jump > n:
                    while i + 1 < len(rungs) and rungs[i] < jump:
                        i += 1
                    n = rungs[i]
                    if self.cap is not None and n > self.cap.max_workers:
                        return self._below_cap(history)
                    notes.append(JumpedAhead(knob=sp.primary, n=n))
                    done = self.measured(sp.with_primary(self._base(), n), history)
                if done is None:
                    return Proposal(sp.with_primary(self._base(), n), Role.SEARCH, Phase.LADDER)
                below = [t for t in self._rung_trials(history) if sp.primary_of(t.config) < n]
            stop, flat = self._stop_after(done, below, flat, notes)
            if stop:
                return None
            i += 1
        notes.append(MaxWorkersReached(max_workers=sp.max_primary))
        return None

    def _below_cap(self, history: Sequence[Trial]) -> Optional[Proposal]:
        """The next rung is past the worker cap (a count that duplicated data, was
        killed or failed): bisect between the best count that worked and it."""
        sp = self.space
        upper = self.cap.max_workers + 1
        done = [sp.primary_of(t.config) for t in self._rung_trials(history)]
        lower = max(done, default=0)
        mid = (lower + upper) // 2
        config = sp.with_primary(self._base(), mid)
        if mid <= lower or mid >= upper or self.measured(config, history) is not None:
            return None
        return Proposal(config, Role.SEARCH, Phase.LADDER)

    def _rung_trials(self, history: Sequence[Trial]) -> List[Trial]:
        """Measured configs that are the ladder's base with only the primary knob changed."""
        sp = self.space
        base = self._base()
        return [t for t in self._ok(history)
                if sp.key(t.config) == sp.key(sp.with_primary(base, sp.primary_of(t.config)))]

    def _past_cpu_cap_blocked(self, below: Sequence[Trial], notes: List[Reason]) -> bool:
        """Going past the CPU count: only while the workers leave CPU idle."""
        bound = self._cpu_bound(below)
        if bound:
            notes.append(CpusSaturated(cpu_cap=self.space.cpu_cap))
            return True
        if bound is not None:
            notes.append(PastCpuCount(cpu_cap=self.space.cpu_cap))
        return False

    def _cpu_bound(self, below: Sequence[Trial]) -> Optional[bool]:
        """From the highest rung below with workers: are the CPUs the limit? (space.cpu_bound)"""
        with_workers = [t for t in below if t.role != Role.BASELINE and self.space.primary_of(t.config) > 1]
        if not with_workers:
            return None
        return self.space.cpu_bound(max(with_workers, key=lambda t: self.space.primary_of(t.config)))

    def _stop_after(self, trial: Trial, below: Sequence[Trial], flat: int, notes: List[Reason]) -> tuple:
        """After a measured rung: (is the ladder done?, flat rungs so far)."""
        sp = self.space
        n = sp.primary_of(trial.config)
        if trial.state != TrialState.OK:
            notes.append(LadderStoppedByTrial(knob=sp.primary, n=n, state=trial.state.value))
            return True, flat
        ceiling = self.ceiling()
        s = score(trial)
        if ceiling and s is not None and s >= ceiling * (1 - self.tol):
            notes.append(ReachedCeiling(knob=sp.primary, n=n))
            return True, flat
        below_scores = [score(t) for t in below]
        # noise-aware: stop only if even the fastest chunk of this rung is no real gain
        high = s * (trial.batches_per_s_high / trial.batches_per_s) \
            if s and trial.batches_per_s and trial.batches_per_s_high else s
        if n >= 2 and below_scores and high is not None and high < max(below_scores) * (1 + self.min_gain):
            flat += 1
            forgiven = flat == 1 and self._loader_limits_with_cpu_to_spare(trial)
            notes.append(FlatRung(knob=sp.primary, n=n, min_gain=self.min_gain, forgiven=forgiven))
            return not forgiven, flat
        return False, flat

    def _loader_limits_with_cpu_to_spare(self, trial: Trial) -> bool:
        """The loop mostly waits and the workers leave CPU idle: a rung that
        gained nothing may have been held back by handing batches over (each
        worker idles while the loop takes its batch), which more workers
        overlap. Worth one more rung before the ladder gives up."""
        wait = trial.data_wait_fraction
        return wait is not None and wait >= JUMP_MIN_WAIT and self.space.cpu_bound(trial) is False

    def _jump_target(self, below: Sequence[Trial]) -> Optional[int]:
        """Workers predicted to reach what the ceiling and the CPU budget allow,
        from the highest rung below (None: keep doubling). The loader must be the
        limit (the loop mostly waits) and the CPUs must have room: throughput is
        capped at usable cores / CPU per batch, so a loader that already fills
        the CPUs gets no jump."""
        sp = self.space
        ceiling = self.ceiling()
        rungs = [t for t in below if sp.primary_of(t.config) >= 2]
        if not rungs or not ceiling or self._cpu_bound(below) is not False:
            return None
        last = max(rungs, key=lambda t: sp.primary_of(t.config))
        n, s = sp.primary_of(last.config), score(last)
        if not s or last.data_wait_fraction is None or last.data_wait_fraction < JUMP_MIN_WAIT:
            return None
        target = ceiling
        cores = job_cores(last)
        if cores:  # the job's own CPU per batch caps what the usable cores can deliver
            target = min(target, s * sp.cpu_cap / cores)
        needed = math.ceil(n * target * (1 - self.tol) / s)
        return needed if needed > 2 * n else None

    # -- refine ---------------------------------------------------------------

    def _refine(self, notes: List[Reason]) -> Optional[Proposal]:
        sp = self.space
        history = self.of(Phase.BASELINE, Phase.LADDER, Phase.REFINE)
        if sum(t.phase == Phase.REFINE for t in history) >= MAX_REFINE:
            return None
        best = pick(self._ok(history), sp.cost, self.tol)
        if best is None:
            return None
        n = sp.primary_of(best.config)
        # the largest measured count below the pick (any knobs): the pick is the
        # cheapest within tolerance, so everything measured below it is slower
        lower = [sp.primary_of(t.config) for t in self._ok(history) if sp.primary_of(t.config) < n]
        if not lower:
            return None
        lo = max(lower)
        mid = (lo + n) // 2
        config = sp.with_primary(best.config, mid)
        if mid <= lo or mid >= n or self.measured(config, history) is not None:
            return None
        return Proposal(config, Role.SEARCH, Phase.REFINE)

    # -- secondary knobs ------------------------------------------------------

    def _secondary(self, notes: List[Reason]) -> Optional[Proposal]:
        history = self.of(Phase.BASELINE, Phase.LADDER, Phase.REFINE, Phase.SECONDARY)
        best = pick(self._ok(history), self.space.cost, self.tol)
        if best is None:
            return None
        tried: Set[tuple] = {self.space.key(t.config) for t in history if t.phase == Phase.SECONDARY}
        for config, overrides in self.space.secondary(best.latest, self.tol, history):
            if self.space.key(config) in tried or self.measured(config, history) is not None:
                continue
            return Proposal(self.space.legalize(config), Role.SEARCH, Phase.SECONDARY, overrides)
        return None

    # -- confirm ------------------------------------------------------------

    def _confirm(self, notes: List[Reason]) -> Optional[Proposal]:
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
        done = sum(t.role == Role.CONFIRM for t in self.trials)
        rounds = done // 2
        notes.append(RivalsRemeasured(pick=dict(chosen.config), rival=dict(rival.config), margin=margin,
                                      repeats=rounds + (done % 2 == 1) or 1))
        if done % 2 == 0 and (rounds >= self.confirm_rounds or (rounds and self._settled(chosen, rival))):
            return None
        # the rival first, the pick last: closest to the end of the tune
        nxt = rival if done % 2 == 0 else chosen
        return Proposal(dict(nxt.config), Role.CONFIRM, Phase.CONFIRM)

    def _settled(self, chosen: Measured, rival: Measured) -> bool:
        """With the repeats so far: told apart either way, or equal within
        tolerance as precisely as more rounds could say."""
        groups = {config_key(m.config): [score(t) for t in m.trials] for m in measured_configs(self._ok(self.trials))}
        a, b = groups[config_key(chosen.config)], groups[config_key(rival.config)]
        measured_noise = noise.repeat_noise([a, b])
        if measured_noise is None:
            return False
        precise = noise.Z * measured_noise / math.sqrt(min(len(a), len(b))) <= self.tol
        return noise.told_apart(a, b, measured_noise) or noise.told_apart(b, a, measured_noise) or precise
