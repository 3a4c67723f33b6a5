"""Memory and open-file budget: reject a config predicted not to fit before it runs.

The model is learned from the trials so far: the main process's footprint,
the largest worker's PSS (the honest per-worker figure: RSS counts shared
pages in every worker), and /dev/shm per batch in flight (workers hand
batches over through shared memory; the space says how many batches a config
keeps in flight, e.g. ``num_workers × prefetch_factor`` for PyTorch). Until a trial with workers has run there is
nothing to predict from, and nothing is rejected.

Two things a short trial does not reach are projected from it:

- copy-on-read growth (analyse/hazards.memory_growth): each worker's
  private memory grows per batch it makes; at the end of an epoch the job
  holds ``main + workers × (worker + growth)`` (analyse/limits.growth_need);
- open files: the main process holds descriptors per worker (pipes) and per
  batch in flight (one per tensor under PyTorch's file_descriptor sharing),
  and each worker inherits those of the workers started before it: lines
  fitted over the trials (main: against workers + batches in flight; a
  worker: against workers), against RLIMIT_NOFILE.

RAM is what is free, or the container's memory limit if lower (the OOM
killer acts there), or what ``--max-memory`` allows.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import psutil

from feedprof.analyse.diagnose import training_loader
from feedprof.analyse.hazards import GrowthRun, memory_growth
from feedprof.analyse.limits import growth_need
from feedprof.store.reasons import (GrowthOverMemoryBudget, OutOfMemoryKilled, OverFdLimit, OverMemoryBudget, OverShmBudget,
                              Reason, SharedMemoryExhausted, TooManyOpenFiles)
from feedprof.record.host import memory_limit_bytes, shm_total_bytes, shm_used_bytes
from feedprof.store import Run, Trial, TrialState

HEADROOM = 0.8  # never plan to use more than this share of what is free
SAFETY = 1.3  # predictions are scaled up by this much
FD_HEADROOM = 0.8  # never plan past this share of RLIMIT_NOFILE (samples miss the peaks of batches in flight)


@dataclass
class MemoryBudget:
    ram_bytes: Optional[int]
    shm_bytes: Optional[int]
    main_bytes: Optional[int] = None  # one training process (one rank)
    per_worker_bytes: Optional[int] = None
    shm_per_batch_bytes: Optional[int] = None
    ranks: int = 1  # training processes on this machine, each with its own workers (a multi-process job)
    growth_per_batch_bytes: Optional[float] = None  # a worker's private memory, per batch it makes
    epoch_batches: Optional[int] = None
    full_copy_bytes: Optional[int] = None  # the most a worker can copy: the main process's memory
    fd_limit: Optional[int] = None
    # per trial: (workers + batches in flight, main's open files), (workers, the busiest worker's)
    main_fds: List[Tuple[int, Optional[int]]] = field(default_factory=list)
    worker_fds: List[Tuple[int, Optional[int]]] = field(default_factory=list)
    _grown: List[GrowthRun] = field(default_factory=list, repr=False)  # the runs with workers so far

    @classmethod
    def of_this_machine(cls, max_ram_bytes: Optional[int] = None) -> "MemoryBudget":
        total, used = shm_total_bytes(), shm_used_bytes()
        shm = None if total is None else int(HEADROOM * (total - (used or 0)))
        free = psutil.virtual_memory().available
        limit = memory_limit_bytes()
        ram = int(HEADROOM * min(free, limit if limit is not None else free))
        return cls(ram_bytes=max_ram_bytes if max_ram_bytes is not None else ram, shm_bytes=shm)

    def learn(self, trial: Trial, workers: int, in_flight: int) -> None:
        run = trial.run
        if trial.state != TrialState.OK or run is None:
            return
        for rank_run in run.ranks or (run,):  # a job: what one rank and its workers take
            self._learn_ram(rank_run.samples.peaks, workers)
            self._learn_fds(rank_run, workers, in_flight)
            if workers > 0:
                self._learn_growth(rank_run, workers, trial.batches_per_s)
        if workers > 0:  # /dev/shm is the machine's: every rank's batches in flight share it
            self._learn_shm(run.samples, in_flight * max(1, len(run.ranks)))

    def _learn_ram(self, peaks: Any, workers: int) -> None:
        tree = peaks.tree_pss_bytes or peaks.tree_rss_bytes
        if workers == 0 and tree:
            self.main_bytes = max(self.main_bytes or 0, tree)
        if workers > 0:
            worker = peaks.worker_pss_bytes or peaks.worker_uss_bytes
            if worker:
                self.per_worker_bytes = max(self.per_worker_bytes or 0, worker)
            if tree and worker and self.main_bytes is None:
                self.main_bytes = max(0, tree - workers * worker)

    def _learn_shm(self, samples: Any, in_flight: int) -> None:
        shm = [b for b in samples.shm_used_bytes if b is not None]
        if shm and samples.peaks.shm_used_bytes is not None:
            per_batch = max(0, samples.peaks.shm_used_bytes - shm[0]) // max(1, in_flight)
            self.shm_per_batch_bytes = max(self.shm_per_batch_bytes or 0, per_batch)

    def _learn_fds(self, run: Run, workers: int, in_flight: int) -> None:
        self.fd_limit = run.samples.fd_limit or self.fd_limit
        self.main_fds.append((workers + in_flight, run.samples.peaks.main_fds))
        if workers:
            self.worker_fds.append((workers, run.samples.peaks.worker_fds))

    def _learn_growth(self, run: Run, workers: int, batches_per_s: Optional[float]) -> None:
        self._grown.append((run, workers, batches_per_s))
        grows = memory_growth(self._grown)  # pooled: a short window holds two or three readings
        rec = training_loader(run)
        if grows is None or not grows.growth_per_batch_bytes or rec is None or not rec.batches_per_epoch:
            return
        self.growth_per_batch_bytes = grows.growth_per_batch_bytes
        self.epoch_batches = rec.batches_per_epoch
        main_rss = [b for b in run.samples.main_rss_bytes if b is not None]
        self.full_copy_bytes = max(main_rss) if main_rss else self.full_copy_bytes

    def predict(self, workers: int, in_flight: int) -> Dict[str, Optional[int]]:
        ram = grown = grown_worker = None
        if self.per_worker_bytes is not None:
            ram = int(SAFETY * self.ranks * ((self.main_bytes or 0) + workers * self.per_worker_bytes))
            if self.growth_per_batch_bytes and self.epoch_batches and workers:
                total, grown_worker = growth_need(self.main_bytes or 0, self.per_worker_bytes,
                                                  self.growth_per_batch_bytes, self.epoch_batches, workers,
                                                  self.full_copy_bytes)
                grown = int(SAFETY * self.ranks * total)
        shm = None
        if self.shm_per_batch_bytes is not None:
            shm = int(SAFETY * self.ranks * max(1, in_flight) * self.shm_per_batch_bytes)
        main_fds, worker_fds = _fit(self.main_fds, workers + in_flight), _fit(self.worker_fds, workers)
        return {"ram_bytes": ram, "grown_bytes": grown, "grown_worker_bytes": grown_worker, "shm_bytes": shm,
                "main_fds": main_fds, "worker_fds": worker_fds}

    def check(self, workers: int, in_flight: int) -> Optional[Reason]:
        """Why this config would not fit, or None."""
        p = self.predict(workers, in_flight)
        if p["ram_bytes"] is not None and self.ram_bytes is not None and p["ram_bytes"] > self.ram_bytes:
            return OverMemoryBudget(need_bytes=p["ram_bytes"], per_worker_bytes=self.per_worker_bytes,
                                    free_bytes=self.ram_bytes)
        if p["grown_bytes"] is not None and self.ram_bytes is not None and p["grown_bytes"] > self.ram_bytes:
            return GrowthOverMemoryBudget(need_bytes=p["grown_bytes"], per_worker_bytes=p["grown_worker_bytes"],
                                          growth_per_batch_bytes=self.growth_per_batch_bytes,
                                          epoch_batches=self.epoch_batches, free_bytes=self.ram_bytes)
        if p["shm_bytes"] is not None and self.shm_bytes is not None and p["shm_bytes"] > self.shm_bytes:
            return OverShmBudget(need_bytes=p["shm_bytes"], free_bytes=self.shm_bytes)
        for process in ("main", "worker"):
            need = p[f"{process}_fds"]
            if need is not None and self.fd_limit and need > FD_HEADROOM * self.fd_limit:
                return OverFdLimit(need_fds=need, limit_fds=self.fd_limit, process=process)
        return None

    def explain(self, cause: Optional[Reason], workers: int, in_flight: int) -> Optional[Reason]:
        """A kill's cause with the config's worker count (the samples may have
        missed workers that died at once) and what the model knows it needed."""
        if isinstance(cause, SharedMemoryExhausted):
            need = max(1, in_flight) * self.shm_per_batch_bytes if self.shm_per_batch_bytes else cause.need_bytes
            return dataclasses.replace(cause, workers=workers, need_bytes=need)
        if isinstance(cause, OutOfMemoryKilled):
            return dataclasses.replace(cause, workers=workers,
                                       worker_pss_bytes=cause.worker_pss_bytes or self.per_worker_bytes)
        if isinstance(cause, TooManyOpenFiles):
            return dataclasses.replace(cause, workers=workers, limit_fds=cause.limit_fds or self.fd_limit)
        return cause


def _fit(points: List[Tuple[int, Optional[int]]], x: int) -> Optional[int]:
    """A line through (workers, open files) of the trials, at ``x`` workers
    (None until two worker counts were measured)."""
    pts = [(w, f) for w, f in points if f is not None]
    if len({w for w, _ in pts}) < 2:
        return None
    n = len(pts)
    mw, mf = sum(w for w, _ in pts) / n, sum(f for _, f in pts) / n
    slope = sum((w - mw) * (f - mf) for w, f in pts) / sum((w - mw) ** 2 for w, _ in pts)
    return int(round(mf + max(0.0, slope) * (x - mw)))
