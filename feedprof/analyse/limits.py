"""How many workers are safe, from the trials so far (pure functions).

NOTE [ Worker limits ]

    trials ─► duplication_in: an IterableDataset whose records repeat once per
              worker (a run's first batches: analyse/hazards.py; or an epoch
              that held more batches with more workers)   ─► at most 1 worker
           ─► a trial killed by a signal (SIGKILL: RAM, SIGBUS: /dev/shm)
              at N workers; one that timed out, failed of a worker hazard
              (too many open files, CUDA in a forked worker) or was rejected
              as over budget, where no trial with as many ran well
              (rules.caps_workers, the online search's rule too)
                                                          ─► at most N - 1
           ─► worker_cap: the tightest of these, as a WorkersCapped finding
           ─► usable(trials, cap): the trials a recommendation may pick from

The strategy asks before every proposal (a function of the history, so a
resumed tune learns the same limits), and recommend() picks only among
usable trials: a config that duplicates data is never called a speedup.
growth_need projects copy-on-read growth to the end of an epoch, for the
memory budget (tune/budget.py) and the recommendation's words.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, List, Optional, Sequence, Tuple

from feedprof.analyse import rules
from feedprof.analyse.diagnose import training_loader, workers_of
from feedprof.analyse.evidence import config_key
from feedprof.analyse.hazards import (complete_epoch_batches, duplicated, fds_near_limit, longest_epoch_batches,
                                      memory_growth, worker_uss_series)
from feedprof.store.reasons import (CudaInForkedWorker, DuplicatedPerWorker, MemoryGrows, MemoryGrowthProjected, RankFailed,
                              Reason, TooManyOpenFiles, WorkerInfoNeverAsked, WorkersCapped)
from feedprof.store import LoaderRecord, Role, Trial, TrialState

WorkersOf = Callable[[dict], Optional[int]]
EPOCH_GROWTH = 1.5  # an epoch this many times longer with more workers repeats records
WORKER_HAZARDS = (TooManyOpenFiles, CudaInForkedWorker)  # failures that more workers cause


def _loader(trial: Trial) -> Optional[LoaderRecord]:
    return training_loader(trial.run) if trial.run is not None else None


def _workers(trial: Trial, workers_of: WorkersOf) -> int:
    return workers_of(trial.config) or 0


# ------------------------------------------------------ duplicated records


def duplication_in(trials: Sequence[Trial], workers_of: WorkersOf) -> Optional[Tuple[Trial, DuplicatedPerWorker]]:
    """The first trial whose workers repeat the records, and the evidence."""
    singles = [r for t in trials if t.role != Role.CEILING and _workers(t, workers_of) <= 1
               and (r := _loader(t)) is not None and r.iterable]
    single_epoch = next((e for r in singles if (e := complete_epoch_batches(r))), None)
    for t in sorted(trials, key=lambda t: t.index):
        n, rec = _workers(t, workers_of), _loader(t)
        if t.role == Role.CEILING or n < 2 or rec is None or not rec.iterable:
            continue
        found = duplicated(rec, n)
        # records are split between workers: an epoch holds what one process's does, and at
        # most a partial batch more per worker (random augmentation cannot hide this one)
        epoch = longest_epoch_batches(rec)
        grew = bool(single_epoch and epoch and epoch > max(EPOCH_GROWTH * single_epoch, single_epoch + n))
        if found is None and not grew:
            continue
        found = found or DuplicatedPerWorker(dataset=rec.dataset, workers=n, worker_info_asked=rec.worker_info_asked)
        if grew:
            found = dataclasses.replace(found, epoch_batches=epoch, single_epoch_batches=single_epoch)
        return t, found
    return None


def repeats_records(trial: Trial) -> bool:
    """Does this trial's own record show its workers repeating the data? (For
    tables: the cross-trial evidence is duplication_in's.)"""
    rec = _loader(trial)
    return rec is not None and duplicated(rec, workers_of(rec.config) or 0) is not None


# -------------------------------------------------------------- the cap


