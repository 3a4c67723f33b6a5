"""Framework adapters: how to recognise a loader, read its settings, inject
knobs at construction, and replay one batch for the compute ceiling.

Adapters never import their framework at module import time: they are
installed by a post-import hook (hooks.py) when the user's script imports it,
and they talk to the trial controller only through contract.Controller.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Dict, Tuple

from feedprof.record.steps import LoaderInfo
from feedprof.store.codes import Framework

_MODULES = {Framework.TORCH: "torch", Framework.KERAS: "keras", Framework.TF_KERAS: "keras",
            Framework.TF_DATA: "tfdata", Framework.TORCHDATA_NODES: "torchdata_nodes", Framework.RAY_DATA: "ray_data"}
# frameworks whose loaders can switch inside the real run (contract.Switcher): the module's SWITCHER
_SWITCHERS = {Framework.TORCH: "torch_switch", Framework.KERAS: "keras_switch"}


def _module(framework: str) -> Any:
    module = _MODULES.get(framework)
    return None if module is None else importlib.import_module(f"feedprof.frameworks.{module}")


def in_flight(framework: str, config: Dict[str, Any]) -> int:
    """Batches a loader with this config holds between loading and the loop:
    what a window must not mistake for steady state."""
    module = _module(framework)
    return module.in_flight(config) if module is not None else 0


def describe_config(framework: str, config: Dict[str, Any]) -> str:
    """A loader config as its framework's keywords, leaving out the defaults
    ("num_workers=8, persistent_workers=True"); any knobs if the framework is unknown."""
    module = _module(framework)
    if module is None:
        return ", ".join(f"{k}={v}" for k, v in config.items() if v is not None)
    return module.describe_config(config)


def switcher_for(framework: str) -> Any:
    """The framework's contract.Switcher, or None where its loaders are only observed online."""
    module = _SWITCHERS.get(framework)
    return None if module is None else importlib.import_module(f"feedprof.frameworks.{module}").SWITCHER


def code_site(frame: Any) -> str:
    """Where a frame is, as people name it: "train.py:42", or "cell line 3"
    in a notebook (whose cells are compiled under generated file names)."""
    name = frame.f_code.co_filename
    if name.startswith("<") or f"{os.sep}ipykernel_" in name:
        return f"cell line {frame.f_lineno}"
    return f"{os.path.basename(name)}:{frame.f_lineno}"


def describe_loader(obj: Any) -> Tuple[Framework, LoaderInfo]:
    """(framework, what is known) of a loader handed to ``prof.watch``; an
    unknown iterable gets what can be read."""
    if "torch.utils.data" in sys.modules:
        from feedprof.frameworks import torch as torch_fw

        if torch_fw.is_dataloader(obj):
            return Framework.TORCH, torch_fw.describe(obj)
    info = LoaderInfo(dataset=type(obj).__name__)
    try:
        info.batches_per_epoch = len(obj)
    except TypeError:
        pass
    return Framework.ITERABLE, info
