"""PyTorch Lightning: its own advice on workers, captured.

Lightning builds nothing feedprof must patch beyond the DataLoader (the
script's ``train_dataloader()`` builds it; a rebuilt one keeps its plan, see
torch.py). What it adds is advice: after preparing a loader it warns "does
not have many workers ... Consider increasing the value of the `num_workers`
argument to `num_workers=N`", with N from the CPU count alone. The check is
wrapped so that the warning is recorded as a finding (the tune then says
whether its measurements agree, analyse/advice.py) and still shown to the
user, under their own warning filters.
"""
from __future__ import annotations

import re
import warnings
from typing import Any

from feedprof.store.reasons import TrainerSuggestedWorkers
from feedprof.frameworks.contract import Controller
from types import ModuleType

SUGGESTION = re.compile(r"does not have many workers.*num_workers=(\d+)", re.S)


def install(ctl: Controller, module: ModuleType) -> None:
    """Wrap ``module._worker_check`` (Lightning's data connector)."""
    orig = getattr(module, "_worker_check")
    if getattr(orig, "_feedprof", False):
        return

    def _worker_check(trainer: Any, dataloader: Any, name: str, *args: Any, **kwargs: Any) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            orig(trainer, dataloader, name, *args, **kwargs)
        for w in caught:
            found = SUGGESTION.search(str(w.message))
            if found and name.startswith("train"):
                ctl.note(TrainerSuggestedWorkers(trainer="lightning", loader=name,
                                                 num_workers=int(getattr(dataloader, "num_workers", 0) or 0),
                                                 suggested=int(found.group(1))))
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)

    _worker_check._feedprof = True  # type: ignore[attr-defined]
    module._worker_check = _worker_check


def install_cli(ctl: Controller, module: ModuleType) -> None:
    """A trial (a run feedprof stops once it has measured) saves no ``config.yaml``:
    LightningCLI refuses to overwrite one, so with ``--trainer.logger false``
    (the file then goes to the same directory every run) every trial after the
    first failed, and the user's next real run would have too. Runs to their
    end (``profile``, ``tune --online``) save it as the script asks."""
    if getattr(getattr(ctl, "spec", None), "full", True):
        return
    callback = getattr(module, "SaveConfigCallback")
    orig = callback.setup
    if getattr(orig, "_feedprof", False):
        return

    def setup(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.already_saved = True  # (every rank alike: no rank waits on another's broadcast)
        return orig(self, *args, **kwargs)

    setup._feedprof = True  # type: ignore[attr-defined]
    callback.setup = setup
