"""torchdata.nodes' knobs: ParallelMapper's num_workers and method, Prefetcher's prefetch_factor
(frameworks/torchdata_nodes.py)."""
from __future__ import annotations

from typing import Any, Dict

KNOBS = ("num_workers", "method", "prefetch_factor")
METHODS = ("thread", "process")


def legalize(config: Dict[str, Any]) -> Dict[str, Any]:
    n = config.get("num_workers")
    pf = config.get("prefetch_factor")
    method = config.get("method")
    return {"num_workers": max(0, int(n or 0)), "method": method if method in METHODS else "thread",
            "prefetch_factor": None if pf is None else max(1, int(pf))}


def in_flight(config: Dict[str, Any]) -> int:
    """Batches held between loading and the loop: the Prefetcher's queue, and
    (roughly) what the workers have in the making."""
    cfg = legalize(config)
    return (cfg["prefetch_factor"] or 0) + cfg["num_workers"]


def describe(config: Dict[str, Any]) -> str:
    cfg = legalize(config)
    parts = [f"num_workers={cfg['num_workers']}"]
    if cfg["num_workers"] and cfg["method"] != "thread":
        parts.append(f"method={cfg['method']!r}")
    if cfg["prefetch_factor"] is not None:
        parts.append(f"prefetch_factor={cfg['prefetch_factor']}")
    return ", ".join(parts)
