"""The command line's parser and the checks on its input: everything that
turns argv into validated arguments, or a UsageError (one line, exit code 2)
before anything runs. The commands themselves are in cli.py.
"""
from __future__ import annotations

import argparse
import codecs
import io
import os
import shutil
import tokenize
from typing import List, Optional, Sequence, Tuple

from feedprof import defaults
from feedprof.defaults import WindowDefaults
from feedprof.units import parse_bytes

DEFAULT_OUT = "feedprof-out"
TENSORBOARD_HELP = "also write TensorBoard event files to DIR (needs the tensorboard package: pip install tensorboard)"


class UsageError(Exception):
    """Bad usage or input: reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        raise UsageError(f"{self.prog}: {message}")


# ------------------------------------------------------------- validation


SCRIPT_COMMANDS = ("profile", "tune")  # the commands that run a script: everything after it is its own


def split_script_args(argv: Sequence[str], parser: argparse.ArgumentParser) -> Tuple[List[str], List[str]]:
    """(feedprof's words, the script's), as profilers take them (``python -m cProfile train.py ARGS``).

    In a command that runs a script, everything after SCRIPT is the script's, an option of
    feedprof's too; a ``--`` just after SCRIPT is dropped. With no SCRIPT, what follows ``--`` is a
    launch command (``feedprof tune -- torchrun ... train.py``). Elsewhere, what follows ``--``.
    Words before SCRIPT are walked with the command's own options, so that an option's value
    (``--out DIR``) is never taken for the script."""
    argv = list(argv)
    at = next((i for i, w in enumerate(argv) if not w.startswith("-")), None)
    if at is None or argv[at] not in SCRIPT_COMMANDS:
        return _split_at_dashes(argv)
    options = _options_of(parser, argv[at])
    i = at + 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return argv[:i], argv[i + 1:]
        if word.startswith("-") and word != "-":
            action = _action_of(options, word)
            i += 2 if action is not None and action.nargs is None and "=" not in word else 1
            continue
        rest = argv[i + 1:]
        return argv[:i + 1], rest[1:] if rest[:1] == ["--"] else rest
    return argv, []


def _split_at_dashes(argv: List[str]) -> Tuple[List[str], List[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _options_of(parser: argparse.ArgumentParser, command: str) -> dict:
    """A command's option strings, each with its action."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices[command]._option_string_actions)


def _action_of(options: dict, word: str) -> Optional[argparse.Action]:
    """The option ``word`` names, as argparse reads it: exactly, ``--name=value``, or a long
    option's unambiguous prefix; None for an option the command does not have."""
    name = word.split("=", 1)[0] if word.startswith("--") else word
    if name in options:
        return options[name]
    found = {id(a): a for o, a in options.items() if o.startswith("--") and o.startswith(name)}
    return next(iter(found.values())) if len(found) == 1 and name.startswith("--") else None


def options_given(parser: argparse.ArgumentParser, command: str, ours: Sequence[str]) -> List[str]:
    """The dests of the options written in ``ours`` (feedprof's words of ``command``), in order."""
    options = _options_of(parser, command)
    given = []
    for word in ours:
        action = _action_of(options, word) if word.startswith("-") else None
        if action is not None and action.dest not in given:
            given.append(action.dest)
    return given


def own_options_in(parser: argparse.ArgumentParser, command: str, script_args: Sequence[str]) -> List[str]:
    """Options of feedprof's command written after the script (they are the script's): said once,
    as a user who put ``--out DIR`` there may have meant it for feedprof."""
    options = _options_of(parser, command)  # (a --help there is the script's own help, asked for)
    return [w for w in script_args if w.startswith("--") and w.split("=", 1)[0] in options
            and not isinstance(options[w.split("=", 1)[0]], argparse._HelpAction)]


def check_script(path: str, command: str = "tune") -> str:
    """The script as an absolute path, or a UsageError that says what is wrong."""
    if not os.path.exists(path) and os.sep not in path and shutil.which(path):  # torchrun, srun, python ...
        raise UsageError(f"{path} is a command, not a training script: a launch command goes after -- "
                         f"(feedprof {command} -- {path} ...)")
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


def _add_window_flags(p: argparse.ArgumentParser, window: WindowDefaults, offline: str = "") -> None:
    """The measurement window's flags; ``offline``: what to add where they are for trials alone."""
    g = p.add_argument_group("measurement window" + (f" ({offline})" if offline else ""))
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


def shown_default(action: argparse.Action, words: str) -> argparse.Action:
    """A default worked out when the command runs (from the machine, the baseline trial), in the
    words --help gives it: docs/make_cli_reference.py shows them in its default column."""
    action.default_words = words  # type: ignore[attr-defined]
    return action


# Defaults worked out when the command runs: their words, for --help and docs/cli.md.
MAX_WORKERS_DEFAULT = f"max({defaults.MAX_WORKERS_LEAST}, 2 × usable CPUs)"  # defaults.max_workers
BUDGET_DEFAULT = (f"{defaults.TUNE_BUDGET_S:g} s; {defaults.RAY_TUNE_BUDGET_S:g} s for a Ray Train job, whose every trial "
                  "starts Ray")
