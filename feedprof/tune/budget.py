"""Memory budget: reject a config predicted not to fit before it runs.

The model is learned from the trials so far: the main process's footprint,
the largest worker's PSS (the honest per-worker figure: RSS counts shared
pages in every worker), and /dev/shm per batch in flight (workers hand
batches over through shared memory; the space says how many batches a config
keeps in flight, e.g. ``num_workers × prefetch_factor`` for PyTorch). Until a trial with workers has run there is
nothing to predict from, and nothing is rejected.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import psutil

from feedprof.reasons import OverMemoryBudget, OverShmBudget, Reason
from feedprof.record.host import shm_total_bytes, shm_used_bytes
from feedprof.store import Trial, TrialState

HEADROOM = 0.8  # never plan to use more than this share of what is free
SAFETY = 1.3  # predictions are scaled up by this much


@dataclass
class MemoryBudget:
    ram_bytes: Optional[int]
    shm_bytes: Optional[int]
    main_bytes: Optional[int] = None  # one training process (one rank)
    per_worker_bytes: Optional[int] = None
    shm_per_batch_bytes: Optional[int] = None
    ranks: int = 1  # training processes on this machine, each with its own workers (a multi-process job)

    @classmethod
    def of_this_machine(cls) -> "MemoryBudget":
        total, used = shm_total_bytes(), shm_used_bytes()
        shm = None if total is None else int(HEADROOM * (total - (used or 0)))
        return cls(ram_bytes=int(HEADROOM * psutil.virtual_memory().available), shm_bytes=shm)

    def learn(self, trial: Trial, workers: int, in_flight: int) -> None:
        run = trial.run
        if trial.state != TrialState.OK or run is None:
            return
        for rank_run in run.ranks or (run,):  # a job: what one rank and its workers take
            self._learn_ram(rank_run.samples.peaks, workers)
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

    def predict(self, workers: int, in_flight: int) -> Dict[str, Optional[int]]:
        ram = None
        if self.per_worker_bytes is not None:
            ram = int(SAFETY * self.ranks * ((self.main_bytes or 0) + workers * self.per_worker_bytes))
        shm = None
        if self.shm_per_batch_bytes is not None:
            shm = int(SAFETY * self.ranks * max(1, in_flight) * self.shm_per_batch_bytes)
        return {"ram_bytes": ram, "shm_bytes": shm}

    def check(self, workers: int, in_flight: int) -> Optional[Reason]:
        """Why this config would not fit, or None."""
        p = self.predict(workers, in_flight)
        if p["ram_bytes"] is not None and self.ram_bytes is not None and p["ram_bytes"] > self.ram_bytes:
            return OverMemoryBudget(need_bytes=p["ram_bytes"], per_worker_bytes=self.per_worker_bytes,
                                    free_bytes=self.ram_bytes)
        if p["shm_bytes"] is not None and self.shm_bytes is not None and p["shm_bytes"] > self.shm_bytes:
            return OverShmBudget(need_bytes=p["shm_bytes"], free_bytes=self.shm_bytes)
        return None
