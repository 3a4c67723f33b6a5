"""What a run says: the training loader, its steady-state throughput, data
wait, input-bound class, and the host/GPU picture over the same window."""
from __future__ import annotations

from typing import List, Optional

from feedprof.analyse import stats
from feedprof.store import LoaderRecord, Run, Summary

# The TensorFlow Profiler's input-pipeline thresholds.
HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05


def classify(input_bound_fraction: Optional[float]) -> str:
    if input_bound_fraction is None:
        return "unknown"
    if input_bound_fraction >= HIGHLY_INPUT_BOUND:
        return "highly"
    if input_bound_fraction >= MODERATELY_INPUT_BOUND:
        return "moderately"
    return "not"


def verdict_words(input_bound: str) -> str:
    return {"highly": "highly input-bound", "moderately": "moderately input-bound",
            "not": "not input-bound", "unknown": "input-bound: unknown"}[input_bound]


def training_loader(run: Run) -> Optional[LoaderRecord]:
    """The loader the window measured, else the one that delivered the most batches."""
    if run.window.loader_id is not None:
        rec = run.loader(run.window.loader_id)
        if rec is not None:
            return rec
    return max(run.loaders, key=lambda r: r.batches, default=None)


def num_workers_of(rec: LoaderRecord) -> Optional[int]:
    cfg = rec.config
    for key in ("num_workers", "workers"):
        if isinstance(cfg.get(key), int):
            return cfg[key]
    return None


def epoch_startup(rec: LoaderRecord) -> tuple:
    """(time to first batch of the run, mean first-batch time of later epochs).

    On a run long enough for epoch records to be merged, the first record
    covers several epochs and its mean stands in for the first one.
    """
    e = rec.epochs
    if not e.first_batch_s:
        return None, None
    first = e.first_batch_s[0] / max(1, e.n_epochs[0])
    later_n = sum(e.n_epochs[1:])
    later = sum(e.first_batch_s[1:]) / later_n if later_n else None
    return first, later


def epoch_teardown(rec: LoaderRecord) -> Optional[float]:
    """Mean time per ended epoch spent stopping the loader (None: none measured)."""
    e = rec.epochs
    ended = [(t, n) for t, n in zip(e.teardown_s, e.n_epochs) if t > 0]
    if not ended:
        return None
    return sum(t for t, _ in ended) / sum(n for _, n in ended)


def effective_rate(batches_per_s: Optional[float], batches_per_epoch: Optional[int],
                   startup_s: Optional[float]) -> Optional[float]:
    """Throughput with one epoch's start-up spread over the epoch's batches."""
    if batches_per_s is None or not batches_per_epoch or startup_s is None or batches_per_s <= 0:
        return batches_per_s
    return batches_per_epoch / (startup_s + (batches_per_epoch - 1) / batches_per_s)


def summarize(run: Run, n_chunks: int = stats.DEFAULT_CHUNKS) -> Summary:
    rec = training_loader(run)
    notes: List[str] = list(run.notes) + list(run.samples.notes)
    if rec is None:
        return Summary(notes=tuple(notes + ["no data loader was iterated"]))
    w = run.window
    steps = rec.steps
    measured = sum(steps.n_steps)
    wall = sum(steps.wall_s)
    wait = sum(steps.wait_s)
    rates = stats.chunk_rates(steps, n_chunks)
    rate, low, high = stats.spread(rates)
    wait_fraction = wait / wall if wall > 0 and rec.wait_observable else None
    if not rec.wait_observable:
        notes.append(f"data wait is not observable here: {rec.framework} pulls each batch inside its own "
                     "runtime; the compute ceiling (feedprof tune) says how input-bound the job is")
    first, later = epoch_startup(rec)
    # Without a later epoch measured, the first epoch's start-up stands in for
    # every epoch's, except with persistent workers: they start once per run.
    startup = later if later is not None else (None if rec.config.get("persistent_workers") else first)
    teardown = epoch_teardown(rec)
    if teardown:
        startup = (startup or 0.0) + teardown
    effective = effective_rate(rate, rec.batches_per_epoch, startup)
    if measured == 0:
        notes.append(f"{rec.batches} batches were delivered, all of them warm-up or epoch start-up: "
                     "nothing to measure in steady state (a longer run would say more)")
    elif measured < 3 * stats.MIN_STEPS_PER_CHUNK:
        notes.append(f"only {measured} steady-state batches were measured: figures are rough")
    # Host and GPU readings over the steady window (or the whole run if it had none).
    t0 = w.t_start_s if w.t_start_s is not None else (steps.t_end_s[0] - steps.wall_s[0] if steps.t_end_s else None)
    t1 = w.t_end_s if w.t_end_s is not None else (steps.t_end_s[-1] if steps.t_end_s else None)
    s = run.samples
    mean = lambda col: stats.window_mean(s.t_s, col, t0, t1)  # noqa: E731
    workers = num_workers_of(rec)
    peaks = s.peaks
    return Summary(
        loader=rec.name or rec.site or f"loader {rec.loader_id}",
        framework=rec.framework,
        batches_measured=measured,
        measured_s=wall,
        batches_per_s=rate,
        batches_per_s_low=low,
        batches_per_s_high=high,
        n_chunks=len(rates),
        effective_batches_per_s=effective,
        batch_size=rec.batch_size,
        samples_per_s=rate * rec.batch_size if rate is not None and rec.batch_size else None,
        data_wait_fraction=wait_fraction,
        data_wait_s=wait if measured and rec.wait_observable else None,
        input_bound=classify(wait_fraction),
        time_to_first_batch_s=first,
        epoch_startup_s=later,
        epoch_teardown_s=teardown,
        num_workers=workers if workers is not None else (peaks.n_workers or None),
        system_cpu_pct=mean(s.system_cpu_pct),
        main_cpu_pct=mean(s.main_cpu_pct),
        workers_cpu_pct=mean(s.workers_cpu_pct),
        gpu_util_pct=tuple(mean(g.util_pct) for g in s.gpus),
        peak_tree_rss_bytes=peaks.tree_rss_bytes,
        peak_tree_pss_bytes=peaks.tree_pss_bytes,
        peak_worker_pss_bytes=peaks.worker_pss_bytes,
        peak_worker_uss_bytes=peaks.worker_uss_bytes,
        peak_shm_used_bytes=peaks.shm_used_bytes,
        notes=tuple(dict.fromkeys(notes)),
    )
