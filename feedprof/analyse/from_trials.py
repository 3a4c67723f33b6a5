"""What an offline tune's trials tell recommend() (analyse/recommend.py Measurements): each config's
trials pooled into its evidence (analyse/measured.py), and what only trials hold: the worker cap
and the hazards their runs showed (analyse/limits.py), repeats' noise, settings judged from a
trial's start-up (the space's ``finalize``), CPU and memory by process, a trainer's own advice.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from feedprof.analyse.advice import trainer_advice
from feedprof.analyse.batch_time import StepAlone, batch_time, loads_beside_the_step, step_alone_of
from feedprof.analyse.ceiling import ceiling_trial, read_ceiling
from feedprof.analyse.loading import training_loading
from feedprof.analyse.evidence import config_key
from feedprof.analyse.limits import hazard_reasons, usable, worker_cap
from feedprof.analyse.measured import (Measured, cheaper_within_noise, cpu_use, evidence_of, measured_configs,
                                       run_margin)
from feedprof.analyse.measurements import Baseline, CpuUse
from feedprof.store.reasons import CheaperWithinNoise, Reason, Verdict
from feedprof.store import BatchTime, ConfigEvidence, LoadingProfile, Role, Trial, TrialState

Config = Dict[str, Any]


def tried_a_setting(trials: Sequence[Trial]) -> bool:
    """Did any loader setting run beside the script's own (and the compute ceiling)?"""
    return any(t.role not in (Role.BASELINE, Role.CEILING) and t.state != TrialState.REJECTED for t in trials)


class TrialMeasurements:
    """``trials`` as recommend() reads them; ``fits``: does a config fit the memory budget as
    learned so far (a config it no longer fits is never picked)."""

    def __init__(self, trials: Sequence[Trial], space: Any, fits: Optional[Callable[[Config], bool]] = None):
        self.all_trials, self.space = list(trials), space
        self.cap = worker_cap(self.all_trials, space.workers)
        self.trials = usable(self.all_trials, self.cap, space.workers)  # a config past the cap is never picked
        if fits is not None:
            self.trials = [t for t in self.trials if fits(t.config)]
        self.measured = {config_key(m.config): m for m in measured_configs(self.trials)}
        self.baseline_trial = next((t for t in self.all_trials if t.role == Role.BASELINE), None)
        b = self.baseline_trial
        self.baseline = None if b is None else Baseline(config=dict(b.config), state=b.state, cause=b.cause,
                                                        wait_fraction=b.data_wait_fraction)
        self.ceiling = read_ceiling(self.all_trials).batches_per_s  # one cached batch replayed, where it bounds

    def _of(self, e: ConfigEvidence) -> Measured:
        return self.measured[config_key(e.config)]

    def configs(self) -> List[ConfigEvidence]:
        return [evidence_of(m) for m in self.measured.values()]

    def tried_a_setting(self) -> bool:
        return tried_a_setting(self.all_trials)

    def cheaper_within_noise(self, chosen: ConfigEvidence,
                             cost: Any) -> Optional[Tuple[ConfigEvidence, CheaperWithinNoise]]:
        m = self._of(chosen)
        cheaper = cheaper_within_noise(m, self.trials, cost)
        if cheaper is None:
            return None
        why = CheaperWithinNoise(config=dict(cheaper.config), rival=dict(m.config),
                                 rival_lead=m.score / cheaper.score - 1, noise=run_margin(self.trials) or 0.0,
                                 repeats=min(len(cheaper.trials), len(m.trials)))
        return evidence_of(cheaper), why

    def finalize(self, chosen: ConfigEvidence, tol: float) -> Tuple[Config, List[Reason]]:
        return self.space.finalize(self._of(chosen).latest, tol, self.trials)

    def repeats(self, chosen: ConfigEvidence) -> int:
        return len(self._of(chosen).trials)

    def cpu(self, chosen: ConfigEvidence) -> Tuple[Optional[bool], Optional[CpuUse]]:
        best = self._of(chosen).latest
        return self.space.cpu_bound(best), cpu_use(best)

    def memory_saved_bytes(self, chosen: ConfigEvidence) -> Optional[int]:
        a, b = self.baseline_trial, self._of(chosen).latest
        if a is None:
            return None
        for name in ("peak_pss_bytes", "peak_rss_bytes"):
            x, y = getattr(a, name), getattr(b, name)
            if x is not None and y is not None and x > y:
                return x - y
        return None

    def trainer_advice(self, verdict: Verdict) -> Optional[Reason]:
        return trainer_advice(self.baseline_trial, measured_configs(usable(self.all_trials, self.cap,
                                                                           self.space.workers)), verdict)

    def hazards(self, chosen: ConfigEvidence, config: Config, ram_budget_bytes: Optional[int]) -> List[Reason]:
        return hazard_reasons(self.all_trials, self._of(chosen).latest, config, self.space, ram_budget_bytes)

    def step_alone(self) -> Optional[StepAlone]:
        """The step with nothing loading beside it: the ceiling's replay where it bounds anything,
        else the script's own settings where they have no workers."""
        if self.ceiling is not None:
            alone = step_alone_of(ceiling_trial(self.all_trials).run, "ceiling")
            if alone is not None:
                return alone
        b = self.baseline_trial
        if b is not None and b.state == TrialState.OK and not loads_beside_the_step(b.run):
            return step_alone_of(b.run, "no_workers")
        return None

    def batch_times(self, chosen: ConfigEvidence) -> Tuple[BatchTime, ...]:
        alone, out = self.step_alone(), []
        b, pick = self.baseline_trial, self._of(chosen).latest
        if b is not None and b.state == TrialState.OK:
            out.append(batch_time(b.run, "script", alone, b.config))
        if b is None or config_key(pick.config) != config_key(b.config):
            out.append(batch_time(pick.run, "pick", alone, pick.config))
        if self.ceiling is not None:
            c = ceiling_trial(self.all_trials)
            out.append(batch_time(c.run, "ceiling", step_alone_of(c.run, "ceiling"), c.config))
        return tuple(t for t in out if t is not None)

    def loading(self, chosen: ConfigEvidence) -> Optional[LoadingProfile]:
        return training_loading(self._of(chosen).latest.run)
