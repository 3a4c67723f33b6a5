"""The paste-ready advice: each recommended setting where the script sets it.

A setting is changed where its value comes from (origin.py): the loader's own
call, an outer call that passes it in, an assignment, or the script's own
command-line flag ("run with ``--workers 8``"). Statements are the user's own,
rewritten with the knobs (source.py), each followed by ``# file:line``; flags
become one command line. What cannot be followed is said plainly, and the
loader's call gets the literal value instead.
"""
from __future__ import annotations

import ast
import os
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from feedprof.frameworks import configs
from feedprof.frameworks.configs import FromConfig
from feedprof.frameworks.origin import AtAssign, AtCall, FromFlag, NotFound, Tracer, argument, display
from feedprof.frameworks.source import enclosing_def, find_call, parse_file, resolve_site, rewrite_statement
from feedprof.store.reasons import (BuiltByHelper, HelperTakesNoSetting, Reason, SetByFlag, SetByOverride,
                                    SetElsewhere, SettingSourceUnknown)

_ABSENT = object()


@dataclass(frozen=True)
class Setting:
    knob: str  # the recommendation's name for it ("num_workers")
    keyword: str  # the call's keyword ("dataloader_num_workers")
    value: Any
    default: Any = _ABSENT  # the callee's default: left absent, a call already has it
    aliases: Tuple[str, ...] = ()  # what a library's helper may call it ("workers" for num_workers)
    now: Any = None  # the value the loader ran with (None: not known)


@dataclass(frozen=True)
class Call:
    """One call that holds settings: its user frames ("train.py:31"), outermost first."""

    chain: Tuple[str, ...]
    names: Tuple[str, ...]
    settings: Tuple[Setting, ...]
    positional: Tuple[str, ...] = ()
    drop: Tuple[str, ...] = ()  # keywords that must go (prefetch_factor without workers)
    parsers: Tuple[str, ...] = ()  # calls that build it from the command line instead, one flag per
    #                                keyword (HfArgumentParser.parse_args_into_dataclasses)
    built_in: Tuple[str, ...] = ()  # a library's frames from the chain's last to the call (see NOTE below)


@dataclass(frozen=True)
class Paste:
    line: str  # what to paste (statements, each with "# file:line") and run
    findings: Tuple[Reason, ...] = ()


@dataclass
class _Plan:
    edits: Dict[tuple, Dict[str, Any]] = field(default_factory=dict)  # (path, line, names, positional) -> knobs
    drops: Dict[tuple, List[str]] = field(default_factory=dict)
    assigns: Dict[tuple, Any] = field(default_factory=dict)  # (path, line, name) -> value
    flags: List[Tuple[FromFlag, Optional[str]]] = field(default_factory=list)  # value None: a bare switch
    overrides: List[Tuple[str, str, Any]] = field(default_factory=list)  # (config system, key, value)
    yaml: Dict[tuple, Any] = field(default_factory=dict)  # (path, line, key) -> value: a config file's key
    findings: List[Reason] = field(default_factory=list)


def paste(calls: Sequence[Call], script: str, argv: Sequence[str] = (), fallback: str = "") -> Paste:
    """Advice for ``calls`` (``fallback``: the keywords, where no call is found)."""
    plan, tracer = _Plan(), Tracer()
    for call in calls:
        frames = [f for f in (resolve_site(site, script) for site in call.chain) if f is not None]
        if frames and call.parsers and _call_at(frames[-1], call.names) is None \
                and _call_at(frames[-1], call.parsers) is not None:
            _parsed(call, frames[-1], plan, script, argv)
            continue
        library = [f for f in (resolve_site(site, script) for site in call.built_in) if f is not None]
        if frames and _call_at(frames[-1], call.names) is not None:
            library = []  # built on the user's line, through a wrapper (Lightning patches __init__)
        if frames and library and _through_helper(call, frames, library, tracer, plan, script, argv):
            continue
        if not frames or library or _call_at(frames[-1], call.names) is None:
            site = call.chain[-1] if call.chain else ""
            plan.findings.append(SettingSourceUnknown(knob="", site=site, call=call.names[0]))
            return Paste(fallback, tuple(plan.findings))
        key = (*frames[-1], call.names, call.positional)
        plan.edits.setdefault(key, {})  # the loader's own call first
        for setting in call.settings:
            _place(setting, call, frames, tracer, plan, script, argv)
        if call.drop:
            plan.drops[key] = list(call.drop)
    return Paste("\n".join(_lines(plan, script, argv)), tuple(plan.findings))


