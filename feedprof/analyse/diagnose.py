"""What a run says: the training loader, its steady-state throughput, data
wait, input-bound class, and the host/GPU picture over the same window."""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

from feedprof.analyse import rules, stats
from feedprof.analyse.hazards import run_hazards
from feedprof.analyse.pools import pools_finding
from feedprof.analyse.stragglers import nodes_differ, rank_spread, waits_of_run
from feedprof.analyse.window import training_loader, window_steps
from feedprof.store.reasons import (FewSteadyBatches, GpuUnavailable, NoLoaderIterated, OnlyWarmup, Reason, Straggler,
                              WaitNotObservable, said_once)
from feedprof.store import InputBound, LoaderRecord, Run, Samples, StepLog, Summary

# The TensorFlow Profiler's input-pipeline thresholds.
HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05
AT_CEILING = 1 - MODERATELY_INPUT_BOUND  # a config this close to the compute ceiling: the loader is not the limit


def classify(input_bound_fraction: Optional[float]) -> InputBound:
    if input_bound_fraction is None:
        return InputBound.UNKNOWN
    if input_bound_fraction >= HIGHLY_INPUT_BOUND:
        return InputBound.HIGHLY
    if input_bound_fraction >= MODERATELY_INPUT_BOUND:
        return InputBound.MODERATELY
    return InputBound.NOT


def workers_of(config: dict) -> Optional[int]:
    """Worker processes (or threads) a loader config asks for, whatever the framework."""
    for key in ("num_workers", "workers"):
        if isinstance(config.get(key), int):
            return config[key]
    return None


def wait_fraction(rec: LoaderRecord, steps: Optional[StepLog] = None) -> Optional[float]:
    """Share of the steady-state steps' wall time (of ``steps``, by default all
    of them) spent blocked on the loader (None where the framework pulls
    batches out of sight)."""
    steps = rec.steps if steps is None else steps
    wall = sum(steps.wall_s)
    return sum(steps.wait_s) / wall if wall > 0 and rec.wait_observable else None


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


def between_epochs(rec: LoaderRecord) -> Optional[float]:
    """Mean time per epoch from the loader's end of epoch to the next epoch's
    iterator: what the loop does once per epoch outside the loader (validation,
    checkpoints), which its steps never see. None: no epoch boundary seen."""
    e = rec.epochs
    n = sum(e.n_between)
    return sum(e.between_s) / n if n else None


def effective_rate(batches_per_s: Optional[float], batches_per_epoch: Optional[int],
                   startup_s: Optional[float]) -> Optional[float]:
    """Throughput with one epoch's start-up spread over the epoch's batches."""
    if batches_per_s is None or not batches_per_epoch or startup_s is None or batches_per_s <= 0:
        return batches_per_s
    # (the start-up is the time to the first batch: what it costs beyond that batch at the rate)
    return rules.charge_per_epoch(batches_per_s, batches_per_epoch, startup_s - 1 / batches_per_s)


def summarize(run: Run, n_chunks: int = stats.DEFAULT_CHUNKS) -> Summary:
    if run.ranks:
        return summarize_job(run)
    rec = training_loader(run)
    notes: List[Reason] = list(run.notes) + list(run.samples.notes)
    if rec is None:
        return Summary(notes=tuple(notes + [NoLoaderIterated()]))
    steps = window_steps(run, rec)
    measured = sum(steps.n_steps)
    rate, low, high = stats.spread(rates := stats.chunk_rates(steps, n_chunks))
    waited = wait_fraction(rec, steps)
    notes += _step_notes(rec, measured)
    first, later = epoch_startup(rec)
    teardown = epoch_teardown(rec)
    per_epoch_s = _per_epoch_cost(rec, first, later, teardown)
    workers = workers_of(rec.config)
    notes += run_hazards(run, rec, workers, rate)
    wall_s = sum(steps.wall_s)
    summary = Summary(
        loader=rec.name or rec.site or f"loader {rec.loader_id}",
        framework=rec.framework,
        batches_measured=measured,
        measured_s=sum(steps.wall_s),
        batches_per_s=rate,
        batches_per_s_low=low,
        batches_per_s_high=high,
        n_chunks=len(rates),
        effective_batches_per_s=effective_rate(rate, rec.batches_per_epoch, per_epoch_s),
        sustained_batches_per_s=effective_rate(measured / wall_s, rec.batches_per_epoch, per_epoch_s)
        if measured and wall_s > 0 else None,
        batches_per_epoch=rec.batches_per_epoch,
        per_epoch_cost_s=per_epoch_s,
        batch_size=rec.batch_size,
        samples_per_s=rate * rec.batch_size if rate is not None and rec.batch_size else None,
        data_wait_fraction=waited,
        data_wait_s=sum(steps.wait_s) if measured and rec.wait_observable else None,
        input_bound=classify(waited),
        time_to_first_batch_s=first,
        epoch_startup_s=later,
        epoch_teardown_s=teardown,
        num_workers=workers if workers is not None else (run.samples.peaks.n_workers or None),
        **_host_means(run, rec),
        notes=tuple(said_once(notes)),
    )
    return _with_pools(run, summary)


