"""The application layer: a tune or a profile wired to a person watching it.

``feedprof tune`` (cli.py) and ``feedprof.tune()`` (the Python API) are the
same thing with different exits, so both call :func:`run_tune`: the tuner
measures and decides (tune/), render/ words it and writes the page. The same
holds for ``feedprof profile`` and :func:`run_profile`.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, List, Optional, Tuple, Union

from feedprof import defaults
from feedprof.outdir import claimed
from feedprof.store import NotSaved, Run, RunKind, StoreError, TuneResult, load, save, write_refused
from feedprof.trial.launch import Launch
from feedprof.tune.machine import read_machine
from feedprof.tune.job import TuneError, TuneInterrupted, TuneJob, TuneOptions
from feedprof.tune.tuner import Tuner
from feedprof.units import fmt_path
from feedprof.trial.options import TrialOptions

if TYPE_CHECKING:
    from feedprof.analyse.merge import MergedTunes
    from feedprof.tune.evidence import Next
    from feedprof.tune.online import OnlineOptions

Report = Union[Run, TuneResult, "MergedTunes"]


def write_report(obj: Report, path: str, err: Optional[IO[str]] = None) -> Optional[str]:
    """Write the HTML report; a failure to write says so (on ``err``, default
    the stderr of the moment) and keeps the JSON."""
    from feedprof.render.report import write_report as render_page

    try:
        return render_page(obj, path)
    except OSError as exc:
        print(f"feedprof: could not write {path}: {exc.strerror}", file=err or sys.stderr, flush=True)
        return None


def write_tensorboard(obj: Union[Run, TuneResult], logdir: Optional[str], err: Optional[IO[str]] = None) -> None:
    """TensorBoard event files, if asked for; a failure to write says so and keeps the JSON."""
    if logdir is None:
        return
    from feedprof.render.tensorboard import write

    err = err or sys.stderr
    try:
        write(obj, logdir)
    except OSError as exc:
        print(f"feedprof: could not write TensorBoard files to {logdir}: {exc.strerror}", file=err, flush=True)
        return
    print(f"feedprof: wrote TensorBoard event files to {fmt_path(logdir)} "
          f"(view: tensorboard --logdir {fmt_path(logdir)})", file=err, flush=True)


@dataclass(frozen=True)
class Outputs:
    """Where a tune's words and extra files go."""

    progress: bool = True  # live progress on ``err``
    show: bool = True  # the recommendation on ``out``
    tensorboard: Optional[str] = None  # a directory for TensorBoard event files
    out: IO[str] = field(default_factory=lambda: sys.stdout)
    err: IO[str] = field(default_factory=lambda: sys.stderr)


def _write_outputs(result: TuneResult, out_dir: str, outputs: Outputs) -> None:
    write_report(result, os.path.join(out_dir, "report.html"), outputs.err)
    write_tensorboard(result, outputs.tensorboard, outputs.err)


def run_tune(job: TuneJob, options: TuneOptions, outputs: Optional[Outputs] = None) -> TuneResult:
    """Tune, show progress (``outputs.progress``), write results.json,
    report.html (and TensorBoard files, if asked for), print the
    recommendation (``outputs.show``). Raises TuneInterrupted / TuneError
    (with the partial result) after writing what was measured, NotSaved (with
    it, unwritten) where the output cannot be written, OutDirInUse if
    another feedprof is writing to ``job.out_dir``."""
    with claimed(job.out_dir):
        return _tune_here(job, options, outputs or Outputs())


def _tune_here(job: TuneJob, options: TuneOptions, outputs: Outputs) -> TuneResult:
    from feedprof.render.progress import ConsoleProgress, format_recommendation, terminal_width

    observer = ConsoleProgress(outputs.err) if outputs.progress else None
    tuner = Tuner(job, options, read_machine(gpu=options.gpu), observer=observer)
    try:
        result = tuner.run()
    except TuneInterrupted as stop:
        from feedprof.trial.signals import deferred_signals

        with deferred_signals():
            if observer is not None:
                observer.tune_done()  # the live line, if one was drawn
            _write_outputs(stop.result, job.out_dir, outputs)
        raise
    except TuneError as exc:
        if observer is not None:
            observer.tune_done()
        _write_outputs(exc.result, job.out_dir, outputs)
        raise
    except OSError as exc:  # a full disk (the tuner ended its trials): what was measured, unwritten
        if observer is not None:
            observer.tune_done()
        if not write_refused(exc):
            raise
        raise NotSaved(tuner.result(False, None), exc, _trials_in(tuner.results_path)) from None


    _write_outputs(result, job.out_dir, outputs)
    if outputs.show:
        print(format_recommendation(result.recommendation, result, width=terminal_width(outputs.out)),
              file=outputs.out, flush=True)
    return result


def _trials_in(path: str) -> int:
    """How many trials the results.json on disk holds (0 if none can be read)."""
    try:
        return len(load(path).trials)
    except (StoreError, AttributeError):
        return 0


