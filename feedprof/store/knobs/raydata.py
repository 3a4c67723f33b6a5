"""Ray Data's ``iter_torch_batches`` knobs in a training worker (frameworks/ray_data.py):
``prefetch_batches`` is set; ``batch_size`` is the training's, reported, never changed."""
from __future__ import annotations

from typing import Any, Dict

KNOBS = ("prefetch_batches", "batch_size")
DEFAULTS = {"prefetch_batches": 1, "batch_size": 256}  # iter_torch_batches' own


def legalize(config: Dict[str, Any]) -> Dict[str, Any]:
    """prefetch_batches as a count (iter_torch_batches' default where absent); batch_size as the
    script gave it (None: not known)."""
    pf = config.get("prefetch_batches", DEFAULTS["prefetch_batches"])
    return {"prefetch_batches": max(0, int(pf or 0)), "batch_size": config.get("batch_size")}


def in_flight(config: Dict[str, Any]) -> int:
    return legalize(config)["prefetch_batches"]


def describe(config: Dict[str, Any]) -> str:
    cfg = legalize(config)
    size = f", batch_size={cfg['batch_size']}" if cfg["batch_size"] is not None else ""
    return f"prefetch_batches={cfg['prefetch_batches']}{size}"
