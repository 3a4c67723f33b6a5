"""One feedprof per task: ``srun -n 2 feedprof profile train.py``. Each feedprof runs one
rank of the job; the ranks train in lockstep, so no feedprof may end its rank before
every rank has its window (the others would wait for it in a collective for ever).

NOTE [ Ending together, one feedprof per task ]

    feedprof (task 0) ─► rank 0 ─ window measured ─► FEEDPROF_OUT/.job-<JOB.STEP>/window-0
    feedprof (task 1) ─► rank 1 ─ window measured ─► FEEDPROF_OUT/.job-<JOB.STEP>/window-1
    each feedprof: its own rank's window, then every rank's marker (or PEER_GRACE_S) ─► end its rank

The markers travel through the output directory every task shares (the job's shared
filesystem, as the runs themselves do): no network service of feedprof's own. Where the
tasks were given output directories of their own, no feedprof sees the others' markers:
each ends its rank once the grace is over, as a lone feedprof would.
"""
from __future__ import annotations

import glob
import os
import re
import time
from dataclasses import dataclass
from typing import Mapping, Optional

from feedprof.record.ranks import rank_from_env
from feedprof.store import RankInfo

PEER_GRACE_S = 30.0  # after its own window, how long a feedprof waits for the other ranks' windows
CLOCK_SKEW_S = 5.0  # nodes' clocks (and a shared filesystem's) may disagree by this much


def task_of(env: Mapping[str, str]) -> Optional[RankInfo]:
    """This feedprof's place in a job of several tasks (srun -n 2 feedprof ...), or None."""
    info = rank_from_env(env)
    return info if info is not None and info.world_size > 1 else None


def task_dir_name(task: RankInfo) -> str:
    """A task's own output directory under the shared one: ``<node>-rank<N>``."""
    node = re.sub(r"[^A-Za-z0-9._-]", "_", task.node or "node")
    return f"{node}-rank{task.rank}"


@dataclass(frozen=True)
class Peers:
    """The markers of one job's windows, in a directory every task's feedprof shares. The
    markers stay (a task that ended cannot know the others have seen its marker); only those
    written since this feedprof started count, so an earlier run's never do."""

    directory: str
    rank: int
    world_size: int
    since_s: float  # wall-clock time this feedprof started (a file's mtime is wall-clock time)

    @classmethod
    def of_task(cls, shared_dir: str, task: RankInfo) -> "Peers":
        job = re.sub(r"[^A-Za-z0-9._-]", "_", task.job or "job")
        return cls(os.path.join(shared_dir, f".job-{job}"), task.rank, task.world_size,
                   since_s=time.time() - CLOCK_SKEW_S)

    def window_done(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        with open(os.path.join(self.directory, f"window-{self.rank}"), "w", encoding="utf-8") as fh:
            fh.write(str(os.getpid()))

    def done_ranks(self) -> int:
        n = 0
        for path in glob.glob(os.path.join(self.directory, "window-*")):
            try:
                n += os.path.getmtime(path) >= self.since_s
            except OSError:
                continue
        return n

    def all_done(self) -> bool:
        return self.done_ranks() >= self.world_size
