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
from typing import Any

from feedprof.version import __version__
__all__ = ["profile", "tune", "load", "report", "text", "to_tensorboard", "load_ipython_extension", "__version__"]


def _rich_output_in_notebooks() -> None:
    if "IPython" in sys.modules:  # only a running IPython shell can want it; never import IPython here
        from feedprof.notebook import register_if_in_ipython

        register_if_in_ipython()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext feedprof``: rich output for feedprof's records, and the
    ``%%feedprof`` cell magic (``%%feedprof --out run.json``) that profiles the
    loop in a cell: every torch DataLoader it iterates is timed."""
    from feedprof.notebook import load_ipython_extension as _load

    _load(ipython)


def profile(enabled: bool = True, **kwargs: Any) -> Any:
    """Profile a loop: ``with feedprof.profile() as prof: for b in prof.watch(loader): ...``

    Keyword arguments: ``interval_s`` (sampling period, default 0.2 s),
    ``gpu`` (sample NVML, default True), ``warmup_batches`` (excluded from the
    steady state, default 5). ``enabled=False`` gives a no-op profiler.
    """
    from feedprof.session import profile as _profile

    _rich_output_in_notebooks()
    return _profile(enabled=enabled, **kwargs)


def load(path: str) -> Any:
    """Read ``run.json`` (a :class:`~feedprof.store.Run`) or ``results.json``
    (a :class:`~feedprof.store.TuneResult`)."""
    from feedprof.store import load as _load

    _rich_output_in_notebooks()
    return _load(path)


def tune(script: str, argv: Any = (), out_dir: str = "feedprof-out", progress: bool = True, **options: Any) -> Any:
    """Tune the data loader of an unmodified training script.

    Runs ``script`` (with ``argv``) in child processes with different loader
    settings injected, within ``budget_s`` seconds (default 120), and returns
    a :class:`~feedprof.store.TuneResult` whose ``recommendation`` holds the
    config to use. Writes ``out_dir/results.json`` and ``out_dir/report.html``.
    Other options: ``max_workers``, ``loader_site`` ("train.py:42"),
    ``window_seconds``, ``min_window_batches``, ``warmup_batches``, ``gpu``.
    """
    import dataclasses
    import sys

    from feedprof.app import Outputs, run_tune
    from feedprof.tune.job import TuneJob, TuneOptions

    _rich_output_in_notebooks()
    opts = dataclasses.replace(TuneOptions(), **options)
    return run_tune(TuneJob(script=script, out_dir=out_dir, argv=tuple(argv)), opts,
                    Outputs(progress=progress, show=progress, out=sys.stderr))


def text(obj: Any) -> str:
    """In plain words: a TuneResult's recommendation, a Run's or Summary's
    summary, or one finding (``feedprof.store.reasons``), as the command line says them."""
    from feedprof.render.text import words_for

    return words_for(obj)


def report(obj: Any, path: str = "feedprof.html") -> str:
    """Write the HTML report of a Run or TuneResult (as from :func:`load`)."""
    from feedprof.render.report import write_report

    return write_report(obj, path)


def to_tensorboard(obj: Any, logdir: str) -> Any:
    """Write a Run or TuneResult (as from :func:`load`) as TensorBoard event files
    under ``logdir`` (a tune: one run per trial); returns the files written.
    Needs the tensorboard package (``pip install tensorboard``)."""
    from feedprof.render.tensorboard import write

    return write(obj, logdir)