def run_profile(script: str, argv: List[str], out_dir: str, opts: TrialOptions, gpu: bool = True,
                launch: Optional[Launch] = None) -> "tuple[Run, bool]":
    """One observed run of the script's own settings (or of a multi-process
    job, every rank): (run, interrupted). Writes run.json (NotSaved, with the run,
    where it cannot be written); OutDirInUse if another feedprof is writing to ``out_dir``."""
    from feedprof.record.host import machine_info
    from feedprof.trial.jobrunner import run_job
    from feedprof.trial.runner import TrialInterrupted, run_trial

    host = machine_info(gpu=gpu)
    trial_dir = os.path.join(out_dir, "trial")
    with claimed(out_dir):
        try:
            run = run_job(launch, trial_dir, host, opts) if launch else run_trial(script, argv, trial_dir, host, opts)
            interrupted = False
        except TrialInterrupted as stop:
            if stop.run is None:  # stopped as the script was starting: nothing measured
                raise KeyboardInterrupt from None
            run, interrupted = stop.run, True
        run = dataclasses.replace(run, kind=RunKind.PROFILE)
        try:
            save(run, os.path.join(out_dir, "run.json"))
        except OSError as exc:  # a full disk: the run, in memory, is still shown
            if not write_refused(exc):
                raise
            raise NotSaved(run, exc) from None
    return run, interrupted


def run_attach(pid: int, duration_s: float, out_dir: str, gpu: bool = True,
               rate_hz: int = defaults.ATTACH_RATE_HZ) -> "tuple[Run, bool]":
    """A running job read from outside (trial/attach.py): (its run, interrupted). Writes run.json."""
    from feedprof.record.host import machine_info
    from feedprof.trial.attach import attach

    host = machine_info(gpu=gpu)
    with claimed(out_dir):
        run, interrupted = attach(pid, duration_s, host, gpu=gpu, rate_hz=rate_hz)
        try:
            save(run, os.path.join(out_dir, "run.json"))
        except OSError as exc:
            if not write_refused(exc):
                raise
            raise NotSaved(run, exc) from None
    return run, interrupted


def baseline_output(result: TuneResult, out_dir: str) -> str:
    """What to show of a tune whose baseline failed: the script's own traceback,
    or without one (it exited: argparse's usage error) the end of its output."""
    for trial in result.trials:
        if trial.run is not None and trial.run.outcome.traceback:
            return trial.run.outcome.traceback
    log = os.path.join(out_dir, "trials", "00-baseline", "output.log")
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, os.path.getsize(log) - 2000))
            tail = fh.read().decode("utf-8", "replace").splitlines()[-10:]
    except OSError:
        return ""
    return "".join(line + "\n" for line in tail)


def run_online_tune(script: str, argv: List[str], out_dir: str, opts: "OnlineOptions", launch: Optional[Launch] = None,
                    quiet: bool = False, out: IO[str] = sys.stdout, err: IO[str] = sys.stderr) -> "Tuple[TuneResult, bool]":
    """``feedprof tune --online``: the job runs once while its loader is tuned;
    results.json and report.html are written at its end, or on Ctrl-C.
    Returns (result, interrupted)."""
    from feedprof.render.online import decision_line, format_online
    from feedprof.render.progress import format_recommendation, terminal_width
    from feedprof.tune.online import run_online

    def say(step: "Next", t_s: float, framework: str) -> None:
        print(decision_line(step.config, step.why, step.final, t_s, framework, step.held, step.predicted_workers),
              file=err, flush=True)

    with claimed(out_dir):
        if not quiet:
            print("feedprof: tuning inside the run (--online): the job runs once, as written", file=err, flush=True)
        _warm_renderer()
        result, interrupted = run_online(script, argv, out_dir, opts, launch=launch,
                                         on_decision=None if quiet else say)
        from feedprof.trial.signals import deferred_signals

        with deferred_signals():
            write_report(result, os.path.join(out_dir, "report.html"), err)
            print(format_online(result), file=err, flush=True)
            if result.recommendation is not None:
                print(format_recommendation(result.recommendation, result, width=terminal_width(out)),
                      file=out, flush=True)
            print(f"feedprof: wrote {fmt_path(os.path.join(out_dir, 'results.json'))} and "
                  f"{fmt_path(os.path.join(out_dir, 'report.html'))}", file=err, flush=True)
    return result, interrupted


def _warm_renderer() -> None:
    """Import the report's renderer (matplotlib: about a second) while the job runs, which
    leaves this process idle, rather than after it ends, when the user waits for the report."""
    import importlib
    import threading

    def warm() -> None:
        for name in ("feedprof.render.html", "matplotlib.figure", "matplotlib.backends.backend_svg"):
            try:
                importlib.import_module(name)
            except ImportError:  # (the report says so itself when it is written)
                return

    threading.Thread(target=warm, name="feedprof-warm-renderer", daemon=True).start()
