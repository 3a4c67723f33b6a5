"""Where a process feedprof starts lives: a process group of its own, in feedprof's session.

NOTE [ A group, not a session ]

    user's shell (session S) ── feedprof ── trial child (group G = its pid, session S)
                                              └─ loader workers, ranks (group G)
    one killpg(G) ends the trial; the kernel schedules it as the script run from that shell

Why not a session of its own (setsid): with Linux's autogroup scheduling (on by
default where the kernel has it: /proc/sys/kernel/sched_autogroup_enabled),
every session is one scheduling group, and the groups share the CPUs equally
whatever their thread counts. A job in a session of its own then competes with
the rest of the user's session as a whole group, not thread by thread as the
script run from the shell does. Measured on 2 cores with a core spinning in the
user's session: a Hugging Face Trainer job ran 3.7-3.9 batches/s from the shell
and 1.5-1.6 in a session of its own (its two intra-op threads shared one core),
which made `feedprof profile` report half the job's speed. A group is all one
killpg needs.

A process of a background group that reads the terminal is stopped (SIGTTIN):
where feedprof's standard input is a terminal, the job's is /dev/null.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Callable, Dict, Optional


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def child_stdin(captured: bool) -> Optional[int]:
    """The standard input of a process feedprof starts: /dev/null for a trial whose
    output is captured, or where ours is a terminal (it could not read it); else ours."""
    return subprocess.DEVNULL if captured or _is_terminal(0) else None


def own_group(preexec: Optional[Callable[[], None]] = None) -> Dict[str, Any]:
    """``subprocess.Popen`` keywords: the child leads a new process group in our session
    (and runs ``preexec`` after that, where given)."""
    if preexec is None and sys.version_info >= (3, 11):
        return {"process_group": 0}  # set before exec, without a Python callback

    def group_then_preexec() -> None:
        os.setpgid(0, 0)
        if preexec is not None:
            preexec()

    return {"preexec_fn": group_then_preexec}


def own_session(preexec: Optional[Callable[[], None]] = None) -> Dict[str, Any]:
    """``subprocess.Popen`` keywords: the child leads a session of its own (srun: see the module's
    NOTE), and runs ``preexec`` after that, where given."""
    return {"start_new_session": True, "preexec_fn": preexec}


def lead_group_after_fork(pid: int = 0) -> None:
    """A forked child in a group of its own: called in the child (``pid`` 0) and by the
    parent for that child, so the group exists whichever runs first (as shells do)."""
    try:
        os.setpgid(pid, pid)
    except (PermissionError, ProcessLookupError):  # the child already exec'd or ended: it did it itself
        pass
