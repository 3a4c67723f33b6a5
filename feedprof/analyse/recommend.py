"""From trials to a recommendation: the cheapest config within tolerance of the
best, how much faster it is than the script's own, how close to the compute
ceiling, and why — in plain words."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

from feedprof.analyse.diagnose import classify
from feedprof.store import Recommendation, Run, Trial
from feedprof.units import fmt_bytes, fmt_rate

PICK_TOLERANCE = 0.03  # configs within 3 % of the best count as equally fast

Cost = Callable[[Dict[str, Any]], tuple]


def score(trial: Optional[Trial]) -> Optional[float]:
    """What configs are ranked by: steady throughput with per-epoch start-up amortised."""
    if trial is None or trial.state != "ok":
        return None
    return trial.effective_batches_per_s if trial.effective_batches_per_s is not None else trial.batches_per_s


def pick(trials: Sequence[Trial], cost: Cost, tol: float = PICK_TOLERANCE) -> Optional[Trial]:
    """Among trials within ``tol`` of the fastest, the cheapest."""
    ok = [t for t in trials if t.role != "ceiling" and score(t)]
    if not ok:
        return None
    best = max(score(t) for t in ok)
    within = [t for t in ok if score(t) >= best * (1 - tol)]
    return min(within, key=lambda t: (cost(t.config), -score(t)))


def trial_from_run(index: int, role: str, config: Dict[str, Any], run: Run) -> Trial:
    """The tune's row for one trial: headline figures, and the full run for the report."""
    s = run.summary
    get = (lambda name: getattr(s, name)) if s is not None else (lambda name: None)  # noqa: E731
    peaks = run.samples.peaks
    return Trial(
        index=index, role=role, config=dict(config), state=run.outcome.state,
        reason="" if run.outcome.state == "ok" else run.outcome.message,
        batches_per_s=get("batches_per_s"), batches_per_s_low=get("batches_per_s_low"),
        batches_per_s_high=get("batches_per_s_high"), effective_batches_per_s=get("effective_batches_per_s"),
        samples_per_s=get("samples_per_s"), data_wait_fraction=get("data_wait_fraction"),
        time_to_first_batch_s=get("time_to_first_batch_s"), main_cpu_pct=get("main_cpu_pct"),
        workers_cpu_pct=get("workers_cpu_pct"), gpu_util_pct=get("gpu_util_pct") or (),
        peak_rss_bytes=peaks.tree_rss_bytes, peak_pss_bytes=peaks.tree_pss_bytes,
        peak_shm_used_bytes=peaks.shm_used_bytes, duration_s=run.duration_s, run=run)


