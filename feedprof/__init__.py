"""feedprof: is your training job waiting for data, and which loader settings fix it?

Public API::

    with feedprof.profile() as prof:        # inside your own loop
        for batch in prof.watch(loader):
            train_step(batch)
    print(prof.summary()); prof.save("run.json"); prof.report("feedprof.html")
    prof.to_tensorboard("runs/exp1")        # TensorBoard event files

    feedprof.load("run.json")               # a saved run (or a tune's results.json)
    result = feedprof.tune("train.py", budget_s=60)  # sweep the loader settings of an unmodified script
    print(feedprof.text(result))            # the recommendation in words

In Jupyter, records show as rich HTML once any of these has been called (or
after ``%load_ext feedprof``, which also gives the ``%%feedprof`` cell magic).
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Union

from feedprof import defaults
from feedprof.version import __version__

if TYPE_CHECKING:  # (the layers are imported where they are used: see the layer test)
    from IPython.core.interactiveshell import InteractiveShell

    from feedprof.session import NullProfile, Profile
    from feedprof.store import Run, Summary, TuneResult
    from feedprof.store.reasons import Reason
__all__ = ["profile", "tune", "load", "report", "text", "to_tensorboard", "load_ipython_extension", "__version__"]


def _rich_output_in_notebooks() -> None:
    if "IPython" in sys.modules:  # only a running IPython shell can want it; never import IPython here
        from feedprof.notebook import register_if_in_ipython

        register_if_in_ipython()


def load_ipython_extension(ipython: "InteractiveShell") -> None:
    """``%load_ext feedprof``: rich output for feedprof's records, and the
    ``%%feedprof`` cell magic (``%%feedprof --out run.json``) that profiles the
    loop in a cell: every torch DataLoader it iterates is timed."""
    from feedprof.notebook import load_ipython_extension as _load

    _load(ipython)


def profile(enabled: bool = True, **kwargs: Any) -> Union["Profile", "NullProfile"]:
    """Profile a loop: ``with feedprof.profile() as prof: for b in prof.watch(loader): ...``

    Keyword arguments: ``interval_s`` (sampling period, default 0.2 s),
    ``gpu`` (sample NVML, default True), ``warmup_batches`` (excluded from the
    steady state, default 5). ``enabled=False`` gives a no-op profiler.
    """
    from feedprof.session import profile as _profile

    _rich_output_in_notebooks()
    return _profile(enabled=enabled, **kwargs)


def load(path: str) -> Union["Run", "TuneResult"]:
    """Read ``run.json`` (a :class:`~feedprof.store.Run`) or ``results.json``
    (a :class:`~feedprof.store.TuneResult`)."""
    from feedprof.store import load as _load

    _rich_output_in_notebooks()
    return _load(path)


def tune(script: str, argv: Sequence[str] = (), out_dir: str = "feedprof-out", progress: bool = True, *,
         budget_s: float = defaults.TUNE_BUDGET_S, max_workers: Optional[int] = None, loader_site: Optional[str] = None,
         window_seconds: float = defaults.TUNE_WINDOW.seconds, window_batches: int = defaults.TUNE_WINDOW.batches,
         min_window_batches: int = defaults.TUNE_WINDOW.min_batches,
         warmup_batches: int = defaults.TUNE_WINDOW.warmup_batches, interval_s: float = defaults.INTERVAL_S,
         gpu: bool = True, loader_timeout_s: float = defaults.LOADER_TIMEOUT_S, trial_timeout_s: Optional[float] = None,
         tolerance: float = defaults.TOLERANCE, fork_trials: bool = True, max_memory_bytes: Optional[int] = None,
         allow_reorder: bool = False) -> "TuneResult":
    """Tune the data loader of an unmodified training script.

    Runs ``script`` (with ``argv``) in child processes with different loader
    settings injected, within ``budget_s`` seconds, and returns a
    :class:`~feedprof.store.TuneResult` whose ``recommendation`` holds the config
    to use. Writes ``out_dir/results.json`` and ``out_dir/report.html``. The
    options are ``feedprof tune``'s (tune/job.py TuneOptions): ``max_workers``
    (default max(32, 2 x the usable CPUs)), ``loader_site`` ("train.py:42"), the
    trial window (``window_seconds``, ``window_batches``, ``min_window_batches``,
    ``warmup_batches``), ``gpu``, ``tolerance`` (configs within it of the fastest
    count as equally fast), ``max_memory_bytes``, ``allow_reorder``.
    """
    from feedprof.app import Outputs, run_tune
    from feedprof.tune.job import TuneJob, TuneOptions

    _rich_output_in_notebooks()
    opts = TuneOptions(budget_s=budget_s, max_workers=max_workers, loader_site=loader_site,
                       window_seconds=window_seconds, window_batches=window_batches,
                       min_window_batches=min_window_batches, warmup_batches=warmup_batches, interval_s=interval_s,
                       gpu=gpu, loader_timeout_s=loader_timeout_s, trial_timeout_s=trial_timeout_s,
                       tolerance=tolerance, fork_trials=fork_trials, max_memory_bytes=max_memory_bytes,
                       allow_reorder=allow_reorder)
    return run_tune(TuneJob(script=script, out_dir=out_dir, argv=tuple(argv)), opts,
                    Outputs(progress=progress, show=progress, out=sys.stderr))


Record = Union["Run", "TuneResult"]


def text(obj: Union["Run", "TuneResult", "Summary", "Reason"]) -> str:
    """In plain words: a TuneResult's recommendation, a Run's or Summary's
    summary, or one finding (``feedprof.store.reasons``), as the command line says them."""
    from feedprof.render.text import words_for

    return words_for(obj)


def report(obj: Record, path: str = "feedprof.html") -> str:
    """Write the HTML report of a Run or TuneResult (as from :func:`load`)."""
    from feedprof.render.report import write_report

    return write_report(obj, path)


def to_tensorboard(obj: Record, logdir: str) -> List[str]:
    """Write a Run or TuneResult (as from :func:`load`) as TensorBoard event files
    under ``logdir`` (a tune: one run per trial); returns the files written.
    Needs the tensorboard package (``pip install tensorboard``)."""
    from feedprof.render.tensorboard import write

    return write(obj, logdir)


_tune = tune  # (the feedprof.tune package, once imported, takes the name tune here: it calls this)
