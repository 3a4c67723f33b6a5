"""From trials to a recommendation: the cheapest config within tolerance of the
best, how much faster it is than the script's own, how close to the compute
ceiling, and why — as figures and reason codes (render/words.py words them).
What each trial measured, and its pooling, is analyse/measured.py's.

NOTE [ What is recommended ]

    trials ─► measured_configs (repeats pooled, median score: analyse/measured.py)
           ─► pick: cheapest (space.cost) within ``tol`` of the fastest
           ─► space.finalize: settings judged rather than trialled (persistent
              workers on long epochs; tf.data: never below AUTOTUNE)
           ─► figures: baseline, ceiling, speedup, fraction of the ceiling
           ─► verdict kind + reasons (reasons.py), one per thing worth saying
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from feedprof.analyse import noise, stats
from feedprof.analyse.advice import trainer_advice
from feedprof.analyse.diagnose import MODERATELY_INPUT_BOUND, classify, workers_of
from feedprof.analyse.evidence import config_key
from feedprof.analyse.limits import hazard_reasons, usable, worker_cap
from feedprof.analyse.measured import (PICK_TOLERANCE, Measured, cheaper_within_noise, measured_configs, pick,
                                       relative_spread, run_noise, score, sustained)
from feedprof.store.reasons import (BaselineFigures, CheaperWithinNoise, CpusAreTheLimit, DuplicatedPerWorker,
                              FewerWorkersDoAsWell, KeepScriptSettings, LeadNotConfirmed, MeasuredRepeatedly,
                              NothingTried, NotTheLoader, PickFigures, Reason, ShortOfCeiling, Verdict, WorkersCapped,
                              WorkersLeaveCpuIdle)
from feedprof.store import InputBound, Recommendation, Role, Trial, TrialState, VerdictKind

NEAR_CEILING = 0.9  # below this share of the ceiling, what remains is said to be loading's cost

Config = Dict[str, Any]


class ConfigSpace(Protocol):
    """What recommend needs of a search space (tune/space.py implements it)."""

    framework: str

    def cost(self, config: Config) -> tuple: ...

    def finalize(self, pick: Trial, tol: float, trials: Sequence[Trial]) -> Tuple[Config, List[Reason]]: ...

    def cpu_bound(self, trial: Trial) -> Optional[bool]: ...

    def workers(self, config: Config) -> int: ...


def keeps_own_settings(rec: Recommendation) -> bool:
    """The pick is the script's own settings (KeepScriptSettings), or nothing else
    was tried (VerdictKind.NOTHING_TRIED): there is nothing to paste, and the
    advice says which."""
    kind = getattr(rec.verdict, "kind", None)
    return kind == VerdictKind.NOTHING_TRIED or any(isinstance(r, KeepScriptSettings) for r in rec.reasons)


def tried_a_setting(trials: Sequence[Trial]) -> bool:
    """Did any loader setting run beside the script's own (and the compute ceiling)?"""
    return any(t.role not in (Role.BASELINE, Role.CEILING) and t.state != TrialState.REJECTED for t in trials)


# ---------------------------------------------------------------- figures


@dataclass(frozen=True)
class Figures:
    """The numbers a recommendation is made of."""

    baseline: Optional[Trial]
    chosen: Measured
    config: Config  # the chosen config after finalize
    judged: Tuple[Reason, ...]  # what finalize decided without a trial, and why
    baseline_score: Optional[float]  # as reported (the stopwatch rate over its windows)
    ceiling_score: Optional[float]
    gap: Optional[float]  # 1 - baseline / ceiling
    input_bound: Optional[float]  # the baseline's data wait where observable, else the gap
    cap: Optional[WorkersCapped] = None  # the most workers that are safe, and why (analyse/limits.py)
    pick_score: float = 0.0  # the pick as reported: from windows not used to choose it where there are
    confirm_windows: int = 0  # such windows (0: the figure is the one it was chosen on)

    @property
    def speedup(self) -> Optional[float]:
        return self.pick_score / self.baseline_score if self.baseline_score else None

    @property
    def fraction_of_ceiling(self) -> Optional[float]:
        return self.pick_score / self.ceiling_score if self.ceiling_score else None


