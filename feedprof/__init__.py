"""feedprof: is your training job waiting for data, and which loader settings fix it?

Public API::

    with feedprof.profile() as prof:        # inside your own loop
        for batch in prof.watch(loader):
            train_step(batch)
    print(prof.summary()); prof.save("run.json"); prof.report("feedprof.html")

    feedprof.load("run.json")               # a saved run (or a tune's results.json)
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["profile", "load", "__version__"]


def profile(enabled: bool = True, **kwargs: Any) -> Any:
    """Profile a loop: ``with feedprof.profile() as prof: for b in prof.watch(loader): ...``

    Keyword arguments: ``interval_s`` (sampling period, default 0.2 s),
    ``gpu`` (sample NVML, default True), ``warmup_batches`` (excluded from the
    steady state, default 5). ``enabled=False`` gives a no-op profiler.
    """
    from feedprof.session import profile as _profile

    return _profile(enabled=enabled, **kwargs)


def load(path: str) -> Any:
    """Read ``run.json`` (a :class:`~feedprof.store.Run`) or ``results.json``
    (a :class:`~feedprof.store.TuneResult`)."""
    from feedprof.store import load as _load

    return _load(path)
