"""Search strategy: proposes the next config from the results so far (ask/tell).

NOTE [ Search, not grid ]

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
                           measured once more, interleaved; configs are ranked by the
                           median over their trials (run-to-run drift on a shared
                           machine is larger than the spread inside one window)

The strategy never runs anything: the tuner asks, runs the trial, tells.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from feedprof.analyse.recommend import Measured, config_key, measured_configs, pick, score
from feedprof.store import Trial
from feedprof.units import fmt_pct
from feedprof.tune.space import Config, Space

MIN_GAIN = 0.05  # a rung must beat the rungs below by this much to keep climbing
SHORT_EPOCH_S = 10.0  # epochs this short at the compute ceiling: worker start-up is a real share
MAX_REFINE = 3
CONFIRM_MARGIN = (0.10, 0.30)  # a rival this close (or within twice the measured spread) is re-measured
JUMP_MIN_WAIT = 0.5  # jump only while the loop mostly waits: the loader is the limit


@dataclass
class Proposal:
    config: Config
    role: str  # ceiling | search
    why: str
    overrides: Dict[str, Any] = field(default_factory=dict)  # trial option overrides


class LadderStrategy:
    def __init__(self, space: Space, tol: float = 0.03, min_gain: float = MIN_GAIN,
                 cpus_online: Optional[int] = None):
        self.space = space
        self.cpus_online = cpus_online or space.cpu_cap  # system CPU % is a share of these
        self.tol = tol
        self.min_gain = min_gain
        self.trials: List[Trial] = []
        self.phase = "ceiling"
        self.notes: List[str] = []  # why the search stopped where it did
        self._ladder_pos = -1
        self._pending_rung: Optional[Config] = None
        self._flat_rungs = 0  # rungs that gained less than min_gain
        self._refines = 0
        self._secondary_tried: set = set()
        self._confirm_queue: Optional[List[Measured]] = None

    # -- bookkeeping ------------------------------------------------------

    def tell(self, trial: Trial) -> None:
        self.trials.append(trial)

    def _measured(self, config: Config) -> Optional[Trial]:
        key = self.space.key(config)
        return next((t for t in self.trials if t.role != "ceiling" and self.space.key(t.config) == key), None)

    def _ok(self) -> List[Trial]:
        return [t for t in self.trials if t.role != "ceiling" and t.state == "ok" and score(t) is not None]

    def ceiling(self) -> Optional[float]:
        c = next((t for t in self.trials if t.role == "ceiling" and t.state == "ok"), None)
        return score(c) if c else None

    def best(self) -> Optional[Measured]:
        return pick(self._ok(), self.space.cost, self.tol)

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # -- ask ----------------------------------------------------------------

    def ask(self) -> Optional[Proposal]:
        while True:
            if self.phase == "ceiling":
                self.phase = "ladder"
                return Proposal(self.space.ceiling_config(), "ceiling",
                                "compute ceiling: one cached batch replayed, loading costs nothing")
            if self.phase == "ladder":
                prop = self._next_rung()
                if prop is not None:
                    return prop
                self.phase = "refine"
            elif self.phase == "refine":
                prop = self._refine()
                if prop is not None:
                    return prop
                self.phase = "secondary"
            elif self.phase == "secondary":
                prop = self._secondary()
                if prop is not None:
                    return prop
                self.phase = "confirm"
            elif self.phase == "confirm":
                prop = self._confirm()
                if prop is not None:
                    return prop
                self.phase = "done"
            else:
                return None

    def _base(self) -> Config:
        return self.space.ladder_base(self.space.baseline, self.short_epochs())

    def short_epochs(self) -> bool:
        """Would an epoch last under SHORT_EPOCH_S at the compute ceiling?"""
        ceiling = self.ceiling()
        base = next((t for t in self.trials if t.role == "baseline"), None)
        run = base.run if base is not None else None
        if not ceiling or run is None:
            return False
        rec = run.loader(run.window.loader_id)
        bpe = rec.batches_per_epoch if rec is not None else None
        return bool(bpe) and bpe / ceiling <= SHORT_EPOCH_S

    def _ladder_trials(self) -> List[Trial]:
        """Measured configs that are the baseline with only the primary knob changed."""
        sp = self.space
        return [t for t in self._ok()
                if sp.key(t.config) == sp.key(sp.with_primary(self._base(), sp.primary_of(t.config)))]

    def _stop_ladder_after(self, trial: Trial) -> bool:
        """After measuring a rung: is the ladder done?"""
        sp = self.space
        n = sp.primary_of(trial.config)
        if trial.state != "ok":
            self._note(f"stopped adding workers at {sp.primary}={n}: the trial {trial.state} ({trial.reason})")
            return True
        ceiling = self.ceiling()
        s = score(trial)
        if ceiling and s is not None and s >= ceiling * (1 - self.tol):
            self._note(f"{sp.primary}={n} reaches the compute ceiling: more loader work cannot help")
            return True
        below = [score(t) for t in self._ladder_trials() if sp.primary_of(t.config) < n]
        # noise-aware: stop only if even the fastest chunk of this rung is no real gain
        high = s * (trial.batches_per_s_high / trial.batches_per_s) \
            if s and trial.batches_per_s and trial.batches_per_s_high else s
        if n >= 2 and below and high is not None and high < max(below) * (1 + self.min_gain):
            self._flat_rungs += 1
            if self._flat_rungs == 1 and self._loader_limits_with_cpu_to_spare(trial):
                self._note(f"{sp.primary}={n} gained less than {fmt_pct(self.min_gain)}, but the loop still "
                           "waited and the CPUs had room: one more rung was tried")
                return False
            self._note(f"{sp.primary}={n} gained less than {fmt_pct(self.min_gain)} over fewer workers: "
                       "more workers stopped paying off")
            return True
        return False

    def _loader_limits_with_cpu_to_spare(self, trial: Trial) -> bool:
        """The loop mostly waits and the workers leave CPU idle: a rung that
        gained nothing may have been held back by handing batches over (each
        worker idles while the loop takes its batch), which more workers
        overlap. Worth one more rung before the ladder gives up."""
        wait = trial.data_wait_fraction
        return wait is not None and wait >= JUMP_MIN_WAIT and self.space.cpu_bound(trial) is False

    def _last_with_workers(self) -> Optional[Trial]:
        for t in reversed(self.trials):
            if t.role == "search" and t.state == "ok" and self.space.primary_of(t.config) > 1:
                return t
        return None

    def _cpu_bound(self) -> Optional[bool]:
        """From the latest trial with workers: are the CPUs the limit? (space.cpu_bound)"""
        t = self._last_with_workers()
        return None if t is None else self.space.cpu_bound(t)

    def _next_rung(self) -> Optional[Proposal]:
        sp = self.space
        if self._pending_rung is not None:  # the stop rules look at the rung just measured
            measured = self._measured(self._pending_rung)
            self._pending_rung = None
            if measured is None or self._stop_ladder_after(measured):
                return None
        rungs = sp.rungs(sp.max_primary)
        while self._ladder_pos + 1 < len(rungs):
            self._ladder_pos += 1
            n = rungs[self._ladder_pos]
            if n > sp.cpu_cap:
                bound = self._cpu_bound()
                if bound:
                    self._note(f"the CPUs are the limit ({sp.cpu_cap} usable, saturated by the workers): "
                               f"more than {sp.cpu_cap} worker(s) cannot help")
                    return None
                if bound is not None:
                    self._note("the workers left CPU time idle (waiting on I/O or on handing batches over), "
                               "so more workers than CPUs were tried")
            config = sp.with_primary(self._base(), n)
            done = self._measured(config)
            if done is not None:  # the baseline sits on this rung
                if self._stop_ladder_after(done):
                    return None
                continue
            jump = self._jump_target()
            if jump is not None and jump > n:
                while self._ladder_pos + 1 < len(rungs) and rungs[self._ladder_pos] < jump:
                    self._ladder_pos += 1
                n = rungs[self._ladder_pos]
                config = sp.with_primary(self._base(), n)
                self._note(f"the workers wait on I/O and scale: jumped to {sp.primary}={n}, "
                           "the count predicted to reach the ceiling")
            self._pending_rung = config
            return Proposal(config, "search", f"worker ladder: {sp.primary}={n}")
        self._note(f"reached the most workers allowed ({sp.max_primary}, --max-workers)")
        return None

    def _jump_target(self) -> Optional[int]:
        """Workers predicted to reach what the ceiling and the CPU budget allow,
        from the last rung (None: keep doubling). The loader must be the limit
        (the loop mostly waits) and the CPUs must have room: throughput is
        capped at usable cores / CPU per batch, so a loader that already fills
        the CPUs gets no jump."""
        sp = self.space
        ceiling = self.ceiling()
        last = next((t for t in reversed(self._ladder_trials()) if sp.primary_of(t.config) >= 2), None)
        if last is None or not ceiling or self._cpu_bound() is not False:
            return None
        n, s = sp.primary_of(last.config), score(last)
        if not s or last.data_wait_fraction is None or last.data_wait_fraction < JUMP_MIN_WAIT:
            return None
        target = ceiling
        if last.system_cpu_pct and self.cpus_online:
            busy_cores = last.system_cpu_pct / 100 * self.cpus_online
            target = min(target, s * sp.cpu_cap / busy_cores)
        needed = math.ceil(n * target * (1 - self.tol) / s)
        return needed if needed > 2 * n else None

    def _refine(self) -> Optional[Proposal]:
        if self._refines >= MAX_REFINE:
            return None
        sp = self.space
        best = self.best()
        if best is None:
            return None
        n = sp.primary_of(best.config)
        # the largest measured count below the pick (any knobs): the pick is the
        # cheapest within tolerance, so everything measured below it is slower
        lower = [sp.primary_of(t.config) for t in self._ok() if sp.primary_of(t.config) < n]
        if not lower:
            return None
        lo = max(lower)
        mid = (lo + n) // 2
        if mid <= lo or mid >= n:
            return None
        config = sp.with_primary(best.config, mid)
        if self._measured(config) is not None:
            return None
        self._refines += 1
        return Proposal(config, "search", f"refine: is {sp.primary}={mid} as good as {n}, for less?")

    def _secondary(self) -> Optional[Proposal]:
        best = self.best()
        if best is None:
            return None
        for config, why, overrides in self.space.secondary(best.latest, self.tol, self.trials):
            key = self.space.key(config)
            if key in self._secondary_tried or self._measured(config) is not None:
                continue
            self._secondary_tried.add(key)
            return Proposal(self.space.legalize(config), "search", why, overrides)
        return None

    def _confirm(self) -> Optional[Proposal]:
        """Re-measure the pick and its strongest rival when they are within noise."""
        if self._confirm_queue is None:
            self._confirm_queue = []
            chosen = self.best()
            configs = measured_configs(self._ok())
            if chosen is None or len(configs) < 2:
                return None
            rivals = [m for m in configs if config_key(m.config) != config_key(chosen.config)]
            rival = max(rivals, key=lambda m: m.score)
            spread = max(chosen.relative_spread, rival.relative_spread)
            margin = min(CONFIRM_MARGIN[1], max(CONFIRM_MARGIN[0], 2 * spread))
            top = max(chosen.score, rival.score)
            if min(chosen.score, rival.score) >= top * (1 - margin):
                self._confirm_queue = [rival, chosen]  # the pick last: closest to the end of the tune
                self._note(f"{self.space.describe(chosen.config)} and {self.space.describe(rival.config)} were "
                           f"within {fmt_pct(margin)} of each other: both were measured again")
        if not self._confirm_queue:
            return None
        m = self._confirm_queue.pop(0)
        return Proposal(dict(m.config), "confirm", "re-measured: within noise of its closest rival")
