"""The thread-pool and core knobs, applied in the script's processes without editing its code (the
pools themselves are read by record/pools.py; why they matter is its NOTE, Thread pools beside the
loader).

    worker_threads  N  each loader worker's pools (BLAS, OpenMP, OpenCV) held to N threads: the
                       loader's worker_init_fn is wrapped (HeldWorker), the script's own still runs after
    main_threads    N  the training process's torch intra-op pool: torch.set_num_threads(N)
    main_cores      K  the training process on K cores of its own, its workers on the rest
                       (os.sched_setaffinity, every thread of each process)

The knobs live in a config beside the loader's own (store/knobs/threads.py names them); the
adapters take them out before the loader is built (``split``).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from feedprof.record.pools import POOLS
from feedprof.store.knobs.threads import THREAD_KNOBS, cores_apart

# what a library loaded after the limit reads at its start (a pool that exists already is held by threadpoolctl)
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
              "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def split(config: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the loader's own knobs, the thread knobs) of an injected config."""
    own = {k: v for k, v in config.items() if k not in THREAD_KNOBS}
    threads = {k: v for k, v in config.items() if k in THREAD_KNOBS and v}
    return own, threads


def hold_pools(threads: int) -> None:
    """This process's thread pools held to ``threads`` each, and any that start later too."""
    for name in THREAD_ENV:
        os.environ[name] = str(threads)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        pass
    else:
        threadpool_limits(limits=threads)  # (kept for the process's life: never undone)
    cv2 = sys.modules.get("cv2")  # OpenCV's own pool (pthreads in pip's builds, not OpenMP)
    if cv2 is not None and hasattr(cv2, "setNumThreads"):
        cv2.setNumThreads(threads)
    POOLS.held = threads


def pin_process(cpus: Sequence[int]) -> None:
    """Every thread of this process on ``cpus`` (sched_setaffinity of pid 0 moves the calling thread alone)."""
    wanted = set(cpus)
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, wanted)
        except OSError:  # a thread that ended meanwhile
            continue


class HeldWorker:
    """A loader's worker_init_fn with feedprof's thread knobs applied first; the script's own runs
    after (what it sets wins, as it would in the paste). A class, so that spawned workers can pickle it."""

    def __init__(self, inner: Optional[Callable[[int], Any]], threads: int = 0, cpus: Tuple[int, ...] = ()):
        self.inner, self.threads, self.cpus = inner, threads, tuple(cpus)

    def __call__(self, worker_id: int) -> Any:
        if self.cpus:
            pin_process(self.cpus)
        if self.threads:
            hold_pools(self.threads)
        if self.inner is not None:
            return self.inner(worker_id)
        return None


def worker_init(inner: Optional[Callable[[int], Any]], threads: Dict[str, Any]) -> Optional[Callable[[int], Any]]:
    """The worker_init_fn a loader with these thread knobs is built with (the script's own where none applies)."""
    cores = _workers_cores(threads)
    held = int(threads.get("worker_threads") or 0)
    if not held and not cores:
        return inner
    if isinstance(inner, HeldWorker):  # (a loader rebuilt from one already wrapped)
        inner = inner.inner
    return HeldWorker(inner, held, cores)


def apply_to_training_process(threads: Dict[str, Any]) -> None:
    """The training process's own knobs: its torch intra-op pool, and its cores apart from the workers'."""
    n = int(threads.get("main_threads") or 0)
    torch = sys.modules.get("torch")
    if n and torch is not None:
        torch.set_num_threads(n)
    k = int(threads.get("main_cores") or 0)
    if k:
        main, _ = cores_apart(_usable(), k)
        if main:
            pin_process(main)


def _workers_cores(threads: Dict[str, Any]) -> Tuple[int, ...]:
    k = int(threads.get("main_cores") or 0)
    if not k:
        return ()
    _, workers = cores_apart(_usable(), k)
    return workers


_first_cpus: Optional[Tuple[int, ...]] = None  # the CPUs the process had before main_cores pinned it


def _usable() -> Tuple[int, ...]:
    """The CPUs the training process may run on, in order (its affinity: a job's cgroup or taskset), as
    they were before it was pinned to its own (the workers get the rest of these)."""
    global _first_cpus
    if _first_cpus is None:
        try:
            _first_cpus = tuple(sorted(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            _first_cpus = tuple(range(os.cpu_count() or 1))
    return _first_cpus
