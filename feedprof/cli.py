"""Command line: ``feedprof profile | tune | report | gpus``.

Exit codes (DESIGN.md, "Contracts"): 0 done; 1 the script itself failed;
2 bad usage or input, one line on stderr and no traceback; 130 interrupted
(partial results written).
"""
from __future__ import annotations

import argparse
import codecs
import dataclasses
import io
import os
import signal
import sys
import tokenize
from typing import Any, List, Optional, Sequence, Tuple

EXIT_OK, EXIT_SCRIPT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_OUT = "feedprof-out"


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


def _add_window_flags(p: argparse.ArgumentParser, window_batches: int = 200, window_seconds: float = 30.0) -> None:
    g = p.add_argument_group("measurement window")
    g.add_argument("--window-batches", type=positive_int, default=window_batches, metavar="N",
                   help=f"steady-state batches to measure before ending the script (default {window_batches})")
    g.add_argument("--window-seconds", type=positive_float, default=window_seconds, metavar="S",
                   help=f"or this many seconds of steady state, whichever comes first (default {window_seconds:g})")
    g.add_argument("--warmup-batches", type=int, default=5, metavar="N",
                   help="batches excluded as warm-up after each run's first batch (default 5)")
    g.add_argument("--interval", type=positive_float, default=0.2, metavar="S",
                   help="sampling period for CPU/GPU/memory (default 0.2 s = 5 Hz)")
    g.add_argument("--no-gpu", action="store_true", help="do not sample the GPU")
    g.add_argument("--loader-timeout", type=positive_float, default=120.0, metavar="S",
                   help="give up if no data loader yields a batch within S seconds (default 120)")


def build_parser() -> argparse.ArgumentParser:
    from feedprof import __version__

    parser = _Parser(prog="feedprof", description="Is your training job waiting for data? "
                     "Profile it, and find the loader settings that keep the accelerator fed.")
    parser.add_argument("--version", action="version", version=f"feedprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("profile", help="one observed run of a script, no sweep",
                       description="Run SCRIPT once, unmodified, and say whether its training loop "
                       "waits for data. Script arguments go after --.")
    p.add_argument("script", help="the training script (.py)")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output directory (default {DEFAULT_OUT})")
    p.add_argument("--full", action="store_true", help="run the script to completion instead of a window")
    p.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                   help="stop the script after S seconds in all")
    _add_window_flags(p)
    p.set_defaults(func=cmd_profile)

    t = sub.add_parser("tune", help="sweep the loader settings, recommend the best",
                       description="Run SCRIPT unmodified with different loader settings injected, "
                       "within a time budget, and recommend the config that keeps the accelerator fed. "
                       "Script arguments go after --.")
    t.add_argument("script", nargs="?", help="the training script (.py); optional with --resume")
    t.add_argument("--out", default=None, metavar="DIR", help=f"output directory (default {DEFAULT_OUT})")
    t.add_argument("--resume", default=None, metavar="DIR",
                   help="go on with an interrupted tune in DIR: its measured trials are kept, not re-run")
    t.add_argument("--budget", type=positive_float, default=120.0, metavar="S",
                   help="time budget for the whole tune in seconds (default 120)")
    t.add_argument("--max-workers", type=positive_int, default=None, metavar="N",
                   help="most workers to try (default: max(32, 2 x usable CPUs); beyond the CPU count "
                        "only when the workers wait on I/O)")
    t.add_argument("--loader", default=None, metavar="FILE:LINE",
                   help="the loader to tune, by where it is built (default: the one that delivers most batches)")
    t.add_argument("--quiet", action="store_true", help="no progress display")
    t.add_argument("--trial-timeout", type=positive_float, default=None, metavar="S",
                   help="end a trial that runs longer than S seconds (default: 4 x the baseline trial, "
                        "at least 30 s); a hung trial is recorded as a timeout and the tune goes on")
    _add_window_flags(t, window_batches=2000, window_seconds=2.0)
    t.add_argument("--min-window-batches", type=positive_int, default=30, metavar="N",
                   help="measure at least this many steady-state batches per trial (default 30)")
    t.set_defaults(func=cmd_tune)

    r = sub.add_parser("report", help="render a saved run.json or results.json as HTML",
                       description="Render the HTML report of a saved feedprof run (run.json) or tune "
                       "(results.json): one self-contained page, no network needed to view it.")
    r.add_argument("results", metavar="RESULTS_OR_RUN.json")
    r.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="where to write the page (default: report.html beside the JSON file)")
    r.set_defaults(func=cmd_report)

    sub.add_parser("gpus", help="what is on each GPU, and what looks abandoned there", description="Every "
                   "CUDA-visible GPU and its processes; those whose parent or job is gone are flagged with the "
                   "command that ends them (feedprof never ends one).").set_defaults(func=cmd_gpus)
    return parser


# --------------------------------------------------------------- commands