def _parsed(call: Call, frame: Tuple[str, int], plan: _Plan, script: str, argv: Sequence[str]) -> None:
    """Settings parsed from the command line: each keyword is its own flag."""
    site = display(*frame, script)
    for s in call.settings:
        if s.default is not _ABSENT and s.default == s.value:
            continue  # the default (a flag not given) already says it
        flag = FromFlag(flag=f"--{s.keyword}", dest=s.keyword, path=frame[0], line=frame[1], default=None,
                        action="store")
        if _flag_now(flag, argv) != str(s.value):
            plan.flags.append((flag, str(s.value)))
            plan.findings.append(SetByFlag(knob=s.knob, flag=flag.flag, value=str(s.value), declared_at=site,
                                           used_at=site))


def _call_at(frame: Tuple[str, int], names: Sequence[str]) -> Any:
    tree = parse_file(frame[0])
    return find_call(tree, frame[1], names) if tree is not None else None


# NOTE [ A loader built by a library's helper ]
#
#   train.py:27  create_loader(ds, num_workers=args.workers)    the script's last frame (chain[-1])
#     lib/loader.py:400  create_loader(...) ─► loader.py:467 DataLoader(..., num_workers=num_workers)
#                                                        (built_in: outside the user's files)
#   each setting: followed from the library's call out through the frames; where
#   it ends in the user's files, set there (a flag, the helper's argument, ...);
#   otherwise the helper's argument named like it (num_workers, workers, ...) at
#   train.py:27, followed from there; a helper that takes no such argument: said
#   so (HelperTakesNoSetting). No line under the library is ever given.


def _through_helper(call: Call, frames: List[Tuple[str, int]], library: List[Tuple[str, int]], tracer: Tracer,
                    plan: _Plan, script: str, argv: Sequence[str]) -> bool:
    """Advice at the script's call into the library (False: that call is not found)."""
    helper = enclosing_def(*library[0])
    name, positional, params = helper if helper is not None else ("", (), ())
    node = _call_at(frames[-1], (name,) if name else ())
    if node is None:
        return False
    name = name or ast.unparse(node.func)
    here, site = (*frames[-1], (name,), positional), display(*frames[-1], script)
    plan.findings.append(BuiltByHelper(call=name, site=site, library_site=display(*library[-1], script)))
    plan.edits.setdefault(here, {})
    inside = {path for path, _ in library}
    built = _call_at(library[-1], call.names) is not None
    for s in call.settings:
        origin = tracer.origin(frames + library, call.names, s.keyword, call.positional) if built else None
        keyword = s.keyword
        if origin is None or isinstance(origin, NotFound) or origin.path in inside:
            names = (s.keyword, *s.aliases)
            keyword = next((k for k in names if argument(node, k, positional) is not None), None) or \
                next((k for k in names if k in params), "")
            if not keyword:
                plan.findings.append(HelperTakesNoSetting(knob=s.knob, call=name, site=site))
                continue
            origin = tracer.origin(frames, (name,), keyword, positional)
        _apply(origin, s, keyword, here, site, name, plan, script, argv)
    return True  # nothing to change, or nothing that can be: the script's call as it is


def _place(s: Setting, call: Call, frames: List[Tuple[str, int]], tracer: Tracer, plan: _Plan,
           script: str, argv: Sequence[str]) -> None:
    """Where one setting goes: nowhere (already so), a call, an assignment or a flag."""
    node = _call_at(frames[-1], call.names)
    expr = argument(node, s.keyword, call.positional)
    if expr is None and s.default is not _ABSENT and s.default == s.value:
        return  # absent, and the default is what is wanted
    origin = tracer.origin(frames, call.names, s.keyword, call.positional)
    if isinstance(origin, FromFlag) and _flag_value(origin, s.value) is _ABSENT:  # a switch for the other value
        origin = NotFound(ast.unparse(expr) if expr is not None else "", origin.path, origin.line)
    _apply(origin, s, s.keyword, (*frames[-1], call.names, call.positional), call.chain[-1], call.names[0],
           plan, script, argv)