def figures(all_trials: Sequence[Trial], space: ConfigSpace, tol: float,
            fits: Optional[Callable[[Config], bool]] = None,
            ceiling_batches_per_s: Optional[float] = None) -> Optional[Figures]:
    cap = worker_cap(all_trials, space.workers)
    trials = usable(all_trials, cap, space.workers)  # a config past the cap is never picked, nor a baseline
    if fits is not None:  # as the budget stands now (memory growth learned after a config ran)
        trials = [t for t in trials if fits(t.config)]
    chosen = pick(trials, space.cost, tol)
    if chosen is None:
        return None
    cheaper = cheaper_within_noise(chosen, trials, space.cost)
    judged: List[Reason] = []
    if cheaper is not None:  # the faster one's lead is inside this run's noise: the cheaper one
        judged.append(CheaperWithinNoise(config=dict(cheaper.config), rival=dict(chosen.config),
                                         rival_lead=chosen.score / cheaper.score - 1, noise=run_noise(trials) or 0.0,
                                         repeats=min(len(cheaper.trials), len(chosen.trials))))
        chosen = cheaper
    config, finalized = space.finalize(chosen.latest, tol, trials)
    judged += finalized
    configs = measured_configs(trials)
    # finalize may prefer another measured config (tf.data: AUTOTUNE)
    chosen = next((m for m in configs if config_key(m.config) == config_key(config)), chosen)
    baseline = next((t for t in all_trials if t.role == Role.BASELINE), None)
    base = next((m for m in configs if baseline is not None and config_key(m.config) == config_key(baseline.config)),
                None)
    b_score = reported(base)[0] if base else None
    pick_score, confirm_windows = reported(chosen)
    lost = _lead_not_confirmed(chosen, base, pick_score, b_score, confirm_windows, space, tol)
    if lost is not None and base is not None:  # what chose it did not hold beside the script's own settings
        kept, finalized = space.finalize(base.latest, tol, trials)
        if config_key(kept) == config_key(base.config):  # (unless judging them moves off them)
            config, judged, chosen = kept, [lost, *finalized], base
            pick_score, confirm_windows = reported(base)
    ceiling = ceiling_batches_per_s if ceiling_batches_per_s is not None else ceiling_of(all_trials)
    # The ceiling is an upper bound measured with noise: never report more than 100 % of it.
    if ceiling is not None and pick_score > ceiling:
        ceiling = pick_score
    # Two figures of the same thing (DESIGN: "report both; they should agree"): the
    # data wait, measured inside one run, and the gap to the ceiling, which compares
    # two runs and carries their noise. The verdict uses the wait where it is observable.
    gap = max(0.0, 1 - b_score / ceiling) if b_score and ceiling else None
    wait = baseline.data_wait_fraction if baseline is not None and baseline.state == TrialState.OK else None
    return Figures(baseline=baseline, chosen=chosen, config=config, judged=tuple(judged), baseline_score=b_score,
                   ceiling_score=ceiling, gap=gap, input_bound=wait if wait is not None else gap, cap=cap,
                   pick_score=pick_score, confirm_windows=confirm_windows)


def _lead_not_confirmed(chosen: Measured, base: Optional[Measured], pick_score: float, b_score: Optional[float],
                        confirm_windows: int, space: ConfigSpace, tol: float) -> Optional[LeadNotConfirmed]:
    """A measured rival of the script's own settings that costs no less, chosen on its search
    windows, whose windows measured after it was chosen (beside the script's own) show no gain
    past ``tol``: a change with nothing to show for it is not advised."""
    if base is None or not b_score or not confirm_windows or config_key(chosen.config) == config_key(base.config):
        return None
    if space.cost(chosen.config) < space.cost(base.config) or pick_score >= b_score * (1 + tol):
        return None
    return LeadNotConfirmed(rival=dict(chosen.config), chosen_at_batches_per_s=chosen.score,
                            speedup=pick_score / b_score, spread=_figure_spread(chosen))


def ceiling_of(trials: Sequence[Trial]) -> Optional[float]:
    """The compute ceiling an offline tune measured: its ceiling trial's rate (one cached batch replayed)."""
    return score(next((t for t in trials if t.role == Role.CEILING and t.state == TrialState.OK), None))


def reported(m: Measured) -> Tuple[float, int]:
    """(a config's figure, the confirmation windows it comes from). The best of
    several noisy windows is biased up (the winner's curse): a pick's figure
    comes from the windows that confirmed it, measured after it was chosen,
    where there are; else from all of its windows. Either way the stopwatch
    rate (``sustained``), as an outside timing of the loop would see it."""
    confirms = [t for t in m.trials if t.role == Role.CONFIRM]
    return stats.median([sustained(t) or m.score for t in confirms or m.trials]), len(confirms)


# -------------------------------------------------------------- the words


