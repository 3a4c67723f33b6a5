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
          (while the CPUs have room: jump straight to the count predicted to reach
           what the ceiling and the CPU budget allow, instead of doubling)
              └► refine: the wider gap first, bisected: between the pick and the count
                         below it (a cheaper config within tolerance; never below the
                         fewest workers that could supply the pick's rate), and between
                         the pick and a clearly slower count above it (a peak between)
                  └► secondary knobs at the best config (space.secondary)
                      └► confirm (confirm.py): the pick and its strongest rival within noise are
                           measured again, interleaved; configs are ranked by the
                           median over their trials (run-to-run drift on a shared
                           machine is larger than the spread inside one window)
                      └► confirm the pick: one longer window of what will be
                           recommended, measured after it was chosen (the best
                           of several noisy windows reads high: its figure comes
                           from this one), across an epoch boundary where an
                           epoch is short enough to afford it

Before any step: a trial whose window spread (analyse/measured.sound) is a
measurement that failed, and a ladder rung that reads well below a rung
beneath it breaks the curve; either is measured again, in a longer window,
before it decides anything (its spread window is then left out).

Every trial carries the phase that proposed it, and each step reads only the
trials of the phases before it and its own: a trial measured later (a confirm
repeat of a rung) never changes what an earlier step decided.

GridStrategy (history.py) proposes a fixed list of configs in order (the benchmark's grid).
Strategies never run anything: the tuner asks, runs the trial, tells.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Set

from feedprof.analyse import rules
from feedprof.analyse.ceiling import read_ceiling
from feedprof.analyse.limits import usable, worker_cap
from feedprof.analyse.measured import Measured, measured_configs, pick, relative_spread, score, sound
from feedprof.store.reasons import (CpusSaturated, FlatRung, JumpedAhead, LadderStoppedByTrial, MaxWorkersReached,
                              LoopBarelyWaits, MeasuredAgain, PastCpuCount, ReachedCeiling, Reason, WorkersCapped,
                              said_once)
from feedprof.store import Phase, Role, Trial, TrialState
from feedprof.tune.confirm import CONFIRM_ROUNDS, Confirmation
from feedprof.tune.history import Proposal, TrialHistory, ok_trials
from feedprof.analyse.measured import cpu_use
from feedprof.tune.space import Config, Space, job_cores

MIN_GAIN = rules.MIN_GAIN  # a rung must beat the rungs below by this much to keep climbing
SHORT_EPOCH_S = 10.0  # epochs this short at the compute ceiling: worker start-up is a real share
MAX_REFINE = 3
JUMP_MIN_WAIT, JUMP_MAX_STARTUP_S = 0.5, 10.0  # jump while the loop mostly waits, to workers that start this fast
DIP = 0.15  # a rung this far below a rung beneath it breaks the curve: measured again before believed
AGAIN_WINDOW_FACTOR = 2.0  # a trial measured again gets this many times the usual window


class LadderStrategy(TrialHistory):
    def __init__(self, space: Space, tol: float = rules.OFFLINE.pick_tolerance, min_gain: float = MIN_GAIN,
                 confirm_rounds: int = CONFIRM_ROUNDS):
        super().__init__(space)
        self.tol = tol
        self.min_gain = min_gain
        self.confirm_rounds = confirm_rounds
        self.cap: Optional[WorkersCapped] = None  # from the history, at every ask (analyse/limits.py)
        self.confirmation = Confirmation(self, self._ok, tol, confirm_rounds)

    def _ok(self, trials: Sequence[Trial]) -> List[Trial]:
        """Measured trials within the worker cap: what the steps may build on."""
        return usable(ok_trials(trials), self.cap, self.space.workers, history=self.trials)

    def ask(self) -> Optional[Proposal]:
        notes: List[Reason] = []
        self.cap = worker_cap(self.trials, self.space.workers)
        failed = read_ceiling(self.trials).failed
        if failed is not None:
            notes.append(failed)
        steps = (self._again, self._ceiling, self._ladder, self._refine, self._secondary, self.confirmation.rivals,
                 self.confirmation.pick)
        proposal = next((p for p in (step(notes) for step in steps) if p is not None), None)
        self._notes = said_once(notes)
        return proposal

    # -- what the history says ------------------------------------------------

    def ceiling(self) -> Optional[float]:
        """The compute ceiling, where it bounds the configs that really loaded (analyse/ceiling.py)."""
        return read_ceiling(self.trials).batches_per_s

    # -- measured again -------------------------------------------------------

    def _again(self, notes: List[Reason]) -> Optional[Proposal]:
        """The last trial, measured again in a longer window, if its window
        spread or (a ladder rung) it reads well below a rung beneath it; once."""
        for first in self.first_of_each():  # what was measured again so far, said again
            note = self._again_note(first)
            if len(self.same_as(first)) > 1 and note.why:
                notes.append(note)
        last = self.trials[-1] if self.trials else None
        if last is None or last.state != TrialState.OK or last.role == Role.CONFIRM:
            return None
        if len(self.same_as(last)) > 1:
            return self._beside(last)
        note = self._again_note(last)
        if not note.why:
            return None
        notes.append(note)
        return Proposal(dict(last.config), last.role, last.phase, {"window_factor": AGAIN_WINDOW_FACTOR})

    def _beside(self, rung: Trial) -> Optional[Proposal]:
        """A rung measured again for a dip that still reads below the best rung
        beneath it: that rung is measured again too, beside it, so the two are
        compared in windows side by side (a shared machine's load drifts
        between trials minutes apart)."""
        sp, again = self.space, self.same_as(rung)
        if rung.phase != Phase.LADDER or len(again) != 2 or self._again_note(again[0]).why != "dip":
            return None
        n, s = sp.primary_of(rung.config), score(rung)
        below = [m for m in measured_configs(self._ok(self.of(Phase.BASELINE, Phase.LADDER)))
                 if sp.primary_of(m.config) < n]
        best = max(below, key=lambda m: m.score, default=None)
        if best is None or s is None or s >= best.score or len(best.trials) > 1:
            return None
        first = best.trials[0]
        return Proposal(dict(best.config), first.role, first.phase, {"window_factor": AGAIN_WINDOW_FACTOR})

    def _again_note(self, trial: Trial) -> MeasuredAgain:
        """Why ``trial`` is (or was) measured again: why="" if it needs not be."""
        why = "spread" if not sound(trial) else "dip" if self._dips(trial) else ""
        return MeasuredAgain(config=dict(trial.config), why=why, spread=relative_spread(trial) or 0.0,
                             ceiling=trial.role == Role.CEILING)

    def _dips(self, trial: Trial) -> bool:
        """A ladder rung that reads more than DIP below a rung beneath it."""
        sp = self.space
        if trial.phase != Phase.LADDER:
            return False
        n, s = sp.primary_of(trial.config), score(trial)
        below = [m.score for m in measured_configs(self._ok(self.of(Phase.BASELINE, Phase.LADDER)))
                 if sp.primary_of(m.config) < n]
        return bool(below) and s is not None and s < max(below) * (1 - DIP)

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
                if jump is not None and jump > n:  # to the predicted count itself, as the online climb
                    n = min(jump, rungs[-1])  # (a rung past it can overshoot the peak of a curve that falls)
                    while i + 1 < len(rungs) and rungs[i + 1] <= n:
                        i += 1
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
        """Going past the CPU count: only while the workers leave CPU idle (rules.may_pass_cpus)."""
        verdicts = self._cpu_verdicts(below)
        if not rules.may_pass_cpus(verdicts, rules.OFFLINE):
            notes.append(CpusSaturated(cpu_cap=self.space.cpu_cap))
            return True
        if rules.cpu_bound_at_most(verdicts) is not None:
            notes.append(PastCpuCount(cpu_cap=self.space.cpu_cap))
        return False

    def _cpu_verdicts(self, below: Sequence[Trial]) -> Dict[int, Optional[bool]]:
        """Each rung's verdict below (space.cpu_bound), by its workers: the rungs with more than
        one worker (the first trial of each count)."""
        verdicts: Dict[int, Optional[bool]] = {}
        for t in below:
            n = self.space.primary_of(t.config)
            if t.role != Role.BASELINE and n > 1:
                verdicts.setdefault(n, self.space.cpu_bound(t))
        return verdicts

    def _cpu_bound(self, below: Sequence[Trial]) -> Optional[bool]:
        """Are the CPUs the limit, at the most workers below with a verdict? (None: no verdict yet)"""
        return rules.cpu_bound_at_most(self._cpu_verdicts(below))

    def _stop_after(self, trial: Trial, below: Sequence[Trial], flat: int, notes: List[Reason]) -> tuple:
        """After a measured rung: (is the ladder done?, flat rungs so far)."""
        sp = self.space
        n = sp.primary_of(trial.config)
        if trial.state != TrialState.OK:
            notes.append(LadderStoppedByTrial(knob=sp.primary, n=n, state=trial.state.value))
            return True, flat
        reached = self._reached(trial, n, notes)
        if reached:
            return True, flat
        s = score(trial)
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

    def _reached(self, trial: Trial, n: int, notes: List[Reason]) -> bool:
        """Is there nothing left for loader work to gain at this rung? The ceiling reached (unless
        the loop still waits a fifth of its time: a ceiling never decides alone); without a
        ceiling that bounds anything, a loop that barely waits."""
        sp, wait = self.space, trial.data_wait_fraction
        ceiling, s = self.ceiling(), score(trial)
        if ceiling:
            if s is not None and s >= ceiling * (1 - self.tol) and (wait is None or wait < rules.WAITING_ON_LOADER):
                notes.append(ReachedCeiling(knob=sp.primary, n=n))
                return True
            return False
        if wait is not None and wait < rules.MIN_WAIT_FRACTION:
            notes.append(LoopBarelyWaits(knob=sp.primary, n=n, wait_fraction=wait, below=rules.MIN_WAIT_FRACTION))
            return True
        return False

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
        # the job's own CPU per batch caps what the usable cores can deliver; workers start in turn
        # (spawn, forkserver: an interpreter each): analyse/rules.py, the online search's jump too
        mode = dataclasses.replace(rules.OFFLINE, jump_margin=1 - self.tol)
        needed = rules.jump_target(n, s, ceiling, mode, job_cores=job_cores(cpu_use(last)), cpu_cap=sp.cpu_cap,
                                   worker_start_s=last.time_to_first_batch_s, max_start_s=JUMP_MAX_STARTUP_S)
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
        lo = max((sp.primary_of(t.config) for t in self._ok(history) if sp.primary_of(t.config) < n), default=None)
        if lo is not None:  # never below the fewest workers that could supply the pick's rate
            lo = max(lo, (self._fewest_to_supply(best, lo, history) or 0) - 1)
        hi = self._slower_above(best, history)
        # the wider gap first (a section search): below, a cheaper count may do as well; above, a
        # clearly slower count leaves a peak between the two unmeasured (the online climb aims there)
        gaps = sorted((g for g in ((lo, n), (n, hi)) if None not in g and g[1] - g[0] >= 2),
                      key=lambda g: (g[0] - g[1], g[0]))
        for a, b in gaps:
            config = sp.with_primary(best.config, (a + b) // 2)
            if self.measured(config, history) is None:
                return Proposal(config, Role.SEARCH, Phase.REFINE)
        return None

    def _fewest_to_supply(self, best: Measured, lo: int, history: Sequence[Trial]) -> Optional[int]:
        """The fewest workers that could supply the pick's rate (rules.fewest_workers_to_supply),
        from what one worker supplied at ``lo``, the fastest config measured with that count (the
        most per worker: the lowest floor; where its loop barely waited, no floor at all)."""
        sp = self.space
        at_lo = [m for m in measured_configs(self._ok(history)) if sp.primary_of(m.config) == lo]
        slower = max(at_lo, key=lambda m: m.score, default=None)
        if slower is None:
            return None
        e, in_loop = slower.evidence, sp.loads_in_loop(slower.config)
        rate = (e.steady_rate if in_loop else e.rate) or 0.0
        per_worker = rules.supply_per_worker(rate, lo, in_loop, e.wait_fraction)
        return rules.fewest_workers_to_supply((1 - self.tol) * best.score, per_worker)

    def _slower_above(self, best: Measured, history: Sequence[Trial]) -> Optional[int]:
        """The least count above the pick, where it measured clearly slower (past the tolerance).
        None for a pick without workers: 1 worker rarely beats none where 2 did not (ladder_rungs)."""
        sp = self.space
        n, rate = sp.primary_of(best.config), best.score
        if n == 0:
            return None
        # configs as the pick reads them (repeats pooled, a window that spread left out)
        above = [m for m in measured_configs(self._ok(history)) if sp.primary_of(m.config) > n]
        least = min(above, key=lambda m: sp.primary_of(m.config), default=None)
        if least is None or least.score >= rate * (1 - self.tol):
            return None
        return sp.primary_of(least.config)

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
            role = Role.PROBE if self.space.probe_only(config) else Role.SEARCH  # (space_order.py)
            return Proposal(self.space.legalize(config), role, Phase.SECONDARY, overrides)
        return None
