"""Nothing feedprof started outlives it, even when it is killed (SIGKILL, the
OOM killer, a closed SSH session) and cannot clean up after itself.

NOTE [ Lifeline ]

    feedprof ── holds the write end of one pipe for its whole life (never written, never closed)
       │  every process it starts gets the read end (pass_fds), named with its identity
       │  in FEEDPROF_LIFELINE=fd:dev:inode
       ├─ trial child (child.py), a fork of the fork server (zygote.py), every Python process
       │  of a launched job (bootstrap/sitecustomize.py): a daemon thread blocks reading it
       └─ the fork server itself (no thread: it forks) watches its stdin from feedprof the same way,
       and dies with feedprof while it imports the framework (die_with_parent: the kernel's
       parent-death signal; safe there, as the thread that starts it is the tune's own)

    feedprof dies ─► the kernel closes the write end ─► the read returns EOF ─► the watcher
    SIGKILLs its descendants that left its process group, then its group (itself, its loader
    workers, a launcher's ranks)

Unlike the kernel's parent-death signal (prctl PR_SET_PDEATHSIG), it fires on the death of
the process, not of the thread that started the child, reaches grandchildren (loader
workers, ranks) through the group kill, survives exec, and works on macOS too.
"""
from __future__ import annotations

import os
import signal
import stat
import sys
import threading
from typing import Dict, Optional, Tuple

LIFELINE_ENV = "FEEDPROF_LIFELINE"

_lock = threading.Lock()
_ends: Optional[Tuple[int, int]] = None  # (read, write) in feedprof's own process


def _pipe() -> Tuple[int, int]:
    global _ends
    with _lock:
        if _ends is None or _identity(_ends[0]) is None:
            _ends = os.pipe()  # both close-on-exec: only the children it is passed to get it
        return _ends


def _identity(fd: int) -> Optional[str]:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}" if stat.S_ISFIFO(st.st_mode) else None


def for_child() -> Tuple[Dict[str, str], Tuple[int, ...]]:
    """(environment entries, fds to pass) for a process feedprof starts."""
    read_fd, _ = _pipe()
    return {LIFELINE_ENV: f"{read_fd}:{_identity(read_fd)}"}, (read_fd,)


def inherited_fd(environ: Optional[Dict[str, str]] = None) -> Optional[int]:
    """The lifeline's read end in this process, if it was passed here (the number
    alone is not enough: a process that did not inherit it may use it for another file)."""
    value = (os.environ if environ is None else environ).get(LIFELINE_ENV, "")
    fd_text, _, identity = value.partition(":")
    if not fd_text.isdigit() or not identity:
        return None
    fd = int(fd_text)
    return fd if _identity(fd) == identity else None


def watch_from_env() -> bool:
    """In a process feedprof started: end this process's group when feedprof
    dies. False where no lifeline was passed (nothing to watch)."""
    fd = inherited_fd()
    if fd is None:
        return False
    threading.Thread(target=_watch, args=(fd,), name="feedprof-lifeline", daemon=True).start()
    return True


def _watch(fd: int) -> None:
    while True:
        try:
            if os.read(fd, 1):
                continue  # never written to; ignore it if it is
        except InterruptedError:
            continue
        except OSError:
            return  # closed under us (the script closed every descriptor): nothing to watch
        break
    end_everything()


def die_with_parent(parent_pid: int) -> None:
    """Linux: the kernel SIGKILLs this process when the thread that started it
    exits (prctl PR_SET_PDEATHSIG), for a process that cannot run a watcher yet
    (the fork server while it imports the framework, seconds). Only where that
    thread outlives the process by design; not inherited by forks."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # it died before the request was made
        os.kill(os.getpid(), signal.SIGKILL)


def end_everything() -> None:
    """SIGKILL this process's descendants that left its group, then the group (this process too)."""
    try:
        import psutil

        for p in psutil.Process().children(recursive=True):
            try:
                p.kill()
            except psutil.Error:
                pass
    except Exception:  # psutil missing or failing: the group kill below still ends most of it
        pass
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    finally:
        os.kill(os.getpid(), signal.SIGKILL)
