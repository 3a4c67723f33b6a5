"""Who is on each GPU, and which of them look abandoned (``feedprof gpus``).

NOTE [ How an abandoned process shows ]

    shell ─► python train.py (leader of its process group G) ─► DataLoader workers (group G)
             killed (OOM, Ctrl-C in the wrong place, a lost SSH session)
                 workers: adopted by init (PPID 1) or a subreaper, group G has no leader,
                          and a worker that was inside a CUDA call keeps its memory

Linux forgets the original parent once a process is adopted, so it is
inferred: a parent that is PID 1 or a known reaper, with the process neither
in its parent's group nor leading a session of its own (a service or daemon
that did ``setsid`` is left alone), is *adopted*. Being adopted, or in a group
whose leader is gone, is not by itself a sign that the job ended: a job started
with ``nohup`` from a shell since closed, by a wrapper script that exited, or
from a backgrounded subshell looks just the same, and it is still training.
Only a process that exists to serve another one is called left behind when it
is adopted or its job's leader is gone (then the one it served has ended):

    a DataLoader worker (torch names it pt_data_worker)
    a multiprocessing child (spawn, forkserver, the resource tracker: their command lines say so)
    a rank torchrun started (TORCHELASTIC_RUN_ID in its environment): its launcher is gone
    a process of a trial that has ended (record/leftovers.py knows it: ``job_ended``)

A Jupyter kernel whose connection file is gone is no longer known to its
server. feedprof names these and the command that ends them; it never ends a
process itself.

A process in the middle of exec shows an empty command line and environment
for a moment (the kernel has installed its new memory but not yet written its
arguments there; its parent is already told that exec succeeded), and on a
busy machine that moment can last: an empty one is read again for up to
SETTLE_S before it is believed (a zombie's or a kernel thread's stays empty).
"""
from __future__ import annotations

import os
import re
import shlex
import time
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

import psutil

from feedprof.store.procs import (ORPHAN_ADOPTED, ORPHAN_JOB_GONE, ORPHAN_KERNEL_UNOWNED, GpuProcess, GpuState,
                                  GpusView, ProcessInfo)

# Parents that adopt orphans: init systems and the subreapers of containers and user sessions.
REAPERS = frozenset({"init", "systemd", "tini", "docker-init", "dumb-init", "catatonit", "s6-svscan",
                     "runit", "containerd-shim"})
_KERNEL_FILE = re.compile(r"ipykernel_launcher(?:\.py)?\s+(?:.*\s)?-f\s+(\S+\.json)")
# Processes that only run for another one (see the NOTE).
WORKER_NAMES = frozenset({"pt_data_worker"})
_MP_CHILD = re.compile(r"multiprocessing\.(?:spawn|forkserver|resource_tracker)|--multiprocessing-fork")
LAUNCHED_BY_ENV = ("TORCHELASTIC_RUN_ID",)  # torchrun sets it for every rank it starts
SETTLE_S = 0.5  # how long an empty command line or environment is read again (a process in exec: the NOTE)
SETTLE_STEP_S = 0.01
KTHREADD_PID = 2  # the parent of every kernel thread: their command lines are empty for good

T = TypeVar("T")


def settled(read: Callable[[], T], may_be_in_exec: bool, deadline: float) -> T:
    """``read()`` (a command line, an environment), read again while it is empty
    and the process may be in the middle of exec, until ``deadline`` (monotonic)."""
    value = read()
    while not value and may_be_in_exec and time.monotonic() < deadline:
        time.sleep(SETTLE_STEP_S)
        value = read()
    return value


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _ids(pid: int) -> Tuple[Optional[int], Optional[int]]:
    try:
        return os.getpgid(pid), os.getsid(pid)
    except OSError:
        return None, None


def adopted(pid: int, ppid: int, pgid: Optional[int], sid: Optional[int], parent_name: str) -> bool:
    """Whether init or a subreaper adopted the process (its own parent is gone)."""
    if ppid != 1 and parent_name not in REAPERS:
        return False
    if sid == pid:  # a session of its own: a service or a daemon, started that way on purpose
        return False
    return pgid != ppid  # in its parent's group: PID 1 really started it (a container's entrypoint)


