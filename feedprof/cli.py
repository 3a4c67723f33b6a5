"""Command line: ``feedprof profile | tune | report | gpus`` (the parser and the
checks on its input are in cliargs.py).

Exit codes (docs/exit-codes.md): 0 done; 1 the script itself failed
(profile and tune --online: the script's own status, 128 + N for signal N);
2 bad usage or input, or an output the machine refuses to write (a full
disk), one line on stderr and no traceback; 130 interrupted (partial results written).
"""
from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

from feedprof import defaults
from feedprof.cliargs import (DEFAULT_OUT, OFFLINE_ONLY, ONLINE_ONLY, SCRIPT_COMMANDS, UsageError, build_parser,
                              check_out_dir, check_script, check_tensorboard, looks_like_site, options_given,
                              own_options_in, split_script_args)
from feedprof.outdir import OutDirInUse
from feedprof.trial.peers import Peers, task_dir_name, task_of
from feedprof.store import NotSaved, TrialState, write_refused
from feedprof.units import fmt_path

if TYPE_CHECKING:
    from feedprof.analyse.merge import MergedTunes
    from feedprof.store import RankInfo, Run, TuneResult
    from feedprof.trial.launch import Launch

    Record = Union[Run, TuneResult]
from types import FrameType

EXIT_OK, EXIT_SCRIPT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: stop, keep what was measured, exit 130."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


# --------------------------------------------------------------- commands


def cmd_profile(args: argparse.Namespace, script_args: List[str]) -> int:
    from feedprof.app import run_profile, write_tensorboard
    from feedprof.render.text import format_summary
    from feedprof.render.words import LOOKED_FOR, say
    from feedprof.trial.runner import TrialOptions

    script, script_args, launch = _what_to_run(args.script, script_args, "profile")
    task = task_of(os.environ)
    out_dir = check_out_dir(_task_out(args.out, task))
    check_tensorboard(args.tensorboard)
    peers = Peers.of_task(os.path.abspath(args.out), task) if task is not None and not args.full else None
    opts = TrialOptions(window_batches=args.window_batches, window_seconds=args.window_seconds,
                        warmup_batches=args.warmup_batches, full=args.full, timeout_s=args.timeout,
                        loader_timeout_s=None if args.full else args.loader_timeout,
                        interval_s=args.interval, gpu=not args.no_gpu, capture_output=False, peers=peers)
    what = "to completion" if args.full else f"for up to {args.window_batches} steady-state batches"
    _err(f"feedprof: profiling {' '.join(launch.command) if launch else fmt_path(script)} {what}")
    try:
        run, interrupted = run_profile(script, script_args, out_dir, opts, gpu=not args.no_gpu, launch=launch)
    except NotSaved as exc:  # measured, not written: shown, and said so
        print(format_summary(exc.record.summary, exc.record.host, leftovers=exc.record.leftovers, run=exc.record))
        _err(_not_saved(exc.error, "what is shown above is not saved"))
        return EXIT_USAGE
    report = _write_report(run, os.path.join(out_dir, "report.html"))
    print(format_summary(run.summary, run.host, leftovers=run.leftovers, run=run))
    if run.ranks:
        from feedprof.render.ranks import format_ranks

        print(format_ranks(run))
    _err(f"feedprof: wrote {fmt_path(os.path.join(out_dir, 'run.json'))}" +
         (f" and {fmt_path(report)}" if report else ""))
    write_tensorboard(run, args.tensorboard)
    outcome = run.outcome
    if interrupted:
        _err("feedprof: interrupted; what was measured is saved")
        return EXIT_INTERRUPTED
    out_of_reach = next((n for n in run.notes if n.code == "ray_cluster_joined"), None)
    if outcome.state == TrialState.OK and not run.loaders and out_of_reach is not None:
        _err(f"feedprof: {say(out_of_reach)}")  # its loaders were iterated, where feedprof cannot see them
        return EXIT_USAGE
    if outcome.state == TrialState.OK and not run.loaders:
        _err(f"feedprof: the script ended without iterating a data loader (looked for {LOOKED_FOR}): "
             "nothing to profile")
        return EXIT_SCRIPT_FAILED
    if outcome.state == TrialState.OK:
        return EXIT_OK
    # the script's own end (its exit status, or the kernel's signal) is feedprof's, as with `time`;
    # not a signal from feedprof (a job it ended after a rank failed)
    code = outcome.exit_code if isinstance(outcome.exit_code, int) else None
    if outcome.state == TrialState.KILLED or (outcome.state == TrialState.FAILED and code is not None and code > 0):
        code = _shell_status(code)
    else:
        code = None
    same = f"; feedprof exits with its status, {code}" if code else ""
    _err(f"feedprof: the script did not finish cleanly: {outcome.state}: {say(outcome.cause)}{same}")
    return code or EXIT_SCRIPT_FAILED


