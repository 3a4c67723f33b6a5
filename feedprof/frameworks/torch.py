"""PyTorch ``torch.utils.data.DataLoader``: read, inject, time, replay.

NOTE [ DataLoader instrumentation in a trial child ]

    script: DataLoader(ds, batch_size=64, num_workers=0)
              │ patched __init__: bind args ─► ctl.plan() ─► knobs to inject? (by call site)
              │                   original __init__ with the knobs
              │                   ctl.created() ─► a handle kept on the loader
    script: for batch in loader:
              │ patched __iter__ ─► ctl.iterate(handle, original __iter__): the first time,
              │                     the handle is bound to a StepRecorder (one per call site,
              │                     continued when the script re-creates the loader each epoch)
              │                     ─► WatchedIterator (timed) or ReplayIterator (ceiling)

The class is patched in place rather than replaced, so ``isinstance`` checks,
subclasses and ``from torch.utils.data import DataLoader`` done before or after
all keep working.
"""
from __future__ import annotations

import inspect
import os
import sys
from typing import Any, Dict, Optional

from feedprof.record.steps import LoaderInfo

KNOBS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
DEFAULT_PREFETCH_FACTOR = 2  # torch's own default when workers > 0


def is_dataloader(obj: Any) -> bool:
    mod = sys.modules.get("torch.utils.data")
    return mod is not None and isinstance(obj, mod.DataLoader)


def describe(loader: Any) -> LoaderInfo:
    batch_size = loader.batch_size
    if batch_size is None:  # a custom batch_sampler
        batch_size = getattr(loader.batch_sampler, "batch_size", None)
    try:
        batches_per_epoch: Optional[int] = len(loader)
    except TypeError:  # an IterableDataset without __len__
        batches_per_epoch = None
    return LoaderInfo(config=legalize({k: getattr(loader, k, None) for k in KNOBS}),
                      dataset=type(loader.dataset).__name__,
                      batch_size=batch_size if isinstance(batch_size, int) else None,
                      batches_per_epoch=batches_per_epoch)


def legalize(config: Dict[str, Any]) -> Dict[str, Any]:
    """The DataLoader rejects prefetch_factor / persistent_workers without workers."""
    out = dict(config)
    if not out.get("num_workers"):
        out["num_workers"] = 0
        out["prefetch_factor"] = None
        out["persistent_workers"] = False
    return out


def effective(config: Dict[str, Any]) -> Dict[str, Any]:
    """Settings as the DataLoader will use them (prefetch_factor None -> 2)."""
    out = legalize(config)
    if out["num_workers"] and out.get("prefetch_factor") is None:
        out["prefetch_factor"] = DEFAULT_PREFETCH_FACTOR
    out.setdefault("pin_memory", False)
    out.setdefault("persistent_workers", False)
    return out


def in_flight(config: Dict[str, Any]) -> int:
    """Batches the loader holds ready or in the making: every worker prefetches its own."""
    cfg = effective(config)
    return cfg["num_workers"] * (cfg["prefetch_factor"] or 0)


def describe_config(config: Dict[str, Any]) -> str:
    """num_workers, plus only the knobs that differ from PyTorch's defaults."""
    cfg = effective(config)
    parts = [f"num_workers={cfg['num_workers']}"]
    if cfg["num_workers"] and cfg["prefetch_factor"] not in (None, DEFAULT_PREFETCH_FACTOR):
        parts.append(f"prefetch_factor={cfg['prefetch_factor']}")
    if cfg["num_workers"] and cfg["persistent_workers"]:
        parts.append("persistent_workers=True")
    if cfg["pin_memory"]:
        parts.append("pin_memory=True")
    return ", ".join(parts)


def call_line(config: Dict[str, Any], dataset: str = "dataset", batch_size: Optional[int] = None) -> str:
    """A paste-ready ``DataLoader(...)`` call with the recommended knobs."""
    cfg = effective(config)
    args = [dataset]
    if batch_size is not None:
        args.append(f"batch_size={batch_size}")
    args.append(f"num_workers={cfg['num_workers']}")
    if cfg.get("pin_memory"):
        args.append("pin_memory=True")
    if cfg["num_workers"]:
        args.append(f"prefetch_factor={cfg['prefetch_factor']}")
        if cfg.get("persistent_workers"):
            args.append("persistent_workers=True")
    return f"DataLoader({', '.join(args)})"


POSITIONAL = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn",
              "pin_memory", "drop_last", "timeout", "worker_init_fn", "multiprocessing_context", "generator")


