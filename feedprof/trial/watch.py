"""Watching a trial's processes while it runs, and reaping them after: the
parts runner.py (one process) and jobrunner.py (a launcher and its ranks) share.

NOTE [ How a trial ends ]  (child.py is the other half)

    Watch.wait polls, every POLL_S on the trial's clock:
      the child exited ─────────────────────────► its result.json says how
      "window_done" event + exit_grace_s passed ─► measured; the script lingers
      no first batch within loader_timeout_s ───► timeout (NoBatchWithin)
      past timeout_s ───────────────────────────► timeout (TrialTimedOut)
    then: kill_group (every process of the trial), stop the sampler, and the
    runner puts the Run together: the child's Run + the samples; ending.py
    names a bad end.
"""
from __future__ import annotations

import os
import signal
import subprocess
from typing import Any, Callable, List, Optional

import psutil

from feedprof.store.reasons import NoBatchWithin, Reason, TrialTimedOut
from feedprof.record.clock import MONOTONIC, Clock
from feedprof.record.sampler import Sampler
from feedprof.trial.options import TrialOptions
from feedprof.trial.protocol import read_events

POLL_S = 0.05
EXIT_GRACE_S = 3.0  # after the window is measured, how long the child may take to exit
REAP_WAIT_S = 5.0  # after SIGKILL, how long to wait for the group to be gone
KNOWN_REFRESH_S = 1.0  # how often descendants are listed, in case they leave the group


def kill_group(proc: Any, known: List[psutil.Process], clock: Clock = MONOTONIC) -> None:
    """SIGKILL the child's process group, and any descendant that left it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in known:
        try:
            if p.is_running():
                p.kill()
        except psutil.Error:
            pass
    if proc.poll() is None:  # forked before it had a group of its own: its group is not its pid yet
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process stuck in the kernel
        pass
    deadline = clock.now_s() + REAP_WAIT_S
    while clock.now_s() < deadline and group_alive(proc.pid):
        clock.sleep_s(0.02)


def group_alive(pgid: int) -> bool:
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False


def descendants(pid: int) -> List[psutil.Process]:
    """Every process below ``pid`` now (none if it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


class Watch:
    """Polls the child: its events, its exit, and the trial's time limits.
    (jobrunner.py's watch of a multi-process job builds on it.)"""

    exit_grace_s = EXIT_GRACE_S

    def __init__(self, proc: Any, origin: float, opts: TrialOptions, events_path: str,
                 on_poll: Optional[Callable[[], None]], clock: Clock):
        self.proc = proc
        self.origin = origin
        self.opts = opts
        self.events_path = events_path
        self.on_poll = on_poll
        self.clock = clock
        self.sampler: Optional[Sampler] = None
        self.offset = 0
        self.events: List[dict] = []
        self.timed_out: Optional[Reason] = None
        self.window_done_at: Optional[float] = None
        self.first_batch = False
        self.known: List[psutil.Process] = []
        self._t_known = float("-inf")

    def _poll_events(self) -> None:
        new, self.offset = read_events(self.events_path, self.offset)
        for ev in new:
            self.events.append(ev)
            kind = ev.get("event")
            if kind == "first_batch":
                self.first_batch = True
            elif kind == "window_done":
                self.window_done_at = self.clock.now_s()
                if self.opts.peers is not None:  # one rank of a job whose others other feedprofs run
                    self.opts.peers.window_done()
            if kind in ("loader", "first_batch") and self.sampler is not None:
                self.sampler.refresh_tree()  # workers start now: look for them at the next sample

    def _peers_done(self, now: float) -> bool:
        """Every rank of the job has its window (one feedprof per task: trial/peers.py), or the
        others had long enough; always true for a trial that is the whole job."""
        peers = self.opts.peers
        if peers is None:
            return True
        from feedprof.trial.peers import PEER_GRACE_S

        return peers.all_done() or now - self.window_done_at >= PEER_GRACE_S

    def paused_s(self) -> float:
        """Time that is no time of the trial's (a Slurm step waiting for resources: jobrunner.py)."""
        return 0.0

    def _limit_reached(self, now: float) -> bool:
        opts, elapsed = self.opts, now - self.origin - self.paused_s()
        if self.window_done_at is not None and self.opts.peers is not None:
            return self._peers_done(now)  # a rank trains on after its window: end it once every rank has one
        if self.window_done_at is not None and now - self.window_done_at >= self.exit_grace_s:
            return True  # measured; the script is ignoring StopTrial or slow to unwind
        if not self.first_batch and opts.loader_timeout_s is not None and elapsed > opts.loader_timeout_s:
            self.timed_out = NoBatchWithin(limit_s=opts.loader_timeout_s)
            return True
        if opts.timeout_s is not None and elapsed > opts.timeout_s:
            self.timed_out = TrialTimedOut(limit_s=opts.timeout_s)
            return True
        return False

    def wait(self) -> None:
        while True:
            self._poll_events()
            if self.proc.poll() is not None:
                self._poll_events()
                return
            now = self.clock.now_s()
            if now - self._t_known > KNOWN_REFRESH_S:  # remember descendants in case they leave the group
                self.known = list({p.pid: p for p in self.known + descendants(self.proc.pid)}.values())
                self._t_known = now
            if self._limit_reached(now):
                return
            if self.on_poll is not None:
                self.on_poll()
            self.clock.sleep_s(POLL_S)
