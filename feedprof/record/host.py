"""Host side of the sampler: CPU and memory of a process tree, via psutil.

Costs measured on the 2-core dev machine (docs/architecture.md, psutil polling costs) shape this:
``children(recursive=True)`` scans every process on the machine (~2 ms here),
so the tree is re-listed adaptively: at the sampling rate while it changes
(workers start with each epoch), backing off to every 2 s while it is stable; a process's CPU is
measured from its own CPU-time deltas (``ProcessCpu``), never over an interval
too short for the kernel's 10 ms ticks; PSS/USS
(``memory_full_info``) walks every mapping of every process, ~5 ms per torch
worker, so it runs on its own schedule, spaced so that it costs at most
``MEMORY_DETAIL_BUDGET`` of one core however many workers there are.
"""
from __future__ import annotations

import os
import platform
import shutil
import socket
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import psutil

from feedprof.record.clock import MONOTONIC, Clock
from feedprof.record.pools import threads_of
from feedprof.record.workers import IN_PROCESS, ProbeSchedule, WorkerProbe
from feedprof.store import GpuStatus, HostInfo

SHM_PATH = "/dev/shm"
# multiprocessing's helper processes are part of the tree, not loader workers.
_HELPER_MARKERS = ("resource_tracker", "forkserver", "semaphore_tracker")
MEMORY_DETAIL_BUDGET = 0.003  # fraction of one core PSS/USS readings may use
THREADS_EVERY_S = 0.25  # runnable threads are counted at most this often (two /proc files a thread)


def _forked_by_server(proc: psutil.Process) -> bool:
    """A forkserver's children are the loader workers it forks: their command
    line is the server's, but they are workers, not helpers."""
    try:
        return "multiprocessing.forkserver" in " ".join(psutil.Process(proc.ppid()).cmdline())
    except psutil.Error:
        return False


@dataclass(frozen=True)
class TreeReading:
    system_cpu_pct: Optional[float]
    per_core_cpu_pct: Tuple[float, ...]
    main_cpu_pct: Optional[float]
    workers_cpu_pct: Optional[float]
    main_runq_pct: Optional[float]  # runnable but waiting for a CPU (starved), percent of one core
    workers_runq_pct: Optional[float]
    main_rss_bytes: Optional[int]
    workers_rss_bytes: Optional[int]
    n_workers: int
    shm_used_bytes: Optional[int]
    tree_pss_bytes: Optional[int] = None  # only on memory-detail ticks
    tree_uss_bytes: Optional[int] = None
    worker_pss_max_bytes: Optional[int] = None
    worker_uss_max_bytes: Optional[int] = None
    worker_uss_bytes: Optional[int] = None  # one worker's, on record/workers.py's schedule
    worker_pss_bytes: Optional[int] = None
    worker_pid: Optional[int] = None
    main_fds: Optional[int] = None
    worker_fds_max: Optional[int] = None
    fd_limit: Optional[int] = None
    main_threads_runnable: Optional[int] = None  # threads ready to run (record/pools.py), on THREADS_EVERY_S's schedule
    workers_threads_runnable: Optional[int] = None


class TargetGone(Exception):
    """The observed main process has exited."""


class CpuTimesMeter:
    """System CPU % per core from /proc/stat deltas, with private state (psutil's
    own ``cpu_percent()`` shares one global baseline with the user's code)."""

    def __init__(self) -> None:
        self._last = psutil.cpu_times(percpu=True)

    def read(self) -> Tuple[float, ...]:
        now = psutil.cpu_times(percpu=True)
        pcts = []
        for a, b in zip(self._last, now):
            total = sum(b) - sum(a)
            idle = (b.idle - a.idle) + (getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0))
            pcts.append(0.0 if total <= 0 else max(0.0, min(100.0, 100.0 * (total - idle) / total)))
        self._last = now
        return tuple(pcts)


