"""From trials to a recommendation: the cheapest config within tolerance of the
best, how much faster it is than the script's own, how close to the compute
ceiling, and why — in plain words."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from feedprof.analyse.diagnose import classify
from feedprof.store import Recommendation, Run, Trial
from feedprof.units import fmt_bytes, fmt_pct, fmt_rate

PICK_TOLERANCE = 0.03  # configs within 3 % of the best count as equally fast

Cost = Callable[[Dict[str, Any]], tuple]


def score(trial: Optional[Trial]) -> Optional[float]:
    """What configs are ranked by: steady throughput with per-epoch start-up amortised."""
    if trial is None or trial.state != "ok":
        return None
    return trial.effective_batches_per_s if trial.effective_batches_per_s is not None else trial.batches_per_s


def config_key(config: Dict[str, Any]) -> tuple:
    return tuple(sorted(config.items()))


@dataclass(frozen=True)
class Measured:
    """One config with every trial of it: repeats (confirm trials) are pooled."""

    config: Dict[str, Any]
    trials: Tuple[Trial, ...]
    score: float  # median over the trials
    latest: Trial

    @property
    def relative_spread(self) -> float:
        """Half the relative range of chunk throughputs and repeats (0.1 = ±10 %)."""
        lows, highs = [], []
        for t in self.trials:
            s = score(t)
            scale = s / t.batches_per_s if s and t.batches_per_s else 1.0
            lows.append((t.batches_per_s_low or t.batches_per_s or s) * scale)
            highs.append((t.batches_per_s_high or t.batches_per_s or s) * scale)
            lows.append(s)
            highs.append(s)
        return 0.5 * (max(highs) - min(lows)) / self.score if self.score else 0.0


def measured_configs(trials: Sequence[Trial]) -> List[Measured]:
    """Successful, non-ceiling trials grouped by config, in first-measured order."""
    groups: Dict[tuple, List[Trial]] = {}
    for t in trials:
        if t.role != "ceiling" and score(t):
            groups.setdefault(config_key(t.config), []).append(t)
    out = []
    for group in groups.values():
        scores = sorted(score(t) for t in group)
        mid = len(scores) // 2
        med = scores[mid] if len(scores) % 2 else 0.5 * (scores[mid - 1] + scores[mid])
        out.append(Measured(config=dict(group[0].config), trials=tuple(group), score=med, latest=group[-1]))
    return out


def pick(trials: Sequence[Trial], cost: Cost, tol: float = PICK_TOLERANCE) -> Optional[Measured]:
    """Among configs within ``tol`` of the fastest, the cheapest."""
    configs = measured_configs(trials)
    if not configs:
        return None
    best = max(m.score for m in configs)
    within = [m for m in configs if m.score >= best * (1 - tol)]
    return min(within, key=lambda m: (cost(m.config), -m.score))


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
        time_to_first_batch_s=get("time_to_first_batch_s"), system_cpu_pct=get("system_cpu_pct"),
        main_cpu_pct=get("main_cpu_pct"),
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
              notes: Sequence[str] = (), tol: float = PICK_TOLERANCE,
              finalize: Optional[Callable[[Trial, Sequence[Trial]], Tuple[Dict[str, Any], List[str]]]] = None,
              cpu_bound: Optional[Callable[[Trial], Optional[bool]]] = None) -> Optional[Recommendation]:
    """``finalize(pick)`` may adjust the picked config with settings judged rather
    than trialled, returning (config, reasons)."""
    baseline = next((t for t in trials if t.role == "baseline"), None)
    ceiling_trial = next((t for t in trials if t.role == "ceiling" and t.state == "ok"), None)
    chosen = pick(trials, cost, tol)
    if chosen is None:
        return None
    config, judged = finalize(chosen.latest, trials) if finalize else (dict(chosen.latest.config), [])
    switched = next((m for m in measured_configs(trials) if config_key(m.config) == config_key(config)), None)
    if switched is not None:  # finalize preferred another measured config (tf.data: AUTOTUNE)
        chosen = switched
    best = chosen.latest
    base_measured = next((m for m in measured_configs(trials)
                          if baseline is not None and config_key(m.config) == config_key(baseline.config)), None)
    b_score = base_measured.score if base_measured else None
    c_score, p_score = score(ceiling_trial), chosen.score
    # The ceiling is an upper bound measured with noise: never report more than 100 % of it.
    if c_score is not None and p_score is not None and p_score > c_score:
        c_score = p_score
    # Two figures of the same thing (DESIGN: "report both; they should agree"): the
    # data wait, measured inside one run, and the gap to the ceiling, which compares
    # two runs and carries their noise. The verdict uses the wait where it is observable.
    gap = max(0.0, 1 - b_score / c_score) if b_score and c_score else None
    wait = baseline.data_wait_fraction if baseline else None
    input_bound = wait if wait is not None else gap
    bound_class = classify(input_bound)
    speedup = p_score / b_score if b_score and p_score else None
    frac = p_score / c_score if c_score and p_score else None
    n_best = _workers(best.config)
    n_base = _workers(baseline.config) if baseline else None

    reasons: List[str] = []
    if baseline is not None and b_score:
        wait = baseline.data_wait_fraction
        waits = f"waits for data {fmt_pct(wait)} of the time and " if wait is not None else ""
        of_ceiling = f", {fmt_pct(b_score / c_score)} of the compute ceiling ({fmt_rate(c_score)})" if c_score else ""
        reasons.append(f"With the script's own settings ({describe(baseline.config)}) the loop "
                       f"{waits}runs at {fmt_rate(b_score)}{of_ceiling}.")
    same_as_baseline = baseline is not None and describe(config) == describe(baseline.config)
    if same_as_baseline:
        reasons.append("The script's own settings are already the best found: leave them as they are.")
    else:
        faster = f": {speedup:.2f}× the baseline" if speedup else ""
        near = f", {fmt_pct(frac)} of the ceiling" if frac else ""
        reasons.append(f"{describe(best.config)} runs at {fmt_rate(p_score)}{faster}{near}.")
    reasons.extend(judged)
    cores = _cores_per_worker(best)
    bound = cpu_bound(best) if cpu_bound is not None else (None if cores is None else cores >= 0.5)
    if n_best and n_best > 1 and bound is not None:
        each = f" ({cores:.2f} cores each)" if cores else ""
        if bound:
            cap = f", and {cpu_cap} CPU(s) are usable" if cpu_cap else ""
            reasons.append(f"The CPUs are the limit{each}{cap}: past that, more workers only compete; to go "
                           "faster, make per-sample work (decoding, augmentation) cheaper.")
        else:
            reasons.append(f"The workers leave CPU time idle{each}: they wait on I/O or on handing batches over, "
                           "so more workers than CPUs can pay off.")
    not_loader = bound_class == "not"
    if not_loader:
        reasons.append("Not the loader: the job already runs near the compute ceiling, so loader tuning "
                       "cannot make it meaningfully faster; look at the model step instead.")
        if n_base is not None and n_best is not None and n_best < n_base:
            saved = _memory_saved(baseline, best)
            reasons.append(f"{n_best} worker(s) do as well as {n_base}" +
                           (f" and free about {fmt_bytes(saved)} of memory" if saved else "") + ".")
    if frac is not None and frac < 0.9 and not not_loader:
        reasons.append(f"Still {fmt_pct(1 - frac)} short of the compute ceiling: what remains is the cost of "
                       "loading itself on this machine.")
    if len(chosen.trials) > 1:
        reasons.append(f"Measured {len(chosen.trials)} times, interleaved with its closest rival, because "
                       "the two were within this machine's run-to-run noise.")
    reasons.extend(notes)

    if not_loader:
        verdict = "Not input-bound: the loader is not what limits this job"
        if n_base is not None and n_best is not None and n_best < n_base:
            verdict += f"; use fewer workers ({n_best} instead of {n_base})"
    elif same_as_baseline:
        verdict = f"{bound_class.capitalize()} input-bound, but no loader setting tried does better than the script's own"
    else:
        verdict = f"{bound_class.capitalize()} input-bound: {describe(config)} is " + \
            (f"{speedup:.1f}× faster" if speedup else "the fastest found") + \
            (f" ({fmt_pct(frac)} of the compute ceiling)" if frac else "")
    return Recommendation(
        framework=framework, config=dict(config), config_text=describe(config), trial_index=best.index,
        batches_per_s=p_score,
        samples_per_s=p_score * best.samples_per_s / best.batches_per_s
        if best.samples_per_s and best.batches_per_s else None,
        baseline_config=dict(baseline.config) if baseline else {},
        baseline_batches_per_s=b_score, speedup=speedup, ceiling_batches_per_s=c_score,
        fraction_of_ceiling=frac, input_bound_fraction=input_bound, data_wait_fraction=wait,
        ceiling_gap_fraction=gap, input_bound=bound_class,
        verdict=verdict, reasons=tuple(reasons), code=code_for(config), loader_site=loader_site)


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
