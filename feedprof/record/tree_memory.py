"""What a job's processes hold, each counted once: the figure a memory budget is held to.

PSS splits the pages forked workers share with their parent among them (RSS counts each in
every worker, so a dozen workers of a 1 GB process read as 12 GB). Only anonymous and shared
memory count (``Pss_Anon + Pss_Shmem`` of /proc/PID/smaps_rollup, Linux 5.7+): the pages of a
memory-mapped file (a numpy memmap, an Arrow dataset) are page cache the kernel reclaims under
pressure, not memory the job takes from the machine. Where the kernel splits no PSS: psutil's
PSS, else USS; RSS where none can be read (another user's process). Reading PSS walks every
mapping, ~5 ms per torch process (PLATFORM: ``memory_full_info``): read it rarely.
"""
from __future__ import annotations

from typing import Iterable, Optional, Set

import psutil


def tree_bytes(root_pids: Iterable[int]) -> int:
    """The memory of ``root_pids`` and all their descendants, each process once (0: none alive)."""
    seen: Set[int] = set()
    total = 0
    for pid in root_pids:
        try:
            root = psutil.Process(pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:  # ended
            continue
        for proc in procs:
            if proc.pid not in seen:
                seen.add(proc.pid)
                total += _held_bytes(proc)
    return total


def _held_bytes(proc: psutil.Process) -> int:
    held = _anon_and_shmem_pss_bytes(proc.pid)
    if held is not None:
        return held
    try:
        full = proc.memory_full_info()
        return int(getattr(full, "pss", 0) or full.uss)
    except psutil.AccessDenied:
        try:
            return int(proc.memory_info().rss)
        except psutil.Error:
            return 0
    except psutil.Error:  # ended meanwhile
        return 0


def _anon_and_shmem_pss_bytes(pid: int) -> Optional[int]:
    """``Pss_Anon + Pss_Shmem`` (+ ``SwapPss``: swapped-out anonymous pages are still the job's),
    or None where the kernel's rollup does not split PSS (or the process cannot be read)."""
    fields = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                if name in ("Pss_Anon", "Pss_Shmem", "SwapPss"):
                    fields[name] = int(rest.split()[0]) * 1024  # (kB)
    except (OSError, ValueError):
        return None
    if "Pss_Anon" not in fields:
        return None
    return sum(fields.values())