def verdict_of(f: Figures, tol: float, nothing_tried: Optional[NothingTried] = None) -> Verdict:
    """The headline's kind: duplicates (more workers would repeat the data: the
    pick is within the cap); survives (the script's own settings were killed
    or failed); fewer_workers (fewer workers than the script's reach the
    ceiling, or do as well); faster (beats the script's own settings by more
    than ``tol``); cheaper (as fast, for less); not_loader (near the ceiling
    already); no_better (input-bound, yet nothing tried does better);
    nothing_tried (the tune stopped before any setting was tried: ``nothing_tried``
    from the tuner, which knows why)."""
    bound = classify(f.input_bound)
    before = workers_of(f.baseline.config) if f.baseline else None
    after = workers_of(f.config)
    same = f.baseline is None or config_key(f.config) == config_key(f.baseline.config)
    gains = f.speedup is not None and f.speedup >= 1 + tol
    at_ceiling = f.fraction_of_ceiling is not None and f.fraction_of_ceiling >= 1 - MODERATELY_INPUT_BOUND
    fewer = not same and before is not None and after is not None and after < before
    failed = f.baseline is not None and f.baseline.state != TrialState.OK
    if f.cap is not None and isinstance(f.cap.because, DuplicatedPerWorker):  # correct before fast
        kind = VerdictKind.DUPLICATES
    elif failed:
        kind = VerdictKind.SURVIVES
    elif nothing_tried is not None and same:  # no words of a search that did not happen
        kind = VerdictKind.NOTHING_TRIED
    elif fewer and (at_ceiling or not gains):  # the script's workers only cost: what they waited on was themselves
        kind = VerdictKind.FEWER_WORKERS
    elif not same and gains:
        kind = VerdictKind.FASTER
    elif bound == InputBound.NOT:
        kind = VerdictKind.NOT_LOADER
    else:
        kind = VerdictKind.NO_BETTER if same else VerdictKind.CHEAPER
    return Verdict(kind=kind, input_bound=bound, input_bound_fraction=f.input_bound, config=dict(f.config),
                   speedup=f.speedup, fraction_of_ceiling=f.fraction_of_ceiling, workers_before=before,
                   workers_after=after, dataset=getattr(f.cap.because, "dataset", "") if f.cap else "",
                   baseline_state=f.baseline.state.value if failed else "",
                   baseline_config=dict(f.baseline.config) if failed else {})


def reasons_of(f: Figures, verdict: Verdict, space: ConfigSpace, cpu_cap: Optional[int],
               trials: Sequence[Trial] = (), nothing_tried: Optional[NothingTried] = None,
               tol: float = PICK_TOLERANCE) -> List[Reason]:
    out: List[Reason] = []
    if f.baseline is not None and f.baseline_score:
        out.append(BaselineFigures(config=dict(f.baseline.config), batches_per_s=f.baseline_score,
                                   data_wait_fraction=f.baseline.data_wait_fraction,
                                   ceiling_batches_per_s=f.ceiling_score))
    if verdict.kind == VerdictKind.NOTHING_TRIED and nothing_tried is not None:
        out.append(nothing_tried)
    elif verdict.kind in (VerdictKind.NO_BETTER, VerdictKind.NOT_LOADER) and f.baseline is not None \
            and config_key(f.config) == config_key(f.baseline.config):
        out.append(KeepScriptSettings())
    else:
        out.append(PickFigures(config=dict(f.chosen.latest.config), batches_per_s=f.pick_score,
                               speedup=f.speedup, fraction_of_ceiling=f.fraction_of_ceiling,
                               confirm_windows=f.confirm_windows, chosen_at_batches_per_s=f.chosen.score,
                               spread=_figure_spread(f.chosen)))
    out.extend(f.judged)
    if verdict.kind == VerdictKind.SURVIVES and f.baseline.cause is not None \
            and (f.cap is None or f.cap.because != f.baseline.cause):
        out.append(f.baseline.cause)  # why the script's own settings failed, in the user's own words
    if f.cap is not None:
        out.append(f.cap)
    out.extend(_cpu_reasons(f.chosen.latest, space, cpu_cap))
    at_ceiling = f.fraction_of_ceiling is not None and f.fraction_of_ceiling >= 1 - MODERATELY_INPUT_BOUND
    gains = f.speedup is not None and f.speedup >= 1 + tol
    # (fewer workers that make the job faster: the script's loader settings were what held it back)
    if (verdict.input_bound == InputBound.NOT and verdict.kind not in (VerdictKind.FASTER, VerdictKind.FEWER_WORKERS)) \
            or (verdict.kind == VerdictKind.FEWER_WORKERS and (at_ceiling or verdict.input_bound == InputBound.NOT)
                and not gains):
        out.append(NotTheLoader())
    if verdict.kind == VerdictKind.FEWER_WORKERS:
        out.append(FewerWorkersDoAsWell(workers_before=verdict.workers_before, workers_after=verdict.workers_after,
                                        memory_saved_bytes=_memory_saved(f.baseline, f.chosen.latest)))
    elif verdict.input_bound != InputBound.NOT \
            and verdict.kind not in (VerdictKind.DUPLICATES, VerdictKind.NOTHING_TRIED) \
            and f.fraction_of_ceiling is not None and f.fraction_of_ceiling < NEAR_CEILING:
        out.append(ShortOfCeiling(fraction_short=1 - f.fraction_of_ceiling))
    if len(f.chosen.trials) > 1:
        out.append(MeasuredRepeatedly(times=len(f.chosen.trials)))
    advice = trainer_advice(f.baseline, measured_configs(usable(trials, f.cap, space.workers)), verdict)  # checked
    if advice is not None:
        out.append(advice)
    return out


