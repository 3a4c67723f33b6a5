"""The thread pools of every process that loads and of the training process, and the threads that run.

NOTE [ Thread pools beside the loader ]

    numpy's BLAS (OpenBLAS, MKL, BLIS), OpenMP (OpenCV, numba, scikit-learn's libraries) and torch
    each start a pool as large as the machine in every process. torch holds its own intra-op pool to
    one thread in its DataLoader workers; nothing holds the others, so N workers each run a pool of C
    threads on C cores, and the pools' threads spin against each other (measured on 2 cores: 2
    workers doing numpy matrix products 10.2 batches/s, the same workers with their BLAS held to one
    thread 94.6).

      a process's first loading call (record/loadprof.loading) ─► POOLS.loading_started(): its
          pools read once, in that process (threadpoolctl) ─► <trial dir>/pools-<pid>.json
      the training process ─► the controller reads its own once measured (torch's intra-op too)
      the trial's parent ─► read_pools(dir): one ProcessPools per role (store/pools.py)
      the sampler (record/host.py) ─► threads_of(pid): how many of a process's threads are
          runnable, and their wait for a CPU, summed over every thread (a pool's threads included:
          /proc/PID/schedstat is the main thread's alone)

threadpoolctl (the scikit-learn project's library made for this) finds the pools by the libraries
loaded in the process; without it only torch's own pool is seen.
"""
from __future__ import annotations

import glob
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from feedprof.store.codes import PoolRole
from feedprof.store.pools import ProcessPools, ThreadPool

FILE_GLOB = "pools-*.json"


def pools_here() -> Tuple[ThreadPool, ...]:
    """The thread pools of this process, as their libraries report them."""
    found: List[ThreadPool] = []
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # (a dependency of feedprof's: only a broken install lacks it)
        info: List[Dict[str, Any]] = []
    else:
        try:
            info = threadpool_info()
        except Exception:  # a library threadpoolctl fails to query is not a reason to stop the run
            info = []
    for d in info:
        threads = d.get("num_threads")
        if isinstance(threads, int):
            found.append(ThreadPool(api=str(d.get("user_api", "")), library=str(d.get("internal_api", "")),
                                    threads=threads, prefix=str(d.get("prefix", ""))))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        found.append(ThreadPool(api="torch", library="torch", threads=int(torch.get_num_threads())))
    return tuple(found)


class PoolsSeen:
    """One per process (POOLS): each process that loads writes its pools once, to the trial's folder."""

    def __init__(self) -> None:
        self.directory = ""  # "": not in a trial
        self.main_pid = 0
        self.held = 0  # the threads feedprof held this process's pools to (0: as written)
        self._written_pid = 0
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self._written_pid = 0
        self.held = 0  # (a worker is held by its own worker_init_fn: frameworks/thread_limits.py)

    def configure(self, directory: str, main_pid: int) -> None:
        self.directory, self.main_pid = directory, main_pid

    def loading_started(self) -> None:
        """A loading call began in this process: its pools are written, the first time."""
        pid = os.getpid()
        if self._written_pid == pid or not self.directory:
            return
        self._written_pid = pid
        self.write(PoolRole.TRAINING if pid == self.main_pid else PoolRole.WORKER)

    def write(self, role: PoolRole) -> None:
        """This process's pools as ``role`` (the training process writes its own once measured)."""
        if not self.directory:
            return
        data = {"pid": os.getpid(), "role": role.value, "held": self.held,
                "pools": [[p.api, p.library, p.threads, p.prefix] for p in pools_here()]}
        path = os.path.join(self.directory, f"pools-{os.getpid()}.json")
        try:
            with open(f"{path}.tmp", "w", encoding="utf-8") as fh:
                json.dump(data, fh)
            os.replace(f"{path}.tmp", path)
        except OSError:  # a full disk: the pools go unsaid, the run goes on
            pass


POOLS = PoolsSeen()


def read_pools(directory: str) -> Tuple[ProcessPools, ...]:
    """Each role's pools, from the files its processes wrote: the training process's first, then
    the workers' (the first worker's pools stand for every worker's; ``processes`` counts them)."""
    by_role: Dict[str, List[Dict[str, Any]]] = {}
    for path in sorted(glob.glob(os.path.join(directory, FILE_GLOB))):
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        by_role.setdefault(str(data.get("role", "")), []).append(data)
    out: List[ProcessPools] = []
    for role in (PoolRole.TRAINING, PoolRole.WORKER):
        seen = by_role.get(role.value)
        if seen:
            first = seen[0]
            pools = tuple(ThreadPool(api=a, library=lib, threads=int(n), prefix=pre)
                          for a, lib, n, pre in first.get("pools", ()))
            out.append(ProcessPools(role=role, processes=len(seen), pools=pools, held=int(first.get("held") or 0)))
    return tuple(out)


def pool_threads_of(pids: List[int], directory: str = "") -> Optional[int]:
    """The most threads one pool of these processes ran, from the files they wrote (a trial's folder:
    POOLS.directory where none is given); None: none of them wrote one yet."""
    directory = directory or POOLS.directory
    found: List[int] = []
    for pid in pids:
        try:
            with open(os.path.join(directory, f"pools-{pid}.json"), encoding="utf-8") as fh:
                found += [int(p[2]) for p in json.load(fh).get("pools", ())]
        except (OSError, ValueError, TypeError, IndexError):
            continue
    return max(found, default=None)


@dataclass(frozen=True)
class ThreadsState:
    """A process's threads at one reading: how many are runnable (running, or ready to and waiting
    for a CPU), and the seconds they have waited for a CPU so far, all of them summed."""

    runnable: int
    waited_s: Optional[float]


def threads_of(pid: int) -> Optional[ThreadsState]:
    """None: the process is gone (or not Linux)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    runnable, waited, known = 0, 0.0, False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                stat = fh.read()
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
                waited += int(fh.read().split()[1]) / 1e9
                known = True
        except (OSError, ValueError, IndexError):
            continue  # (a thread that ended between the listing and the read)
        state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]  # (the name may hold spaces and parentheses)
        runnable += state == b"R"
    return ThreadsState(runnable=runnable, waited_s=waited if known else None)
