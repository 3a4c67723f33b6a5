"""Command line: ``feedprof profile | tune | report | gpus``.

Exit codes (DESIGN.md, "Contracts"): 0 done; 1 the script itself failed;
2 bad usage or input, one line on stderr and no traceback; 130 interrupted
(partial results written).
"""
from __future__ import annotations

import argparse
import codecs
import io
import os
import signal
import sys
import tokenize
from typing import Any, List, Optional, Sequence, Tuple

from feedprof import defaults
from feedprof.defaults import WindowDefaults
from feedprof.outdir import OutDirInUse
from feedprof.store import TrialState

EXIT_OK, EXIT_SCRIPT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_OUT = "feedprof-out"
TENSORBOARD_HELP = "also write TensorBoard event files to DIR (pip install 'feedprof[tensorboard]')"


class UsageError(Exception):
    """Bad usage or input: reported as one line, exit code 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: stop, keep what was measured, exit 130."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        raise UsageError(f"{self.prog}: {message}")


# ------------------------------------------------------------- validation


def split_script_args(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Everything after the first ``--`` belongs to the user's script."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def check_script(path: str) -> str:
    """The script as an absolute path, or a UsageError that says what is wrong."""
    if not os.path.exists(path):
        raise UsageError(f"no such script: {path}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory; give the training script's .py file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    if b"\0" in head:
        raise UsageError(f"{path} is not a Python script (it looks like a binary file)")
    try:  # honour a PEP 263 coding cookie, as Python itself would
        encoding, _ = tokenize.detect_encoding(io.BytesIO(head).readline)
        codecs.getincrementaldecoder(encoding)().decode(head, final=False)  # 64 KiB may cut a character
    except (SyntaxError, UnicodeDecodeError, LookupError):
        raise UsageError(f"{path} is not a Python script (not readable as Python source text)") from None
    return os.path.abspath(path)


def check_out_dir(path: str) -> str:
    """Create the output directory and prove it is writable before any trial runs."""
    path = os.path.abspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"--out {path}: exists and is not a directory") from None
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot create it ({exc.strerror})") from None
    probe = os.path.join(path, f".feedprof-write-test-{os.getpid()}")
    try:
        with open(probe, "wb") as fh:
            fh.write(b"\0" * 65536)  # a full disk refuses this, not just the open()
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise UsageError(f"--out {path}: not writable ({exc.strerror})") from None
    finally:
        try:
            os.remove(probe)
        except OSError:
            pass
    return path


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


# ---------------------------------------------------------------- parsers


def _add_window_flags(p: argparse.ArgumentParser, window: WindowDefaults) -> None:
    g = p.add_argument_group("measurement window")
    g.add_argument("--window-batches", type=positive_int, default=window.batches, metavar="N",
                   help=f"steady-state batches to measure before ending the script (default {window.batches})")
    g.add_argument("--window-seconds", type=positive_float, default=window.seconds, metavar="S",
                   help=f"or this many seconds of steady state, whichever comes first (default {window.seconds:g})")
    g.add_argument("--warmup-batches", type=int, default=window.warmup_batches, metavar="N",
                   help=f"batches excluded as warm-up after each run's first batch (default {window.warmup_batches})")
    g.add_argument("--interval", type=positive_float, default=defaults.INTERVAL_S, metavar="S",
                   help=f"sampling period for CPU/GPU/memory (default {defaults.INTERVAL_S:g} s)")
    g.add_argument("--no-gpu", action="store_true", help="do not sample the GPU")
    g.add_argument("--loader-timeout", type=positive_float, default=defaults.LOADER_TIMEOUT_S, metavar="S",
                   help="give up if no data loader yields a batch within S seconds "
                        f"(default {defaults.LOADER_TIMEOUT_S:g})")


def build_parser() -> argparse.ArgumentParser:
    from feedprof import __version__

    parser = _Parser(prog="feedprof", description="Is your training job waiting for data? "
                     "Profile it, and find the loader settings that keep the accelerator fed.")
    parser.add_argument("--version", action="version", version=f"feedprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("profile", help="one observed run of a script, no sweep",
                       description="Run SCRIPT once, unmodified, and say whether its training loop "
                       "waits for data. Script arguments go after --. A multi-process job: leave out SCRIPT "
                       "and give its launch command after -- (feedprof profile -- torchrun --nproc-per-node 2 "
                       "train.py): every rank is profiled.")
    p.add_argument("script", nargs="?", help="the training script (.py); or none, and a launch command after --")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output directory (default {DEFAULT_OUT})")
    p.add_argument("--full", action="store_true", help="run the script to completion instead of a window")
    p.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                   help="stop the script after S seconds in all")
    p.add_argument("--tensorboard", default=None, metavar="DIR", help=TENSORBOARD_HELP)
    _add_window_flags(p, defaults.PROFILE_WINDOW)
    p.set_defaults(func=cmd_profile)

    t = sub.add_parser("tune", help="sweep the loader settings, recommend the best",
                       description="Run SCRIPT unmodified with different loader settings injected, "
                       "within a time budget, and recommend the config that keeps the accelerator fed. "
                       "Script arguments go after --. A multi-process job: leave out SCRIPT and give its launch "
                       "command after -- (feedprof tune -- torchrun --nproc-per-node 2 train.py): every rank "
                       "gets the same knobs, and the recommendation is per rank.")
    t.add_argument("script", nargs="?", help="the training script (.py); or none, and a launch command after --; "
                   "optional with --resume")
    t.add_argument("--out", default=None, metavar="DIR", help=f"output directory (default {DEFAULT_OUT})")
    t.add_argument("--resume", default=None, metavar="DIR",
                   help="go on with an interrupted tune in DIR: its measured trials are kept, not re-run")
    t.add_argument("--budget", type=positive_float, default=defaults.TUNE_BUDGET_S, metavar="S",
                   help=f"time budget for the whole tune in seconds (default {defaults.TUNE_BUDGET_S:g})")
    t.add_argument("--max-workers", type=positive_int, default=None, metavar="N",
                   help="most workers to try (default: max(32, 2 x usable CPUs); beyond the CPU count "
                        "only when the workers wait on I/O)")
    t.add_argument("--loader", default=None, metavar="FILE:LINE",
                   help="the loader to tune, by where it is built (default: the one that delivers most batches)")
    t.add_argument("--quiet", action="store_true", help="no progress display")
    t.add_argument("--tensorboard", default=None, metavar="DIR", help=TENSORBOARD_HELP + "; one run per trial")
    t.add_argument("--trial-timeout", type=positive_float, default=None, metavar="S",
                   help="end a trial that runs longer than S seconds (default: 4 x the baseline trial, "
                        "at least 30 s); a hung trial is recorded as a timeout and the tune goes on")
    _add_window_flags(t, defaults.TUNE_WINDOW)
    t.add_argument("--min-window-batches", type=positive_int, default=defaults.TUNE_WINDOW.min_batches, metavar="N",
                   help=f"measure at least this many steady-state batches per trial "
                        f"(default {defaults.TUNE_WINDOW.min_batches})")
    t.set_defaults(func=cmd_tune)

    r = sub.add_parser("report", help="render a saved run.json or results.json as HTML",
                       description="Render the HTML report of a saved feedprof run (run.json) or tune "
                       "(results.json): one self-contained page, no network needed to view it.")
    r.add_argument("results", metavar="RESULTS_OR_RUN.json", nargs="+",
                   help="one results.json or run.json; or the run.json of every node of a multi-node job, merged")
    r.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="where to write the page (default: report.html beside the JSON file)")
    r.set_defaults(func=cmd_report)

    sub.add_parser("gpus", help="what is on each GPU, and what looks abandoned there", description="Every "
                   "CUDA-visible GPU and its processes; those whose parent or job is gone are flagged with the "
                   "command that ends them (feedprof never ends one).").set_defaults(func=cmd_gpus)
    return parser


# --------------------------------------------------------------- commands


def cmd_profile(args: argparse.Namespace, script_args: List[str]) -> int:
    from feedprof.app import run_profile, write_tensorboard
    from feedprof.render.text import format_summary
    from feedprof.render.words import LOOKED_FOR, say
    from feedprof.tune.runner import TrialOptions

    script, script_args, launch = _what_to_run(args.script, script_args, "profile")
    out_dir = check_out_dir(args.out)
    check_tensorboard(args.tensorboard)
    opts = TrialOptions(window_batches=args.window_batches, window_seconds=args.window_seconds,
                        warmup_batches=args.warmup_batches, full=args.full, timeout_s=args.timeout,
                        loader_timeout_s=None if args.full else args.loader_timeout,
                        interval_s=args.interval, gpu=not args.no_gpu, capture_output=False)
    what = "to completion" if args.full else f"for up to {args.window_batches} steady-state batches"
    _err(f"feedprof: profiling {' '.join(launch.command) if launch else os.path.relpath(script)} {what}")
    run, interrupted = run_profile(script, script_args, out_dir, opts, gpu=not args.no_gpu, launch=launch)
    report = _write_report(run, os.path.join(out_dir, "report.html"))
    print(format_summary(run.summary, run.host, leftovers=run.leftovers))
    if run.ranks:
        from feedprof.render.ranks import format_ranks

        print(format_ranks(run))
    _err(f"feedprof: wrote {os.path.relpath(os.path.join(out_dir, 'run.json'))}" +
         (f" and {os.path.relpath(report)}" if report else ""))
    write_tensorboard(run, args.tensorboard)
    outcome = run.outcome
    if interrupted:
        _err("feedprof: interrupted; what was measured is saved")
        return EXIT_INTERRUPTED
    if outcome.state == TrialState.OK and not run.loaders:
        _err(f"feedprof: the script ended without iterating a data loader (looked for {LOOKED_FOR}): "
             "nothing to profile")
        return EXIT_SCRIPT_FAILED
    if outcome.state == TrialState.OK:
        return EXIT_OK
    _err(f"feedprof: the script did not finish cleanly: {outcome.state}: {say(outcome.cause)}")
    return EXIT_SCRIPT_FAILED


def _previous_tune(args: argparse.Namespace) -> Any:
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
    from feedprof.app import run_tune
    from feedprof.render.progress import format_recommendation, terminal_width
    from feedprof.render.words import say
    from feedprof.tune.tuner import TuneError, TuneInterrupted, TuneOptions

    previous = _previous_tune(args) if args.resume is not None else None
    if previous is not None and previous.launch:
        args.script, script_args = None, list(previous.launch)
    elif previous is not None:
        args.script = previous.script
        script_args = script_args or list(previous.argv)
    script, script_args, launch = _what_to_run(args.script, script_args, "tune")
    out_dir = check_out_dir(args.resume or args.out or DEFAULT_OUT)
    check_tensorboard(args.tensorboard)
    if args.loader is not None and not _looks_like_site(args.loader):
        raise UsageError(f"--loader expects FILE:LINE (e.g. train.py:42), got {args.loader!r}")
    opts = TuneOptions(budget_s=args.budget, max_workers=args.max_workers, loader_site=args.loader,
                       window_seconds=args.window_seconds, window_batches=args.window_batches,
                       min_window_batches=min(args.min_window_batches, args.window_batches),
                       warmup_batches=args.warmup_batches, interval_s=args.interval, gpu=not args.no_gpu,
                       loader_timeout_s=args.loader_timeout, trial_timeout_s=args.trial_timeout)
    written = f"{os.path.relpath(os.path.join(out_dir, 'results.json'))} and " \
              f"{os.path.relpath(os.path.join(out_dir, 'report.html'))}"
    try:
        run_tune(script, script_args, out_dir, opts, progress=not args.quiet, previous=previous,
                 tensorboard=args.tensorboard, launch=launch)
    except TuneInterrupted as stop:
        _err(format_recommendation(stop.result.recommendation, stop.result, width=terminal_width(sys.stderr)))
        _err(f"feedprof: interrupted; {len(stop.result.trials)} trial(s) kept in {written}")
        return EXIT_INTERRUPTED
    except TuneError as exc:
        _err(f"feedprof: {say(exc.reason)}")
        _show_trial_output(exc.result)
        _err(f"feedprof: wrote {written}")
        return exc.exit_code
    _err(f"feedprof: wrote {written}")
    return EXIT_OK


def _what_to_run(script: Optional[str], script_args: List[str], command: str) -> Tuple[str, List[str], Any]:
    """(script, its arguments, a Launch or None): a script and its arguments, or a
    multi-process job's launch command after -- (no script)."""
    if script is not None:
        return check_script(script), script_args, None
    if not script_args:
        raise UsageError(f"feedprof {command}: the training script is required, or a launch command after -- "
                         f"(feedprof {command} -- torchrun --nproc-per-node 2 train.py)")
    from feedprof.tune.launch import LaunchError, parse_launch

    try:
        launch = parse_launch(script_args)
    except LaunchError as exc:
        raise UsageError(f"feedprof {command} -- {' '.join(script_args)}: {exc}") from None
    return launch.script or "", [], launch


