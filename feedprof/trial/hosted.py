"""The trial controller inside a rank of a multi-process job.

NOTE [ Every rank instrumented, the script untouched ]

    jobrunner: env FEEDPROF_JOB_SPEC=job.json, PYTHONPATH=feedprof/trial/bootstrap:...
      launcher (torchrun, mpirun, a shell script...) ─► rank processes: python train.py
        sitecustomize.py (at interpreter start) ─► maybe_host():
          a rank? (its launcher's environment, record/ranks.py; or the job's own script)
            yes: Controller(rank) + post-import hooks, as in a trial child (child.py);
                 results to result-<rank>.json, events to events-<rank>.jsonl;
                 out of feedprof's sight (another node): its own samples too (rank_meter.py),
                 its time counted from the trial's start through the wall clock;
                 the script then runs as the real __main__, unmodified
            no:  nothing (the launcher; loader workers started with spawn)
      each rank: window measured ─► result written, "window_done" ─► it trains on
      jobrunner: every rank done ─► the whole job's process group is ended together

A rank that fails writes its own traceback (sys.excepthook); one that ends
writes what it measured (atexit); sys.exit's code is kept for the result; one
ended by SIGTERM writes it first and takes its loader workers with it.
"""
from __future__ import annotations

import atexit
import dataclasses
import os
import signal
import sys
import threading
from typing import List, Mapping, Optional, Type

from types import FrameType, TracebackType

from feedprof.record.host import usable_cpu_count
from feedprof.record.ranks import cpu_share, is_launcher, rank_from_env, sight
from feedprof.record.userframes import failure_hint, script_traceback
from feedprof.store import RankInfo, TrialState
from feedprof.store.reasons import Interrupted, ScriptExited, ScriptFailed
from feedprof.trial import ray_train
from feedprof.trial.controller import Controller
from feedprof.trial.protocol import TrialSpec
from feedprof.trial.rank_host import JOB_SPEC_ENV, host_rank
from feedprof.trial.rank_meter import RankMeter

def _is_rank(argv: List[str], info: Optional[RankInfo], job_script: str) -> bool:
    if not argv or argv[0] in ("-c", "") or "--multiprocessing-fork" in argv:
        return False  # python -c: multiprocessing's spawn and forkserver children, and the like
    if is_launcher(argv):
        return False  # torchrun inside a Slurm task inherits SLURM_PROCID: its ranks are the ranks
    if info is not None:
        return True
    return bool(job_script) and os.path.abspath(argv[0]) == job_script  # `python train.py`, the only rank


def maybe_host(env: Optional[Mapping[str, str]] = None) -> Optional[Controller]:
    """If this process is a rank of the job, instrument it (called at interpreter start)."""
    env = os.environ if env is None else env
    info = rank_from_env(env)
    with open(env[JOB_SPEC_ENV], encoding="utf-8") as fh:
        spec = TrialSpec.from_json(fh.read())
    if spec.launcher == "ray":  # Ray's training workers become ranks once Ray Train says which
        if os.path.abspath(sys.argv[0]) == spec.script:
            ray_train.in_driver(env[JOB_SPEC_ENV])
        return None
    if not _is_rank(sys.argv, info, spec.script):
        return None
    info = dataclasses.replace(info or RankInfo(launcher="python", node=_node()), pid=os.getpid())
    out_of_sight = bool(spec.sight) and spec.sight != sight()  # feedprof cannot find this rank by its PID
    info = dataclasses.replace(info, cpus=cpu_share(usable_cpu_count(), info.local_world_size, env),
                               self_sampled=out_of_sight)
    script = os.path.abspath(sys.argv[0]) if sys.argv[0] != "-m" else spec.script
    ctl, meter = host_rank(spec, info, script, list(sys.argv[1:]), env)
    _on_the_way_out(ctl, meter)
    return ctl


def _node() -> str:
    import socket

    return socket.gethostname()


def _on_the_way_out(ctl: Controller, meter: Optional[RankMeter] = None) -> None:
    """The rank's own end, written unless its window already was (and its own samples' last)."""
    exit_code: List[object] = []
    original_exit, original_hook = sys.exit, sys.excepthook

    def exit(code: object = None) -> None:
        exit_code.append(code)
        original_exit(code)

    def excepthook(kind: Type[BaseException], exc: BaseException, tb: Optional[TracebackType]) -> None:
        if not ctl.result_written and not isinstance(exc, KeyboardInterrupt):
            ctl.emit("failed")  # when: the first rank to fail is the cause, the others' errors follow from it
            text = script_traceback(exc)
            ctl.write_result(TrialState.FAILED, ScriptFailed(error=f"{kind.__name__}: {exc}".strip(),
                                                             hint=failure_hint(exc)), tb=text, exit_code=1)
        original_hook(kind, exc, tb)

    def at_exit() -> None:
        if meter is not None:
            meter.stop()
        if ctl.result_written:
            return
        code = exit_code[-1] if exit_code else None
        if code not in (None, 0):
            ctl.write_result(TrialState.FAILED, ScriptExited(exit_code=code), exit_code=1)
        else:
            ctl.write_result(TrialState.OK, exit_code=0)

    sys.exit, sys.excepthook = exit, excepthook
    atexit.register(at_exit)
    _written_on_sigterm(ctl, meter)


def _written_on_sigterm(ctl: Controller, meter: Optional[RankMeter]) -> None:
    """SIGTERM (feedprof interrupted, or ending the job: jobrunner.py) kills the rank as it would,
    but writes what the rank measured first: a rank killed with nothing written leaves its loaders
    unknown. Its loader workers get the signal too, at once: left to notice their rank gone, they
    would outlive it for seconds, where (on another node) no feedprof can see them. Only where the
    script left SIGTERM alone, and only in the rank itself, not in the loader workers it forks
    (they inherit the handler)."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL or threading.current_thread() is not \
            threading.main_thread():
        return
    owner = os.getpid()

    def on_term(signum: int, frame: Optional[FrameType]) -> None:
        if os.getpid() == owner:
            if not ctl.result_written:
                ctl.write_result(TrialState.INTERRUPTED, Interrupted(), exit_code=128 + signum)
            if meter is not None:
                meter.stop()
            _signal_descendants(signum)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_term)


def _signal_descendants(signum: int) -> None:
    import psutil

    try:
        below = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for p in below:
        try:
            p.send_signal(signum)
        except psutil.Error:
            continue