def _with_pools(run: Run, summary: Summary) -> Summary:
    """The summary, with its workers' thread pools said where together they ask for more threads
    than the cores the run may use (analyse/pools.py)."""
    cpus = (run.rank.cpus if run.rank is not None else None) or run.host.cpus_usable
    found = pools_finding(run.pools, summary, cpus) if cpus else None
    return dataclasses.replace(summary, notes=summary.notes + (found,)) if found is not None else summary


def _step_notes(rec: LoaderRecord, measured: int) -> List[Reason]:
    notes: List[Reason] = []
    if not rec.wait_observable:
        notes.append(WaitNotObservable(framework=rec.framework))
    if measured == 0:
        notes.append(OnlyWarmup(batches=rec.batches))
    elif measured < 3 * stats.MIN_STEPS_PER_CHUNK:
        notes.append(FewSteadyBatches(batches=measured))
    return notes


def _per_epoch_cost(rec: LoaderRecord, first: Optional[float], later: Optional[float],
                    teardown: Optional[float]) -> Optional[float]:
    """Start-up, teardown and the time between epochs, paid per epoch. Without a
    later epoch measured, the first epoch's start-up stands in for every
    epoch's, except with persistent workers: they start once per run."""
    cost = later if later is not None else (None if rec.config.get("persistent_workers") else first)
    for per_epoch_s in (teardown, between_epochs(rec)):
        if per_epoch_s:
            cost = (cost or 0.0) + per_epoch_s
    return cost


def other_cores(s: Samples) -> Tuple[Optional[float], ...]:
    """Per sample, cores busy outside the job: the machine's busy cores less the
    job's own (main process and workers)."""
    out = []
    for system, cores, main, workers in zip(s.system_cpu_pct, s.per_core_cpu_pct, s.main_cpu_pct,
                                            s.workers_cpu_pct):
        if system is None or main is None or not cores:
            out.append(None)
            continue
        out.append(max(0.0, system / 100 * len(cores) - (main + (workers or 0.0)) / 100))
    return tuple(out)


def host_means(run: Run) -> dict:
    """The host's and the GPUs' readings over the run's window (a run with no steps: attached)."""
    return _host_means(run, LoaderRecord(loader_id=-1, framework=run.loaders[0].framework if run.loaders else ""))


def _or_run(value: Optional[float], t_s: Sequence[float], col: Sequence[Optional[float]]) -> Optional[float]:
    return value if value is not None else stats.window_mean(t_s, col, None, None)


