"""Ranking what is known of each config (store/evidence.py ConfigEvidence), whichever search
measured it: offline the measurements are its trials (analyse/measured.py ``evidence_of``); online
they are stretches of the real run (tune/online_strategy.py ``RunHistory.evidence``). Both searches
and recommend() pick from it with one rule (``pick``, over analyse/rules.pick), so the same
evidence gives the same pick.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence

from feedprof.analyse import rules
from feedprof.store.evidence import ConfigEvidence

Config = Dict[str, Any]


def config_key(config: Config) -> tuple:
    """A config as a dict key: its settings, in name order."""
    return tuple(sorted(config.items()))


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