def noise(trials: Sequence[Trial]) -> float:
    """Median half-spread of chunk throughputs, relative (0.04 = ±4 %)."""
    spreads = sorted(0.5 * (t.batches_per_s_high - t.batches_per_s_low) / t.batches_per_s
                     for t in trials if t.state == "ok" and t.batches_per_s and t.batches_per_s_high is not None
                     and t.batches_per_s_low is not None)
    return spreads[len(spreads) // 2] if spreads else 0.0


def recommend(trials: Sequence[Trial], framework: str, cost: Cost, describe: Callable[[Dict[str, Any]], str],
              code_for: Callable[[Dict[str, Any]], str], loader_site: str = "", cpu_cap: Optional[int] = None,
              notes: Sequence[str] = (), tol: float = PICK_TOLERANCE) -> Optional[Recommendation]:
    baseline = next((t for t in trials if t.role == "baseline"), None)
    ceiling_trial = next((t for t in trials if t.role == "ceiling" and t.state == "ok"), None)
    best = pick(trials, cost, tol)
    if best is None:
        return None
    b_score, c_score, p_score = score(baseline), score(ceiling_trial), score(best)
    # The ceiling is an upper bound measured with noise: never report more than 100 % of it.
    if c_score is not None and p_score is not None and p_score > c_score:
        c_score = p_score
    if b_score and c_score:
        input_bound = max(0.0, 1 - b_score / c_score)
    else:
        input_bound = baseline.data_wait_fraction if baseline else None
    bound_class = classify(input_bound)
    speedup = p_score / b_score if b_score and p_score else None
    frac = p_score / c_score if c_score and p_score else None
    n_best = _workers(best.config)
    n_base = _workers(baseline.config) if baseline else None

    reasons: List[str] = []
    if baseline is not None and b_score:
        wait = baseline.data_wait_fraction
        waits = f"waits for data {wait:.0%} of the time and " if wait is not None else ""
        of_ceiling = f", {b_score / c_score:.0%} of the compute ceiling ({fmt_rate(c_score)})" if c_score else ""
        reasons.append(f"With the script's own settings ({describe(baseline.config)}) the loop "
                       f"{waits}runs at {fmt_rate(b_score)}{of_ceiling}.")
    same_as_baseline = baseline is not None and cost(best.config) == cost(baseline.config) \
        and describe(best.config) == describe(baseline.config)
    if same_as_baseline:
        reasons.append("The script's own settings are already the best found: leave them as they are.")
    else:
        faster = f": {speedup:.2f}× the baseline" if speedup else ""
        near = f", {frac:.0%} of the ceiling" if frac else ""
        reasons.append(f"{describe(best.config)} runs at {fmt_rate(p_score)}{faster}{near}.")
    cores = _cores_per_worker(best)
    if n_best and cores is not None:
        if cores >= 0.5:
            cap = f" and {cpu_cap} CPU(s) are usable" if cpu_cap else ""
            reasons.append(f"The workers are CPU-bound ({cores:.2f} cores each{cap}): past the CPU count more "
                           "workers only compete; to go faster, make per-sample work (decoding, augmentation) cheaper.")
        else:
            reasons.append(f"The workers mostly wait on I/O ({cores:.2f} cores each), so more workers than CPUs "
                           "can pay off.")
    not_loader = bound_class == "not"
    if not_loader:
        reasons.append("Not the loader: the job already runs near the compute ceiling, so loader tuning "
                       "cannot make it meaningfully faster; look at the model step instead.")
        if n_base is not None and n_best is not None and n_best < n_base:
            saved = _memory_saved(baseline, best)
            reasons.append(f"{n_best} worker(s) do as well as {n_base}" +
                           (f" and free about {fmt_bytes(saved)} of memory" if saved else "") + ".")
    if frac is not None and frac < 0.9 and not not_loader:
        reasons.append(f"Still {1 - frac:.0%} short of the compute ceiling: what remains is the cost of "
                       "loading itself on this machine.")
    reasons.extend(notes)

    if not_loader:
        verdict = "Not input-bound: the loader is not what limits this job"
        if n_base is not None and n_best is not None and n_best < n_base:
            verdict += f"; use fewer workers ({n_best} instead of {n_base})"
    elif same_as_baseline:
        verdict = f"{bound_class.capitalize()} input-bound, but no loader setting tried does better than the script's own"
    else:
        verdict = f"{bound_class.capitalize()} input-bound: {describe(best.config)} is " + \
            (f"{speedup:.1f}× faster" if speedup else "the fastest found") + \
            (f" ({frac:.0%} of the compute ceiling)" if frac else "")
    return Recommendation(
        framework=framework, config=dict(best.config), trial_index=best.index, batches_per_s=p_score,
        samples_per_s=best.samples_per_s if best.batches_per_s else None,
        baseline_config=dict(baseline.config) if baseline else {},
        baseline_batches_per_s=b_score, speedup=speedup, ceiling_batches_per_s=c_score,
        fraction_of_ceiling=frac, input_bound_fraction=input_bound, input_bound=bound_class,
        verdict=verdict, reasons=tuple(reasons), code=code_for(best.config), loader_site=loader_site)


def _workers(config: Dict[str, Any]) -> Optional[int]:
    for key in ("num_workers", "workers"):
        if isinstance(config.get(key), int):
            return config[key]
    return None


def _cores_per_worker(trial: Trial) -> Optional[float]:
    n = _workers(trial.config)
    if not n or trial.workers_cpu_pct is None:
        return None
    return trial.workers_cpu_pct / 100 / n


def _memory_saved(a: Optional[Trial], b: Trial) -> Optional[int]:
    if a is None:
        return None
    for field in ("peak_pss_bytes", "peak_rss_bytes"):
        x, y = getattr(a, field), getattr(b, field)
        if x is not None and y is not None and x > y:
            return x - y
    return None
