"""One loader worker's memory, and the job's open files, read often enough to
show a trend within one trial.

Copy-on-read (workers touching the reference counts of a big Python list or
dict inherited from the parent) turns shared pages private: a worker's USS
grows with every batch while its RSS stays flat, so only USS/PSS show it.
Those walk every mapping (``/proc/PID/smaps_rollup``, ~5-7 ms per torch
worker here), too dear to read for every worker at the sampling rate; the
whole tree is read on host.py's slow schedule. This probe follows a single
worker (they all index the same data) on a ``ProbeSchedule``: at most every
``interval_s``, spaced so that it costs at most ``budget`` of one core.
Observed from outside (a trial, sampled by the tune's own process) it reads
every ~0.25 s, a handful of readings even in a short window; inside the
user's process (``feedprof.profile()``) every ~0.5 s, within 1 % of a core.

Open files are cheap to count (a listing of /proc/PID/fd, ~20 µs): the main
process (which holds a descriptor per tensor a worker shares with it under
PyTorch's default ``file_descriptor`` strategy) and the busiest worker, on
the same schedule, against the script's RLIMIT_NOFILE.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

import psutil


@dataclass(frozen=True)
class ProbeSchedule:
    interval_s: float  # at most this often
    budget: float  # share of one core the readings may use


IN_PROCESS = ProbeSchedule(interval_s=0.5, budget=0.01)  # feedprof.profile(): the user's own process pays
OBSERVED = ProbeSchedule(interval_s=0.25, budget=0.03)  # a trial, read from the tune's process


class WorkerProbe:
    def __init__(self, main: psutil.Process, schedule: ProbeSchedule = IN_PROCESS):
        self.main = main
        self.interval_s = schedule.interval_s
        self.budget = schedule.budget
        self.pid: Optional[int] = None  # the worker followed, kept while it lives
        self._due_s = float("-inf")

    def read(self, t_s: float, workers: Dict[int, psutil.Process]) -> Dict[str, Any]:
        """Readings due at ``t_s`` (``{}`` between them); ``workers``: the loader
        workers by pid (helpers left out)."""
        if t_s < self._due_s:
            return {}
        c0 = time.thread_time()
        out: Dict[str, Any] = dict(main_fds=_fds(self.main), fd_limit=fd_limit(self.main))
        counts = [n for n in (_fds(p) for p in workers.values()) if n is not None]
        out["worker_fds_max"] = max(counts) if counts else None
        out.update(self._memory(workers))
        self._due_s = t_s + max(self.interval_s, (time.thread_time() - c0) / self.budget)
        return out

    def _memory(self, workers: Dict[int, psutil.Process]) -> Dict[str, Any]:
        if self.pid not in workers:
            self.pid = min(workers) if workers else None
        if self.pid is None:
            return {}
        try:
            full = workers[self.pid].memory_full_info()
        except psutil.Error:  # gone (or no permission): follow another one next time
            self.pid = None
            return {}
        if not full.uss:  # exiting: its mappings are already gone
            return {}
        return dict(worker_uss_bytes=full.uss, worker_pss_bytes=getattr(full, "pss", None), worker_pid=self.pid)


def _fds(proc: psutil.Process) -> Optional[int]:
    try:
        return proc.num_fds()
    except (psutil.Error, AttributeError):  # gone, no permission, or not POSIX
        return None


def fd_limit(proc: psutil.Process) -> Optional[int]:
    """The process's soft RLIMIT_NOFILE (None: unlimited or unreadable)."""
    try:
        soft, _ = proc.rlimit(psutil.RLIMIT_NOFILE)
    except (psutil.Error, AttributeError, OSError):
        return None
    return None if soft in (-1, getattr(psutil, "RLIM_INFINITY", -1)) else int(soft)

