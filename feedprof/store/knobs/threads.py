"""The thread-pool and core knobs feedprof sets beside a loader's own (frameworks/thread_limits.py
applies them): they are not the loader's keywords, and a paste sets them with code of their own.

    worker_threads  N   each loader worker's thread pools (BLAS, OpenMP, OpenCV) held to N threads
    main_threads    N   the training process's torch intra-op threads
    main_cores      K   the training process on K cores of its own, the workers on the rest (its
                        main_threads then K at most: a pool wider than its cores spins on them)

Absent (or 0): as the script has it. Pure: no framework is imported.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

THREAD_KNOBS = ("worker_threads", "main_threads", "main_cores")


def threads_of(config: Dict[str, Any]) -> Dict[str, int]:
    """The thread knobs a config sets (none: as the script has them)."""
    return {k: int(config[k]) for k in THREAD_KNOBS if config.get(k)}


def without_threads(config: Dict[str, Any]) -> Dict[str, Any]:
    """The loader's own keywords of a config."""
    return {k: v for k, v in config.items() if k not in THREAD_KNOBS}


def legal_threads(config: Dict[str, Any], workers: int, cpus: int) -> Dict[str, Any]:
    """``config`` with its thread knobs as they apply to ``workers`` workers on ``cpus`` cores: the
    workers' knobs gone without workers; their pools held to their share of the cores they have (the
    cores main_cores leaves them), whatever count the config asked (the share follows the workers),
    and gone where that share is the whole machine (a pool as large as the machine is no hold); the
    training process's threads no more than the cores of its own; a knob at 0 gone."""
    out = dict(config)
    for k in THREAD_KNOBS:
        if not out.get(k) or (k != "main_threads" and not workers):
            out.pop(k, None)
    if out.get("main_cores", 0) >= cpus:  # (no core would be left to the workers)
        out.pop("main_cores")
    if "main_cores" in out:  # its torch pool no wider than its cores (measured: 2 spinning threads on 1
        out["main_threads"] = min(out.get("main_threads") or cpus, out["main_cores"])  # core, 4.7 b/s against 68)
    if "worker_threads" in out:
        share = worker_share(cpus - out.get("main_cores", 0), workers)
        if share >= cpus:
            out.pop("worker_threads")
        else:
            out["worker_threads"] = share
    return out


def threads_apart(config: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """A recommendation's fields for ``config``: the loader's keywords, and the thread knobs apart."""
    return {"config": without_threads(config), "threads": threads_of(config)}


def worker_share(cpus: int, workers: int) -> int:
    """The threads each worker's pools may run so that the workers' pools together fit the cores:
    cores ÷ workers, at least one."""
    return max(1, cpus // max(1, workers))


def cores_apart(cpus: Sequence[int], main_cores: int) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(the training process's cores, the workers'): the first ``main_cores`` of ``cpus`` and the
    rest; ((), ()) where no core would be left to the workers."""
    cpus = tuple(cpus)
    if main_cores <= 0 or main_cores >= len(cpus):
        return (), ()
    return cpus[:main_cores], cpus[main_cores:]


def describe(config: Dict[str, Any]) -> str:
    """The thread knobs a config sets, as ``name=value`` ("" where none is set)."""
    return ", ".join(f"{k}={v}" for k, v in threads_of(config).items())