def _shell_status(code: Optional[int]) -> Optional[int]:
    """A process's exit as the shell reports it: its status, or 128 + N when signal N killed it."""
    if not isinstance(code, int) or code == 0:
        return None
    return 128 - code if code < 0 else code


def _previous_tune(args: argparse.Namespace) -> "TuneResult":
    """--resume DIR: the interrupted tune to go on with (its script and arguments)."""
    from feedprof.store import StoreError, TuneResult, load

    try:
        previous = load(os.path.join(args.resume, "results.json"))
    except StoreError as exc:
        raise UsageError(f"--resume {args.resume}: {exc}") from None
    if not isinstance(previous, TuneResult):
        raise UsageError(f"--resume {args.resume}: results.json is not from feedprof tune")
    if args.script is not None and os.path.abspath(args.script) != previous.script:
        raise UsageError(f"--resume {args.resume} tuned {previous.script}, not {args.script}")
    if args.out is not None and os.path.abspath(args.out) != os.path.abspath(args.resume):
        raise UsageError("--resume DIR writes to DIR: leave out --out, or give the same directory")
    return previous


def cmd_tune(args: argparse.Namespace, script_args: List[str]) -> int:
    from feedprof.app import Outputs, baseline_output, run_tune
    from feedprof.render.progress import format_recommendation, terminal_width
    from feedprof.render.words import say
    from feedprof.tune.job import TuneError, TuneInterrupted, TuneJob, TuneOptions

    if args.online:
        return _tune_online(args, script_args)
    task = task_of(os.environ)
    if task is not None:  # every trial starts the job anew: all tasks' trials would have to run as one
        raise UsageError(f"feedprof tune is task {task.rank} of {task.world_size} here ({task.launcher}): an offline "
                         "tune starts the whole job again for every trial, so run one feedprof for the whole job "
                         "(feedprof tune -- srun -n 2 python train.py), or tune inside the run in each task "
                         "(feedprof tune --online)")
    previous = _previous_tune(args) if args.resume is not None else None
    if previous is not None and previous.launch:
        args.script, script_args = None, list(previous.launch)
    elif previous is not None:
        args.script = previous.script
        script_args = script_args or list(previous.argv)
    script, script_args, launch = _what_to_run(args.script, script_args, "tune")
    out_dir = check_out_dir(args.resume or args.out or DEFAULT_OUT)
    check_tensorboard(args.tensorboard)
    if args.loader is not None and not looks_like_site(args.loader):
        raise UsageError(f"--loader expects FILE:LINE (e.g. train.py:42), got {args.loader!r}")
    opts = TuneOptions(budget_s=tune_budget_s(args.budget, launch), max_workers=args.max_workers, loader_site=args.loader,
                       window_seconds=args.window_seconds, window_batches=args.window_batches,
                       min_window_batches=min(args.min_window_batches, args.window_batches),
                       warmup_batches=args.warmup_batches, interval_s=args.interval, gpu=not args.no_gpu,
                       loader_timeout_s=args.loader_timeout, trial_timeout_s=args.trial_timeout,
                       max_memory_bytes=args.max_memory, allow_reorder=args.allow_reorder)
    written = f"{fmt_path(os.path.join(out_dir, 'results.json'))} and " \
              f"{fmt_path(os.path.join(out_dir, 'report.html'))}"
    try:
        run_tune(TuneJob(script=script, out_dir=out_dir, argv=tuple(script_args), launch=launch, previous=previous),
                 opts, Outputs(progress=not args.quiet, tensorboard=args.tensorboard))
    except TuneInterrupted as stop:
        _err(format_recommendation(stop.result.recommendation, stop.result, width=terminal_width(sys.stderr)))
        _err(f"feedprof: interrupted; {len(stop.result.trials)} trial(s) kept in {written}")
        return EXIT_INTERRUPTED
    except NotSaved as exc:  # the output's filesystem refused: what was measured, shown
        _err(format_recommendation(exc.record.recommendation, exc.record, width=terminal_width(sys.stderr)))
        measured = len(exc.record.trials)
        _err(_not_saved(exc.error, f"it keeps {exc.trials_on_disk} of the {measured} trial(s) measured; "
                                   f"the recommendation above is from all {measured}"))
        return EXIT_USAGE
    except TuneError as exc:
        _err(f"feedprof: {say(exc.reason)}")
        sys.stderr.write(baseline_output(exc.result, out_dir))
        _err(f"feedprof: wrote {written}")
        return exc.exit_code
    _err(f"feedprof: wrote {written}")
    return EXIT_OK


