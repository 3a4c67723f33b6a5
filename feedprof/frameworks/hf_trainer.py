"""Hugging Face ``transformers.Trainer``: where its loader's settings live.

NOTE [ Trainer's DataLoader ]

    script: args = TrainingArguments(..., dataloader_num_workers=0)
              │ patched __post_init__ ─► the script's frames that built it, kept on the object
    script: Trainer(model, args, train_dataset=ds).train()
              │ patched get_train_dataloader ─► torch.settings_from("TrainingArguments", its frames)
              │   DataLoader(ds, num_workers=args.dataloader_num_workers, ...)  (transformers' code)
              │     └ frameworks/torch.py: planned, knobs injected, settings_call = "TrainingArguments"
              │   accelerator.prepare(dl) ─► DataLoaderShard ─► DataLoader(ds, **dl's attributes)
              │     └ the same dataset: that loader rebuilt, with the same plan (torch.py NOTE)
              └ the shard iterates its DataLoader: timed as the training loader

The knobs are injected into the DataLoader (accelerate copies them from its
attributes), and the paste-ready line is the script's ``TrainingArguments(...)``
call with ``dataloader_num_workers`` etc. set (torch.paste_for).
"""
from __future__ import annotations

import sys
from typing import Any
from feedprof.frameworks.contract import Controller


def install_arguments(ctl: Controller) -> None:
    """TrainingArguments (and its subclasses): remember where the script built them."""
    from transformers.training_args import TrainingArguments

    if TrainingArguments.__dict__.get("_feedprof_patched", False):
        return
    orig_post_init = TrainingArguments.__post_init__

    def __post_init__(self: Any, *args: Any, **kwargs: Any) -> None:
        chain = ctl.user_chain(sys._getframe(1), direct=False)  # frame 1: the dataclass's generated __init__
        orig_post_init(self, *args, **kwargs)
        object.__setattr__(self, "_feedprof_chain", chain)

    TrainingArguments.__post_init__ = __post_init__
    TrainingArguments._feedprof_patched = True


def install_trainer(ctl: Controller) -> None:
    """Trainer.get_train_dataloader: the loader it builds takes its knobs from the args."""
    from transformers.trainer import Trainer

    from feedprof.frameworks.torch import settings_from

    if Trainer.__dict__.get("_feedprof_patched", False):
        return
    orig = Trainer.get_train_dataloader

    def get_train_dataloader(self: Any, *args: Any, **kwargs: Any) -> Any:
        chain = getattr(self.args, "_feedprof_chain", ())
        with settings_from(type(self.args).__name__, chain):
            return orig(self, *args, **kwargs)

    Trainer.get_train_dataloader = get_train_dataloader
    Trainer._feedprof_patched = True
