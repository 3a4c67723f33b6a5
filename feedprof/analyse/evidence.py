"""What is known of a config, whichever search measured it: the rate it is ranked by, the rates
of its measurements (their spread is the noise), how long the loop waited, and whether it failed.
Offline the measurements are its trials (analyse/measured.py ``evidence_of``); online they are
stretches of the real run (tune/online_strategy.py ``RunHistory.evidence``). Both searches pick from
it with one rule (``pick``, over analyse/rules.pick), so the same evidence gives the same pick.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from feedprof.analyse import noise, rules

Config = Dict[str, Any]


def config_key(config: Config) -> tuple:
    """A config as a dict key: its settings, in name order."""
    return tuple(sorted(config.items()))


@dataclass(frozen=True)
class ConfigEvidence:
    config: Config
    rate: Optional[float]  # batches/s it is ranked by: the steady rate, per-epoch costs charged
    rates: Tuple[float, ...]  # each measurement's rate (a trial's score, a window's batches/s)
    measurements: int  # how many stand behind ``rate`` (online: the slowest rank's count of windows)
    wait_fraction: Optional[float] = None  # the loop's data wait, the median over its measurements
    failed: bool = False  # a failure was seen at this config (it is never picked)
    source: str = "trials"  # "trials" (offline) or "run" (windows of the real run)
    steady_rate: Optional[float] = None  # the rate before per-epoch costs are charged
    startup_s: Optional[float] = None  # what starting its workers costs an epoch beyond the steady rate
    batches: int = 0  # totals over its measurements
    samples: int = 0
    wall_s: float = 0.0
    wait_s: float = 0.0
    workers_cores: Optional[float] = None  # its workers' CPU, the median over its measurements

    @property
    def spread(self) -> Optional[float]:
        """The relative half-range of its rates, shrunk by the measurements behind their median
        (None under two): what analyse/rules.noise_floor reads as this run's noise."""
        half_range = noise.relative_spread(self.rates)
        return half_range / math.sqrt(len(self.rates)) if half_range is not None else None


def pick(evidence: Sequence[ConfigEvidence], cost: Callable[[Config], Any],
         tolerance: float) -> Optional[ConfigEvidence]:
    """Among the configs that did not fail, the cheapest within ``tolerance`` of the fastest
    (rules.pick: ties go to the first measured)."""
    by_key = {config_key(e.config): e for e in evidence if not e.failed}
    chosen = rules.pick({k: e.rate or 0.0 for k, e in by_key.items()}, lambda k: cost(by_key[k].config), tolerance)
    return by_key[chosen] if chosen is not None else None


def fastest(evidence: Sequence[ConfigEvidence]) -> Optional[ConfigEvidence]:
    """The fastest config that did not fail (the first measured among equals)."""
    return max((e for e in evidence if not e.failed), key=lambda e: e.rate or 0.0, default=None)
