"""Framework adapters: how to recognise a loader, read its settings, inject
knobs at construction, and replay one batch for the compute ceiling.

Adapters never import their framework at module import time: they are
installed by a post-import hook (hooks.py) when the user's script imports it,
and they talk to the trial controller only through contract.Controller.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Dict, Tuple

from feedprof.record.steps import LoaderInfo

_MODULES = {"torch": "torch", "keras": "keras", "tf.keras": "keras", "tf.data": "tfdata"}


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


def describe_loader(obj: Any) -> Tuple[str, LoaderInfo]:
    """(framework, what is known) of a loader handed to ``prof.watch``; an
    unknown iterable gets what can be read."""
    if "torch.utils.data" in sys.modules:
        from feedprof.frameworks import torch as torch_fw

        if torch_fw.is_dataloader(obj):
            return "torch", torch_fw.describe(obj)
    info = LoaderInfo(dataset=type(obj).__name__)
    try:
        info.batches_per_epoch = len(obj)
    except TypeError:
        pass
    return "iterable", info


HEAVY_MODULES = ("torch", "torch._dynamo", "tensorflow", "keras", "tf_keras", "jax")


def _install(adapter: str, ctl: Any) -> None:
    """Instrument a framework the script just imported (a failure to do so is a
    note, never an error in the user's script)."""
    from feedprof.reasons import NotInstrumented

    try:
        importlib.import_module(f"feedprof.frameworks.{adapter}").install(ctl)
        if adapter == "keras" and "tensorflow" in sys.modules:
            from feedprof.frameworks import tfdata

            tfdata.install_keras_adapter(ctl)
    except (ImportError, AttributeError) as exc:  # a framework version we do not know
        ctl.note(NotInstrumented(adapter=adapter, error=f"{type(exc).__name__}: {exc}"))


def install_adapters(ctl: Any) -> None:
    """In a trial child: each adapter is installed when the script imports its framework."""
    from feedprof.frameworks import hooks
    from feedprof.frameworks import torch as torch_fw

    hooks.when_imported("torch.utils.data", lambda _m: torch_fw.install(ctl))
    hooks.when_imported("tensorflow", lambda _m: _install("tfdata", ctl))
    hooks.when_imported("keras", lambda _m: _install("keras", ctl))
    hooks.when_imported("tf_keras", lambda _m: _install("tf_keras", ctl))
