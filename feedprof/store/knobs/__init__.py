"""Each framework's loader knobs as data: their names and defaults, their legal combinations, the
batches a config holds in flight, and the config in its framework's own keywords. Pure (no
framework is imported): the adapters (frameworks/), the search spaces (tune/space*.py) and the
words (render/words: config_words) read one definition of each.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any, Dict, Optional

from feedprof.store.codes import Framework
from feedprof.store.knobs import dataloader, nodes, pydataset, raydata, tfdata, threads

Config = Dict[str, Any]
_BY_FRAMEWORK = {Framework.TORCH: dataloader, Framework.KERAS: pydataset, Framework.TF_KERAS: pydataset,
                 Framework.TF_DATA: tfdata, Framework.TORCHDATA_NODES: nodes, Framework.RAY_DATA: raydata}


def _of(framework: str) -> Optional[ModuleType]:
    return _BY_FRAMEWORK.get(framework)


def in_flight(framework: str, config: Config) -> int:
    """Batches a loader with this config holds between loading and the loop: what a window must
    not mistake for steady state."""
    knobs = _of(framework)
    return knobs.in_flight(config) if knobs is not None else 0


def describe(framework: str, config: Config) -> str:
    """A loader config as its framework's keywords, leaving out the defaults
    ("num_workers=8, persistent_workers=True"); any knobs if the framework is unknown."""
    knobs = _of(framework)
    if knobs is None:
        return ", ".join(f"{k}={v}" for k, v in config.items() if v is not None)
    own = knobs.describe(threads.without_threads(config))
    return ", ".join(p for p in (own, threads.describe(config)) if p)
