"""Framework adapters: how to recognise a loader, read its settings, inject
knobs at construction, and replay one batch for the compute ceiling.

Adapters never import their framework at module import time: they are
installed by a post-import hook (hooks.py) when the user's script imports it,
and they talk to the trial controller only through contract.Controller.
"""
from __future__ import annotations

import importlib
import os
from typing import Any

from feedprof.store.codes import Framework

# frameworks whose loaders can switch inside the real run (contract.Switcher): the module's SWITCHER
_SWITCHERS = {Framework.TORCH: "torch_switch", Framework.KERAS: "keras_switch"}


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
