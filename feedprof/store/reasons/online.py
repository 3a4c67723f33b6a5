"""Findings of an online tune (``feedprof tune --online``) about the run as written."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

from feedprof.store.reasons.base import Reason


@dataclass(frozen=True)
class RandomDrawsMove(Reason):
    """Switching the tuned loader moves draws from the script's random streams in its own
    process (store.online.OnlineRandomness): ``where`` rng_loading (its dataset or collate_fn
    draws, at 0 workers) or rng_sampler (its sampler draws lazily while the loop draws too).
    ``held``: it was not switched (no --allow-rng-change) and the advice is what the windows
    measured support: ``predicted_workers``, the count the wait predicts reaches the compute
    ceiling (None: nothing to predict). Else it was switched, and ``moved`` says the draws
    moved in this run."""

    code: ClassVar[str] = "random_draws_move"
    where: str = ""
    streams: Tuple[str, ...] = ()
    held: bool = True
    moved: bool = False
    predicted_workers: Optional[int] = None


@dataclass(frozen=True)
class SwitchingStopped(Reason):
    """The tuned loader stopped being switched before another setting was measured: ``why``
    check_failed (``detail``: what did not match; the script's own settings from then on).
    ``predicted_workers`` as in RandomDrawsMove."""

    code: ClassVar[str] = "switching_stopped"
    why: str = ""
    detail: str = ""
    predicted_workers: Optional[int] = None
