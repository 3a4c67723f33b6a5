"""A job launched with ``srun``: its tasks are Slurm's, not srun's children.

NOTE [ A Slurm step ]

    feedprof ─► srun (its own session; PR_SET_PDEATHSIG=SIGTERM: feedprof killed ─► srun's own cancel)
                 │ outside an allocation: srun asks for one first (a job; squeue shows it, AllocSID = srun's PID)
                 │ inside one (sbatch, salloc): srun makes a step of the job around it
      slurmctld ─► slurmd ─► slurmstepd ─► task 0 … task N-1   (not descendants of srun)
      each task reports its rank and SLURM_JOB_ID.SLURM_STEP_ID ("started"), so the step is known by what it is

    waiting: no task yet and the job PENDING (or, inside an allocation, no step of srun's yet)
             ─► "waiting for resources", and the wait is no time of the trial's
    ending:  scancel --signal=KILL JOB.STEP (every task now, even one that ignores SIGTERM)
             ─► SIGTERM to srun (its own cancel; revokes a pending allocation) ─► srun exits
             ─► scancel JOB where srun made the allocation and it is still there
             ─► the launcher's process group, as for every launcher

The Slurm commands are looked up on PATH and read SLURM_CONF from the environment,
as srun itself does. Nothing here ends a job or step that is not this run's.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Tuple

from feedprof.record.clock import MONOTONIC, Clock

COMMAND_TIMEOUT_S = 10.0  # a slurmctld that does not answer must not hang feedprof
SRUN_EXIT_S = 5.0  # srun's own cancel: how long it may take to end its step and exit
GONE_WAIT_S = 5.0  # how long squeue may keep listing what was cancelled


def in_allocation(env: Mapping[str, str]) -> bool:
    """Is this process inside a Slurm allocation (an sbatch script, a salloc shell, a task)?
    There, srun makes a step of the job around it; outside, it asks for a job of its own."""
    return bool(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"))


def _run(argv: List[str]) -> Tuple[int, str]:
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                              timeout=COMMAND_TIMEOUT_S, text=True)
    except (OSError, subprocess.TimeoutExpired):
        return -1, ""
    return done.returncode, done.stdout


def jobs_of(srun_pid: int) -> List[Tuple[str, str]]:
    """(job id, state) of the jobs whose allocation srun ``srun_pid`` asked for (by their AllocSID:
    srun runs in a session of its own, so its session id is its PID)."""
    rc, out = _run(["squeue", "-h", "-O", "JobID:24,AllocSID:24,State:24"])
    if rc != 0:
        return []
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == str(srun_pid):
            found.append((parts[0], parts[2]))
    return found


def steps_of(job_id: str, srun_pid: int) -> List[str]:
    """The steps of job ``job_id`` that srun ``srun_pid`` started ("JOB.STEP"), from ``scontrol show step``."""
    rc, out = _run(["scontrol", "-o", "show", "step", job_id])
    if rc != 0:
        return []
    steps = []
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("SrunHost:Pid", "").rsplit(":", 1)[-1] == str(srun_pid) and "StepId" in fields:
            steps.append(fields["StepId"])
    return steps


def listed(what: str) -> bool:
    """Does squeue still list job or step ``what`` ("JOB" or "JOB.STEP")?"""
    job, _, step = what.partition(".")
    if step:
        rc, out = _run(["squeue", "-h", "-s", "-j", job, "-O", "StepId:32"])
        return rc == 0 and any(line.strip() == what for line in out.splitlines())
    rc, out = _run(["squeue", "-h", "-j", job, "-O", "JobID:24"])
    return rc == 0 and any(line.strip() == job for line in out.splitlines())


def scancel(what: str, kill: bool = False, signal_name: str = "") -> None:
    """Cancel job or step ``what``; ``kill``: SIGKILL its tasks at once (srun's cancel sends
    SIGTERM and waits the cluster's KillWait, 30 s by default, for a task that ignores it);
    ``signal_name``: only send its tasks that signal."""
    name = "KILL" if kill else signal_name
    _run(["scancel"] + ([f"--signal={name}"] if name else []) + [what])


def _term_on_parent_death() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def preexec_for_srun() -> Optional[Callable[[], None]]:
    """srun gets SIGTERM (its own cancel) when feedprof dies, even by SIGKILL: srun is no Python
    process and cannot watch the lifeline. The kernel's signal follows the thread that started
    srun, so it is asked for only from the main thread, which lives as long as feedprof does."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    return _term_on_parent_death


@dataclass
class SlurmStep:
    """The step (and, outside an allocation, the job) that one srun started."""

    srun: object  # its Popen
    own_allocation: bool  # srun asked for the allocation itself: ending the run ends the job
    step: str = ""  # "JOB.STEP", from the first task that reported it
    queued: str = ""  # the job id while it waits for resources
    waited_s: float = 0.0  # how long it waited, all told
    clock: Clock = MONOTONIC
    _last_check_s: float = float("-inf")
    _since_s: Optional[float] = None
    _started_s: float = 0.0

    def __post_init__(self) -> None:
        self._started_s = self.clock.now_s()

    @property
    def pid(self) -> int:
        return self.srun.pid  # type: ignore[attr-defined]

    def task_started(self, step: str) -> None:
        if step and not self.step:
            self.step = step
        self._stop_waiting()

    def _stop_waiting(self) -> None:
        if self._since_s is not None:
            self.waited_s += self.clock.now_s() - self._since_s
            self._since_s = None
        self.queued = ""

    def waiting(self, every_s: float = 1.0) -> bool:
        """Is the step still waiting for resources (checked at most every ``every_s``)?"""
        if self.step:
            return False
        now = self.clock.now_s()
        if now - self._last_check_s >= every_s:
            self._last_check_s = now
            self.queued = self._queued_job()
            if self.queued and self._since_s is None:
                self._since_s = now
            elif not self.queued:
                self._stop_waiting()
        return bool(self.queued)

    def waited_now_s(self) -> float:
        """The time spent waiting so far, the current wait included."""
        return self.waited_s + (self.clock.now_s() - self._since_s if self._since_s is not None else 0.0)

    def _queued_job(self) -> str:
        if self.own_allocation:
            return next((job for job, state in jobs_of(self.pid) if state == "PENDING"), "")
        job = os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID") or ""
        started_long_ago = self.clock.now_s() - self._started_s > 2.0  # a step exists within moments otherwise
        if job and started_long_ago and self.srun.poll() is None and not steps_of(job, self.pid):  # type: ignore
            return job
        return ""

    def end(self) -> List[str]:
        """End the step and, where srun made it, the job; what squeue still lists afterwards."""
        steps = [self.step] if self.step else []
        job_ids = [job for job, _ in jobs_of(self.pid)] if self.own_allocation else []
        if not steps and not self.own_allocation and in_allocation(os.environ):
            job = os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID") or ""
            steps = steps_of(job, self.pid) if job else []
        for step in steps:
            scancel(step, kill=True)
        self._cancel_srun()
        mine = steps + [j for j in job_ids + ([self.step.split(".")[0]] if self.step and self.own_allocation else [])
                        if j not in steps]
        for job in {m for m in mine if "." not in m}:
            if listed(job):
                scancel(job, kill=True)
        return self._still_listed(mine)

    def _cancel_srun(self) -> None:
        srun = self.srun
        if srun.poll() is not None:  # type: ignore[attr-defined]
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            return
        try:
            srun.wait(timeout=SRUN_EXIT_S)  # type: ignore[attr-defined]
        except subprocess.TimeoutExpired:
            pass

    def _still_listed(self, what: List[str]) -> List[str]:
        deadline = self.clock.now_s() + GONE_WAIT_S
        left = [w for w in set(what) if w]
        while left and self.clock.now_s() < deadline:
            left = [w for w in left if listed(w)]
            if left:
                self.clock.sleep_s(0.2)
        return sorted(left)
