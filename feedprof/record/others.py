"""Who else used the CPUs during a trial: the busiest processes outside the job.

A shared machine's other work makes every figure noisier and can starve the
loader's workers; the report names it (how many cores, which processes)
instead of letting the workers take the blame. Two snapshots of every
process's CPU time, at the trial's start and end: a few milliseconds each.
"""
from __future__ import annotations

import os
from typing import Dict, Iterable, Tuple

import psutil

from feedprof.record.clock import MONOTONIC, Clock
from feedprof.store import OtherProcess

TOP = 3
MIN_CORES = 0.05  # processes using less than this are not worth naming


def _cpu_times() -> Dict[int, Tuple[str, float]]:
    out = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        t = p.info.get("cpu_times")
        if t is not None:
            out[p.pid] = (p.info.get("name") or "?", t.user + t.system)
    return out


class OtherLoad:
    """Started with the trial; ``stop(job_pids)`` names the busiest others."""

    def __init__(self, clock: Clock = MONOTONIC) -> None:
        self._clock = clock
        self._t0 = clock.now_s()
        self._before = _cpu_times()

    def stop(self, job_pids: Iterable[int]) -> Tuple[OtherProcess, ...]:
        elapsed = max(1e-6, self._clock.now_s() - self._t0)
        after = _cpu_times()
        skip = set(job_pids) | {os.getpid()} | {p.pid for p in _own_descendants()}
        used = []
        for pid, (name, cpu_s) in after.items():
            if pid in skip or pid not in self._before:
                continue
            cores = (cpu_s - self._before[pid][1]) / elapsed
            if cores >= MIN_CORES:
                used.append(OtherProcess(pid=pid, name=name, cpu_cores=cores))
        return tuple(sorted(used, key=lambda p: -p.cpu_cores)[:TOP])


def _own_descendants() -> list:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
