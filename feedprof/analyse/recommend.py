"""From each config's evidence to a recommendation, for both searches: the cheapest config within
tolerance of the best, how much faster it is than the script's own, how close to the compute
ceiling, and why — as figures and reason codes (render/words/ words them).

NOTE [ What is recommended ]

    a search's Measurements: each config's evidence (store/evidence.py, one shape for both),
    and what only its own records hold (offline: its trials, analyse/from_trials.py;
    online: the run's windows and failures, tune/online_result.py)
           ─► pick: cheapest (space.cost) within ``tol`` of the fastest (rules.pick)
           ─► a cheaper config the pick cannot be told apart from (offline: repeats' noise)
           ─► finalize: settings judged rather than measured (persistent workers on long
              epochs; tf.data: never below AUTOTUNE)
           ─► figures: baseline, ceiling, speedup, fraction of the ceiling
           ─► verdict kind + reasons (reasons.py), one per thing worth saying
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

from feedprof import defaults
from feedprof.analyse import rules
from feedprof.analyse.diagnose import AT_CEILING, classify, workers_of
from feedprof.analyse.evidence import config_key
from feedprof.analyse.beyond import explain_gap
from feedprof.analyse.from_trials import TrialMeasurements
from feedprof.analyse.measurements import Baseline, CpuUse, Measurements
from feedprof.store.reasons import (BaselineFigures, CpusAreTheLimit, DuplicatedPerWorker, FewerWorkersDoAsWell,
                                    KeepScriptSettings, LeadNotConfirmed, MeasuredRepeatedly, NothingTried,
                                    NotTheLoader, PickFigures, Reason, ShortOfCeiling, Verdict, WorkersCapped,
                                    WorkersLeaveCpuIdle)
from feedprof.store import ConfigEvidence, InputBound, Recommendation, Trial, TrialState, VerdictKind

GAP_SAID_BELOW = 0.9  # below this share of the ceiling, the gap is said, with the parts that make it

Config = Dict[str, Any]


class ConfigSpace(Protocol):
    """What recommend needs of a search space (tune/space.py implements it)."""

    framework: str

    def cost(self, config: Config) -> tuple: ...


def keeps_own_settings(rec: Recommendation) -> bool:
    """The pick is the script's own settings (KeepScriptSettings), or nothing else
    was tried (VerdictKind.NOTHING_TRIED): there is nothing to paste, and the
    advice says which."""
    kind = getattr(rec.verdict, "kind", None)
    return kind == VerdictKind.NOTHING_TRIED or any(isinstance(r, KeepScriptSettings) for r in rec.reasons)


# ---------------------------------------------------------------- figures


@dataclass(frozen=True)
class Figures:
    """The numbers a recommendation is made of."""

    baseline: Optional[Baseline]
    chosen: ConfigEvidence
    config: Config  # the chosen config after finalize
    judged: Tuple[Reason, ...]  # what finalize decided without a trial, and why
    baseline_score: Optional[float]  # as reported (the stopwatch rate over its windows)
    ceiling_score: Optional[float]
    gap: Optional[float]  # 1 - baseline / ceiling
    input_bound: Optional[float]  # the baseline's data wait where observable, else the gap
    cap: Optional[WorkersCapped] = None  # the most workers that are safe, and why (Measurements.cap)
    pick_score: float = 0.0  # the pick as reported: from windows not used to choose it where there are
    confirm_windows: int = 0  # such windows (0: the figure is the one it was chosen on)

    @property
    def speedup(self) -> Optional[float]:
        return self.pick_score / self.baseline_score if self.baseline_score else None

    @property
    def fraction_of_ceiling(self) -> Optional[float]:
        return self.pick_score / self.ceiling_score if self.ceiling_score else None

    @property
    def baseline_failed(self) -> bool:
        return self.baseline is not None and self.baseline.state != TrialState.OK


def figures(m: Measurements, space: ConfigSpace, tol: float) -> Optional[Figures]:
    configs = m.configs()
    chosen = rules.pick(configs, space.cost, tol)
    if chosen is None:
        return None
    judged: List[Reason] = []
    cheaper = m.cheaper_within_noise(chosen, space.cost)
    if cheaper is not None:  # the faster one's lead is inside this run's noise: the cheaper one
        chosen, why = cheaper
        judged.append(why)
    config, finalized = m.finalize(chosen, tol)
    judged += finalized
    # finalize may prefer another measured config (tf.data: AUTOTUNE)
    chosen = next((e for e in configs if config_key(e.config) == config_key(config)), chosen)
    baseline = m.baseline
    base = next((e for e in configs if baseline is not None and config_key(e.config) == config_key(baseline.config)),
                None)
    b_score = base.figure if base else None
    pick_score, confirm_windows = chosen.figure or 0.0, chosen.confirm_measurements
    lost = _lead_not_confirmed(chosen, base, pick_score, b_score, space, tol)
    if lost is not None and base is not None:  # what chose it did not hold beside the script's own settings
        kept, finalized = m.finalize(base, tol)
        if config_key(kept) == config_key(base.config):  # (unless judging them moves off them)
            config, judged, chosen = kept, [lost, *finalized], base
            pick_score, confirm_windows = base.figure or 0.0, base.confirm_measurements
    ceiling = m.ceiling
    # The ceiling is an upper bound measured with noise: never report more than 100 % of it.
    if ceiling is not None and pick_score > ceiling:
        ceiling = pick_score
    # Two figures of the same thing (DESIGN: "report both; they should agree"): the
    # data wait, measured inside one run, and the gap to the ceiling, which compares
    # two runs and carries their noise. The verdict uses the wait where it is observable.
    gap = max(0.0, 1 - b_score / ceiling) if b_score and ceiling else None
    wait = baseline.wait_fraction if baseline is not None and baseline.state == TrialState.OK else None
    return Figures(baseline=baseline, chosen=chosen, config=config, judged=tuple(judged), baseline_score=b_score,
                   ceiling_score=ceiling, gap=gap, input_bound=wait if wait is not None else gap, cap=m.cap,
                   pick_score=pick_score, confirm_windows=confirm_windows)


def _lead_not_confirmed(chosen: ConfigEvidence, base: Optional[ConfigEvidence], pick_score: float,
                        b_score: Optional[float], space: ConfigSpace, tol: float) -> Optional[LeadNotConfirmed]:
    """A measured rival of the script's own settings that costs no less, chosen on its search
    windows, whose windows measured after it was chosen (beside the script's own) show no gain
    past ``tol``: a change with nothing to show for it is not advised."""
    if base is None or not b_score or not chosen.confirm_measurements \
            or config_key(chosen.config) == config_key(base.config):
        return None
    if space.cost(chosen.config) < space.cost(base.config) or pick_score >= b_score * (1 + tol):
        return None
    return LeadNotConfirmed(rival=dict(chosen.config), chosen_at_batches_per_s=chosen.rate or 0.0,
                            speedup=pick_score / b_score, spread=chosen.figure_spread)


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
    at_ceiling = f.fraction_of_ceiling is not None and f.fraction_of_ceiling >= AT_CEILING
    fewer = not same and before is not None and after is not None and after < before
    failed = f.baseline_failed
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


def reasons_of(f: Figures, verdict: Verdict, m: Measurements, cpu_cap: Optional[int],
               nothing_tried: Optional[NothingTried] = None, tol: float = defaults.TOLERANCE) -> List[Reason]:
    out: List[Reason] = []
    if f.baseline is not None and f.baseline_score:
        out.append(BaselineFigures(config=dict(f.baseline.config), batches_per_s=f.baseline_score,
                                   data_wait_fraction=f.baseline.wait_fraction,
                                   ceiling_batches_per_s=f.ceiling_score))
    if verdict.kind == VerdictKind.NOTHING_TRIED and nothing_tried is not None:
        out.append(nothing_tried)
    elif verdict.kind in (VerdictKind.NO_BETTER, VerdictKind.NOT_LOADER) and f.baseline is not None \
            and config_key(f.config) == config_key(f.baseline.config):
        out.append(KeepScriptSettings())
    else:
        out.append(PickFigures(config=dict(f.chosen.config), batches_per_s=f.pick_score,
                               speedup=f.speedup, fraction_of_ceiling=f.fraction_of_ceiling,
                               confirm_windows=f.confirm_windows, chosen_at_batches_per_s=f.chosen.rate or 0.0,
                               spread=f.chosen.figure_spread, training_batches_per_s=f.chosen.steady_rate))
    out.extend(f.judged)
    if verdict.kind == VerdictKind.SURVIVES and f.baseline.cause is not None \
            and (f.cap is None or f.cap.because != f.baseline.cause):
        out.append(f.baseline.cause)  # why the script's own settings failed, in the user's own words
    if f.cap is not None:
        out.append(f.cap)
    out.extend(_cpu_reasons(f.chosen.config, *m.cpu(f.chosen), cpu_cap))
    at_ceiling = f.fraction_of_ceiling is not None and f.fraction_of_ceiling >= AT_CEILING
    gains = f.speedup is not None and f.speedup >= 1 + tol
    # (fewer workers that make the job faster: the script's loader settings were what held it back)
    if (verdict.input_bound == InputBound.NOT and verdict.kind not in (VerdictKind.FASTER, VerdictKind.FEWER_WORKERS)) \
            or (verdict.kind == VerdictKind.FEWER_WORKERS and (at_ceiling or verdict.input_bound == InputBound.NOT)
                and not gains):
        out.append(NotTheLoader())
    if verdict.kind == VerdictKind.FEWER_WORKERS:
        out.append(FewerWorkersDoAsWell(workers_before=verdict.workers_before, workers_after=verdict.workers_after,
                                        memory_saved_bytes=m.memory_saved_bytes(f.chosen)))
    elif verdict.input_bound != InputBound.NOT \
            and verdict.kind not in (VerdictKind.DUPLICATES, VerdictKind.NOTHING_TRIED) \
            and f.fraction_of_ceiling is not None and f.fraction_of_ceiling < GAP_SAID_BELOW:
        out.append(ShortOfCeiling(fraction_short=1 - f.fraction_of_ceiling))  # followed by why (analyse/beyond.py)
    if m.repeats(f.chosen) > 1:
        out.append(MeasuredRepeatedly(times=m.repeats(f.chosen)))
    advice = m.trainer_advice(verdict)  # checked against what was measured
    if advice is not None:
        out.append(advice)
    return out


def _cpu_reasons(config: Config, bound: Optional[bool], use: Optional[CpuUse], cpu_cap: Optional[int]) -> List[Reason]:
    n = workers_of(config)
    if not n or n <= 1 or bound is None or use is None:
        return []
    cores = use.workers_cores / n if use.workers_cores is not None else None
    used = dict(workers_cores=use.workers_cores, main_cores=use.main_cores, other_cores=use.other_cores)
    if bound:
        return [CpusAreTheLimit(cores_per_worker=cores, cpu_cap=cpu_cap, **used)]
    return [WorkersLeaveCpuIdle(cores_per_worker=cores, **used)]


def recommend_from(m: Measurements, space: ConfigSpace, tol: float = defaults.TOLERANCE, cpu_cap: Optional[int] = None,
                   ram_budget_bytes: Optional[int] = None,
                   nothing_tried: Optional[NothingTried] = None) -> Optional[Recommendation]:
    """The recommendation from what a search measured, without its paste-ready code (the tuner
    knows the script); ``nothing_tried``: the search stopped before any loader setting was tried
    (the tuner's figures: what ran took, what a trial takes, the budget to give)."""
    f = figures(m, space, tol)
    if f is None:
        return None
    verdict = verdict_of(f, tol, nothing_tried if not m.tried_a_setting() else None)
    warnings = m.hazards(f.chosen, f.config, ram_budget_bytes)
    times, loading = m.batch_times(f.chosen), m.loading(f.chosen)
    beyond = [] if verdict.kind in (VerdictKind.DUPLICATES, VerdictKind.NOTHING_TRIED) else explain_gap(
        times, loading, *m.cpu(f.chosen), m.configs(), f.ceiling_score, space, cpu_cap)
    per_batch = f.chosen.samples_per_batch
    return Recommendation(
        framework=space.framework, config=dict(f.config), trial_index=f.chosen.trial_index,
        batches_per_s=f.pick_score, samples_per_s=f.pick_score * per_batch if per_batch else None,
        baseline_config=dict(f.baseline.config) if f.baseline else {},
        baseline_batches_per_s=f.baseline_score, speedup=f.speedup, ceiling_batches_per_s=f.ceiling_score,
        training_batches_per_s=f.chosen.steady_rate, baseline_training_batches_per_s=_training_rate(f, m),
        fraction_of_ceiling=f.fraction_of_ceiling, input_bound_fraction=f.input_bound,
        data_wait_fraction=f.baseline.wait_fraction if f.baseline else None,
        ceiling_gap_fraction=f.gap, input_bound=verdict.input_bound, verdict=verdict,
        reasons=tuple(reasons_of(f, verdict, m, cpu_cap, nothing_tried, tol) + beyond + warnings),
        batch_time=times, loading=loading)


def _training_rate(f: Figures, m: Measurements) -> Optional[float]:
    """The script's own settings' rate while the loop trains."""
    if f.baseline is None:
        return None
    base = next((e for e in m.configs() if config_key(e.config) == config_key(f.baseline.config)), None)
    return base.steady_rate if base is not None else None


def recommend(trials: Sequence[Trial], space: Any, tol: float = defaults.TOLERANCE, cpu_cap: Optional[int] = None,
              ram_budget_bytes: Optional[int] = None, fits: Optional[Any] = None,
              nothing_tried: Optional[NothingTried] = None) -> Optional[Recommendation]:
    """An offline tune's recommendation, from its trials; ``fits``: does a config fit the memory
    budget as learned so far."""
    return recommend_from(TrialMeasurements(trials, space, fits), space, tol, cpu_cap, ram_budget_bytes,
                          nothing_tried)
