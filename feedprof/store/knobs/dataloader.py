"""torch ``DataLoader``'s knobs (frameworks/torch.py injects them)."""
from __future__ import annotations

from typing import Any, Dict

KNOBS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
DEFAULT_PREFETCH_FACTOR = 2  # torch's own default when workers > 0


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


def describe(config: Dict[str, Any]) -> str:
    """num_workers, plus only the knobs that differ from PyTorch's defaults."""
    cfg = effective(config)
    parts = [f"num_workers={cfg['num_workers']}"]
    if cfg["num_workers"] and cfg["prefetch_factor"] not in (None, DEFAULT_PREFETCH_FACTOR):
        parts.append(f"prefetch_factor={cfg['prefetch_factor']}")
    if cfg["num_workers"] and cfg["persistent_workers"]:
        parts.append("persistent_workers=True")
    if cfg["pin_memory"]:
        parts.append("pin_memory=True")
    if cfg["num_workers"] and cfg.get("in_order") is False:
        parts.append("in_order=False")
    return ", ".join(parts)