def _host_means(run: Run, rec: LoaderRecord) -> dict:
    """Host and GPU readings over the steady window (or the whole run if it had none)."""
    w, steps, s = run.window, rec.steps, run.samples
    t0 = w.t_start_s if w.t_start_s is not None else (steps.t_end_s[0] - steps.wall_s[0] if steps.t_end_s else None)
    t1 = w.t_end_s if w.t_end_s is not None else (steps.t_end_s[-1] if steps.t_end_s else None)
    mean = lambda col: stats.window_mean(s.t_s, col, t0, t1)  # noqa: E731
    peaks = s.peaks
    return dict(
        system_cpu_pct=mean(s.system_cpu_pct),
        main_cpu_pct=mean(s.main_cpu_pct),
        workers_cpu_pct=mean(s.workers_cpu_pct),
        workers_runq_pct=mean(s.workers_runq_pct),
        main_runq_pct=mean(s.main_runq_pct),
        # (counted less often than the other readings: a short window may hold none, then the run's)
        main_threads_runnable=_or_run(mean(s.main_threads_runnable), s.t_s, s.main_threads_runnable),
        workers_threads_runnable=_or_run(mean(s.workers_threads_runnable), s.t_s, s.workers_threads_runnable),
        other_cpu_cores=mean(other_cores(s)),
        gpu_util_pct=tuple(mean(g.util_pct) for g in s.gpus),
        peak_tree_rss_bytes=peaks.tree_rss_bytes,
        peak_tree_pss_bytes=peaks.tree_pss_bytes,
        peak_worker_pss_bytes=peaks.worker_pss_bytes,
        peak_worker_uss_bytes=peaks.worker_uss_bytes,
        peak_shm_used_bytes=peaks.shm_used_bytes,
        peak_main_fds=peaks.main_fds,
        peak_worker_fds=peaks.worker_fds,
        fd_limit=s.fd_limit,
    )


# ------------------------------------------------------ multi-process jobs

STRAGGLER_MIN_WAIT = 0.2  # a rank that waits at least this much of its time,
STRAGGLER_LEAD = 0.15  # and this much more than the other ranks' median, is named


def straggler(summaries: Sequence[Tuple[int, Summary]]) -> Optional[Straggler]:
    """The rank that waits for data much longer than the others, if one does."""
    waits = [(rank, s.data_wait_fraction) for rank, s in summaries if s.data_wait_fraction is not None]
    if len(waits) < 2:
        return None
    rank, top = max(waits, key=lambda rw: rw[1])
    others = stats.median([w for r, w in waits if r != rank])
    if top >= STRAGGLER_MIN_WAIT and top - others >= STRAGGLER_LEAD:
        return Straggler(rank=rank, wait_fraction=top, others_wait_fraction=others)
    return None


JOB_NOTES = ("queued_for_resources",)  # findings about the job itself (not one rank's), shown in its summary


def summarize_job(run: Run) -> Summary:
    """The job: as fast as its slowest rank (training is synchronous), as starved
    as its most starved one; CPU per rank (the mean), memory and GPUs of the whole job."""
    per_rank = [(r.rank.rank if r.rank else i, r.summary or summarize(r)) for i, r in enumerate(run.ranks)]
    measured = [s for _, s in per_rank if s.batches_per_s]
    # the ranks' own samplers leave the GPUs to the job's: their GPU notes are not the job's
    notes: List[Reason] = said_once(list(run.samples.notes) + [n for _, s in per_rank for n in s.notes
                                                               if not isinstance(n, GpuUnavailable)]
                                    + [n for n in run.notes if n.code in JOB_NOTES])
    if not measured:
        return Summary(notes=tuple(notes or [NoLoaderIterated()]))
    slowest = min(measured, key=lambda s: s.effective_batches_per_s or s.batches_per_s)
    lag = straggler(per_rank)
    notes += [n for n in (rank_spread(waits_of_run(run)), nodes_differ(run)) if n is not None]
    waits = [s.data_wait_fraction for s in measured if s.data_wait_fraction is not None]
    batch = sum(s.batch_size or 0 for s in measured)
    mean = lambda name: stats.mean([getattr(s, name) for s in measured])  # noqa: E731
    machine = _host_means(run, training_loader(run)) if training_loader(run) is not None else {}
    return dataclasses.replace(
        slowest, samples_per_s=slowest.batches_per_s * batch if batch else None,
        data_wait_fraction=max(waits) if waits else None, input_bound=classify(max(waits) if waits else None),
        main_cpu_pct=mean("main_cpu_pct"), workers_cpu_pct=mean("workers_cpu_pct"),
        workers_runq_pct=mean("workers_runq_pct"),
        **{k: machine[k] for k in ("system_cpu_pct", "other_cpu_cores", "gpu_util_pct", "peak_tree_rss_bytes",
                                   "peak_tree_pss_bytes", "peak_shm_used_bytes") if k in machine},
        peak_worker_pss_bytes=max((s.peak_worker_pss_bytes or 0 for s in measured), default=None) or None,
        notes=tuple(notes + ([lag] if lag else [])))
