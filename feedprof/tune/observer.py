"""What a person watching a tune is told, as a protocol: render/progress.py
implements it, app.py wires it to the Tuner; tests and benchmarks pass the
silent one.
"""
from __future__ import annotations

from typing import Callable, Optional, Protocol

from feedprof.store.codes import Role
from feedprof.store import LoaderRecord, Trial, TuneStart


class TuneObserver(Protocol):
    """What a person watching the tune is told (render/progress.py words it)."""

    def tune_started(self, start: TuneStart) -> None: ...

    def loader_found(self, loader: LoaderRecord, config_text: str) -> None: ...

    def trial_started(self, index: int, n_planned: Optional[int], role: Role, config_text: str,
                      elapsed_s: float, budget_s: float) -> None: ...

    def tick(self, elapsed_s: float, budget_s: float) -> None: ...

    def trial_done(self, trial: Trial) -> None: ...

    def tune_done(self) -> None: ...


class SilentObserver:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None
