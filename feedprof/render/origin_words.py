"""The words for where a setting comes from when it is not on the loader's line
(store/reasons/origin.py): a library helper that builds the loader, a config
system that holds the value. render/words.py merges ``WORDS`` into its table."""
from __future__ import annotations

from typing import Any, Callable, Dict

from feedprof.store import reasons as r

SYSTEMS = {"lightning_cli": "LightningCLI", "hydra": "Hydra", "yacs": "the yacs config"}


def _helper(x: r.BuiltByHelper) -> str:
    return (f"The DataLoader is built inside a library, by {x.call}(...): its settings are passed at your call "
            f"{x.site}, so the advice is given there, not in the library.")


def _no_setting(x: r.HelperTakesNoSetting) -> str:
    return (f"{x.knob} cannot be passed through {x.call}(...) at {x.site} (it takes no such argument, or "
            f"feedprof cannot tell how it reaches the loader): it is left out of the advice.")


def _override(x: r.SetByOverride) -> str:
    system = SYSTEMS.get(x.system, x.system)
    where = f"; it is set now at {x.declared_at}" if x.declared_at else ""
    change = " (or change it there)" if x.declared_at else ""
    return (f"{x.knob} comes from {system}'s {x.key} (read at {x.used_at}{where}): run with "
            f"`{x.override}`{change}.")


def _config_unknown(x: r.ConfigOriginUnknown) -> str:
    return (f"{x.knob} is read from a config ({x.expression} at {x.site}), but feedprof cannot tell where that "
            f"config gets it (a file, an override, the environment): the line below sets it in the call itself; "
            f"set {x.expression} where your config is made instead, if you prefer.")


def words() -> Dict[type, Callable[[Any, Callable], str]]:
    return {
        r.BuiltByHelper: lambda x, d: _helper(x),
        r.HelperTakesNoSetting: lambda x, d: _no_setting(x),
        r.SetByOverride: lambda x, d: _override(x),
        r.ConfigOriginUnknown: lambda x, d: _config_unknown(x),
    }
