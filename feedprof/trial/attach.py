"""``feedprof attach PID``: a running job read from outside, read-only, for a window of seconds: its
training thread's and its loader workers' stacks (record/pyspy.py, without stopping them), the CPU
and memory of every process of it (record/sampler.py, as a trial is sampled), and the record a
profile writes, marked attached: its figures are shares of samples, not timings.

    PID ─► readable? (why_not_readable: no such PID, not Python, ptrace not allowed) ─► AttachRefused
        ─► a launcher (torchrun, mpirun, ...)? its ranks below it, each read alike (Run.ranks)
        ─► py-spy ×2 + the host sampler, for the window (Ctrl-C, SIGTERM: stopped early, kept)
        ─► attached_stacks: the wait inside __next__, where the rest goes, the workers' lines, a stop
        ─► Run(kind=attached, summary, loading, attached=AttachedInfo)

Nothing of the job is changed and nothing is left running: py-spy reads memory with process_vm_readv
(--nonblocking: the job is never paused), and both samplers end with the window.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from typing import Dict, List, Optional, Sequence, Tuple

import psutil

from feedprof import defaults
from feedprof.analyse import rules
from feedprof.analyse.diagnose import classify
from feedprof.record.clock import MONOTONIC
from feedprof.record.host import local_world_size, usable_cpu_count
from feedprof.record.pyspy import Sampler as StackSampler, ThreadStacks, find_pyspy, why_not_readable
from feedprof.record.ranks import is_launcher, rank_from_env
from feedprof.record.sampler import Sampler
from feedprof.record.workers import OBSERVED
from feedprof.store import HostInfo, LoaderRecord, Outcome, RankInfo, Run, RunKind, Summary, TrialState, Window, \
    WindowEnd
from feedprof.store.attached import AttachedInfo
from feedprof.store.codes import Framework
from feedprof.store.reasons import AttachAdvice, LoopStopped, NoLoaderSeen, Reason
from feedprof.trial import attached_stacks as st

DEFAULT_DURATION_S = 30.0


class AttachRefused(Exception):
    """The PID cannot be read: ``why`` is a code (no_pid, not_python, ptrace_scope, other_user,
    no_pyspy, pyspy_failed), ``detail`` what the sampler said."""

    def __init__(self, pid: int, why: str, detail: str = ""):
        super().__init__(why)
        self.pid, self.why, self.detail = pid, why, detail


def _cmdline(pid: int) -> Tuple[Tuple[str, ...], str]:
    try:
        p = psutil.Process(pid)
        return tuple(p.cmdline()), p.cwd()
    except psutil.Error:
        return (), ""


def targets(pid: int) -> List[int]:
    """The processes to read: ``pid`` itself, or, where it is a launcher (torchrun, mpirun, srun, ...),
    the ranks below it (Python processes with a rank in their environment; a launcher is never one)."""
    argv, _ = _cmdline(pid)
    if not is_launcher(list(argv[1:]), list(argv)):
        return [pid]
    ranks: List[Tuple[int, int]] = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            rank = rank_from_env(child.environ())
            if rank is not None and not is_launcher(child.cmdline()[1:], child.cmdline()):
                ranks.append((rank.rank, child.pid))
        except psutil.Error:
            continue
    return [p for _, p in sorted(ranks)] or [pid]


def check_readable(pid: int) -> None:
    """AttachRefused where ``pid`` cannot be read from here (before anything is started or written)."""
    why = why_not_readable(pid)
    if why:
        raise AttachRefused(pid, why)
    if find_pyspy() is None:
        raise AttachRefused(pid, "no_pyspy")


def attach(pid: int, duration_s: float, host: HostInfo, gpu: bool = True,
           rate_hz: int = defaults.ATTACH_RATE_HZ) -> Tuple[Run, bool]:
    """Read the job for ``duration_s`` (less where interrupted), ``rate_hz`` stack samples a second per
    process: (its run, interrupted)."""
    check_readable(pid)
    pids = targets(pid)
    spies = [StackSampler(p, duration_s, rate_hz).start() for p in pids]
    hosts = [Sampler(pid=p, interval_s=0.5, gpu=gpu and k == 0, worker_probe=OBSERVED).start()
             for k, p in enumerate(pids)]
    t0, interrupted = MONOTONIC.now_s(), False
    try:
        for spy in spies:
            spy.wait(timeout_s=duration_s + 60)
    except (KeyboardInterrupt, subprocess.TimeoutExpired) as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        for spy in spies:
            spy.stop()
    finally:
        window_s = MONOTONIC.now_s() - t0
        samples = [h.stop() for h in hosts]
    runs = [_run_of(p, spy, s, host, window_s, len(pids)) for p, spy, s in zip(pids, spies, samples)]
    if len(runs) == 1:
        return runs[0], interrupted
    from feedprof.analyse.diagnose import summarize_job

    job = dataclasses.replace(runs[0], ranks=tuple(runs), rank=None, loaders=(), loading=())
    return dataclasses.replace(job, summary=summarize_job(job), attached=dataclasses.replace(
        runs[0].attached, rank_pids=tuple(pids), pid=pid, command=_cmdline(pid)[0])), interrupted


def _run_of(pid: int, spy: StackSampler, samples: object, host: HostInfo, window_s: float, ranks: int) -> Run:
    threads, said = spy.result()
    if not threads:
        raise AttachRefused(pid, "pyspy_failed", said)
    argv, cwd = _cmdline(pid)
    script = next((a for a in argv[1:] if a.endswith(".py")), "")
    user = st.UserFiles([os.path.dirname(os.path.join(cwd, script)) if script else "", cwd])
    interval_s = 1.0 / spy.rate_hz
    training = st.training_thread(threads.values(), pid)
    workers = st.workers_of(threads.values(), pid)
    if training is None:
        raise AttachRefused(pid, "pyspy_failed", said or "no thread of the process was sampled")
    info = _info(pid, training, workers, user, interval_s, window_s, argv, cwd)
    loader = _loader(threads, training, workers, user, pid)
    run = Run(kind=RunKind.ATTACHED, script=os.path.join(cwd, script) if script else None, argv=tuple(argv[2:]),
              started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), duration_s=window_s, host=host,
              loaders=(loader,), window=Window(loader_id=0, t_start_s=0.0, t_end_s=window_s, end=WindowEnd.SECONDS),
              samples=samples, outcome=Outcome(state=TrialState.OK),
              loading=tuple(p for p in (st.loading_of(workers, training, user, interval_s),) if p is not None),
              rank=_rank(pid, ranks), attached=info)
    return dataclasses.replace(run, summary=_summary(run, info, loader))


def _info(pid: int, training: ThreadStacks, workers: Sequence[ThreadStacks], user: st.UserFiles, interval_s: float,
          window_s: float, argv: Sequence[str], cwd: str) -> AttachedInfo:
    share, noise = st.wait_share(training)
    moved = st.advanced(training, workers)
    return AttachedInfo(sampler=f"py-spy {_pyspy_version()}", rate_hz=round(1 / interval_s), window_s=window_s,
                        samples=training.samples, wait_share=share, wait_noise=noise, pid=pid, command=tuple(argv),
                        cwd=cwd, advanced=moved, rest=st.rest_of(training, user, interval_s),
                        waits=st.waits_of(training, workers, user) if moved is False else (),
                        unknown=("prefetch_factor", "persistent_workers"))


def _loader(threads: Dict[Tuple[int, int], ThreadStacks], training: ThreadStacks, workers: Sequence[ThreadStacks],
            user: st.UserFiles, pid: int) -> LoaderRecord:
    """What can be read of the loader from outside: its workers, a pin-memory thread, where it is iterated."""
    site = ""
    for frames in sorted(training.stacks, key=lambda f: -training.stacks[f][0]):
        i = st.in_next(frames)
        if i:
            site, _ = st.innermost_user(frames[:i], user)
            break
    config = {"num_workers": len(workers), "pin_memory": st.pin_memory_thread(threads.values(), pid)}
    return LoaderRecord(loader_id=0, framework=Framework.TORCH, name=site, site=site, call_chain=(site,) if site else (),
                        config=config, script_config=config)


def _summary(run: Run, info: AttachedInfo, loader: LoaderRecord) -> Summary:
    from feedprof.analyse.diagnose import host_means

    notes: List[Reason] = []
    if info.advanced is False:
        notes.append(LoopStopped(waits=info.waits))
    wait = info.wait_share
    if not loader.site and info.advanced is not False:  # (no sample inside a loader's __next__: no wait to read)
        notes.append(NoLoaderSeen(samples=info.samples))
        wait = None
    n = int(loader.config.get("num_workers") or 0)
    if wait is not None and info.wait_share >= rules.MIN_WAIT_FRACTION and info.advanced is not False:
        notes.append(AttachAdvice(workers=n, wait_share=info.wait_share, predicted_workers=predicted_workers(
            n, info.wait_share), command=info.command, cwd=info.cwd))
    return Summary(loader=loader.site or "the loader", framework=Framework.TORCH, measured_s=info.window_s,
                   data_wait_fraction=wait, input_bound=classify(wait), num_workers=n,
                   **host_means(run), notes=tuple(notes))


def predicted_workers(workers: int, wait_share: float) -> int:
    """The worker count the wait predicts reaches the compute ceiling (the rate were data always
    ready: 1 / the step's share), as a held online loader is advised it: predicted, not measured."""
    rate = max(1e-6, 1.0 - wait_share)
    return rules.jump_target(workers, rate, 1.0, rules.ONLINE) if workers else \
        max(2, rules.jump_target(1, rate, 1.0, rules.ONLINE))


def _rank(pid: int, ranks: int) -> Optional[RankInfo]:
    if ranks <= 1:
        return None
    try:
        info = rank_from_env(psutil.Process(pid).environ())
    except psutil.Error:
        info = None
    if info is None:
        return None
    return dataclasses.replace(info, pid=pid, cpus=max(1, usable_cpu_count() // max(1, local_world_size(
        {"LOCAL_WORLD_SIZE": str(info.local_world_size)}))))


def _pyspy_version() -> str:
    try:
        out = subprocess.run([find_pyspy() or "py-spy", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.stdout.strip().split()[-1] if out.stdout.strip() else "?"
