"""A rank that the feedprof which launched its job cannot see measures itself.

NOTE [ Every rank measured where it runs ]

    feedprof (node n1) ─ spec.json: its sight (host name + PID namespace) ─► every rank
    rank on n1: same sight ─► feedprof samples it from outside, by its PID (jobrunner.py)
    rank on n2: another sight ─► a PID of n2 means nothing on n1, so the rank samples itself:
      RankMeter: a Sampler of its own process tree (its loader workers, /dev/shm) and the devices
      it sees, on its node ─► every WRITE_EVERY_S, as its window is done (before "window_done":
      feedprof ends the job on hearing it), and when the rank ends or is told to (SIGTERM):
      samples-<rank>.json in the trial directory, a Run of kind "rank" holding its
      own host and samples ─► jobrunner.py reads it once the trial is over

The file travels as the events do: through the directory every node of the job shares.
Only a rank out of sight pays for the thread; a rank killed outright (SIGKILL) leaves its
last write, at most WRITE_EVERY_S old.
"""
from __future__ import annotations

import glob
import os
import threading
from typing import Any, Callable, Optional

from feedprof.record.host import host_info
from feedprof.record.sampler import Sampler
from feedprof.record.workers import IN_PROCESS
from feedprof.store import Run, RunKind
from feedprof.store.codec import dumps, write_text_atomic
from feedprof.store import RankInfo

SAMPLES_FILE = "samples-{rank}.json"
WRITE_EVERY_S = 2.0  # how stale the last write may be when the rank is killed outright
WRITE_BUDGET = 0.01  # ... and at most this share of one core spent writing (a long run's file grows)


def samples_path(trial_dir: str, rank: int) -> str:
    return os.path.join(trial_dir, SAMPLES_FILE.format(rank=rank))


def clear(trial_dir: str) -> None:
    """An earlier trial's files (each trial starts from none)."""
    for path in glob.glob(os.path.join(trial_dir, SAMPLES_FILE.format(rank="*"))):
        os.remove(path)


class RankMeter:
    """The rank's own sampler and the thread that writes what it read."""

    def __init__(self, path: str, rank: RankInfo, interval_s: float, gpu: bool, origin_s: float):
        self.path = path
        self.rank = rank
        self.sampler = Sampler(pid=None, interval_s=interval_s, gpu=gpu, origin_s=origin_s, worker_probe=IN_PROCESS)
        self.host = host_info(self.sampler.gpu)  # this rank's node, not the launching feedprof's
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the writer thread and a last write at exit or SIGTERM
        self._thread: Optional[threading.Thread] = None
        self._pid = os.getpid()  # a loader worker forked from the rank inherits this object, not its thread

    def start(self) -> "RankMeter":
        self.sampler.start()
        self._thread = threading.Thread(target=self._loop, name="feedprof-rank-meter", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        import time

        wait_s = WRITE_EVERY_S
        while not self._stop.wait(wait_s):
            c0 = time.thread_time()  # this thread's CPU time: what writing costs the rank
            self.write()
            wait_s = max(WRITE_EVERY_S, (time.thread_time() - c0) / WRITE_BUDGET)

    def emitting(self, emit: Callable[..., None]) -> Callable[..., None]:
        """The controller's ``emit``, telling this meter first what the rank does: its loader
        workers start (list the tree again soon), its window is measured (write now, before
        feedprof hears of it and ends the job)."""
        def emit_and_measure(event: str, **fields: Any) -> None:
            if event in ("loader", "first_batch"):
                self.sampler.refresh_tree()
            elif event == "window_done":
                self.write()
            emit(event, **fields)

        return emit_and_measure

    def write(self) -> None:
        """What the rank measured so far, replacing the last write (never raises into the rank)."""
        run = Run(kind=RunKind.RANK, host=self.host, samples=self.sampler.snapshot(), rank=self.rank)
        with self._lock:
            try:
                write_text_atomic(self.path, dumps(run))
            except OSError:
                pass  # a full disk: the trial goes on without this rank's curves

    def stop(self) -> None:
        """The last write (the rank is ending; in a process forked from it, nothing)."""
        if os.getpid() != self._pid:
            return
        self._stop.set()
        self.write()
