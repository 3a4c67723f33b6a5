"""Search strategy: proposes the next config from the results so far (ask/tell).

NOTE [ Search, not grid ]

    baseline (the script's own settings, run by the tuner)
      └► ceiling: one cached batch replayed, so loading costs nothing
          └► ladder 0, 2, 4, 8, ... (and the CPU count) over the primary knob
               stop when: throughput reaches the ceiling (within tolerance)
                          a rung gains less than MIN_GAIN over the rungs below
                          the next rung passes the CPU count and the workers are
                            CPU-bound (beyond it only I/O-bound workers pay off)
                          a trial fails, is killed or rejected
              └► refine: halfway between the best rung and the rung below it,
                         looking for a cheaper config within tolerance
                  └► secondary knobs at the best config (space.secondary)

The strategy never runs anything: the tuner asks, runs the trial, tells.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from feedprof.analyse.recommend import pick, score
from feedprof.store import Trial
from feedprof.tune.space import Config, Space

MIN_GAIN = 0.05  # a rung must beat the rungs below by this much to keep climbing
IO_BOUND_CORES_PER_WORKER = 0.5  # workers using less than this mostly wait (I/O, sleep)
MAX_REFINE = 2


@dataclass
class Proposal:
    config: Config
    role: str  # ceiling | search
    why: str
    overrides: Dict[str, Any] = field(default_factory=dict)  # trial option overrides


class LadderStrategy:
    def __init__(self, space: Space, tol: float = 0.03, min_gain: float = MIN_GAIN):
        self.space = space
        self.tol = tol
        self.min_gain = min_gain
        self.trials: List[Trial] = []
        self.phase = "ceiling"
        self.notes: List[str] = []  # why the search stopped where it did
        self._ladder_pos = -1
        self._pending_rung: Optional[Config] = None
        self._refines = 0
        self._secondary_tried: set = set()

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

    def best(self) -> Optional[Trial]:
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
                self.phase = "done"
            else:
                return None

    def _base(self) -> Config:
        return self.space.baseline

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
        if n >= 2 and below and s is not None and s < max(below) * (1 + self.min_gain):
            self._note(f"{sp.primary}={n} gained less than {self.min_gain:.0%} over fewer workers: "
                       "more workers stopped paying off")
            return True
        return False

    def _cpu_bound(self) -> Optional[bool]:
        """From the latest trial with workers: do the workers use their CPU, or wait?"""
        for t in reversed(self.trials):
            n = self.space.primary_of(t.config)
            if t.role == "search" and t.state == "ok" and n > 0 and t.workers_cpu_pct is not None:
                return t.workers_cpu_pct / 100 / n >= IO_BOUND_CORES_PER_WORKER
        return None

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
                    self._note(f"the workers are CPU-bound and {sp.cpu_cap} CPU(s) are usable: "
                               f"more than {sp.cpu_cap} worker(s) cannot help")
                    return None
                if bound is not None:
                    self._note("the workers mostly wait on I/O, so more workers than CPUs were tried")
            config = sp.with_primary(self._base(), n)
            done = self._measured(config)
            if done is not None:  # the baseline sits on this rung
                if self._stop_ladder_after(done):
                    return None
                continue
            self._pending_rung = config
            return Proposal(config, "search", f"worker ladder: {sp.primary}={n}")
        self._note(f"reached the most workers allowed ({sp.max_primary}, --max-workers)")
        return None

    def _refine(self) -> Optional[Proposal]:
        if self._refines >= MAX_REFINE:
            return None
        sp = self.space
        best = self.best()
        if best is None:
            return None
        n = sp.primary_of(best.config)
        lower = [sp.primary_of(t.config) for t in self._ladder_trials() if sp.primary_of(t.config) < n]
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
        for config, why, overrides in self.space.secondary(best, self.tol, self.trials):
            key = self.space.key(config)
            if key in self._secondary_tried or self._measured(config) is not None:
                continue
            self._secondary_tried.add(key)
            return Proposal(self.space.legalize(config), "search", why, overrides)
        return None
