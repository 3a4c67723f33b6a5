"""Keras 3 ``PyDataset``'s knobs, and legacy tf.keras ``fit(workers=...)``'s (frameworks/keras.py,
tf_keras.py inject them)."""
from __future__ import annotations

from typing import Any, Dict

KNOBS = ("workers", "use_multiprocessing", "max_queue_size")
DEFAULTS = {"workers": 1, "use_multiprocessing": False, "max_queue_size": 10}


def legalize(config: Dict[str, Any]) -> Dict[str, Any]:
    out = {**DEFAULTS, **{k: v for k, v in config.items() if k in KNOBS and v is not None}}
    out["workers"] = max(1, int(out["workers"]))
    out["max_queue_size"] = max(1, int(out["max_queue_size"]))
    out["use_multiprocessing"] = bool(out["use_multiprocessing"])
    return out


def in_flight(config: Dict[str, Any]) -> int:
    """Batches the enqueuer's queue holds (workers=1 without processes: one, loaded in turn)."""
    cfg = legalize(config)
    return cfg["max_queue_size"] if cfg["workers"] > 1 or cfg["use_multiprocessing"] else 1


def describe(config: Dict[str, Any]) -> str:
    """workers, plus only the knobs that differ from Keras's defaults."""
    cfg = legalize(config)
    parts = [f"workers={cfg['workers']}"]
    if cfg["use_multiprocessing"]:
        parts.append("use_multiprocessing=True")
    if cfg["max_queue_size"] != DEFAULTS["max_queue_size"]:
        parts.append(f"max_queue_size={cfg['max_queue_size']}")
    return ", ".join(parts)
