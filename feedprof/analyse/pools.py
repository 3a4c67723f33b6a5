"""Thread pools against the cores (record/pools.py reads them; its NOTE says why they matter): whether
a loader's workers, each running its own pools, ask for more threads than the job has cores. Pure."""
from __future__ import annotations

from typing import Optional, Sequence

from feedprof.store import Summary
from feedprof.store.codes import PoolRole
from feedprof.store.pools import ProcessPools, ThreadPool
from feedprof.store.reasons import PoolsOversubscribe


def pools_of(pools: Sequence[ProcessPools], role: PoolRole) -> Optional[ProcessPools]:
    return next((p for p in pools if p.role == role), None)


def widest(pools: Sequence[ThreadPool]) -> Optional[ThreadPool]:
    """The pool with the most threads (None: none was read)."""
    return max(pools, key=lambda p: p.threads, default=None)


def worker_pool_threads(pools: Sequence[ProcessPools]) -> Optional[int]:
    """The most threads one pool of a loader worker ran (torch holds its own to one in its workers:
    a wider pool is a library's that nothing held); None where no worker read its pools."""
    workers = pools_of(pools, PoolRole.WORKER)
    top = widest(workers.pools) if workers is not None else None
    return top.threads if top is not None else None


COMPUTING_SHARE = 0.2  # workers busy this share of the cores they can use: their pools may compute (idle: 0.03 cores)


def oversubscribes(workers: int, pool_threads: Optional[int], cpus: int,
                   workers_busy: Optional[float] = None) -> bool:
    """Do ``workers`` workers, each running a pool of ``pool_threads``, ask for more threads than
    ``cpus`` cores, and do they compute (``workers_busy``: their threads ready to run, or their CPU in
    cores, at least COMPUTING_SHARE of the cores they can use; unknown: taken to)? One thread a
    worker is what the workers alone need; pools in workers that wait on storage cost nothing
    (measured: a sleep-bound loader's 2 workers, each with an OpenBLAS pool of 2, used 0.03 cores)."""
    computing = workers_busy is None or workers_busy >= COMPUTING_SHARE * min(workers, max(1, cpus))
    return bool(workers) and bool(pool_threads) and pool_threads > 1 and workers * pool_threads > max(1, cpus) \
        and computing


def pools_finding(pools: Sequence[ProcessPools], summary: Summary, cpus: int) -> Optional[PoolsOversubscribe]:
    """A run's workers' pools, where together they ask for more threads than the cores."""
    workers = pools_of(pools, PoolRole.WORKER)
    n = summary.num_workers
    top = widest(workers.pools) if workers is not None else None
    # (threads ready to run where counted: a machine busy beside the job leaves them their demand, not their CPU)
    busy = summary.workers_threads_runnable if summary.workers_threads_runnable is not None else \
        summary.workers_cpu_pct / 100 if summary.workers_cpu_pct is not None else None
    if workers is None or top is None or not n or not oversubscribes(n, top.threads, cpus, busy):
        return None
    return PoolsOversubscribe(workers=n, library=top.library, api=top.api, pool_threads=top.threads,
                              threads=n * top.threads, cpus=cpus, held=workers.held,
                              workers_runq_pct=summary.workers_runq_pct,
                              workers_threads_runnable=summary.workers_threads_runnable)
