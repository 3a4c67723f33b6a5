"""When a trial's window of its training loader is measured: enough batches or enough seconds
(several times what the loader holds in flight), and a rate that is steady (the window's start
moved past a first chunk of start-up); the window as the run records it (trial/controller.py asks).
"""
from __future__ import annotations

from typing import Optional

from feedprof.analyse import stats
from feedprof.record.steps import StepRecorder
from feedprof.store import Window, WindowEnd
from feedprof.trial.protocol import TrialSpec

QUEUE_MULTIPLE = 4  # a window holds at least this many times the batches in flight
SETTLE_TOLERANCE = 0.10  # a first chunk this much faster or slower than the rest is not steady yet
MAX_SETTLE_MOVES = 3  # the window's start moves at most this often


def window_full(rec: StepRecorder, spec: TrialSpec) -> Optional[WindowEnd]:
    """Has the window enough batches, or enough seconds? Seconds are counted on the wall clock
    from the window's start, epoch start-ups included: with short epochs those are a real share of
    the time (what persistent_workers saves) and must be inside the window. A window is at least
    QUEUE_MULTIPLE times the batches the loader holds in flight, so that a queue filled at start-up
    is a small part of it."""
    steady = rec.window_batches()
    start = rec.window_start_s()
    window_s = 0.0 if start is None else rec.t_last - start
    if steady >= spec.window_batches:
        return WindowEnd.BATCHES
    least = max(spec.min_window_batches, QUEUE_MULTIPLE * rec.info.in_flight)
    if window_s >= spec.window_seconds and steady >= least:
        return WindowEnd.SECONDS
    return None


class WindowStart:
    """Where the window starts: past its first chunk while that chunk is not the steady rate (at
    most MAX_SETTLE_MOVES times). ``origin_s``: the trial's time zero."""

    def __init__(self, origin_s: float):
        self.origin_s = origin_s
        self.moves = 0

    def settled(self, rec: StepRecorder) -> bool:
        """Is the window's rate steady? A first chunk much faster than the rest is a queue filled
        during start-up draining (deep prefetch queues of many workers); one much slower is
        start-up still going on (many workers starting on few CPUs, the loop waiting for a CPU
        while they do). Either way the window then starts after that chunk, and goes on."""
        if rec.window_from_batches >= rec.steady_batches or self.moves >= MAX_SETTLE_MOVES:
            return True
        origin = self.origin_s
        start = rec.window_start_s()
        log = rec.step_log()
        chunks = stats.chunks(log, stats.DEFAULT_CHUNKS, None if start is None else start - origin)
        rest = stats.median([rate for _, rate in chunks[1:]])
        if len(chunks) < 3 or not rest or abs(chunks[0][1] / rest - 1) <= SETTLE_TOLERANCE:
            return True
        first_end = log.t_end_s[chunks[0][0]] + origin
        rec.window_from_batches = rec.steady_batches - sum(
            n for t, n in zip(log.t_end_s, log.n_steps) if t + origin > first_end)
        rec.window_from_s = first_end
        self.moves += 1
        return False


def window_of(rec: StepRecorder, end: WindowEnd, origin_s: float) -> Window:
    """The window ``rec`` measured, in the trial's time."""
    start = rec.window_start_s()
    return Window(loader_id=rec.loader_id, t_start_s=None if start is None else start - origin_s,
                  t_end_s=None if rec.t_last is None else rec.t_last - origin_s, end=end)