def _figure_spread(m: Measured) -> Optional[float]:
    """How sure the pick's figure is: how far the windows it comes from spread."""
    confirms = [t for t in m.trials if t.role == Role.CONFIRM]
    if len(confirms) > 1:
        return noise.relative_spread([sustained(t) or m.score for t in confirms])
    return relative_spread(confirms[0] if confirms else m.latest)


def _cpu_reasons(best: Trial, space: ConfigSpace, cpu_cap: Optional[int]) -> List[Reason]:
    n = workers_of(best.config)
    cores = best.workers_cpu_pct / 100 / n if n and best.workers_cpu_pct is not None else None
    bound = space.cpu_bound(best)
    if not n or n <= 1 or bound is None:
        return []
    used = dict(workers_cores=_cores(best.workers_cpu_pct), main_cores=_cores(best.main_cpu_pct),
                other_cores=best.other_cpu_cores)
    if bound:
        return [CpusAreTheLimit(cores_per_worker=cores, cpu_cap=cpu_cap, **used)]
    return [WorkersLeaveCpuIdle(cores_per_worker=cores, **used)]


def _cores(cpu_pct: Optional[float]) -> Optional[float]:
    return cpu_pct / 100 if cpu_pct is not None else None


def recommend(trials: Sequence[Trial], space: ConfigSpace, tol: float = PICK_TOLERANCE,
              cpu_cap: Optional[int] = None, ram_budget_bytes: Optional[int] = None,
              fits: Optional[Callable[[Config], bool]] = None,
              nothing_tried: Optional[NothingTried] = None,
              ceiling_batches_per_s: Optional[float] = None) -> Optional[Recommendation]:
    """The recommendation, without its paste-ready code (the tuner knows the
    script); ``fits``: does a config fit the memory budget as learned so far;
    ``nothing_tried``: the tune stopped before any loader setting was tried
    (the tuner's figures: what ran took, what a trial takes, the budget to give);
    ``ceiling_batches_per_s``: the compute ceiling where no trial measured it (an
    online run: the step time when data is ready), else the ceiling trial's."""
    f = figures(trials, space, tol, fits, ceiling_batches_per_s)
    if f is None:
        return None
    verdict = verdict_of(f, tol, nothing_tried if not tried_a_setting(trials) else None)
    warnings = hazard_reasons(trials, f.chosen.latest, f.config, space, ram_budget_bytes)
    best = f.chosen.latest
    return Recommendation(
        framework=space.framework, config=dict(f.config), trial_index=best.index, batches_per_s=f.pick_score,
        samples_per_s=f.pick_score * best.samples_per_s / best.batches_per_s
        if best.samples_per_s and best.batches_per_s else None,
        baseline_config=dict(f.baseline.config) if f.baseline else {},
        baseline_batches_per_s=f.baseline_score, speedup=f.speedup, ceiling_batches_per_s=f.ceiling_score,
        fraction_of_ceiling=f.fraction_of_ceiling, input_bound_fraction=f.input_bound,
        data_wait_fraction=f.baseline.data_wait_fraction if f.baseline else None,
        ceiling_gap_fraction=f.gap, input_bound=verdict.input_bound, verdict=verdict,
        reasons=tuple(reasons_of(f, verdict, space, cpu_cap, trials, nothing_tried, tol) + warnings))


def _memory_saved(a: Optional[Trial], b: Trial) -> Optional[int]:
    if a is None:
        return None
    for name in ("peak_pss_bytes", "peak_rss_bytes"):
        x, y = getattr(a, name), getattr(b, name)
        if x is not None and y is not None and x > y:
            return x - y
    return None
