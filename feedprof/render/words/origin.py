"""The words for where a setting comes from when it is not on the loader's line
(store/reasons/origin.py): a library helper that builds the loader, a config
system that holds the value. The package (render/words/__init__.py) merges ``WORDS`` into its table."""
from __future__ import annotations

from typing import Any, Callable, Dict

from feedprof.store import reasons as r
from feedprof.store.codes import LineProblem

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


_PROBLEMS = {
    LineProblem.DOES_NOT_PARSE: "is not valid {kind} ({detail})",
    LineProblem.KEYWORD_TWICE: "would pass {detail} twice to {call}(...), which Python refuses",
    LineProblem.KEYWORD_MAYBE_TWICE: ("would add {detail} to {call}(...) beside a ** dict feedprof cannot read, "
                                      "which may pass it already (Python refuses a keyword passed twice)"),
    LineProblem.FLAG_TWICE: "would give {detail} twice",
}


def _withheld(x: r.PasteLineWithheld) -> str:
    """A paste line that failed the check: why, and what to set where, by hand."""
    command = not x.site
    why = _PROBLEMS.get(x.problem, "failed feedprof's check ({detail})").format(
        kind="shell words" if command else "Python", detail=x.detail, call=x.call or "the call")
    if command:
        flags = " ".join(f"{flag} {value}" if value is not None else flag for flag, value in x.settings.items())
        return f"feedprof's command line is left out: it {why}. Run the script with `{flags}` instead."
    settings = ", ".join(f"{k}={v!r}" for k, v in x.settings.items())
    return (f"feedprof's line for the statement at {x.site} is left out: it {why}. Set {settings} there by hand, "
            f"where that statement gets {'it' if len(x.settings) == 1 else 'them'}.")


def words() -> Dict[type, Callable[[Any, Callable], str]]:
    return {
        r.BuiltByHelper: lambda x, d: _helper(x),
        r.HelperTakesNoSetting: lambda x, d: _no_setting(x),
        r.SetByOverride: lambda x, d: _override(x),
        r.ConfigOriginUnknown: lambda x, d: _config_unknown(x),
        r.PasteLineWithheld: lambda x, d: _withheld(x),
    }
