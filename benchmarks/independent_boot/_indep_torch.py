"""PyTorch: force the config in DataLoader.__init__, time each batch the
iterator delivers to the loop (steps = batches delivered)."""
from __future__ import annotations

import inspect
from typing import Any, Dict

import _indep_core as core

KNOBS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")


def legalise(args: Dict[str, Any], config: Dict[str, Any]) -> None:
    """Apply config to DataLoader's bound arguments the way torch accepts them."""
    for k in KNOBS:
        if k in config:
            args[k] = config[k]
    if not args.get("num_workers"):
        args["num_workers"] = 0
        args["prefetch_factor"] = None  # torch raises on either with 0 workers
        args["persistent_workers"] = False


def effective(loader: Any) -> Dict[str, Any]:
    return {k: getattr(loader, k, None) for k in KNOBS}


def in_flight(cfg: Dict[str, Any]) -> int:
    """Batches the config keeps queued ahead of the loop."""
    n = cfg.get("num_workers") or 0
    return n * (cfg.get("prefetch_factor") or 2) if n else 0


def _length(loader: Any) -> Any:
    try:
        return len(loader)
    except TypeError:  # an IterableDataset without __len__
        return None


def install(module: Any) -> None:
    DL = module.DataLoader
    if getattr(DL, "_indep_patched", False):
        return
    Base = module.dataloader._BaseDataLoaderIter
    orig_init, orig_iter, orig_next = DL.__init__, DL.__iter__, Base.__next__
    sig = inspect.signature(orig_init)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        config = core.force_config("torch")
        if config is None:
            orig_init(self, *args, **kwargs)
        else:
            bound = sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            legalise(bound.arguments, config)
            orig_init(*bound.args, **bound.kwargs)
        cfg = effective(self)
        self._indep = core.register("torch", core.user_site(), config is not None, cfg, in_flight(cfg),
                                    getattr(self, "batch_size", None), _length(self))

    def __iter__(self: Any) -> Any:
        it = orig_iter(self)
        rec = getattr(self, "_indep", None)
        if rec is not None:
            core.epoch_start(rec)
            it._indep = rec  # persistent workers: the same iterator, tagged again
        return it

    def __next__(self: Any) -> Any:
        batch = orig_next(self)
        rec = getattr(self, "_indep", None)
        if rec is not None:
            core.delivered(rec, 1, batch)
        return batch

    __init__.__wrapped__ = orig_init  # a tool patched on top (feedprof, under observe_command) still
    # sees the DataLoader's own parameters through inspect.signature
    DL.__init__, DL.__iter__, Base.__next__ = __init__, __iter__, __next__
    DL._indep_patched = True
