"""Where a loader's settings come from when the script does not set them on the
loader's own line: a library helper builds the loader, or a config system
(LightningCLI/jsonargparse, Hydra/OmegaConf, yacs) holds the value
(frameworks/paste.py finds them; render/words/origin.py words them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from feedprof.store.codes import LineProblem
from feedprof.store.reasons.base import Config, Reason


@dataclass(frozen=True)
class BuiltByHelper(Reason):
    """The loader is built inside ``call`` (a library's helper, at ``library_site``),
    which the script calls at ``site``: its settings are passed there."""

    code: ClassVar[str] = "built_by_helper"
    call: str = ""
    site: str = ""  # the script's call, "train.py:27"
    library_site: str = ""  # where the library builds it, "/.../site-packages/lib/loader.py:467"


@dataclass(frozen=True)
class HelperTakesNoSetting(Reason):
    """``knob`` cannot be passed to ``call`` at ``site`` (the helper has no such
    parameter, or feedprof cannot tell how it reaches the loader): left out."""

    code: ClassVar[str] = "helper_takes_no_setting"
    knob: str = ""
    call: str = ""
    site: str = ""


@dataclass(frozen=True)
class SetByOverride(Reason):
    """``knob`` comes from a config system (``system``: lightning_cli | hydra |
    yacs): pass ``override`` on the command line; ``declared_at`` is where the
    value is set now (a YAML key or the config's default, "conf/data.yaml:3"; "":
    not found)."""

    code: ClassVar[str] = "set_by_override"
    knob: str = ""
    system: str = ""
    override: str = ""  # "--data.num_workers 8", "data.num_workers=8", "DATALOADER.NUM_WORKERS 8"
    key: str = ""  # the setting's name in the system, "data.num_workers"
    declared_at: str = ""
    used_at: str = ""  # the loader's line that reads it


@dataclass(frozen=True)
class ConfigOriginUnknown(Reason):
    """``knob`` is read from a config object (``expression`` at ``site``) whose
    source feedprof cannot tell: the value is set on the loader's call instead."""

    code: ClassVar[str] = "config_origin_unknown"
    knob: str = ""
    expression: str = ""
    site: str = ""


@dataclass(frozen=True)
class PasteLineWithheld(Reason):
    """The line feedprof wrote for the statement at ``site`` failed the check every
    paste line passes before it is shown (``problem``; ``detail``: the keyword or
    flag given twice, or the parser's message), so it is not shown: ``settings``
    are to be set there by hand (``call``: the call the line changed, "" for a
    command line)."""

    code: ClassVar[str] = "paste_line_withheld"
    site: str = ""
    call: str = ""
    problem: LineProblem = LineProblem.NONE
    detail: str = ""
    settings: Config = field(default_factory=dict)
