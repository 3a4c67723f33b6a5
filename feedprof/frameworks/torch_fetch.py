"""A DataLoader's loading calls marked for the loading profiler (record/loadprof.py).

torch fetches every batch through one of two fetchers, in a worker process or, at 0 workers, in
the training process itself: ``_MapDatasetFetcher.fetch`` (the dataset's items, then the collate)
and ``_IterableDatasetFetcher.fetch``. Patched in the trial child before any worker is forked,
so forked workers inherit the patch (spawned ones run torch's own and are not profiled).
"""
from __future__ import annotations

from typing import Any

from feedprof.record.loadprof import loading


def install() -> None:
    from torch.utils.data._utils import fetch

    for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        if not cls.__dict__.get("_feedprof_profiled", False):
            _patch(cls)


def _patch(cls: type) -> None:
    original = cls.fetch

    def fetch(self: Any, possibly_batched_index: Any) -> Any:
        with loading(type(self.dataset).__name__):
            return original(self, possibly_batched_index)

    fetch.__wrapped__ = original  # type: ignore[attr-defined]
    cls.fetch = fetch
    cls._feedprof_profiled = True
