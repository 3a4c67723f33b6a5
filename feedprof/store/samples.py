"""Inert records of what the sampler read over a run: CPU, memory, open files
and GPU series, one row per sample, and their exact peaks. Same rules as
every record here: frozen, plain data, ``None`` means "not
measured", units in names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

from feedprof.store.reasons import Reason


@dataclass(frozen=True)
class GpuSeries:
    cuda_index: Optional[int]
    uuid: str
    util_pct: Tuple[Optional[float], ...] = ()
    mem_used_bytes: Tuple[Optional[int], ...] = ()
    sm_clock_mhz: Tuple[Optional[int], ...] = ()
    pcie_rx_bytes_per_s: Tuple[Optional[int], ...] = ()
    pcie_tx_bytes_per_s: Tuple[Optional[int], ...] = ()
    power_w: Tuple[Optional[float], ...] = ()


@dataclass(frozen=True)
class Peaks:
    """Exact maxima over every sample taken, decimated or not."""

    tree_rss_bytes: Optional[int] = None
    tree_pss_bytes: Optional[int] = None
    tree_uss_bytes: Optional[int] = None
    worker_pss_bytes: Optional[int] = None  # the largest single worker
    worker_uss_bytes: Optional[int] = None
    shm_used_bytes: Optional[int] = None
    n_workers: int = 0
    gpu_mem_used_bytes: Tuple[Optional[int], ...] = ()
    main_fds: Optional[int] = None  # open files of the main process
    worker_fds: Optional[int] = None  # of the busiest worker


@dataclass(frozen=True)
class Samples:
    """Columnar series from the sampler; row ``i`` of every column is one sample."""

    interval_s: float = 0.2
    stride: int = 1  # each stored row stands for `stride` samples taken (see record/buffer.py)
    n_taken: int = 0
    t_s: Tuple[float, ...] = ()
    system_cpu_pct: Tuple[Optional[float], ...] = ()
    per_core_cpu_pct: Tuple[Tuple[float, ...], ...] = ()
    main_cpu_pct: Tuple[Optional[float], ...] = ()
    workers_cpu_pct: Tuple[Optional[float], ...] = ()
    main_runq_pct: Tuple[Optional[float], ...] = ()  # runnable but waiting for a CPU: starved by other work
    workers_runq_pct: Tuple[Optional[float], ...] = ()
    main_rss_bytes: Tuple[Optional[int], ...] = ()
    workers_rss_bytes: Tuple[Optional[int], ...] = ()
    n_workers: Tuple[int, ...] = ()
    shm_used_bytes: Tuple[Optional[int], ...] = ()
    tree_pss_bytes: Tuple[Optional[int], ...] = ()  # measured at a slower rate: None between
    tree_uss_bytes: Tuple[Optional[int], ...] = ()
    # One loader worker's memory (``worker_pid``), read more often than the whole
    # tree's so that growth shows within a trial (record/workers.py): None between.
    worker_uss_bytes: Tuple[Optional[int], ...] = ()
    worker_pss_bytes: Tuple[Optional[int], ...] = ()
    worker_pid: Tuple[Optional[int], ...] = ()
    main_fds: Tuple[Optional[int], ...] = ()  # open files, on the same schedule as worker_uss_bytes
    worker_fds_max: Tuple[Optional[int], ...] = ()  # of the busiest worker
    fd_limit: Optional[int] = None  # the script's soft RLIMIT_NOFILE (every worker inherits it)
    # threads ready to run (running, or waiting for a CPU): the training process's, and its workers' together;
    # counted every quarter second (None between)
    main_threads_runnable: Tuple[Optional[int], ...] = ()
    workers_threads_runnable: Tuple[Optional[int], ...] = ()
    gpus: Tuple[GpuSeries, ...] = ()
    peaks: Peaks = field(default_factory=Peaks)
    notes: Tuple[Reason, ...] = ()
