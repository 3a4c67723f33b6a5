"""Clean-up that a second Ctrl-C must not cut short.

When the user interrupts a tune, feedprof kills the running trial's process
group and writes what it measured. A second SIGINT (or a SIGTERM, a SIGHUP) arriving in
the middle of that would leave orphans or half-written files, so those
signals are held while it happens and delivered right after.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

HELD = (signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []))


@contextmanager
def deferred_signals() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives them
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
