"""Thread pools and cores: what a run's pools asked of the cores, and what holding them measured
(record/pools.py reads the pools; analyse/pools.py judges them; tune/search.py tries them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from feedprof.store.reasons.base import Config, Reason


@dataclass(frozen=True)
class PoolsOversubscribe(Reason):
    """Each of ``workers`` loader workers ran a ``library`` pool of ``pool_threads`` threads:
    ``threads`` threads that compute, on ``cpus`` cores (``held``: feedprof held them to this many
    threads in this run, 0: as the script has them). The workers' wait for a CPU and their threads
    ready to run, on average, say what it cost."""

    code: ClassVar[str] = "pools_oversubscribe"
    workers: int = 0
    library: str = ""  # threadpoolctl's internal_api: openblas, mkl, blis, openmp; torch
    api: str = ""  # blas | openmp | torch
    pool_threads: int = 0
    threads: int = 0
    cpus: int = 0
    held: int = 0
    workers_runq_pct: Optional[float] = None
    workers_threads_runnable: Optional[float] = None


@dataclass(frozen=True)
class PoolsTried(Reason):
    """The search measured ``config`` with each worker's pools held to ``threads`` threads beside
    the same config as written: ``held_batches_per_s`` against ``own_batches_per_s`` (None: that one
    failed or was not measured); ``kept``: the climb went on with the pools held."""

    code: ClassVar[str] = "pools_tried"
    config: Config = field(default_factory=dict)
    threads: int = 0
    held_batches_per_s: Optional[float] = None
    own_batches_per_s: Optional[float] = None
    kept: bool = False


@dataclass(frozen=True)
class PoolsHeldOnline(Reason):
    """The real run's loader workers had their thread pools held to ``threads`` threads for a while
    (tune --online): the samples and their order are the run's own (checked), but a BLAS library
    computes the same products in another order with fewer threads, so the batches' floating-point
    values can differ in their last bits."""

    code: ClassVar[str] = "pools_held_online"
    threads: int = 1
