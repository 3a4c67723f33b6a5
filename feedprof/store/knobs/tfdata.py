"""tf.data's knobs as feedprof sets them on a pipeline (frameworks/tfdata.py)."""
from __future__ import annotations

from typing import Any, Dict

KNOBS = ("num_parallel_calls", "prefetch", "deterministic", "private_threadpool_size")
AUTOTUNE = "AUTOTUNE"
AUTOTUNE_BUFFER = 8  # batches an AUTOTUNE prefetch buffer is counted as (it grows as it sees fit)


def legalize(config: Dict[str, Any]) -> Dict[str, Any]:
    out = {k: config.get(k) for k in KNOBS}
    npc = out["num_parallel_calls"]
    if isinstance(npc, int) and npc < 1:
        out["num_parallel_calls"] = None
    return out


def in_flight(config: Dict[str, Any]) -> int:
    """Batches the prefetch buffer holds."""
    buffer = legalize(config)["prefetch"]
    return 0 if buffer is None else (AUTOTUNE_BUFFER if buffer == AUTOTUNE else int(buffer))


def describe(config: Dict[str, Any]) -> str:
    cfg = legalize(config)
    parts = [f"num_parallel_calls={cfg['num_parallel_calls'] or 'None (sequential)'}"]
    parts += [f"{k}={cfg[k]}" for k in ("prefetch", "deterministic", "private_threadpool_size") if cfg[k] is not None]
    return ", ".join(parts)