def _apply(origin: Any, s: Setting, keyword: str, here: tuple, site: str, call_name: str, plan: _Plan,
           script: str, argv: Sequence[str]) -> None:
    """Set ``s`` where ``origin`` says (``here``: the call that gets the literal
    value, as its keyword ``keyword``, where the origin cannot be followed)."""
    if isinstance(origin, AtCall):
        key = (origin.path, origin.line, origin.names, origin.positional)
        plan.edits.setdefault(key, {})[origin.keyword] = s.value
        if key[:2] != here[:2]:
            plan.findings.append(SetElsewhere(knob=s.knob, keyword=origin.keyword, call=origin.names[0],
                                              site=display(origin.path, origin.line, script), loader_site=site))
    elif isinstance(origin, AtAssign):
        plan.assigns[(origin.path, origin.line, origin.name)] = s.value
        plan.findings.append(SetElsewhere(knob=s.knob, keyword=origin.name, call=f"{origin.name} = ...",
                                          site=display(origin.path, origin.line, script), loader_site=site))
    elif isinstance(origin, FromFlag) and _flag_value(origin, s.value) is not _ABSENT:
        origin = as_given(origin, argv)
        value = _flag_value(origin, s.value)
        if value is not None and _flag_now(origin, argv) == value:
            return  # the script already runs with it
        plan.flags.append((origin, value))
        also = tuple(display(origin.path, n, script) for n in origin.uses)
        plan.findings.append(SetByFlag(knob=s.knob, flag=origin.flag, value=value or "", default=origin.default,
                                       declared_at=display(origin.path, origin.line, script), used_at=site,
                                       also_used_at=also))
    elif isinstance(origin, FromConfig):
        _config(origin, s, site, plan, script)
    else:  # not followed: the literal value at the call, and say so
        plan.edits.setdefault(here, {})[keyword] = s.value
        expression = origin.expression if isinstance(origin, NotFound) else ""
        plan.findings.append(SettingSourceUnknown(knob=s.knob, expression=expression, site=site, call=call_name))


def _config(origin: FromConfig, s: Setting, site: str, plan: _Plan, script: str) -> None:
    """A config system's key: the override to pass, or the config file's line to change."""
    if s.now is not None and s.now == s.value:
        return  # the config already says it
    declared = display(origin.declared_path, origin.declared_line, script) if origin.declared_path else ""
    if origin.system == "yaml_file":
        key = origin.key.split(".")[-1]
        plan.yaml[(origin.declared_path, origin.declared_line, key)] = s.value
        override = f"{key}: {configs.tokens('hydra', key, s.value)[0].split('=', 1)[1]}"
    else:
        plan.overrides.append((origin.system, origin.key, s.value))
        override = " ".join(configs.tokens(origin.system, origin.key, s.value))
    plan.findings.append(SetByOverride(knob=s.knob, system=origin.system, override=override, key=origin.key,
                                       declared_at=declared, used_at=site))


def _options(flag: FromFlag) -> Tuple[str, ...]:
    return flag.options or (flag.flag,)


def as_given(flag: FromFlag, argv: Sequence[str]) -> FromFlag:
    """The flag as this run's command line spells it (``-j`` where it was given as
    ``-j 2``), else as the script declares it."""
    for a in argv:
        for option in _options(flag):
            if a == option or a.startswith(option + "=") or (
                    not option.startswith("--") and a.startswith(option) and a[len(option):].isdigit()):
                return replace(flag, flag=option)
    return flag


