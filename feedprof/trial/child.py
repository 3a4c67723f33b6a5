"""Bootstrap inside a trial process: run the user's unmodified script with its
loaders instrumented, measure the training loader's window, then end it.

NOTE [ Trial child ]

    python -m feedprof.trial.child spec.json
      ├─ post-import hooks: torch.utils.data ─► frameworks.torch.install(ctl)  (frameworks/install.py)
      ├─ sys.argv = [script, *args]; sys.path[0] = script's dir; run as __main__
      │     each loader: ctl.plan (inject? by call site) ─► ctl.created ─► ctl.iterate
      │     (the adapters' side of this is frameworks/contract.py)
      │     each batch:  WatchedIterator ─► ctl.after_batch ─► window measured?
      │                     yes: write result.json, raise StopTrial (a BaseException,
      │                          so the script's `except Exception` does not swallow it)
      └─ result.json (a store.Run without samples) ─► the parent adds samples and host

How a trial ends (runner.py is the parent's half):
    window measured ─► ChildExit(0, at_once) ─► os._exit: the script is not unwound
    the script ended, raised or called sys.exit ─► result.json says so ─► normal exit
    the parent's limits (timeout, no batch, window measured but the script lingers)
        ─► the parent kills the whole process group
The child never waits for its loader workers: the parent kills the whole
process group once the child is done, so nothing outlives a trial.
"""
from __future__ import annotations

import dataclasses
import os
import runpy
import sys
from dataclasses import dataclass
from typing import List, Optional

from feedprof.frameworks.install import install_adapters
from feedprof.store import RankInfo, TrialState, write_refused
from feedprof.store.reasons import ScriptExited
from feedprof.trial.controller import Controller, StopTrial
from feedprof.trial.failures import failure_cause
from feedprof.trial.lifeline import watch_from_env
from feedprof.trial.protocol import TrialSpec
from feedprof.record.userframes import script_traceback


@dataclass(frozen=True)
class ChildExit:
    """How the trial process ends: ``at_once`` once the window is measured
    (``os._exit``, without unwinding the script: the parent reaps its workers),
    else through normal interpreter exit, with the script's exit handlers."""

    code: int
    at_once: bool = False


def run_script(spec: TrialSpec) -> ChildExit:
    """Run the script under the controller; how the child process ends."""
    rank = _job_rank()
    ctl = Controller(spec, rank=rank)
    ctl.emit("started", pid=os.getpid(), **({} if rank is None else dict(
        rank=rank.rank, local_rank=rank.local_rank, world_size=rank.world_size, node=rank.node, job=rank.job,
        cpus=rank.cpus)))
    install_adapters(ctl)
    script = os.path.abspath(spec.script)
    sys.argv = [spec.script, *spec.argv]
    sys.path[0] = os.path.dirname(script)
    try:
        runpy.run_path(script, run_name="__main__")
    except StopTrial:
        return ChildExit(0, at_once=True)  # result already written
    except SystemExit as exc:
        return _script_exited(ctl, exc)
    except KeyboardInterrupt:
        ctl.write_result(TrialState.INTERRUPTED, exit_code=130)
        return ChildExit(130)
    except OSError as exc:
        if _ours_refused(exc, spec):
            raise  # the trial's own files, not the script: run_spec_file says so
        return _script_failed(ctl, exc, rank)
    except BaseException as exc:  # the script's own error: reported as the script's
        return _script_failed(ctl, exc, rank)
    ctl.write_result(TrialState.OK, exit_code=0)
    return ChildExit(0)


def _job_rank() -> Optional[RankInfo]:
    """This script is one rank of a job whose other ranks other feedprofs run (one feedprof per
    task: srun -n 2 feedprof profile train.py): it is measured as that rank and, like a rank of
    a launched job, trains on after its window until every rank has one (trial/peers.py)."""
    from feedprof.record.host import usable_cpu_count
    from feedprof.record.ranks import cpu_share, rank_from_env

    info = rank_from_env(os.environ)
    if info is None or info.world_size <= 1:
        return None
    return dataclasses.replace(info, pid=os.getpid(),
                               cpus=cpu_share(usable_cpu_count(), info.local_world_size, os.environ))


def _ours_refused(exc: OSError, spec: TrialSpec) -> bool:
    """A file of the trial's own (its result, its events) that the machine refused to write (a full disk)."""
    return write_refused(exc) and os.path.dirname(os.path.abspath(str(exc.filename))) == \
        os.path.dirname(os.path.abspath(spec.result_path))


def _script_failed(ctl: Controller, exc: BaseException, rank: Optional[RankInfo] = None) -> ChildExit:
    """The script's own error: reported as the script's (its frames only). A rank of a job that
    raises after its window was measured has been training on only until every rank has one;
    the others' ends make its collectives fail (gloo: "Connection reset by peer"), depending on
    which feedprof ends its rank first: its window stands, and the error is said in one line."""
    if rank is not None and ctl.done and ctl.window is not None:
        sys.stderr.write(f"feedprof: rank {rank.rank} raised after its window was measured (as a rank does when "
                         f"another ends first): {type(exc).__name__}: {str(exc)[:200]}\n")
        return ChildExit(0, at_once=True)  # (its result, written with the window, stays)
    tb = script_traceback(exc)
    sys.stderr.write(tb)
    ctl.write_result(TrialState.FAILED, failure_cause(exc), tb=tb, exit_code=1)
    return ChildExit(1)


def _script_exited(ctl: Controller, exc: SystemExit) -> ChildExit:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if code:
        if not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        ctl.write_result(TrialState.FAILED, ScriptExited(exit_code=exc.code), exit_code=code)
        return ChildExit(code)
    ctl.write_result(TrialState.OK, exit_code=0)
    return ChildExit(0)


def run_spec_file(path: str) -> ChildExit:
    """Run the trial described in ``path`` (cold, or forked by the zygote). Its
    own files refused (a full disk): the error in one line, no traceback, exit 1
    (the parent finds no result and names the failure from that line)."""
    with open(path, encoding="utf-8") as fh:
        spec = TrialSpec.from_json(fh.read())
    try:
        return run_script(spec)
    except OSError as exc:
        if not write_refused(exc):
            raise
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return ChildExit(1, at_once=True)


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    watch_from_env()  # feedprof killed: this process, its workers and what it started end too
    end = run_spec_file(argv[0])
    sys.stdout.flush()
    sys.stderr.flush()
    if end.at_once:
        os._exit(end.code)
    sys.exit(end.code)


if __name__ == "__main__":
    main()
