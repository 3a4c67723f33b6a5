"""A config's identity, whichever search measured it: the key both searches, recommend() and the
records group measurements by (store/evidence.py ConfigEvidence holds what is known of one
config; analyse/rules.py ``pick`` ranks them)."""
from __future__ import annotations

from typing import Any, Dict

Config = Dict[str, Any]


def config_key(config: Config) -> tuple:
    """A config as a dict key: its settings, in name order (a space's ``key`` is this key of the
    config made legal, over its knobs)."""
    return tuple(sorted(config.items()))
