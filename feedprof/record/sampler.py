"""Background sampler: host and GPU readings on a fixed, non-drifting schedule.

NOTE [ Sampler data flow ]

    thread ─ tick k at origin + k·interval ─► ProcessTreeProbe.read ─┐
                                              GpuProbe.read ─────────┼─► row ─► DecimatingBuffer
                                                                     └─► exact peaks
    stop()/snapshot() ─► store.Samples (columnar, inert)

Ticks are computed from the start time, not by sleeping ``interval`` after
each sample, so the schedule does not drift; a tick missed because a sample
ran long is skipped, never made up in a burst. The sampler may observe its
own process (``feedprof.profile()``) or another one (a trial child, observed
from the parent so the training loop pays nothing for it).

Rows live in a DecimatingBuffer (default 4096 rows: 13 min at 5 Hz before the
first halving, a day in 4096 rows at ~21 s apart). Peaks are kept exactly on
every sample, so thinning never hides a memory spike.

The sampler never raises into the training loop: a probe that fails is
recorded once in ``notes`` and its fields read None from then on.
"""
from __future__ import annotations

import math
import os
import threading
from typing import Any, List, Optional, Tuple

from feedprof import defaults
from feedprof.record.buffer import DecimatingBuffer
from feedprof.record.clock import MONOTONIC, Clock
from feedprof.record.gpu import NVML_SAMPLE_FLOOR_S, NullGpu, open_gpu
from feedprof.record.host import ProcessTreeProbe, TargetGone, TreeReading
from feedprof.record.workers import IN_PROCESS, ProbeSchedule
from feedprof.store.reasons import GpuIntervalBelowNvml, GpuUnavailable, Reason, SamplingStopped
from feedprof.store import GpuSeries, GpuStatus, Peaks, Samples

DEFAULT_INTERVAL_S = defaults.INTERVAL_S
ROW_CAPACITY = 4096

# Row layout (a plain tuple: cheap to store, thinned by keeping the first of a pair).
(_T, _SYS, _CORES, _MAIN_CPU, _WORK_CPU, _MAIN_RSS, _WORK_RSS, _NW, _SHM, _PSS, _USS, _MAIN_RUNQ, _WORK_RUNQ,
 _W_USS, _W_PSS, _W_PID, _MAIN_FDS, _WORK_FDS, _MAIN_THR, _WORK_THR, _GPU) = range(21)
_N_TREE = _GPU - 1  # fields a tree reading fills


def next_tick(origin_s: float, interval_s: float, now_s: float, last_k: int) -> int:
    """Index of the next tick strictly after ``now_s`` (and after ``last_k``)."""
    due = math.floor((now_s - origin_s) / interval_s) + 1
    return max(last_k + 1, due)


def _thin(a: tuple, b: tuple) -> tuple:
    """Keep the earlier row, filling its gaps from the later one (PSS is read
    only every few rows, and must survive thinning)."""
    return tuple(x if x is not None else y for x, y in zip(a, b))