def _tune_online(args: argparse.Namespace, script_args: List[str]) -> int:
    """tune --online: the job runs once; feedprof exits with the job's own status."""
    from feedprof.app import run_online_tune
    from feedprof.tune.online import OnlineOptions

    script, script_args, launch = _what_to_run(args.script, script_args, "tune")
    out_dir = check_out_dir(_task_out(args.out or DEFAULT_OUT, task_of(os.environ)))
    if args.loader is not None and not looks_like_site(args.loader):
        raise UsageError(f"--loader expects FILE:LINE (e.g. train.py:42), got {args.loader!r}")
    seconds, share = args.explore or (None, None)
    opts = OnlineOptions(explore_s=seconds or OnlineOptions.explore_s, explore_share=share,
                         max_workers=args.max_workers, max_memory_bytes=args.max_memory,
                         loader_site=args.loader, interval_s=args.interval,
                         gpu=not args.no_gpu, allow_rng_change=args.allow_rng_change,
                         allow_resharding=args.allow_resharding)
    result, interrupted = run_online_tune(script, script_args, out_dir, opts, launch=launch,
                                          quiet=args.quiet)
    if interrupted:
        return EXIT_INTERRUPTED
    code = result.online.exit_code if result.online is not None else None
    return _shell_status(code) or EXIT_OK


def _task_out(out: str, task: Optional[RankInfo]) -> str:
    """Where this feedprof writes: ``out``, or, as one task of several (srun -n 2 feedprof ...),
    its own directory in it (``out/<node>-rank<N>``), so that no two tasks wait for one
    directory; ``feedprof report out`` merges them."""
    if task is None:
        return out
    path = os.path.join(out, task_dir_name(task))
    _err(f"feedprof: task {task.rank} of {task.world_size} ({task.launcher}{', job ' + task.job if task.job else ''}): "
         f"writing to {fmt_path(path)}; merge the tasks' runs with: feedprof report {fmt_path(out)}")
    return path


def tune_budget_s(given: Optional[float], launch: Optional["Launch"]) -> float:
    """--budget, else the default: a Ray Train job's is longer (every trial starts Ray anew)."""
    ray = launch is not None and launch.launcher == "ray"
    return given or (defaults.RAY_TUNE_BUDGET_S if ray else defaults.TUNE_BUDGET_S)


def _what_to_run(script: Optional[str], script_args: List[str], command: str) -> Tuple[str, List[str], Optional["Launch"]]:
    """(script, its arguments, a Launch or None): a script and its arguments, or a
    multi-process job's launch command after -- (no script)."""
    if script is not None:
        from feedprof.trial.launch import script_launch

        checked = check_script(script, command)
        launch = script_launch(script, script_args)  # a Ray Train script: a job of its own (as typed)
        return (checked, script_args, None) if launch is None else (checked, [], launch)
    if not script_args:
        raise UsageError(f"feedprof {command}: give the training script, then its own arguments "
                         f"(feedprof {command} [options] train.py --epochs 3), or a launch command after -- "
                         f"(feedprof {command} [options] -- torchrun --nproc-per-node 2 train.py)")
    from feedprof.trial.launch import LaunchError, parse_launch

    try:
        launch = parse_launch(script_args)
    except LaunchError as exc:
        raise UsageError(f"feedprof {command} -- {' '.join(script_args)}: {exc}") from None
    return launch.script or "", [], launch