def cmd_profile(args: argparse.Namespace, script_args: List[str]) -> int:
    from feedprof.record.gpu import open_gpu
    from feedprof.record.host import host_info
    from feedprof.render.text import format_summary
    from feedprof.store import save
    from feedprof.tune.runner import TrialInterrupted, TrialOptions, run_trial

    script = check_script(args.script)
    out_dir = check_out_dir(args.out)
    gpu = open_gpu() if not args.no_gpu else None
    host = host_info(gpu_status=gpu.status if gpu else "GPU: sampling turned off",
                     gpus=gpu.devices if gpu else ())
    if gpu:
        gpu.close()
    opts = TrialOptions(window_batches=args.window_batches, window_seconds=args.window_seconds,
                        warmup_batches=args.warmup_batches, full=args.full, timeout_s=args.timeout,
                        loader_timeout_s=None if args.full else args.loader_timeout,
                        interval_s=args.interval, gpu=not args.no_gpu, capture_output=False)
    what = "to completion" if args.full else f"for up to {args.window_batches} steady-state batches"
    _err(f"feedprof: profiling {os.path.relpath(script)} {what}")
    run_json = os.path.join(out_dir, "run.json")
    try:
        run = run_trial(script, script_args, os.path.join(out_dir, "trial"), host, opts)
        interrupted = False
    except TrialInterrupted as stop:
        if stop.run is None:  # stopped as the script was starting: nothing measured
            raise KeyboardInterrupt from None
        run, interrupted = stop.run, True
    run = dataclasses.replace(run, kind="profile")
    save(run, run_json)
    report = _write_report(run, os.path.join(out_dir, "report.html"))
    outcome = run.outcome
    print(format_summary(run.summary, host.gpu_status, leftovers=run.leftovers))
    _err(f"feedprof: wrote {os.path.relpath(run_json)}" + (f" and {os.path.relpath(report)}" if report else ""))
    if interrupted:
        _err("feedprof: interrupted; what was measured is saved")
        return EXIT_INTERRUPTED
    if outcome.state == "ok" and not run.loaders:
        from feedprof.tune.runner import LOOKED_FOR

        _err(f"feedprof: the script ended without iterating a data loader (looked for {LOOKED_FOR}): "
             "nothing to profile")
        return EXIT_SCRIPT_FAILED
    if outcome.state == "ok":
        return EXIT_OK
    _err(f"feedprof: the script did not finish cleanly: {outcome.state}: {outcome.message}")
    return EXIT_SCRIPT_FAILED


def cmd_tune(args: argparse.Namespace, script_args: List[str]) -> int:
    from feedprof.render.progress import ConsoleProgress, format_recommendation, terminal_width
    from feedprof.tune.tuner import TuneError, TuneInterrupted, TuneOptions, Tuner

    from feedprof.store import StoreError, TuneResult, load

    previous = None
    if args.resume is not None:
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
        args.script = previous.script
        script_args = script_args or list(previous.argv)
    if args.script is None:
        raise UsageError("feedprof tune: the training script is required (or --resume DIR)")
    script = check_script(args.script)
    out_dir = check_out_dir(args.resume or args.out or DEFAULT_OUT)
    if args.loader is not None and not _looks_like_site(args.loader):
        raise UsageError(f"--loader expects FILE:LINE (e.g. train.py:42), got {args.loader!r}")
    opts = TuneOptions(budget_s=args.budget, max_workers=args.max_workers, loader_site=args.loader,
                       window_seconds=args.window_seconds, window_batches=args.window_batches,
                       min_window_batches=min(args.min_window_batches, args.window_batches),
                       warmup_batches=args.warmup_batches, interval_s=args.interval, gpu=not args.no_gpu,
                       loader_timeout_s=args.loader_timeout, trial_timeout_s=args.trial_timeout)
    tuner = Tuner(script, script_args, out_dir, opts, previous=previous)
    if not args.quiet:
        tuner.progress = ConsoleProgress(sys.stderr, describe=tuner.describe)
    report_path = os.path.join(out_dir, "report.html")
    try:
        result = tuner.run()
    except TuneInterrupted as stop:
        from feedprof.tune.signals import deferred_signals

        tuner.progress.done()  # the live line, if one was drawn
        with deferred_signals():
            _write_report(stop.result, report_path)
        _err(format_recommendation(stop.result.recommendation, stop.result, width=terminal_width(sys.stderr)))
        _err(f"feedprof: interrupted; {len(stop.result.trials)} trial(s) kept in "
             f"{os.path.relpath(tuner.results_path)} and {os.path.relpath(report_path)}")
        return EXIT_INTERRUPTED
    except TuneError as exc:
        tuner.progress.done()
        _err(f"feedprof: {exc}")
        _show_trial_output(exc.result)
        _write_report(exc.result, report_path)
        _err(f"feedprof: wrote {os.path.relpath(tuner.results_path)} and {os.path.relpath(report_path)}")
        return exc.exit_code
    print(format_recommendation(result.recommendation, result, width=terminal_width(sys.stdout)))
    _write_report(result, report_path)
    _err(f"feedprof: wrote {os.path.relpath(tuner.results_path)} and {os.path.relpath(report_path)}")
    return EXIT_OK


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
        obj = load(args.results)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(args.results)), "report.html")
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


def _write_report(obj: Any, path: str) -> Optional[str]:
    """Write the HTML report; a failure to write says so and keeps the JSON."""
    from feedprof.render.html import write_report

    try:
        return write_report(obj, path)
    except OSError as exc:
        _err(f"feedprof: could not write {path}: {exc.strerror}")
        return None


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
    except UsageError as exc:
        msg = str(exc)
        _err(msg if msg.startswith("feedprof") else f"feedprof: {msg}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("feedprof: interrupted")
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
