"""The thread pools a run's processes held (record/pools.py reads them): a loader worker's numpy
BLAS, OpenMP, the training process's torch intra-op pool. Same rules as every record here: frozen,
plain data, ``None`` means "not known"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from feedprof.store.codes import PoolRole


@dataclass(frozen=True)
class ThreadPool:
    """One pool as its library reports it (threadpoolctl; torch for its own intra-op pool)."""

    api: str  # "blas" | "openmp" | "torch" (torch's intra-op pool, as torch.get_num_threads() says)
    library: str  # "openblas" | "mkl" | "blis" | "openmp" | "torch"
    threads: int
    prefix: str = ""  # the library file it came from ("libscipy_openblas", "libgomp"): which copy


@dataclass(frozen=True)
class ProcessPools:
    """The pools the processes of one role held, as the first of them read its own (every worker of a
    loader runs the same code: they hold the same pools)."""

    role: PoolRole
    processes: int  # processes of this role that read theirs
    pools: Tuple[ThreadPool, ...] = ()
    held: int = 0  # feedprof held each of their pools to this many threads for the trial (0: as written)