MAX_MEMORY_DEFAULT = "80 % of free RAM, or of the container's limit"  # tune/budget.py HEADROOM
TRIAL_TIMEOUT_DEFAULT = "4 × the baseline trial, at least 30 s"  # tune/tuner.py TRIAL_TIMEOUT_*
LOADER_DEFAULT = "the loader that delivers the most batches"

# tune's options that an online tune has no use for (the job runs once, to its own end): given
# with --online they are refused (exit 2), never silently ignored
OFFLINE_ONLY = ("resume", "budget", "trial_timeout", "tensorboard", "allow_reorder", "window_batches",
                "window_seconds", "warmup_batches", "loader_timeout", "min_window_batches")
ONLINE_ONLY = ("explore", "allow_rng_change", "allow_resharding")


def build_parser() -> argparse.ArgumentParser:
    from feedprof import __version__

    parser = _Parser(prog="feedprof", description="Is your training job waiting for data? "
                     "Profile it, and find the loader settings that keep the accelerator fed.")
    parser.add_argument("--version", action="version", version=f"feedprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add_command in (_add_profile, _add_tune, _add_attach, _add_report, _add_gpus):
        add_command(sub)
    return parser


SCRIPT_HELP = "the training script (.py); everything after it is its own arguments, passed to it as they are"
ARGS_WORDS = ("Everything after the script is the script's own arguments (as python -m cProfile train.py ARGS "
              "takes them), an option of feedprof's too: feedprof's options go before the script. ")


def _usage(command: str, *more: str) -> str:
    lines = [f"feedprof {command} [options] train.py [args ...]",
             f"feedprof {command} [options] -- LAUNCH COMMAND (torchrun, srun, mpirun ... train.py [args ...])"]
    return "\n       ".join(lines + list(more))


def _add_profile(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("profile", help="one observed run of a script, no sweep", usage=_usage("profile"),
                       description="Run the training script once, unmodified, and say whether its training loop "
                       "waits for data. " + ARGS_WORDS + "A multi-process job: leave out the script "
                       "and give its launch command after -- (feedprof profile -- torchrun --nproc-per-node 2 "
                       "train.py): every rank is profiled.")
    p.add_argument("script", nargs="?", metavar="train.py", help=SCRIPT_HELP)
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output directory (default {DEFAULT_OUT})")
    p.add_argument("--full", action="store_true", help="run the script to completion instead of a window")
    shown_default(p.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                                 help="stop the script after S seconds in all (default: no limit)"), "no limit")
    p.add_argument("--tensorboard", default=None, metavar="DIR", help=TENSORBOARD_HELP)
    _add_window_flags(p, defaults.PROFILE_WINDOW, "the window and --loader-timeout: without --full")


def _add_tune(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    t = sub.add_parser("tune", help="sweep the loader settings, recommend the best",
                       usage=_usage("tune", "feedprof tune [options] --resume DIR"),
                       description="Run the training script unmodified with different loader settings injected, "
                       "within a time budget, and recommend the config that keeps the accelerator fed. "
                       + ARGS_WORDS + "A multi-process job: leave out the script and give its launch "
                       "command after -- (feedprof tune -- torchrun --nproc-per-node 2 train.py): every rank "
                       "gets the same knobs, and the recommendation is per rank. With --online the job "
                       "runs once, to its own end, and the options marked 'offline' are refused.")
    t.add_argument("script", nargs="?", metavar="train.py", help=SCRIPT_HELP + "; optional with --resume")
    shown_default(t.add_argument("--out", default=None, metavar="DIR",  # (None: --resume DIR writes there)
                                 help=f"output directory (default {DEFAULT_OUT})"), DEFAULT_OUT)
    t.add_argument("--resume", default=None, metavar="DIR",
                   help="offline: go on with an interrupted tune in DIR: its measured trials are kept, not re-run")
    shown_default(t.add_argument("--budget", type=positive_float, default=None, metavar="S",
                                 help=f"offline: time budget for the whole tune in seconds (default: "
                                      f"{BUDGET_DEFAULT})"), BUDGET_DEFAULT)
    shown_default(t.add_argument("--max-workers", type=positive_int, default=None, metavar="N",
                                 help=f"most workers to try (default: {MAX_WORKERS_DEFAULT}; beyond the CPU count "
                                      "only when the workers wait on I/O)"), MAX_WORKERS_DEFAULT)
    shown_default(t.add_argument("--max-memory", type=byte_size, default=None, metavar="SIZE",
                                 help=f"RAM the job may use, e.g. 8G or 512M (default: "
                                      f"{MAX_MEMORY_DEFAULT.replace('%', '%%')}); configs predicted to need more "
                                      "are not run, and online a config whose job passes it is left"),
                  MAX_MEMORY_DEFAULT)
    shown_default(t.add_argument("--loader", default=None, metavar="FILE:LINE",
                                 help=f"the loader to tune, by where it is built (default: {LOADER_DEFAULT})"),
                  LOADER_DEFAULT)
    t.add_argument("--quiet", action="store_true", help="no progress display")
    t.add_argument("--allow-reorder", action="store_true",
                   help="offline: settings that change the order of samples may be recommended (torch "
                        "in_order=False, where a slow tail of reads holds batches back); without it their gain is "
                        "only reported")
    _add_online_flags(t)
    t.add_argument("--tensorboard", default=None, metavar="DIR",
                   help="offline: " + TENSORBOARD_HELP + "; one run per trial")
    shown_default(t.add_argument("--trial-timeout", type=positive_float, default=None, metavar="S",
                                 help=f"offline: end a trial that runs longer than S seconds (default: "
                                      f"{TRIAL_TIMEOUT_DEFAULT}); a hung trial is recorded as a timeout and the "
                                      "tune goes on"), TRIAL_TIMEOUT_DEFAULT)
    _add_window_flags(t, defaults.TUNE_WINDOW, offline="offline: per trial; --interval and --no-gpu also online")
    t.add_argument("--min-window-batches", type=positive_int, default=defaults.TUNE_WINDOW.min_batches, metavar="N",
                   help=f"offline: measure at least this many steady-state batches per trial "
                        f"(default {defaults.TUNE_WINDOW.min_batches})")


def _add_online_flags(t: argparse.ArgumentParser) -> None:
    """tune's options for tuning inside the real run (--online)."""
    t.add_argument("--online", action="store_true",
                   help="tune inside the real run: the job runs once, to its own end, while the training "
                        "loader's workers change between batches (torch DataLoader, Keras PyDataset); the same "
                        "samples in the same order, but random draws made inside workers follow the worker "
                        "count (docs/online.md)")
    shown_default(t.add_argument("--explore", type=explore_budget, default=None, metavar="S|N%",
                                 help=f"--online: explore for at most S seconds (default {defaults.EXPLORE_S:g}) or "
                                      "N%% of the run so far, then keep the pick for the rest of the run"),
                  f"{defaults.EXPLORE_S:g} s")
    t.add_argument("--allow-rng-change", action="store_true",
                   help="--online: switch a loader even where that moves draws from the script's random streams "
                        "(a dataset or collate_fn drawing at 0 workers, a sampler drawing lazily while the loop "
                        "draws): without it such a loader keeps its settings and the summary says what would change")
    t.add_argument("--allow-resharding", action="store_true",
                   help="--online: switch an IterableDataset's workers between epochs; its worker count decides "
                        "what each worker yields, so an epoch's samples follow it unless the dataset shards by a "
                        "fixed key (without it such a loader is observed, and the summary says what would change)")


def _add_attach(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    a = sub.add_parser("attach", help="read a running job from outside, without a restart",
                       usage="feedprof attach [options] PID",
                       description="Read a training job that is already running, for a window of seconds, "
                       "read-only: where its loop waits for data, where its loader workers spend their time, "
                       "and, where it has stopped, where each process waits. PID is the training process (or "
                       "its launcher: torchrun, mpirun, ...: every rank below it). It is sampled from outside "
                       "by py-spy, which needs the same user and ptrace rights; nothing of the job changes.")
    a.add_argument("pid", metavar="PID", help="the training process, or its launcher's")
    shown_default(a.add_argument("--duration", type=positive_float, default=30.0, metavar="S",
                                 help="how long to read the job, seconds (default 30)"), "30")
    shown_default(a.add_argument("--rate", type=_sampling_rate, default=defaults.ATTACH_RATE_HZ, metavar="HZ",
                                 help="stack samples a second, per process (default %(default)s; lower costs a "
                                      "job whose CPUs are full less, and reads its wait with more noise)"),
                  str(defaults.ATTACH_RATE_HZ))
    a.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output directory (default {DEFAULT_OUT})")
    a.add_argument("--no-gpu", action="store_true", help="do not sample GPUs")


def _sampling_rate(text: str) -> int:
    hz = positive_int(text)
    if hz > 1000:
        raise argparse.ArgumentTypeError(f"{hz} samples a second: give 1 to 1000")
    return hz


def _add_report(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    r = sub.add_parser("report", help="render a saved run.json or results.json as HTML",
                       description="Render the HTML report of a saved feedprof run (run.json) or tune "
                       "(results.json): one self-contained page, no network needed to view it.")
    r.add_argument("results", metavar="JSON_OR_DIR", nargs="+",
                   help="one results.json or run.json; or those of every node or task of one job, merged (a "
                        "directory: its own, or those of its subdirectories, as one feedprof per task writes them)")
    shown_default(r.add_argument("-o", "--output", default=None, metavar="FILE",
                                 help="where to write the page (default: report.html beside the JSON file)"),
                  "report.html beside the JSON file")


def _add_gpus(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
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
