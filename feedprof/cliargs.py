"""The command line's parser and the checks on its input: everything that
turns argv into validated arguments, or a UsageError (one line, exit code 2)
before anything runs. The commands themselves are in cli.py.
"""
from __future__ import annotations

import argparse
import codecs
import io
import os
import tokenize
from typing import Any, List, Optional, Sequence, Tuple

from feedprof import defaults
from feedprof.defaults import WindowDefaults
from feedprof.units import parse_bytes

DEFAULT_OUT = "feedprof-out"
TENSORBOARD_HELP = "also write TensorBoard event files to DIR (pip install 'feedprof[tensorboard]')"


class UsageError(Exception):
    """Bad usage or input: reported as one line, exit code 2."""


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


def byte_size(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def explore_budget(text: str) -> Tuple[Optional[float], Optional[float]]:
    """--explore 60 / 60s (seconds) or 10% (a share of the run so far): (seconds, share)."""
    t = text.strip().lower()
    try:
        if t.endswith("%"):
            share = float(t[:-1]) / 100
            if 0 < share <= 1:
                return None, share
        else:
            seconds = float(t[:-1] if t.endswith("s") else t)
            if seconds > 0:
                return seconds, None
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected seconds (60, 60s) or a share of the run (10%), got {text!r}")


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
    for add_command in (_add_profile, _add_tune, _add_report, _add_gpus):
        add_command(sub)
    return parser


def _add_profile(sub: Any) -> None:
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


def _add_tune(sub: Any) -> None:
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
    t.add_argument("--budget", type=positive_float, default=None, metavar="S",
                   help=f"time budget for the whole tune in seconds (default {defaults.TUNE_BUDGET_S:g}; "
                        f"{defaults.RAY_TUNE_BUDGET_S:g} for a Ray Train job, whose every trial starts Ray)")
    t.add_argument("--max-workers", type=positive_int, default=None, metavar="N",
                   help="most workers to try (default: max(32, 2 x usable CPUs); beyond the CPU count "
                        "only when the workers wait on I/O)")
    t.add_argument("--max-memory", type=byte_size, default=None, metavar="SIZE",
                   help="RAM the job may use, e.g. 8G or 512M (default: 80%% of what is free, or of the "
                        "container's memory limit); configs predicted to need more are not run")
    t.add_argument("--loader", default=None, metavar="FILE:LINE",
                   help="the loader to tune, by where it is built (default: the one that delivers most batches)")
    t.add_argument("--quiet", action="store_true", help="no progress display")
    t.add_argument("--allow-reorder", action="store_true",
                   help="settings that change the order of samples may be recommended (torch in_order=False, "
                        "where a slow tail of reads holds batches back); without it their gain is only reported")
    t.add_argument("--online", action="store_true",
                   help="tune inside the real run: the job runs once, to its own end, while the training "
                        "loader's settings change; nothing the model sees changes (torch DataLoader, Keras PyDataset)")
    t.add_argument("--explore", type=explore_budget, default=None, metavar="S|N%",
                   help="--online: explore for at most S seconds (default 60) or N%% of the run so far, "
                        "then keep the pick for the rest of the run")
    t.add_argument("--allow-rng-change", action="store_true",
                   help="--online: switch a loader even where that moves draws from the script's random streams "
                        "(a dataset or collate_fn drawing at 0 workers, a sampler drawing lazily while the loop "
                        "draws): without it such a loader keeps its settings and the summary says what would change")
    t.add_argument("--allow-resharding", action="store_true",
                   help="--online: switch an IterableDataset's workers between epochs; its worker count decides "
                        "what each worker yields, so an epoch's samples follow it unless the dataset shards by a "
                        "fixed key (without it such a loader is observed, and the summary says what would change)")
    t.add_argument("--tensorboard", default=None, metavar="DIR", help=TENSORBOARD_HELP + "; one run per trial")
    t.add_argument("--trial-timeout", type=positive_float, default=None, metavar="S",
                   help="end a trial that runs longer than S seconds (default: 4 x the baseline trial, "
                        "at least 30 s); a hung trial is recorded as a timeout and the tune goes on")
    _add_window_flags(t, defaults.TUNE_WINDOW)
    t.add_argument("--min-window-batches", type=positive_int, default=defaults.TUNE_WINDOW.min_batches, metavar="N",
                   help=f"measure at least this many steady-state batches per trial "
                        f"(default {defaults.TUNE_WINDOW.min_batches})")


def _add_report(sub: Any) -> None:
    r = sub.add_parser("report", help="render a saved run.json or results.json as HTML",
                       description="Render the HTML report of a saved feedprof run (run.json) or tune "
                       "(results.json): one self-contained page, no network needed to view it.")
    r.add_argument("results", metavar="JSON_OR_DIR", nargs="+",
                   help="one results.json or run.json; or those of every node or task of one job, merged (a "
                        "directory: its own, or those of its subdirectories, as one feedprof per task writes them)")
    r.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="where to write the page (default: report.html beside the JSON file)")


def _add_gpus(sub: Any) -> None:
    sub.add_parser("gpus", help="what is on each GPU, and what looks abandoned there", description="Every "
                   "CUDA-visible GPU and its processes; those whose parent or job is gone are flagged with the "
                   "command that ends them (feedprof never ends one).")


def looks_like_site(text: str) -> bool:
    path, _, line = text.rpartition(":")
    return bool(path) and line.isdigit()


def check_tensorboard(logdir: Optional[str]) -> None:
    """Before anything runs: the writer is installed and DIR is writable."""
    if logdir is not None:
        from feedprof.render.tensorboard import check_logdir

        try:
            check_logdir(logdir)
        except (ImportError, OSError) as exc:
            raise UsageError(f"--tensorboard {logdir}: {getattr(exc, 'strerror', None) or exc}") from None