def worker_cap(trials: Sequence[Trial], workers_of: WorkersOf) -> Optional[WorkersCapped]:
    """The most workers that are safe to recommend and to try, and why (None: no limit found)."""
    caps: List[WorkersCapped] = []
    dup = duplication_in(trials, workers_of)
    if dup is not None:
        caps.append(WorkersCapped(max_workers=1, config=dict(dup[0].config), state=dup[0].state.value,
                                  because=dup[1]))
    # A kill caps the worker count whatever ran before it. A prediction, a
    # failure or a timeout (workers too many to start within the trial's time:
    # spawn and forkserver pay an interpreter each) where as many workers ran
    # well with other settings (a deeper prefetch past the open-file limit)
    # rules out that config alone.
    ran = max((_workers(t, workers_of) for t in trials if t.state == TrialState.OK and t.role != Role.CEILING),
              default=-1)
    for t in trials:
        n, kind = _workers(t, workers_of), failure_kind(t)
        if t.role != Role.CEILING and n >= 1 and kind is not None and rules.caps_workers(kind, n, ran):
            caps.append(WorkersCapped(max_workers=n - 1, config=dict(t.config), state=t.state.value, because=t.cause))
    return min(caps, key=lambda c: c.max_workers, default=None)


def failure_kind(trial: Trial) -> Optional[str]:
    """How a trial failed, as rules.FAILURE_KINDS names it (None: it did not)."""
    if trial.state == TrialState.KILLED:
        return "killed"
    if trial.state == TrialState.TIMEOUT:
        return "hung"
    if trial.state == TrialState.REJECTED:  # (predicted over the budget: it never ran)
        return "rejected"
    if trial.state == TrialState.FAILED:
        return "worker_hazard" if _bad(trial) else "error"
    return None


LOST_CONNECTION = ("Connection reset by peer", "Connection closed by peer", "ConnectionResetError")


def connection_lost(trial: Trial) -> Optional[Tuple[int, str]]:
    """(the rank, its error) where a job's trial failed as a connection between its ranks was reset
    (gloo's "Connection reset by peer", a store's): the infrastructure's, not the config's."""
    if trial.state != TrialState.FAILED or not isinstance(trial.cause, RankFailed):
        return None
    error = getattr(trial.cause.cause, "error", "") or ""
    hit = next((line for line in error.splitlines() if any(p in line for p in LOST_CONNECTION)), None)
    return (trial.cause.rank, hit.strip()) if hit is not None else None


def _bad(trial: Trial) -> bool:
    """Killed, or failed of something more workers cause (a job: its first failed rank's cause)."""
    cause = trial.cause.cause if isinstance(trial.cause, RankFailed) else trial.cause
    return trial.state == TrialState.KILLED or (trial.state == TrialState.FAILED and isinstance(cause, WORKER_HAZARDS))


def usable(trials: Sequence[Trial], cap: Optional[WorkersCapped], workers_of: WorkersOf,
           history: Optional[Sequence[Trial]] = None) -> List[Trial]:
    """The trials a recommendation may pick: within the cap, and of configs
    that never died (one that ran once and was killed once is not safe) nor
    were rejected later (the memory budget learned they no longer fit), in
    ``history`` (default: ``trials``)."""
    unsafe = {config_key(t.config) for t in (trials if history is None else history)
              if t.role != Role.CEILING and (_bad(t) or t.state == TrialState.REJECTED)}
    return [t for t in trials if (cap is None or _workers(t, workers_of) <= cap.max_workers)
            and config_key(t.config) not in unsafe]


def survivable(baseline: Trial) -> bool:
    """The script's own workers were killed (RAM, /dev/shm) or ran out of open
    files, in a loader that was found: the tune goes on with fewer workers
    (capped here) instead of ending with the baseline."""
    rec = _loader(baseline)
    hazard = baseline.state == TrialState.KILLED or (
        baseline.state == TrialState.FAILED and isinstance(baseline.cause, TooManyOpenFiles))
    return hazard and rec is not None and (workers_of(rec.config) or 0) > 0


# ---------------------------------------------------------- memory growth


def growth_in(trials: Sequence[Trial], workers_of: WorkersOf) -> Optional[Tuple[Trial, MemoryGrows]]:
    """Workers' memory growth over every measured trial with workers (short
    windows hold few readings each: they are pooled), and the trial with the
    most readings, to project from."""
    measured = [t for t in trials if t.state == TrialState.OK and t.run is not None and t.role != Role.CEILING
                and _workers(t, workers_of) > 0]
    grows = memory_growth([(t.run, _workers(t, workers_of), t.batches_per_s) for t in measured])
    if grows is None or not grows.growth_per_batch_bytes:
        return None
    return max(measured, key=lambda t: sum(map(len, worker_uss_series(t.run)))), grows