def cmd_report(args: argparse.Namespace, script_args: List[str]) -> int:
    from feedprof.store import StoreError, load

    if script_args:
        raise UsageError("feedprof report takes no script arguments")
    paths = _record_paths(args.results)
    try:
        objs = [load(path) for path in paths]
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    obj = objs[0] if len(objs) == 1 else _merged(objs, paths)
    one_dir = len(args.results) == 1 and os.path.isdir(args.results[0])
    if len(objs) > 1 and args.output is None and not one_dir:
        raise UsageError("feedprof report: several runs are merged into one page: say where with -o FILE")
    output = args.output or (os.path.join(args.results[0], "report.html") if one_dir else
                             os.path.join(os.path.dirname(os.path.abspath(paths[0])), "report.html"))
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise UsageError(f"-o {output}: no such directory {out_dir}")
    path = _write_report(obj, output)
    if path is None:
        return EXIT_USAGE
    _err(f"feedprof: wrote {fmt_path(path)}")
    return EXIT_OK


def cmd_gpus(args: argparse.Namespace, script_args: List[str]) -> int:
    from feedprof.record.gpu_procs import gpus_now
    from feedprof.render.gpus import format_gpus
    from feedprof.render.progress import terminal_width

    if script_args:
        raise UsageError("feedprof gpus takes no script arguments")
    print(format_gpus(gpus_now(), width=terminal_width(sys.stdout)))
    return EXIT_OK


def _record_paths(given: List[str]) -> List[str]:
    """The JSON files to read: each file given, and the records of each directory given (its own, or
    its tasks' ``<node>-rank<N>/`` of one feedprof per task)."""
    from feedprof.store import records_in

    paths: List[str] = []
    for path in given:
        if os.path.isdir(path):
            found = records_in(path)
            if not found:
                raise UsageError(f"feedprof report {path}: no run.json or results.json in it, nor in its "
                                 "subdirectories")
            paths += found
        else:
            paths.append(path)
    return paths


def _merged(objs: List[Record], paths: List[str]) -> Union["Run", "MergedTunes"]:
    """The runs (run.json) or the tunes (results.json) of every node or task of one job, as one job."""
    from feedprof.analyse.merge import MergeError, merge_runs, merge_tunes
    from feedprof.store import Run, TuneResult

    try:
        if all(isinstance(o, Run) for o in objs):
            return merge_runs(objs)
        if all(isinstance(o, TuneResult) for o in objs):
            return merge_tunes(objs, _labels(paths))
    except MergeError as exc:
        raise UsageError(f"feedprof report: {exc}") from None
    raise UsageError("feedprof report: runs (run.json, feedprof profile) and tunes (results.json) are merged "
                     "apart: give one kind")


def _labels(paths: List[str]) -> List[str]:
    """Each file by its directory's name (the node or task that wrote it), made unique."""
    names = [os.path.basename(os.path.dirname(os.path.abspath(p))) or p for p in paths]
    return [n if names.count(n) == 1 else fmt_path(os.path.dirname(p) or ".") for n, p in zip(names, paths)]


def _write_report(obj: Union[Record, "MergedTunes"], path: str) -> Optional[str]:
    from feedprof.app import write_report

    return write_report(obj, path)


def _not_saved(error: OSError, kept: str = "") -> str:
    """One line: which file could not be written, why, and what of the run that costs."""
    why = {errno.ENOSPC: "its filesystem is full: free some space, or give another --out",
           errno.EDQUOT: "the disk quota is used up: free some space, or give another --out",
           errno.EFBIG: "past the file size limit, ulimit -f"}.get(error.errno, "give another --out")
    return f"feedprof: cannot write {error.filename}: {error.strerror} ({why})" + (f"; {kept}" if kept else "")


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------- main


def cmd_attach(args: argparse.Namespace, script_args: List[str]) -> int:
    from feedprof.app import run_attach
    from feedprof.render.text import format_summary
    from feedprof.render.words.attach import refused
    from feedprof.trial.attach import AttachRefused, check_readable

    if script_args:
        raise UsageError("feedprof attach takes a PID, not a script (feedprof profile train.py runs one)")
    try:
        pid = int(args.pid)
    except ValueError:
        raise UsageError(f"feedprof attach: expected a process id, got {args.pid!r}") from None
    try:
        check_readable(pid)
        out_dir = check_out_dir(args.out)
        _err(f"feedprof: reading process {pid} for {args.duration:g} s, from outside (Ctrl-C ends it early)")
        run, interrupted = run_attach(pid, args.duration, out_dir, gpu=not args.no_gpu, rate_hz=args.rate)
    except AttachRefused as exc:
        raise UsageError(refused(exc.why, exc.pid, exc.detail)) from None
    report = _write_report(run, os.path.join(out_dir, "report.html"))
    print(format_summary(run.summary, run.host, run=run))
    if run.ranks:
        from feedprof.render.ranks import format_ranks

        print(format_ranks(run))
    _err(f"feedprof: wrote {fmt_path(os.path.join(out_dir, 'run.json'))}" + (f" and {fmt_path(report)}" if report else ""))
    if interrupted:
        _err("feedprof: interrupted; what was read is saved")
        return EXIT_INTERRUPTED
    return EXIT_OK


