"""What a config measured, read from its trials: the rate it is ranked by (``score``: steady
throughput, per-epoch costs charged), what a stopwatch saw (``sustained``), whether a window
measured its config at all (``sound``), and its trials pooled (``Measured``) into the one evidence
record both searches pick from (store/evidence.py). The search (tune/) reads trials through
this; analyse/recommend.py turns the pick into figures and reasons.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from feedprof.analyse import noise, rules, stats
from feedprof.analyse.diagnose import between_epochs, training_loader
from feedprof.analyse.evidence import config_key
from feedprof.analyse.measurements import CpuUse
from feedprof.analyse.pools import worker_pool_threads
from feedprof.store import ConfigEvidence, Role, Run, Trial, TrialState

SPREAD_LIMIT = 0.25  # a window whose chunks spread more than ±25 % failed to measure its config

Config = Dict[str, Any]


def score(trial: Optional[Trial]) -> Optional[float]:
    """What configs are ranked by: steady throughput (the median over the
    window's chunks: robust to a hiccup) with per-epoch costs amortised."""
    if trial is None or trial.state != TrialState.OK:
        return None
    rate = trial.effective_batches_per_s if trial.effective_batches_per_s is not None else trial.batches_per_s
    return charge_epoch_gap(rate, trial)


def sustained(trial: Trial) -> Optional[float]:
    """What a config is reported at: the window's batches over its wall time
    (what a stopwatch around the loop sees), per-epoch costs amortised."""
    if trial.state != TrialState.OK or trial.sustained_batches_per_s is None:
        return score(trial)
    return charge_epoch_gap(trial.sustained_batches_per_s, trial)


def charge_epoch_gap(rate: Optional[float], trial: Trial) -> Optional[float]:
    """``rate`` with the time between epochs that another trial measured
    (trial.epoch_gap_s) spread over this trial's epoch."""
    bpe = batches_per_epoch(trial)
    if not rate or not trial.epoch_gap_s or not bpe:
        return rate
    return rules.charge_per_epoch(rate, bpe, trial.epoch_gap_s)


def batches_per_epoch(trial: Trial) -> Optional[int]:
    rec = training_loader(trial.run) if trial.run is not None else None
    return rec.batches_per_epoch if rec is not None else None


def epoch_gap_s(trial: Trial) -> Optional[float]:
    """The time between epochs outside the loader that a trial saw itself (None: it crossed no boundary)."""
    rec = training_loader(trial.run) if trial.run is not None and trial.state == TrialState.OK else None
    return between_epochs(rec) if rec is not None else None


def window_spread(trial: Trial) -> Optional[float]:
    """Half the range of the trial's window's chunk rates over their median (0.1 = ±10 %)."""
    rate, low, high = trial.batches_per_s, trial.batches_per_s_low, trial.batches_per_s_high
    return 0.5 * (high - low) / rate if rate and low is not None and high is not None else None


def sound(trial: Trial) -> bool:
    """Did the window measure its config? One whose chunks spread past
    SPREAD_LIMIT caught something else (start-up, another job's burst)."""
    spread = window_spread(trial)
    return spread is None or spread <= SPREAD_LIMIT


@dataclass(frozen=True)
class Measured:
    """One config with every trial of it: repeats (confirm trials) are pooled."""

    config: Config
    trials: Tuple[Trial, ...]
    score: float  # median over the trials
    latest: Trial

    @property
    def spread(self) -> float:
        """Half the relative range of its windows' chunks and its repeats (0.1 = ±10 %)."""
        lows, highs = [], []
        for t in self.trials:
            s = score(t)
            scale = s / t.batches_per_s if s and t.batches_per_s else 1.0
            lows += [(t.batches_per_s_low or t.batches_per_s or s) * scale, s]
            highs += [(t.batches_per_s_high or t.batches_per_s or s) * scale, s]
        return 0.5 * (max(highs) - min(lows)) / self.score if self.score else 0.0

    @property
    def evidence(self) -> ConfigEvidence:
        """What the pick reads, as the online search has it of a stretch of the real run."""
        return evidence_of(self)


def evidence_of(m: Measured) -> ConfigEvidence:
    """A config's trials as the one evidence record (store/evidence.py)."""
    runs = [t.run.summary for t in m.trials if t.run is not None and t.run.summary is not None]
    waits = [t.data_wait_fraction for t in m.trials if t.data_wait_fraction is not None]
    cores = [t.workers_cpu_pct / 100 for t in m.trials if t.workers_cpu_pct is not None]
    figure, confirms = reported(m)
    return ConfigEvidence(
        config=m.config, rate=m.score, rates=tuple(scores(m)), measurements=len(m.trials),
        wait_fraction=stats.median(waits), source="trials",
        steady_rate=stats.median([t.batches_per_s for t in m.trials if t.batches_per_s]),
        startup_s=stats.median([s.epoch_startup_s for s in runs if s.epoch_startup_s is not None]),
        batches=sum(s.batches_measured for s in runs),
        samples=round(sum(s.batches_measured * _samples_per_batch(s) for s in runs)),
        wall_s=sum(s.measured_s for s in runs), wait_s=sum(s.data_wait_s or 0.0 for s in runs),
        workers_cores=stats.median(cores), figure_rate=figure, confirm_measurements=confirms,
        figure_spread=figure_spread(m), trial_index=m.latest.index,
        pool_threads=max((p for p in (worker_pool_threads(t.run.pools) for t in m.trials if t.run is not None)
                          if p is not None), default=None))


def evidence_of_trials(trials: Sequence[Trial]) -> List[ConfigEvidence]:
    """Every config the trials ran, first run first, as results.json holds it: its trials that
    measured it pooled (``evidence_of``), ``failed`` where any of its trials was killed, hung or
    failed; one that never measured as a failure with no measurement. (A config predicted over the
    memory budget never ran, and one interrupted measured nothing: the trials say so.)"""
    ended = (TrialState.KILLED, TrialState.TIMEOUT, TrialState.FAILED)
    pooled = {config_key(m.config): m for m in measured_configs(trials)}
    out: Dict[tuple, ConfigEvidence] = {}
    for t in trials:
        key = config_key(t.config)
        if t.role in (Role.CEILING, Role.PROBE) or key in out or (key not in pooled and t.state not in ended):
            continue
        failed = any(config_key(x.config) == key and x.state in ended for x in trials)
        e = evidence_of(pooled[key]) if key in pooled else ConfigEvidence(
            config=dict(t.config), rate=None, rates=(), measurements=0, trial_index=t.index)
        out[key] = dataclasses.replace(e, failed=failed)
    return list(out.values())


def _samples_per_batch(s: Any) -> float:
    """A summary's samples per batch: the job's (every rank's batch), where its rates say it."""
    if s.samples_per_s and s.batches_per_s:
        return s.samples_per_s / s.batches_per_s
    return float(s.batch_size or 0)


def reported(m: Measured) -> Tuple[float, int]:
    """(a config's figure, the confirmation windows it comes from). The best of
    several noisy windows is biased up (the winner's curse): a pick's figure
    comes from the windows that confirmed it, measured after it was chosen,
    where there are; else from all of its windows. Either way the stopwatch
    rate (``sustained``), as an outside timing of the loop would see it."""
    confirms = [t for t in m.trials if t.role == Role.CONFIRM]
    return stats.median([sustained(t) or m.score for t in confirms or m.trials]), len(confirms)


def figure_spread(m: Measured) -> Optional[float]:
    """How sure a config's figure is: how far the windows it comes from spread."""
    confirms = [t for t in m.trials if t.role == Role.CONFIRM]
    if len(confirms) > 1:
        return noise.relative_spread([sustained(t) or m.score for t in confirms])
    return window_spread(confirms[0] if confirms else m.latest)


def measured_configs(trials: Sequence[Trial]) -> List[Measured]:
    """Successful, non-ceiling trials grouped by config, in first-measured
    order. A window that spread (``sound``) is left out where its config has
    another that did not: it was measured again because it failed."""
    groups: Dict[tuple, List[Trial]] = {}
    for t in trials:
        if t.role not in (Role.CEILING, Role.PROBE) and score(t):
            groups.setdefault(config_key(t.config), []).append(t)
    kept = [[t for t in group if sound(t)] or group for group in groups.values()]
    return [Measured(config=dict(group[0].config), trials=tuple(group),
                     score=stats.median([score(t) for t in group]), latest=group[-1])
            for group in kept]


def run_margin(trials: Sequence[Trial]) -> Optional[float]:
    """How far apart two configs' scores must be to be told apart in this tune (noise.margin at
    offline's z): what cheaper_within_noise decides by, and what its finding says."""
    return noise.margin(_score_groups(trials), rules.OFFLINE.noise_z)


def _score_groups(trials: Sequence[Trial]) -> List[List[float]]:
    return [scores(m) for m in measured_configs(trials)]


def scores(m: Measured) -> List[float]:
    return [score(t) for t in m.trials]


def cheaper_within_noise(chosen: Measured, trials: Sequence[Trial], cost: Any) -> Optional[Measured]:
    """A cheaper config, measured repeatedly like ``chosen``, that ``chosen``
    cannot be told apart from on this run's noise (the cheapest such), or None."""
    margin = run_margin(trials)
    if margin is None or len(chosen.trials) < 2:
        return None
    cheaper = [m for m in measured_configs(trials) if len(m.trials) >= 2 and cost(m.config) < cost(chosen.config)
               and not noise.told_apart(scores(m), scores(chosen), margin)]
    return min(cheaper, key=lambda m: cost(m.config), default=None)


def cpu_use(trial: Trial) -> CpuUse:
    """A trial's CPU by part of the job, in cores."""
    def cores(pct: Optional[float]) -> Optional[float]:
        return pct / 100 if pct is not None else None

    return CpuUse(workers_cores=cores(trial.workers_cpu_pct), main_cores=cores(trial.main_cpu_pct),
                  other_cores=trial.other_cpu_cores, runq_cores=cores(trial.workers_runq_pct))


def trial_from_run(index: int, role: Role, config: Config, run: Run, **fields: Any) -> Trial:
    """The tune's row for one trial: its config and state, and the full run (its figures come from it)."""
    return Trial(index=index, role=role, config=dict(config), state=run.outcome.state,
                 cause=None if run.outcome.state == TrialState.OK else run.outcome.cause, run=run, **fields)


def charged_epoch_gaps(trials: Sequence[Trial]) -> List[Trial]:
    """What the loop does between epochs outside the loader (validation, checkpoints) costs the
    same whatever the loader's config, and a trial inside one epoch never sees it: measured by any
    trial that crossed a boundary (the median of them), it is charged per epoch to every trial that
    did not (Trial.epoch_gap_s), so configs are compared and reported with it."""
    gaps = [g for g in (epoch_gap_s(t) for t in trials) if g is not None]
    gap = stats.median(gaps) if gaps else None
    return [dataclasses.replace(t, epoch_gap_s=gap if t.run is not None and epoch_gap_s(t) is None else None)
            for t in trials]