def _flag_now(flag: FromFlag, argv: Sequence[str]) -> Optional[str]:
    """The flag's value in this run: from ``argv``, else its default (as written)."""
    for i, a in enumerate(argv):
        for option in _options(flag):
            if a == option and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(option + "="):
                return a.split("=", 1)[1]
            if not option.startswith("--") and a.startswith(option) and a[len(option):].isdigit():
                return a[len(option):]  # -j8
    try:
        return None if flag.default is None else str(ast.literal_eval(flag.default))
    except (ValueError, SyntaxError):
        return flag.default


def _flag_value(flag: FromFlag, value: Any) -> Any:
    """The flag's argument for ``value``: a string, None for a bare switch, or
    _ABSENT where the flag cannot say it (a switch for the other value)."""
    if flag.action == "store":
        return str(value)
    if flag.action in ("store_true", "store_false") and isinstance(value, bool):
        on = value if flag.action == "store_true" else not value
        default_on = flag.default == ("True" if flag.action == "store_true" else "False")
        return None if on and not default_on else _ABSENT
    return _ABSENT


def _lines(plan: _Plan, script: str, argv: Sequence[str]) -> List[str]:
    lines = []
    for (path, line, names, positional), knobs in plan.edits.items():
        drop = plan.drops.get((path, line, names, positional), [])
        present = _present(path, line, names, drop)
        if not knobs and not present and (plan.flags or plan.overrides or plan.assigns or plan.yaml
                                          or len(plan.edits) > 1):
            continue  # nothing to change here
        found = rewrite_statement(path, line, names, knobs, drop=present, positional=positional)
        if found:
            lines.append(f"{found[0]}  # {display(path, line, script)}")
    for (path, line, name), value in plan.assigns.items():
        lines.append(f"{name} = {value!r}  # {display(path, line, script)}")
    for (path, line, key), value in plan.yaml.items():
        lines.append(f"{key}: {configs.tokens('hydra', key, value)[0].split('=', 1)[1]}  # {display(path, line, script)}")
    if plan.flags or plan.overrides:
        lines.append(command_line(script, argv, plan.flags, plan.overrides))
    return lines


def _present(path: str, line: int, names: Sequence[str], keywords: Sequence[str]) -> List[str]:
    node = _call_at((path, line), names)
    return [k.arg for k in node.keywords if k.arg in keywords] if node is not None else []


def command_line(script: str, argv: Sequence[str], flags: Sequence[Tuple[FromFlag, Optional[str]]],
                 overrides: Sequence[Tuple[str, str, Any]] = ()) -> str:
    """``python train.py ARGS`` with each flag and config override set (replaced
    where ``argv`` has it)."""
    args = list(argv)
    for flag, value in flags:
        for option in _options(flag):
            args = _without(args, option, takes_value=value is not None)
        args += [flag.flag] + ([value] if value is not None else [])
    args = configs.with_overrides(args, overrides)
    rel = os.path.relpath(script)
    shown = script if rel.startswith("..") else rel
    return " ".join(shlex.quote(a) for a in ["python", shown, *args])


def _without(args: List[str], flag: str, takes_value: bool) -> List[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = takes_value
            continue
        if a.startswith(flag + "=") or (takes_value and not flag.startswith("--") and a.startswith(flag)
                                        and a[len(flag):].isdigit()):
            continue
        out.append(a)
    return out


def with_launch(line: str, script: str, launch: Sequence[str]) -> str:
    """The paste with its command line run the way the job is launched: ``python train.py
    --workers 8`` becomes ``srun -n 2 python train.py --epochs 3 --workers 8`` (the launch
    command up to the script, then the script's arguments as advised). Unchanged where the
    launch does not name the script (a shell script that starts the ranks)."""
    if not launch or not script:
        return line
    words = list(launch)
    at = next((i for i, w in enumerate(words) if w.endswith(".py") and os.path.abspath(w) == script), None)
    if at is None:
        return line
    out = []
    for text in line.splitlines():
        try:
            parts = shlex.split(text)
        except ValueError:
            parts = []
        if len(parts) >= 2 and parts[0] == "python" and os.path.abspath(parts[1]) == script:
            text = " ".join(shlex.quote(a) for a in words[:at + 1] + parts[2:])
        out.append(text)
    return "\n".join(out)
