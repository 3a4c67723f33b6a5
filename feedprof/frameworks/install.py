"""Which adapter is installed when the script imports what (post-import hooks,
hooks.py): nothing is imported until the script imports it itself."""
from __future__ import annotations

import importlib
import sys
from typing import Any

from feedprof.store.reasons import NotInstrumented
from feedprof.frameworks.contract import Controller

# module the script imports -> (adapter module in feedprof.frameworks, its install function)
ADAPTERS = (
    ("torch.utils.data", "torch", "install"),
    ("tensorflow", "tfdata", "install"),
    ("tensorflow", "tfdistribute", "install"),  # (after tfdata: it tags the pipelines distributed)
    ("keras", "keras", "install"),
    ("tf_keras", "tf_keras", "install"),
    ("torchdata.stateful_dataloader", "torch", "install_stateful"),
    ("torchdata.nodes", "torchdata_nodes", "install"),
    ("ray.data", "ray_data", "install"),
    ("transformers.training_args", "hf_trainer", "install_arguments"),
    ("transformers.trainer", "hf_trainer", "install_trainer"),
    ("lightning.pytorch.trainer.connectors.data_connector", "lightning", "install"),
    ("pytorch_lightning.trainer.connectors.data_connector", "lightning", "install"),
    ("lightning.pytorch.cli", "lightning", "install_cli"),
    ("pytorch_lightning.cli", "lightning", "install_cli"),
)


def install_adapters(ctl: Controller) -> None:
    """Instrument each framework when (if) the script imports it."""
    from feedprof.frameworks import hooks

    for module, adapter, function in ADAPTERS:
        hooks.when_imported(module, lambda m, a=adapter, f=function: install(a, ctl, f, m))


def install(adapter: str, ctl: Controller, function: str = "install", module: Any = None) -> None:
    """One adapter (a failure to install it is a note, never an error in the user's script)."""
    try:
        fn = getattr(importlib.import_module(f"feedprof.frameworks.{adapter}"), function)
        if adapter == "lightning":  # it wraps a function of the module just imported
            fn(ctl, module)
        else:
            fn(ctl)
        if adapter in ("keras", "tf_keras") and "tensorflow" in sys.modules:
            from feedprof.frameworks import tfdata

            tfdata.install_keras_adapter(ctl)
    except (ImportError, AttributeError) as exc:  # a framework version we do not know
        ctl.note(NotInstrumented(adapter=adapter, error=f"{type(exc).__name__}: {exc}"))
