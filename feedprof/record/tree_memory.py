"""What a job's processes hold, each counted once: the figure a memory budget is held to.

PSS splits the pages forked workers share with their parent among them (RSS counts each in
every worker, so a dozen workers of a 1 GB process read as 12 GB); USS where the kernel gives
no PSS; RSS where neither can be read (another user's process). Reading PSS walks every
mapping, ~5 ms per torch process (PLATFORM: ``memory_full_info``): read it rarely.
"""
from __future__ import annotations

from typing import Iterable, Set

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