COMMANDS = {"profile": cmd_profile, "tune": cmd_tune, "attach": cmd_attach, "report": cmd_report, "gpus": cmd_gpus}


def _tolerant_streams() -> None:
    """A terminal that cannot show a character (LANG=C without UTF-8, a
    script's path in another alphabet) gets "?" for it, never a crash."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # not a text file (a notebook's stream): leave it
            pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _tolerant_streams()
    # SIGTERM, and SIGHUP (a closed terminal or SSH session) unless ignored (nohup), end a
    # run as Ctrl-C does: what was measured is written
    caught = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None))
              if s is not None and (s == signal.SIGTERM or signal.getsignal(s) == signal.SIG_DFL)]
    previous = {s: signal.getsignal(s) for s in caught}

    def on_sigterm(signum: int, frame: Optional[FrameType]) -> None:
        raise Terminated(signum)

    try:
        for s in caught:
            signal.signal(s, on_sigterm)
    except ValueError:  # not the main thread (main() called from a notebook thread): leave it
        previous = {}
    try:
        parser = build_parser()
        args, script_args = _parse(parser, argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return COMMANDS[args.command](args, script_args)
    except (UsageError, OutDirInUse) as exc:
        msg = str(exc)
        _err(msg if msg.startswith("feedprof") else f"feedprof: {msg}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("feedprof: interrupted")
        return EXIT_INTERRUPTED
    except OSError as exc:  # a file the machine refused to write (a full disk): one line, no traceback
        if not write_refused(exc):
            raise
        _err(_not_saved(exc))
        return EXIT_USAGE
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def entry() -> None:
    """The `feedprof` command (and `python -m feedprof`): main(), its status the process's. An interrupt
    at any moment ends it with 130: one that comes as main() unwinds is caught here, and one that comes
    after it returned (as Python shuts down, nothing left to write) exits at once; Python itself would
    die of the signal there, a status its caller cannot read as feedprof's."""
    try:
        code = main()
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) != signal.SIG_IGN:  # (one ignored, as under nohup, stays ignored)
            signal.signal(s, _exit_interrupted)
    sys.exit(code)


def _exit_interrupted(signum: int, frame: Optional[FrameType]) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(EXIT_INTERRUPTED)


def _parse(parser: argparse.ArgumentParser, argv: List[str]) -> Tuple[argparse.Namespace, List[str]]:
    """feedprof's arguments and the script's (everything after SCRIPT, as profilers take them), or
    a UsageError; options that do not go together are refused here, before anything runs."""
    ours, script_args = split_script_args(argv, parser)
    try:
        args = parser.parse_args(ours)
    except UsageError as exc:
        msg = str(exc)
        if "unrecognized arguments" in msg:
            msg += " (feedprof's options go before the script, the script's own after it: " \
                   "feedprof tune --budget 60 train.py --epochs 3)"
        raise UsageError(msg) from None
    if args.command == "tune":
        given = options_given(parser, "tune", ours)
        misfit = [d for d in given if d in (OFFLINE_ONLY if args.online else ONLINE_ONLY)]
        if misfit and args.online:
            raise UsageError(f"--{misfit[0].replace('_', '-')} is for offline tunes: with --online the job runs "
                             "once, to its own end (--explore bounds the exploring)")
        if misfit:
            raise UsageError(f"--{misfit[0].replace('_', '-')} goes with --online")
    if args.command in SCRIPT_COMMANDS and getattr(args, "script", None):
        theirs = own_options_in(parser, args.command, script_args)
        if theirs:
            _err(f"feedprof: {' '.join(theirs)} after {os.path.basename(args.script)} "
                 f"{'goes' if len(theirs) == 1 else 'go'} to the script, as everything after it does; "
                 "feedprof's own options go before the script")
    return args, script_args
