"""One feedprof at a time per output directory.

Two tunes (or a tune and a profile) writing to the same directory at once
would each clear the other's trial directories and overwrite its results, so
each holds an advisory lock on ``DIR/.feedprof.lock`` while it runs. The lock
goes with the process (the kernel drops it however the process ends), so
there is no stale lock to clean up; the file itself stays, holding the PID of
the last holder.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Iterator, Optional

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
    fd = os.open(os.path.join(out_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            raise OutDirInUse(out_dir, int(holder) if holder.isdigit() else None) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)  # releases the lock
