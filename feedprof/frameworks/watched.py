"""A loader handed to ``prof.watch`` (feedprof.profile()): what is known of it, read from the
object itself."""
from __future__ import annotations

import sys
from typing import Tuple

from feedprof.frameworks import torch as torch_fw
from feedprof.record.steps import LoaderInfo
from feedprof.store.codes import Framework


def describe_loader(obj: object) -> Tuple[Framework, LoaderInfo]:
    """(framework, what is known) of a loader handed to ``prof.watch``; an
    unknown iterable gets what can be read."""
    if "torch.utils.data" in sys.modules:
        if torch_fw.is_dataloader(obj):
            return Framework.TORCH, torch_fw.describe(obj)
    info = LoaderInfo(dataset=type(obj).__name__)
    try:
        info.batches_per_epoch = len(obj)
    except TypeError:
        pass
    return Framework.ITERABLE, info