def _looks_like_site(text: str) -> bool:
    path, _, line = text.rpartition(":")
    return bool(path) and line.isdigit()


def _show_trial_output(result: Any) -> None:
    """The script's own traceback from a failed baseline trial, as the script's."""
    for trial in result.trials:
        run = trial.run
        if run is not None and run.outcome.traceback:
            sys.stderr.write(run.outcome.traceback)
            return


def cmd_report(args: argparse.Namespace, script_args: List[str]) -> int:
    from feedprof.store import StoreError, load

    if script_args:
        raise UsageError("feedprof report takes no script arguments")
    try:
        objs = [load(path) for path in args.results]
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    obj = objs[0] if len(objs) == 1 else _merged(objs, args.results)
    if len(objs) > 1 and args.output is None:
        raise UsageError("feedprof report: several runs are merged into one page: say where with -o FILE")
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(args.results[0])), "report.html")
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise UsageError(f"-o {output}: no such directory {out_dir}")
    path = _write_report(obj, output)
    if path is None:
        return EXIT_USAGE
    _err(f"feedprof: wrote {os.path.relpath(path)}")
    return EXIT_OK


def cmd_gpus(args: argparse.Namespace, script_args: List[str]) -> int:
    from feedprof.record.gpu_procs import gpus_now
    from feedprof.render.gpus import format_gpus
    from feedprof.render.progress import terminal_width

    if script_args:
        raise UsageError("feedprof gpus takes no script arguments")
    print(format_gpus(gpus_now(), width=terminal_width(sys.stdout)))
    return EXIT_OK


