"""Ray Data's ``iter_torch_batches``: read, inject, time, replay.

NOTE [ Ray Data instrumentation in a training worker ]

    script (the training function): shard = ray.train.get_dataset_shard("train")
    script: for batch in shard.iter_torch_batches(batch_size=64, prefetch_batches=1):
              │ patched DataIterator.iter_torch_batches (and Dataset's), only where the script's
              │ own code calls it: ctl.plan ─► prefetch_batches injected; LoaderInfo
              │ {prefetch_batches, batch_size} (batch_size is the training's: reported, never changed)
              │ the iterable's __iter__ ─► ctl.iterate: timed, or one batch replayed (ceiling)

The dataset's own work (reads, map_batches) runs in Ray Data's tasks, in other
Ray worker processes: what a training worker shows is its wait for the next
batch, and ``prefetch_batches`` is the knob on its side of the stream (batches
prefetched by a thread of its own). How many tasks Ray Data runs is Ray Data's
(its resources, ``concurrency=``), outside what feedprof sets.
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Dict, Iterable, Iterator, Sequence

from feedprof.record.steps import LoaderInfo
from feedprof.store.codes import Framework
from feedprof.store.knobs.raydata import DEFAULTS, KNOBS, legalize
from feedprof.frameworks.contract import Controller

FRAMEWORK = Framework.RAY_DATA
CALL = "iter_torch_batches"


def paste_for(config: Dict[str, Any], loader: Any, script: str, argv: Sequence[str] = ()) -> Any:
    """The script's ``iter_torch_batches(...)`` call with its prefetch_batches set."""
    from feedprof.frameworks.paste import Call, Paste, Setting, paste

    n = legalize(config)["prefetch_batches"]
    chain = tuple(getattr(loader, "call_chain", ()) or ())
    fallback = f"{CALL}(batch_size=..., prefetch_batches={n})"
    if not chain:
        return Paste(fallback)
    setting = Setting("prefetch_batches", "prefetch_batches", n, DEFAULTS["prefetch_batches"])
    return paste([Call(chain=chain, names=(CALL,), settings=(setting,))], script, argv, fallback)


def install(ctl: Controller) -> None:
    """Patch the iterators' iter_torch_batches so the controller sees the script's own calls."""
    import ray.data
    from ray.data.iterator import DataIterator

    for cls in (DataIterator, ray.data.Dataset):
        if not cls.__dict__.get("_feedprof_patched", False):
            _patch(ctl, cls)
            cls._feedprof_patched = True


def _patch(ctl: Controller, cls: type) -> None:
    original = cls.iter_torch_batches

    @functools.wraps(original)
    def iter_torch_batches(self: Any, **kwargs: Any) -> Any:  # (keyword-only in Ray)
        caller = sys._getframe(1)
        if not ctl.user_chain(caller):  # Ray's own calls (Dataset's goes through DataIterator's)
            return original(self, **kwargs)
        plan = ctl.plan(FRAMEWORK, caller)
        asked = legalize({k: kwargs.get(k, DEFAULTS[k]) for k in KNOBS})
        if plan.inject and plan.inject.get("prefetch_batches") is not None:
            kwargs["prefetch_batches"] = int(plan.inject["prefetch_batches"])
        config = legalize({k: kwargs.get(k, DEFAULTS[k]) for k in KNOBS})
        batches = Batches(original(self, **kwargs), ctl)
        info = LoaderInfo(config=config, script_config=asked, dataset=type(self).__name__,
                          batch_size=config["batch_size"])
        batches.handle = ctl.created(plan, info, batches)
        return batches

    cls.iter_torch_batches = iter_torch_batches


class Batches:
    """The iterable iter_torch_batches returned, timed by the controller when iterated."""

    def __init__(self, inner: Iterable[Any], ctl: Controller):
        self.inner, self.ctl, self.handle = inner, ctl, None

    def __iter__(self) -> Iterator[Any]:
        return self.ctl.iterate(self.handle, lambda: iter(self.inner))
