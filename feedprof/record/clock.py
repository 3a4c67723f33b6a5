"""The clock feedprof reads, behind an interface small enough to fake: every
timing decision (sampling ticks, trial windows, time limits, the tune's
budget) goes through a ``Clock``, so tests drive it with a fake one, and so
does the wall-clock time a record is stamped with (``now_iso``).

``time.perf_counter`` is ``CLOCK_MONOTONIC`` on Linux: one clock for the whole
machine, so a timestamp taken in a trial child and one taken by the sampler in
the parent process can be compared directly.
"""
from __future__ import annotations

import datetime
import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_s(self) -> float:
        """Seconds on a monotonic, machine-wide clock."""

    def wait_s(self, event: threading.Event, timeout_s: float) -> bool:
        """Block until ``event`` is set or ``timeout_s`` passed; True if set."""

    def sleep_s(self, seconds: float) -> None:
        """Let ``seconds`` pass."""

    def wall_s(self) -> float:
        """Seconds since the epoch: for the timestamps people read, never for durations."""

    def thread_cpu_s(self) -> float:
        """The calling thread's CPU time: how much of a stretch of wall time it computed (the rest
        it was blocked, or waiting for a CPU)."""


class MonotonicClock:
    now_s = staticmethod(time.perf_counter)
    wall_s = staticmethod(time.time)
    thread_cpu_s = staticmethod(time.thread_time)  # about 0.5 us a read here

    @staticmethod
    def wait_s(event: threading.Event, timeout_s: float) -> bool:
        return event.wait(max(0.0, timeout_s))

    @staticmethod
    def sleep_s(seconds: float) -> None:
        time.sleep(max(0.0, seconds))


MONOTONIC = MonotonicClock()


def now_iso(clock: Clock = MONOTONIC) -> str:
    """The wall-clock time, local, to the second: when a run or a tune started."""
    return datetime.datetime.fromtimestamp(clock.wall_s()).astimezone().isoformat(timespec="seconds")
