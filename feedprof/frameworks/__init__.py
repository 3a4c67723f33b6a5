"""Framework adapters: how to recognise a loader, read its settings, inject
knobs at construction, and replay one batch for the compute ceiling.

Adapters never import their framework at module import time: they are
installed by a post-import hook (hooks.py) when the user's script imports it.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Dict


def code_site(frame: Any) -> str:
    """Where a frame is, as people name it: "train.py:42", or "cell line 3"
    in a notebook (whose cells are compiled under generated file names)."""
    name = frame.f_code.co_filename
    if name.startswith("<") or f"{os.sep}ipykernel_" in name:
        return f"cell line {frame.f_lineno}"
    return f"{os.path.basename(name)}:{frame.f_lineno}"


def describe_loader(obj: Any) -> Dict[str, Any]:
    """framework, dataset, batch_size, batches_per_epoch and config of a loader
    handed to ``prof.watch``; an unknown iterable gets what can be read."""
    if "torch.utils.data" in sys.modules:
        from feedprof.frameworks import torch as torch_fw

        if torch_fw.is_dataloader(obj):
            return {"framework": "torch", **torch_fw.describe(obj)}
    info: Dict[str, Any] = {"framework": "iterable", "dataset": type(obj).__name__}
    try:
        info["batches_per_epoch"] = len(obj)
    except TypeError:
        pass
    return info