def serves_another(name: str, command: str, environ: Callable[[], Dict[str, str]]) -> bool:
    """Whether the process exists to serve another one (a worker, a rank; the NOTE)."""
    if name in WORKER_NAMES or _MP_CHILD.search(command):
        return True
    try:
        env = environ()
    except (psutil.Error, OSError):  # another user's, or gone
        return False
    return any(k in env for k in LAUNCHED_BY_ENV)


def orphan_code(command: str, pid: int, adopted_: bool, pgid: Optional[int],
                leader_alive: Optional[bool], parent_in_session: bool = False, serves: bool = True) -> str:
    """``parent_in_session``: its parent is of its own session, so the parent is
    the job's (a process adopted by a reaper has a parent outside its session);
    ``serves``: it exists to serve another process (serves_another), or its job
    is known to have ended; a program of its own is a job, adopted or not."""
    if serves and adopted_:
        return ORPHAN_ADOPTED
    if serves and pgid is not None and pgid != pid and leader_alive is False and not parent_in_session:
        return ORPHAN_JOB_GONE
    kernel = _KERNEL_FILE.search(command)
    if kernel and not os.path.exists(kernel.group(1)):
        return ORPHAN_KERNEL_UNOWNED
    return ""


def describe_process(pid: int, job_ended: bool = False) -> ProcessInfo:
    """A process as psutil sees it; ``visible=False`` when it is not in this PID
    namespace. ``job_ended``: the caller knows its job has ended (a trial's)."""
    deadline = time.monotonic() + SETTLE_S
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            ppid, state, name = p.ppid(), p.status(), p.name()
        in_exec = state != psutil.STATUS_ZOMBIE and KTHREADD_PID not in (pid, ppid)  # may be: see the NOTE
        try:
            command = shlex.join(settled(p.cmdline, in_exec, deadline)) or f"[{p.name()}]"
        except psutil.AccessDenied:
            command = f"[{p.name()}]"
        with p.oneshot():
            try:
                user = p.username()
            except (psutil.AccessDenied, KeyError):  # KeyError: a UID with no passwd entry
                user = str(p.uids().real)
    except psutil.NoSuchProcess:
        return ProcessInfo(pid=pid, visible=False)
    except psutil.AccessDenied:
        return ProcessInfo(pid=pid, command="[not readable]")
    parent_command = ""
    if ppid:
        try:
            parent_command = psutil.Process(ppid).name()
        except psutil.Error:
            pass
    pgid, sid = _ids(pid)
    is_adopted = adopted(pid, ppid, pgid, sid, parent_command)
    leader_alive = None if pgid is None or pgid == pid else _alive(pgid)
    parent_in_session = sid is not None and bool(ppid) and _ids(ppid)[1] == sid
    serves = job_ended or serves_another(name, command, lambda: settled(p.environ, in_exec, deadline))
    return ProcessInfo(pid=pid, command=command, user=user, state=state, ppid=ppid,
                       parent_command=parent_command, parent_alive=not is_adopted, pgid=pgid,
                       group_leader_alive=leader_alive,
                       orphan=orphan_code(command, pid, is_adopted, pgid, leader_alive, parent_in_session, serves))


def gpus_view(gpu: Any) -> GpusView:
    """Every device of an opened ``record.gpu`` backend, its readings and its processes.

    ``gpu`` is what :func:`feedprof.record.gpu.open_gpu` returns; the caller closes it.
    """
    if gpu.status != "ok":
        return GpusView(status=str(gpu.status), detail=getattr(gpu, "detail", ""))
    states = []
    for info, reading, procs in zip(gpu.devices, gpu.read(), gpu.processes()):
        listed = None if procs is None else tuple(
            GpuProcess(process=describe_process(p.pid), gpu_mem_bytes=p.used_bytes, kind=p.kind) for p in procs)
        states.append(GpuState(cuda_index=info.cuda_index, nvml_index=info.nvml_index, uuid=info.uuid,
                               name=info.name, mem_total_bytes=info.mem_total_bytes, util_pct=reading.util_pct,
                               mem_used_bytes=reading.mem_used_bytes, power_w=reading.power_w,
                               processes=listed))
    return GpusView(status="ok", driver_version=gpu.driver_version() or "", gpus=tuple(states))


def gpus_now() -> GpusView:
    """:func:`gpus_view` of the CUDA-visible GPUs, NVML opened and closed for it."""
    from feedprof.record.gpu import open_gpu

    gpu = open_gpu()
    try:
        return gpus_view(gpu)
    finally:
        gpu.close()
