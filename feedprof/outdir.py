"""One feedprof at a time per output directory.

Two tunes (or a tune and a profile) writing to the same directory at once
would each clear the other's trial directories and overwrite its results, so
each holds an advisory lock on ``DIR/.feedprof.lock`` while it runs. The lock
goes with the process (the kernel drops it however the process ends), so
there is no stale lock to clean up; the file, holding the holder's PID, is
removed as the run ends (interrupted too), and a file left by a killed run is
taken over by the next.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Iterator, Optional

from feedprof.trial.signals import deferred_signals

LOCK_NAME = ".feedprof.lock"


class OutDirInUse(Exception):
    """Another feedprof process is writing to this directory."""

    def __init__(self, out_dir: str, pid: Optional[int]):
        holder = f" (PID {pid})" if pid else ""
        super().__init__(f"{out_dir} is in use by another feedprof run{holder}: give another --out, "
                         "or wait for it to finish")
        self.out_dir = out_dir
        self.pid = pid


@contextlib.contextmanager
def claimed(out_dir: str) -> Iterator[None]:
    """Hold ``out_dir`` for this process while the block runs; OutDirInUse if another holds it."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, LOCK_NAME)
    fd = _locked(path)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        _release(path, fd)


def _locked(path: str) -> int:
    """The lock file's descriptor, locked: again where the file was removed by its last holder between
    our open and our lock (the lock would be on a file no other run can find)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise OutDirInUse(os.path.dirname(path), int(holder) if holder.isdigit() else None) from None
        if _same_file(path, fd):
            return fd
        os.close(fd)


def _release(path: str, fd: int) -> None:
    """The lock file removed, then the lock dropped, with Ctrl-C and SIGTERM held off meanwhile (an
    interrupt between the two would leave the file behind)."""
    with deferred_signals():
        try:
            if _same_file(path, fd):
                os.unlink(path)
        except OSError:  # (a directory that went read-only or away: the kernel drops the lock all the same)
            pass
        finally:
            os.close(fd)


def _same_file(path: str, fd: int) -> bool:
    try:
        st, mine = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