def _merged(objs: List[Any], paths: List[str]) -> Any:
    """The run.json of every node of one job, as one job."""
    from feedprof.analyse.merge import MergeError, merge_runs
    from feedprof.store import Run

    not_runs = [p for o, p in zip(objs, paths) if not isinstance(o, Run)]
    if not_runs:
        raise UsageError(f"feedprof report: only run.json files (feedprof profile) are merged, not {not_runs[0]}")
    try:
        return merge_runs(objs)
    except MergeError as exc:
        raise UsageError(f"feedprof report: {exc}") from None


def _write_report(obj: Any, path: str) -> Optional[str]:
    from feedprof.app import write_report

    return write_report(obj, path)


def check_tensorboard(logdir: Optional[str]) -> None:
    """Before anything runs: the writer is installed and DIR is writable."""
    if logdir is not None:
        from feedprof.render.tensorboard import check_logdir

        try:
            check_logdir(logdir)
        except (ImportError, OSError) as exc:
            raise UsageError(f"--tensorboard {logdir}: {getattr(exc, 'strerror', None) or exc}") from None


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------- main


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, script_args = split_script_args(argv)
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    try:
        signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread (main() called from a notebook thread): leave it
        previous = None
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(ours)
        except UsageError as exc:
            msg = str(exc)
            if "unrecognized arguments" in msg:
                msg += " (arguments for the script go after --: feedprof profile train.py -- --epochs 3)"
            raise UsageError(msg) from None
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return args.func(args, script_args)
    except (UsageError, OutDirInUse) as exc:
        msg = str(exc)
        _err(msg if msg.startswith("feedprof") else f"feedprof: {msg}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("feedprof: interrupted")
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
