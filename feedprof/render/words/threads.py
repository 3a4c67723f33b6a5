"""Thread pools and cores in words (store/reasons/threads.py)."""
from __future__ import annotations

from typing import Any, Callable, Dict

from feedprof.store import Run, reasons as r
from feedprof.store.codes import PoolRole
from feedprof.store.knobs.threads import without_threads
from feedprof.units import fmt_pct, fmt_rate

LIBRARY = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS", "openmp": "OpenMP", "torch": "torch intra-op"}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _oversubscribe(x: r.PoolsOversubscribe, d: Callable) -> str:
    lib = LIBRARY.get(x.library, x.library or x.api)
    held = f" (held to {_plural(x.held, 'thread')} each by feedprof in this run)" if x.held else ""
    cost = []
    if x.workers_threads_runnable is not None:
        cost.append(f"{x.workers_threads_runnable:.1f} of their threads ready to run at a time")
    if x.workers_runq_pct is not None:
        cost.append(f"the workers waited for a CPU {fmt_pct(x.workers_runq_pct / 100)} of a core")
    measured = f"; measured: {', '.join(cost)}" if cost else ""
    return (f"Each of the {x.workers} workers runs an {lib} pool of {_plural(x.pool_threads, 'thread')}{held}: "
            f"{x.threads} computing threads on {_plural(x.cpus, 'core')}, spinning against each other{measured}. "
            "Hold each worker's pools to one thread (threadpoolctl.threadpool_limits(1) in a worker_init_fn, "
            "or OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 where the training process computes "
            "on a GPU); `feedprof tune` measures it.")


def _tried(x: r.PoolsTried, d: Callable) -> str:
    own = f" against {fmt_rate(x.own_batches_per_s)} as written" if x.own_batches_per_s is not None else ""
    went = "the climb went on with them held" if x.kept else "no gain: the climb went on with the pools as written"
    return (f"Thread pools: {d(without_threads(x.config))} with each worker's pools held to {_plural(x.threads, 'thread')} "
            f"measured {fmt_rate(x.held_batches_per_s)}{own}; {went}.")


def _held_online(x: r.PoolsHeldOnline, d: Callable) -> str:
    return (f"The workers' thread pools were held to {_plural(x.threads, 'thread')} each for part of the run: the "
            "samples and their order are the run's own (checked), but a BLAS library computes the same matrix "
            "products in another order with fewer threads, so the batches' floating-point values can differ in "
            "their last bits (measured with OpenBLAS: up to 5e-7 of the values), as they would on another machine.")


def words() -> Dict[type, Callable[[Any, Callable], str]]:
    return {r.PoolsOversubscribe: _oversubscribe, r.PoolsTried: _tried, r.PoolsHeldOnline: _held_online}


def pools_line(run: Run) -> str:
    """The run's thread pools, by role, and its threads ready to run ("" where none was read)."""
    parts = []
    for p in run.pools:
        who = "training process" if p.role == PoolRole.TRAINING else \
            f"each worker ({p.processes} read)" if p.processes > 1 else "a worker"
        pools = ", ".join(f"{LIBRARY.get(x.library, x.library)} {x.threads}" for x in p.pools) or "none found"
        held = f" (held to {p.held} by feedprof)" if p.held else ""
        parts.append(f"{who}: {pools}{held}")
    s = run.summary
    ready = [f"{v:.1f} {who}" for v, who in ((s.main_threads_runnable, "training"),
                                            (s.workers_threads_runnable, "workers"))
             if s is not None and v is not None]
    if ready:
        parts.append(f"threads ready to run: {', '.join(ready)}, on {_plural(run.host.cpus_usable, 'core')}"
                     if run.host.cpus_usable else f"threads ready to run: {', '.join(ready)}")
    return "; ".join(parts)