class Sampler:
    def __init__(self, pid: Optional[int] = None, interval_s: float = DEFAULT_INTERVAL_S,
                 gpu: Any = True, clock: Clock = MONOTONIC, origin_s: Optional[float] = None,
                 capacity: int = ROW_CAPACITY, memory_detail_interval_s: float = 2.0,
                 children_refresh_s: float = 2.0, worker_probe: ProbeSchedule = IN_PROCESS):
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.pid = os.getpid() if pid is None else pid
        self.interval_s = interval_s
        self.clock = clock
        self.origin_s = clock.now_s() if origin_s is None else origin_s
        self.notes: List[Reason] = []
        self.tree: Optional[ProcessTreeProbe] = ProcessTreeProbe(
            self.pid, children_refresh_s=children_refresh_s,
            memory_detail_interval_s=memory_detail_interval_s, min_children_refresh_s=interval_s,
            worker_probe=worker_probe, clock=clock)
        if gpu is True:
            gpu = open_gpu()
        elif gpu is False or gpu is None:
            gpu = NullGpu(GpuStatus.OFF)
        self.gpu = gpu
        if gpu.status != GpuStatus.OK:
            self.notes.append(GpuUnavailable(status=str(gpu.status), detail=getattr(gpu, "detail", "")))
        elif interval_s < NVML_SAMPLE_FLOOR_S:
            self.notes.append(GpuIntervalBelowNvml(interval_s=interval_s, floor_s=NVML_SAMPLE_FLOOR_S))
        self._rows: DecimatingBuffer = DecimatingBuffer(capacity, _thin)
        self._n_taken = 0
        self._peak = dict(tree_rss=None, tree_pss=None, tree_uss=None, worker_pss=None,
                          worker_uss=None, shm=None, n_workers=0, main_fds=None, worker_fds=None)
        self._fd_limit: Optional[int] = None
        self._peak_gpu_mem: List[Optional[int]] = [None] * len(gpu.devices)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- one sample -------------------------------------------------------

    def sample_once(self) -> None:
        t = self.clock.now_s()
        tree = self._read_tree(t)
        gpus = self._read_gpu()
        row = (
            t - self.origin_s,
            *(_tree_fields(tree) if tree is not None else
              (None, (), None, None, None, None, 0) + (None,) * (_N_TREE - 7)),
            gpus,
        )
        with self._lock:
            self._rows.append(row)
            self._n_taken += 1
            self._update_peaks(tree, gpus)

    def _read_tree(self, t: float) -> Optional[TreeReading]:
        if self.tree is None:
            return None
        try:
            return self.tree.read(t)
        except TargetGone:
            self.tree = None  # the observed process ended: a normal end for a trial
            return None
        except Exception as exc:  # a broken probe must not end sampling of the rest
            self.notes.append(SamplingStopped(what="host", error=f"{type(exc).__name__}: {exc}"))
            self.tree = None
            return None

    def _read_gpu(self) -> Tuple[Any, ...]:
        try:
            return tuple(self.gpu.read())
        except Exception as exc:  # NVML queries never raise; this is a bug guard, recorded
            self.notes.append(SamplingStopped(what="gpu", error=f"{type(exc).__name__}: {exc}"))
            self.gpu = NullGpu(self.gpu.status, getattr(self.gpu, "detail", ""))
            return ()

    def _update_peaks(self, tree: Optional[TreeReading], gpus: Tuple[Any, ...]) -> None:
        p = self._peak
        if tree is not None:
            rss = _add(tree.main_rss_bytes, tree.workers_rss_bytes)
            p["tree_rss"] = _max(p["tree_rss"], rss)
            p["tree_pss"] = _max(p["tree_pss"], tree.tree_pss_bytes)
            p["tree_uss"] = _max(p["tree_uss"], tree.tree_uss_bytes)
            p["worker_pss"] = _max(p["worker_pss"], _max(tree.worker_pss_max_bytes, tree.worker_pss_bytes))
            p["worker_uss"] = _max(p["worker_uss"], _max(tree.worker_uss_max_bytes, tree.worker_uss_bytes))
            p["shm"] = _max(p["shm"], tree.shm_used_bytes)
            p["n_workers"] = max(p["n_workers"], tree.n_workers)
            p["main_fds"] = _max(p["main_fds"], tree.main_fds)
            p["worker_fds"] = _max(p["worker_fds"], tree.worker_fds_max)
            self._fd_limit = tree.fd_limit if tree.fd_limit is not None else self._fd_limit
        for i, reading in enumerate(gpus):
            self._peak_gpu_mem[i] = _max(self._peak_gpu_mem[i], reading.mem_used_bytes)

    def adopt(self, pid: int) -> None:
        """Sample ``pid``'s tree as part of this one's (a Slurm task, which is not the launcher's child)."""
        if self.tree is not None:
            self.tree.adopt(pid)

    def refresh_tree(self) -> None:
        """The observed tree is about to change (a loader started): re-list it soon."""
        tree = self.tree
        if tree is not None:
            tree.refresh_soon()

    # -- thread -----------------------------------------------------------

    def start(self) -> "Sampler":
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._thread = threading.Thread(target=self._loop, name="feedprof-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        clock, interval = self.clock, self.interval_s
        start = clock.now_s()
        k = 0
        while True:
            self.sample_once()
            if self.tree is None and self.gpu.status != GpuStatus.OK:
                return  # nothing left to observe
            k = next_tick(start, interval, clock.now_s(), k)
            if clock.wait_s(self._stop, start + k * interval - clock.now_s()):
                return

    def stop(self) -> Samples:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.gpu.close()
        return self.snapshot()

    # -- output -----------------------------------------------------------

    def snapshot(self) -> Samples:
        with self._lock:
            rows = self._rows.items()
            stride = self._rows.stride
            n_taken = self._n_taken
            p = dict(self._peak)
            gpu_peaks = tuple(self._peak_gpu_mem)
            fd_limit = self._fd_limit
        col = lambda i: tuple(r[i] for r in rows)  # noqa: E731
        gpus = []
        for d, info in enumerate(self.gpu.devices):
            readings = [r[_GPU][d] if len(r[_GPU]) > d else None for r in rows]
            get = lambda name: tuple(None if g is None else getattr(g, name) for g in readings)  # noqa: E731
            gpus.append(GpuSeries(
                cuda_index=info.cuda_index, uuid=info.uuid, util_pct=get("util_pct"),
                mem_used_bytes=get("mem_used_bytes"), sm_clock_mhz=get("sm_clock_mhz"),
                pcie_rx_bytes_per_s=get("pcie_rx_bytes_per_s"), pcie_tx_bytes_per_s=get("pcie_tx_bytes_per_s"),
                power_w=get("power_w")))
        return Samples(
            interval_s=self.interval_s, stride=stride, n_taken=n_taken,
            t_s=col(_T), system_cpu_pct=col(_SYS), per_core_cpu_pct=col(_CORES),
            main_cpu_pct=col(_MAIN_CPU), workers_cpu_pct=col(_WORK_CPU),
            main_runq_pct=col(_MAIN_RUNQ), workers_runq_pct=col(_WORK_RUNQ),
            main_rss_bytes=col(_MAIN_RSS), workers_rss_bytes=col(_WORK_RSS),
            n_workers=col(_NW), shm_used_bytes=col(_SHM),
            tree_pss_bytes=col(_PSS), tree_uss_bytes=col(_USS),
            worker_uss_bytes=col(_W_USS), worker_pss_bytes=col(_W_PSS), worker_pid=col(_W_PID),
            main_fds=col(_MAIN_FDS), worker_fds_max=col(_WORK_FDS), fd_limit=fd_limit,
            main_threads_runnable=col(_MAIN_THR), workers_threads_runnable=col(_WORK_THR),
            gpus=tuple(gpus),
            peaks=Peaks(tree_rss_bytes=p["tree_rss"], tree_pss_bytes=p["tree_pss"],
                        tree_uss_bytes=p["tree_uss"], worker_pss_bytes=p["worker_pss"],
                        worker_uss_bytes=p["worker_uss"], shm_used_bytes=p["shm"],
                        n_workers=p["n_workers"], gpu_mem_used_bytes=gpu_peaks, main_fds=p["main_fds"],
                        worker_fds=p["worker_fds"]),
            notes=tuple(self.notes),
        )


def _tree_fields(r: TreeReading) -> tuple:
    return (r.system_cpu_pct, r.per_core_cpu_pct, r.main_cpu_pct, r.workers_cpu_pct,
            r.main_rss_bytes, r.workers_rss_bytes, r.n_workers, r.shm_used_bytes,
            r.tree_pss_bytes, r.tree_uss_bytes, r.main_runq_pct, r.workers_runq_pct,
            r.worker_uss_bytes, r.worker_pss_bytes, r.worker_pid, r.main_fds, r.worker_fds_max,
            r.main_threads_runnable, r.workers_threads_runnable)


def _add(a: Optional[int], b: Optional[int]) -> Optional[int]:
    if a is None:
        return b
    return a if b is None else a + b


def _max(a: Optional[int], b: Optional[int]) -> Optional[int]:
    if a is None:
        return b
    return a if b is None else max(a, b)