def runqueue_wait_s(pid: int) -> Optional[float]:
    """Seconds ``pid`` has been runnable but waiting for a CPU (/proc/PID/schedstat;
    None where the kernel does not say)."""
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class ProcessCpu:
    """Percent of one core a process used since the previous reading, and
    percent of one core's time it waited, runnable, for a CPU (``runq_pct``):
    a process that sleeps on I/O has neither; one starved by other work on the
    machine has the second.

    Not psutil's ``cpu_percent()``: a reading right after the first one (a
    worker listed and read in the same sample) divides a 10 ms CPU-time tick
    by microseconds and reports a dozen cores. Readings closer together than
    ``MIN_INTERVAL_S`` repeat the last rate and keep the baseline, so the next
    one covers the whole interval."""

    MIN_INTERVAL_S = 0.05

    def __init__(self, proc: psutil.Process, clock: Clock = MONOTONIC):
        self.proc = proc
        self._clock = clock
        self._last = (self._used_s(), runqueue_wait_s(proc.pid), clock.now_s())
        self._pct = 0.0
        self.runq_pct: Optional[float] = None

    def _used_s(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system

    def read(self) -> float:
        used, waited, now = self._used_s(), runqueue_wait_s(self.proc.pid), self._clock.now_s()
        used0, waited0, t0 = self._last
        if now - t0 >= self.MIN_INTERVAL_S:
            self._pct = max(0.0, 100.0 * (used - used0) / (now - t0))
            self.runq_pct = None if waited is None or waited0 is None else max(0.0, 100.0 * (waited - waited0) / (now - t0))
            self._last = (used, waited, now)
        return self._pct


class ProcessTreeProbe:
    def __init__(self, pid: int, children_refresh_s: float = 2.0,
                 memory_detail_interval_s: float = 2.0, shm_path: str = SHM_PATH,
                 min_children_refresh_s: float = 0.2, worker_probe: ProbeSchedule = IN_PROCESS,
                 clock: Clock = MONOTONIC):
        self.pid = pid
        self.main = psutil.Process(pid)
        self._clock = clock
        self._main_cpu = ProcessCpu(self.main, clock)
        self.children_refresh_s = children_refresh_s  # the slowest re-listing, when nothing changes
        self.min_children_refresh_s = min(min_children_refresh_s, children_refresh_s)
        self._refresh_every = self.min_children_refresh_s
        self.memory_detail_interval_s = memory_detail_interval_s
        self.shm_path = shm_path if os.path.isdir(shm_path) else None
        self._cpu = CpuTimesMeter()
        self._children: Dict[int, ProcessCpu] = {}
        self._helpers: set = set()
        self._t_children = float("-inf")
        self._t_detail_due = float("-inf")
        self._worker_probe = WorkerProbe(self.main, worker_probe)
        self._adopted: Dict[int, psutil.Process] = {}
        self._t_threads_due = float("-inf")

    def adopt(self, pid: int) -> None:
        """Count ``pid`` and its descendants in this tree although they are not below the root
        (a Slurm task: slurmstepd's child, not srun's)."""
        try:
            self._adopted.setdefault(pid, psutil.Process(pid))
        except psutil.Error:
            return
        self.refresh_soon()

    def refresh_soon(self) -> None:
        """Re-list the tree at the next reading (e.g. a loader just started its workers)."""
        self._t_children = float("-inf")
        self._refresh_every = self.min_children_refresh_s

    def _refresh_children(self) -> None:
        before = set(self._children)
        self._list_children()
        changed = set(self._children) != before
        self._refresh_every = (self.min_children_refresh_s if changed
                               else min(2 * self._refresh_every, self.children_refresh_s))

    def _list_children(self) -> None:
        try:
            current = {p.pid: p for p in self.main.children(recursive=True)}
        except psutil.NoSuchProcess:
            raise TargetGone(self.pid) from None
        except psutil.Error:
            return
        for pid, root in list(self._adopted.items()):
            try:
                current.update({pid: root, **{p.pid: p for p in root.children(recursive=True)}})
            except psutil.Error:  # that task ended
                del self._adopted[pid]
        for pid in list(self._children):
            if pid not in current:
                del self._children[pid]
                self._helpers.discard(pid)
        for pid, proc in current.items():
            if pid in self._children:
                continue
            try:
                cpu = ProcessCpu(proc, self._clock)
                cmd = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            self._children[pid] = cpu
            if any(m in cmd for m in _HELPER_MARKERS) and not _forked_by_server(proc):
                self._helpers.add(pid)

    def read(self, t_s: float) -> TreeReading:
        if t_s - self._t_children >= self._refresh_every:
            self._refresh_children()
            self._t_children = t_s
        try:
            with self.main.oneshot():
                main_cpu = self._main_cpu.read()
                main_rss = self.main.memory_info().rss
        except psutil.NoSuchProcess:
            raise TargetGone(self.pid) from None
        workers_cpu, workers_rss, workers_runq = 0.0, 0, 0.0
        for pid, cpu in list(self._children.items()):
            try:
                with cpu.proc.oneshot():
                    workers_cpu += cpu.read()
                    workers_rss += cpu.proc.memory_info().rss
                workers_runq += cpu.runq_pct or 0.0
            except psutil.Error:
                self._children.pop(pid, None)
                self._helpers.discard(pid)
        per_core = self._cpu.read()
        detail = {}
        if t_s >= self._t_detail_due:
            c0 = time.thread_time()  # this thread's CPU time (the cost), not time passing: no Clock's
            detail = self._memory_detail()
            cost_s = time.thread_time() - c0
            self._t_detail_due = t_s + max(self.memory_detail_interval_s, cost_s / MEMORY_DETAIL_BUDGET)
        workers = {pid: c.proc for pid, c in self._children.items() if pid not in self._helpers}
        detail.update(self._worker_probe.read(t_s, workers))
        if t_s >= self._t_threads_due:
            self._t_threads_due = t_s + THREADS_EVERY_S
            detail.update(self._runnable(workers))
        return TreeReading(
            system_cpu_pct=sum(per_core) / len(per_core) if per_core else None,
            per_core_cpu_pct=per_core,
            main_cpu_pct=main_cpu,
            workers_cpu_pct=workers_cpu,
            main_runq_pct=self._main_cpu.runq_pct,
            workers_runq_pct=workers_runq if self._main_cpu.runq_pct is not None else None,
            main_rss_bytes=main_rss,
            workers_rss_bytes=workers_rss,
            n_workers=len(self._children) - len(self._helpers),
            shm_used_bytes=shm_used_bytes(self.shm_path),
            **detail,
        )

    def _runnable(self, workers: Dict[int, psutil.Process]) -> dict:
        """Threads ready to run in the training process and in its workers together: against the
        cores the job may use, they say whether the pools oversubscribe them (record/pools.py)."""
        main = threads_of(self.pid)
        counts = [t.runnable for t in (threads_of(pid) for pid in workers) if t is not None]
        return dict(main_threads_runnable=main.runnable if main is not None else None,
                    workers_threads_runnable=sum(counts) if workers else None)

    def _memory_detail(self) -> dict:
        """PSS/USS: the honest per-process figures (RSS counts shared pages in every worker)."""
        pss = uss = 0
        worker_pss: List[int] = []
        worker_uss: List[int] = []
        for pid, proc in [(self.pid, self.main)] + [(pid, cpu.proc) for pid, cpu in self._children.items()]:
            try:
                full = proc.memory_full_info()
            except psutil.Error:  # gone, or no permission: leave it out of this reading
                continue
            p, u = getattr(full, "pss", 0), full.uss
            pss += p
            uss += u
            if pid != self.pid and pid not in self._helpers:
                worker_pss.append(p)
                worker_uss.append(u)
        return dict(
            tree_pss_bytes=pss, tree_uss_bytes=uss,
            worker_pss_max_bytes=max(worker_pss) if worker_pss else None,
            worker_uss_max_bytes=max(worker_uss) if worker_uss else None,
        )


def shm_used_bytes(path: Optional[str] = SHM_PATH) -> Optional[int]:
    if not path:
        return None
    try:
        return shutil.disk_usage(path).used
    except OSError:
        return None


def shm_total_bytes(path: str = SHM_PATH) -> Optional[int]:
    try:
        return shutil.disk_usage(path).total
    except OSError:
        return None


# ------------------------------------------------------------- CPU budget


def _cgroup_cpu_limit(root: str = "/sys/fs/cgroup") -> Optional[float]:
    """CPUs allowed by a cgroup quota (v2 cpu.max, else v1 cfs), None if unlimited."""
    try:
        with open(os.path.join(root, "cpu.max")) as fh:
            quota, period = fh.read().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as fh:
            quota_us = int(fh.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as fh:
            period_us = int(fh.read())
        return quota_us / period_us if quota_us > 0 else None
    except (OSError, ValueError):
        return None


def memory_limit_bytes(root: str = "/sys/fs/cgroup") -> Optional[int]:
    """The container's memory limit (cgroup v2 memory.max, else v1), None if
    there is none: the OOM killer acts at it, whatever the machine has free."""
    for name in ("memory.max", os.path.join("memory", "memory.limit_in_bytes")):
        try:
            with open(os.path.join(root, name)) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < psutil.virtual_memory().total:
            return int(text)  # v1 reports "no limit" as a huge number
        return None
    return None


def usable_cpu_count(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """CPUs this process may really use: affinity mask, capped by a cgroup quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    limit = _cgroup_cpu_limit(cgroup_root)
    if limit is not None:
        n = min(n, max(1, int(limit)))  # a fractional quota cannot run one more worker
    return max(1, n)


def local_world_size(env: Optional[Dict[str, str]] = None) -> int:
    """Processes of one job sharing this machine's CPUs (torchrun, MPI, Slurm...): 1 for a plain process."""
    from feedprof.record.ranks import rank_from_env

    env = os.environ if env is None else env
    info = rank_from_env(env)
    if info is not None:
        return info.local_world_size
    try:  # set without a rank (a job's parent shell); not Slurm's per-node task count: a batch
        return max(1, int(env["LOCAL_WORLD_SIZE"]))  # script's own process is one of no step's tasks
    except (KeyError, ValueError):
        return 1


# ---------------------------------------------------------------- host info


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def framework_versions() -> Dict[str, str]:
    """Installed versions, read from package metadata: importing torch or TF
    just to ask would cost seconds and hundreds of MiB."""
    from importlib import metadata

    found = {}
    for dist, name in (("torch", "torch"), ("tensorflow", "tensorflow"), ("tensorflow-cpu", "tensorflow"),
                       ("keras", "keras"), ("tf-keras", "tf_keras")):
        if name in found:
            continue
        try:
            found[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return found


def machine_info(gpu: bool = True) -> HostInfo:
    """This machine, GPUs included (NVML is opened, read and closed again)."""
    from feedprof.record.gpu import NullGpu, open_gpu

    handle = open_gpu() if gpu else NullGpu(GpuStatus.OFF)
    try:
        return host_info(handle)
    finally:
        handle.close()


def host_info(gpu: Any = None) -> HostInfo:
    """This machine; ``gpu`` is an open record.gpu backend (its devices and status)."""
    from feedprof.version import __version__

    return HostInfo(
        hostname=socket.gethostname(),
        cpu_model=cpu_model(),
        cpus_usable=usable_cpu_count(),
        cpus_online=psutil.cpu_count() or 0,
        ram_bytes=psutil.virtual_memory().total,
        shm_total_bytes=shm_total_bytes(),
        python_version=platform.python_version(),
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
        feedprof_version=__version__,
        frameworks=framework_versions(),
        gpus=tuple(gpu.devices) if gpu is not None else (),
        gpu_status=gpu.status if gpu is not None else GpuStatus.UNKNOWN,
        gpu_status_detail=gpu.detail if gpu is not None else "",
    )