def code_line(config: Dict[str, Any], loader: Any, script: str) -> str:
    """The script's own DataLoader call at the loader's site with the knobs
    changed; a generic call where the source cannot be read."""
    from feedprof.frameworks.source import resolve_site, rewrite_statement

    cfg = effective(config)
    knobs = {"num_workers": cfg["num_workers"]}
    drop = []
    if cfg.get("pin_memory"):
        knobs["pin_memory"] = True
    else:
        drop.append("pin_memory")
    if cfg["num_workers"]:
        knobs["prefetch_factor"] = cfg["prefetch_factor"]
        if cfg.get("persistent_workers"):
            knobs["persistent_workers"] = True
        else:
            drop.append("persistent_workers")
    else:
        drop += ["prefetch_factor", "persistent_workers"]
    where = resolve_site(getattr(loader, "site", "") if loader is not None else "", script)
    if where is not None:
        found = rewrite_statement(*where, ("DataLoader",), knobs, drop=drop, positional=POSITIONAL)
        if found:
            return found[0]
    return call_line(cfg, batch_size=getattr(loader, "batch_size", None))


def install(ctl: Any) -> None:
    """Patch DataLoader so the trial controller ``ctl`` sees every loader."""
    from torch.utils.data import DataLoader

    if getattr(DataLoader, "_feedprof_patched", False):
        return
    orig_init = DataLoader.__init__
    orig_iter = DataLoader.__iter__
    sig = inspect.signature(orig_init)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        caller = sys._getframe(1).f_code.co_filename
        if f"{os.sep}keras{os.sep}" in caller:  # Keras's torch backend feeding a PyDataset: not the user's loader
            return orig_init(self, *args, **kwargs)
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError:  # let the DataLoader raise its own, familiar error
            return orig_init(self, *args, **kwargs)
        script_cfg = {k: bound.arguments.get(k, sig.parameters[k].default) for k in KNOBS}
        plan = ctl.plan("torch", sys._getframe(1))
        if plan.inject:
            for key, value in legalize({**script_cfg, **plan.inject}).items():
                bound.arguments[key] = value
        orig_init(*bound.args, **bound.kwargs)
        info = describe(self)
        info.script_config = legalize(script_cfg)
        self._feedprof_handle = ctl.created(plan, info, self)

    def __iter__(self: Any) -> Any:
        handle = getattr(self, "_feedprof_handle", None)
        if handle is None:
            return orig_iter(self)
        return ctl.iterate(handle, lambda: orig_iter(self))

    __init__.__wrapped__ = orig_init  # type: ignore[attr-defined]
    __init__.__signature__ = sig  # type: ignore[attr-defined]
    DataLoader.__init__ = __init__
    DataLoader.__iter__ = __iter__
    DataLoader._feedprof_patched = True


# NOTE [ In-process timing for the %%feedprof cell magic ]
#
#   %%feedprof cell ─► watching(prof): DataLoader.__iter__ patched while the cell runs
#     for x in loader: ─► patched __iter__ ─► a StepRecorder per (line that iterates, dataset, batch size)
#                                          ─► WatchedIterator(original iterator) ─► timed __next__
#   the cell ends ─► the original __iter__ is put back; an import hook set for a cell that
#                   imports torch itself goes inert
#
# Unlike install() (a trial child, its process to itself) this runs in the
# user's own kernel, so it patches nothing but __iter__ and only for the cell.


def _patch_iter(module: Any, prof: Any, active: Dict[str, Any]) -> None:
    from feedprof.frameworks import code_site
    from feedprof.record.steps import Binding, WatchedIterator, learn_batch_size

    DataLoader = module.DataLoader
    orig_iter = DataLoader.__dict__["__iter__"]
    recorders: Dict[tuple, Any] = {}
    now = prof.clock.now_s

    def __iter__(self: Any) -> Any:
        t_start = now()
        it = orig_iter(self)
        site = code_site(sys._getframe(1))
        info = describe(self)
        key = (site, info.dataset, info.batch_size)
        rec = recorders.get(key)
        if rec is None:
            info.site = site
            rec = recorders[key] = prof.recorder("torch", name=site, info=info)
            rec.binding = Binding(site=site)
        rec.epoch_started(t_start)
        after = learn_batch_size if rec.info.batch_size is None else None
        return WatchedIterator(it, rec, after=after, now=now)

    def undo() -> None:
        if DataLoader.__dict__.get("__iter__") is __iter__:  # unless someone patched it after us
            DataLoader.__iter__ = orig_iter

    DataLoader.__iter__ = __iter__
    active["undo"] = undo


def watching(prof: Any) -> Any:
    """A context manager: every torch DataLoader iterated in this process while
    it is open is timed by ``prof`` (a :class:`feedprof.session.Profile`)."""
    import contextlib

    from feedprof.frameworks.hooks import when_imported

    @contextlib.contextmanager
    def _watching() -> Any:
        active: Dict[str, Any] = {"on": True, "undo": None}

        def patch(module: Any) -> None:
            if active["on"] and active["undo"] is None:
                _patch_iter(module, prof, active)

        when_imported("torch.utils.data", patch)  # now, or when the cell imports torch
        try:
            yield prof
        finally:
            active["on"] = False
            if active["undo"] is not None:
                active["undo"]()

    return _watching()
