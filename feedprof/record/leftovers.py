"""What a run left behind once it ended: its processes still alive, and GPU
memory its processes still hold. Checked after every trial (``feedprof
profile`` and every trial of ``feedprof tune``); reported, never killed here.

NOTE [ Finding what escaped a trial ]

    trial child (its own process group = its pid, in feedprof's session: trial/group.py)
      ─► loader workers, helpers
    watch.kill_group: SIGKILL the group + every descendant seen while it ran
    still alive afterwards, and one of:
      a descendant seen while it ran ............... it left the group (setpgid, setsid)
      FEEDPROF_TRIAL_DIR=<trial dir> in its environ  anything exec'd below the trial, even
                                                     after setsid and a double fork
      stdout/stderr open on a file in the trial dir  forks of a trial forked by the fork server
                                                     (a fork's /proc environ is its parent's
                                                     exec-time one, without the variable)
      FEEDPROF_FORK_SERVER=<the trial's fork server>  the same, with stdio sent to /dev/null (the
                                                     server's mark is in its exec-time environ)
    and started after the trial was launched (no earlier trial's, no reused PID).
    (A process exec'd with an emptied environment that left the group between two looks
    at the trial's descendants is not found: its session is the user's, not the trial's.)

GPU memory: NVML's per-process lists, against every PID the run is known to
have had. The driver frees a killed process's memory a moment after it dies,
so a listed PID gets ``release_s`` to go before it counts.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterable, List, Optional, Set

import psutil

from feedprof.record.clock import MONOTONIC, Clock
from feedprof.record.gpu_procs import describe_process
from feedprof.store.codes import GpuStatus
from feedprof.store.procs import GpuMemoryHeld, Leftovers

TRIAL_ENV = "FEEDPROF_TRIAL_DIR"  # set for every trial child by trial/runner.py, inherited by its descendants
FORK_SERVER_ENV = "FEEDPROF_FORK_SERVER"  # one mark per fork server (trial/zygote.py)
CLOCK_SLACK_S = 0.05  # psutil's create_time counts clock ticks (10 ms)


def process_clock_s() -> float:
    """Now, on the clock of psutil's ``create_time`` (boot time + time since
    boot, where the boot time is whole seconds: ``time.time()`` can be up to a
    second off it). The kernel's clock, not a ``Clock``: it is only ever
    compared with the kernel's own process start times, which no fake moves."""
    try:
        return psutil.boot_time() + time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # no CLOCK_BOOTTIME outside Linux
        return time.time()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _writes_into(pid: int, directory: str) -> bool:
    for fd in (1, 2):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # gone, not ours, or not Linux
            continue
        if target.startswith(directory + os.sep):
            return True
    return False


def _belongs(p: psutil.Process, trial_dir: str, fork_server: Optional[str]) -> bool:
    if _writes_into(p.pid, os.path.abspath(trial_dir)):
        return True
    try:
        env = p.environ()
    except psutil.Error:  # another user's process, or gone
        return False
    return env.get(TRIAL_ENV) == trial_dir or (fork_server is not None and env.get(FORK_SERVER_ENV) == fork_server)


def _fork_server_mark(pid: Optional[int]) -> Optional[str]:
    try:
        return None if pid is None else psutil.Process(pid).environ().get(FORK_SERVER_ENV)
    except psutil.Error:
        return None


def stray_processes(trial_dir: str, known: Iterable[psutil.Process] = (),
                    since_s: Optional[float] = None,
                    fork_server_pid: Optional[int] = None) -> Dict[int, psutil.Process]:
    """The trial's processes that are still alive, by PID (see the NOTE above).

    ``since_s``: when the trial was launched (:func:`process_clock_s`); ``fork_server_pid``:
    the fork server the trial was forked from, if it was.
    """
    me = os.getpid()
    found = {p.pid: p for p in known if p.pid != me and _alive(p)}
    uid = os.getuid()
    server = _fork_server_mark(fork_server_pid)
    for p in psutil.process_iter(["pid", "uids", "status", "create_time"]):
        info = p.info
        if p.pid in found or p.pid in (me, fork_server_pid) or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if uid != 0 and (info["uids"] is None or info["uids"].real != uid):
            continue  # another user's: not ours to have started, and its environ is unreadable
        if since_s is not None and (info["create_time"] or 0.0) < since_s - CLOCK_SLACK_S:
            continue
        if _belongs(p, trial_dir, server):
            found[p.pid] = p
    return found


def _held(gpu: Any, pids: Set[int]) -> List[GpuMemoryHeld]:
    held = []
    for info, procs in zip(gpu.devices, gpu.processes()):
        for p in procs or ():
            if p.pid in pids:
                held.append(GpuMemoryHeld(pid=p.pid, uuid=info.uuid, cuda_index=info.cuda_index,
                                          used_bytes=p.used_bytes))
    return held


def find_leftovers(trial_dir: str, root_pid: int, known: Iterable[psutil.Process] = (), gpu: Any = None,
                   since_s: Optional[float] = None, fork_server_pid: Optional[int] = None,
                   settle_s: float = 0.5, release_s: float = 2.0, clock: Clock = MONOTONIC) -> Leftovers:
    """Processes of a finished trial still alive, and GPU memory the trial's
    processes still hold (``gpu``: an opened ``record.gpu`` backend, or None).

    Processes killed a moment ago get ``settle_s`` to disappear, GPU memory
    ``release_s`` to be freed; a clean run pays one scan of the process table
    (~15 ms for 120 processes).
    """
    known = list(known)
    strays = stray_processes(trial_dir, known, since_s, fork_server_pid)
    deadline = clock.now_s() + settle_s
    while strays and clock.now_s() < deadline:  # killed a moment ago: still exiting?
        clock.sleep_s(0.05)
        strays = {pid: p for pid, p in strays.items() if _alive(p)}
    held: List[GpuMemoryHeld] = []
    checked = gpu is not None and gpu.status == "ok"
    if checked:
        ours = {root_pid} | {p.pid for p in known} | set(strays)
        deadline = clock.now_s() + release_s
        held = _held(gpu, ours)
        while any(h.pid not in strays for h in held) and clock.now_s() < deadline:
            clock.sleep_s(0.1)
            held = _held(gpu, ours)
    return Leftovers(processes=tuple(describe_process(pid, job_ended=True) for pid in sorted(strays)),
                     gpu_memory=tuple(held), gpu_checked=checked)


def check_run(trial_dir: str, root_pid: int, known: Iterable[psutil.Process] = (), use_gpu: bool = True,
              since_s: Optional[float] = None, fork_server_pid: Optional[int] = None,
              clock: Clock = MONOTONIC) -> Leftovers:
    """:func:`find_leftovers` with NVML opened (and closed) for the check."""
    from feedprof.record.gpu import NullGpu, open_gpu

    gpu = open_gpu() if use_gpu else NullGpu(GpuStatus.OFF)
    try:
        return find_leftovers(trial_dir, root_pid, known, gpu=gpu, since_s=since_s, fork_server_pid=fork_server_pid,
                              clock=clock)
    finally:
        gpu.close()