def growth_need(main_bytes: int, worker_bytes: int, growth_per_batch: float, epoch_batches: int, workers: int,
                full_copy_bytes: Optional[int]) -> Tuple[int, int]:
    """(the job's memory, one worker's) at the end of an epoch with ``workers``:
    each worker makes 1/workers of the epoch's batches, and copies at most
    the memory it shares with the main process (``full_copy_bytes``)."""
    grown = growth_per_batch * epoch_batches / max(1, workers)
    if full_copy_bytes:
        grown = min(grown, full_copy_bytes)
    per_worker = int(worker_bytes + grown)
    return main_bytes + workers * per_worker, per_worker


def footprint(trials: Sequence[Trial], workers_of: WorkersOf) -> Tuple[Optional[int], Optional[int]]:
    """(the main process's memory, one worker's), as the memory budget learns
    them (tune/budget.py): the peak PSS of a run without workers, the largest
    worker's peak PSS."""
    ok = [t for t in trials if t.state == TrialState.OK and t.run is not None and t.role != Role.CEILING]
    main = max((p.tree_pss_bytes or p.tree_rss_bytes or 0 for t in ok if _workers(t, workers_of) == 0
                for p in (t.run.samples.peaks,)), default=None)
    worker = max((t.run.samples.peaks.worker_pss_bytes or 0 for t in ok if _workers(t, workers_of) > 0), default=None)
    return main or None, worker or None


def growth_projection(trial: Trial, growth: MemoryGrows, workers: int, budget_bytes: Optional[int],
                      persistent: bool, main_bytes: Optional[int] = None,
                      worker_bytes: Optional[int] = None) -> MemoryGrowthProjected:
    """The growth measured (pooled over trials; ``trial`` the one with most
    readings), projected to the end of an epoch and to ``workers``, on the
    figures the memory budget plans with (``footprint``)."""
    run = trial.run
    rec = _loader(trial)
    peaks = run.samples.peaks
    full_copy = max((b for b in run.samples.main_rss_bytes if b is not None), default=None)
    bpe = rec.batches_per_epoch if rec is not None else None
    out = MemoryGrowthProjected(workers=workers, growth_bytes_per_s=growth.growth_bytes_per_s,
                                worker_now_bytes=growth.uss_end_bytes, full_copy_bytes=full_copy,
                                budget_bytes=budget_bytes, persistent=persistent)
    if not bpe or not growth.growth_per_batch_bytes:
        return out
    worker = worker_bytes or peaks.worker_pss_bytes or growth.uss_end_bytes
    main = main_bytes if main_bytes is not None else max(0, (peaks.tree_pss_bytes or 0) - growth.workers * worker)
    total, per_worker = growth_need(main, worker, growth.growth_per_batch_bytes, bpe, workers, full_copy)
    return dataclasses.replace(out, worker_epoch_end_bytes=per_worker, total_epoch_end_bytes=total,
                               epoch_s=bpe / trial.batches_per_s if trial.batches_per_s else None)


# -------------------------------------------------- what to warn about


def hazard_reasons(trials: Sequence[Trial], chosen: Trial, config: dict, space: Any,
                   ram_budget_bytes: Optional[int]) -> List[Reason]:
    """What the recommended config still risks: its workers' memory growing
    (projected to the end of an epoch at its worker count), open files near
    the limit, an IterableDataset that never asked which worker it is in."""
    out: List[Reason] = []
    n = space.workers(config)
    grown = growth_in(trials, space.workers)
    if grown is not None and n >= 1:
        out.append(growth_projection(grown[0], grown[1], n, ram_budget_bytes, bool(config.get("persistent_workers")),
                                     *footprint(trials, space.workers)))
    if chosen.run is None:
        return out
    near = fds_near_limit(chosen.run, n)
    if near is not None:
        out.append(near)
    rec = _loader(chosen)
    if rec is not None and rec.iterable and n >= 2 and rec.worker_info_asked is False \
            and duplication_in(trials, space.workers) is None:
        out.append(WorkerInfoNeverAsked(dataset=rec.dataset, workers=n))
    return out
