"""The paste-ready advice: each recommended setting where the script sets it.

A setting is changed where its value comes from (origin.py): the loader's own
call, an outer call that passes it in, a dict of keyword arguments, an
assignment, or the script's own command-line flag ("run with ``--workers 8``").
Statements are the user's own, rewritten with the knobs (source.py), each
followed by ``# file:line``; flags become one command line. What cannot be
followed is said plainly, and the literal value goes where the keyword is
written, never beside a ``**`` splat that may pass it already. Every line is
checked before it is shown (paste_check.py): one that does not parse, passes a
keyword twice or changes nothing is left out, and a finding says what to set.
"""
from __future__ import annotations

import ast
import os
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from feedprof.frameworks import configs
from feedprof.frameworks.configs import FromConfig
from feedprof.frameworks.kwargs import find_loader_call, through_splats
from feedprof.frameworks.origin import AtAssign, AtCall, AtKey, FromFlag, NotFound, Origin, Tracer, display
from feedprof.frameworks.paste_check import Check, check_command, check_statement
from feedprof.frameworks.scope import argument, callee, load
from feedprof.frameworks.source import (Code, enclosing_def, parse_file, resolve_site, rewrite_keys,
                                       rewrite_statement, statement_at)
from feedprof.store.codes import LineProblem
from feedprof.store.reasons import (BuiltByHelper, HelperTakesNoSetting, PasteLineWithheld, Reason, SetByFlag,
                                    SetByOverride, SetElsewhere, SettingSourceUnknown)

_ABSENT = object()


Written = Union[AtCall, AtKey, AtAssign]  # where a literal value is written in the script


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
    code: Tuple[Tuple[str, str], ...] = ()  # keywords written at the call itself as code (frameworks/thread_paste.py)


@dataclass(frozen=True)
class Paste:
    line: str  # what to paste (statements, each with "# file:line") and run
    findings: Tuple[Reason, ...] = ()


@dataclass
class _Plan:
    edits: Dict[tuple, Dict[str, Any]] = field(default_factory=dict)  # (path, line, names, positional) -> knobs
    drops: Dict[tuple, List[str]] = field(default_factory=dict)
    assigns: Dict[tuple, Any] = field(default_factory=dict)  # (path, line, name) -> value
    keys: Dict[tuple, Dict[str, Any]] = field(default_factory=dict)  # (path, line) -> a {...} display's keys
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
            return Paste(fallback if check_statement(fallback).ok else "", tuple(plan.findings))
        key = (*frames[-1], call.names, call.positional)
        plan.edits.setdefault(key, {})  # the loader's own call first
        for setting in call.settings:
            _place(setting, call, frames, tracer, plan, script, argv)
        for keyword, code in call.code:  # (never followed to where the call's own value comes from)
            plan.edits[key][keyword] = Code(code)
        if call.drop:
            plan.drops[key] = list(call.drop)
    _siblings_without_workers(plan, tracer)
    lines = _lines(plan, script, argv)  # (checked: a line left out adds its finding)
    return Paste("\n".join(lines), tuple(plan.findings))


def _siblings_without_workers(plan: _Plan, tracer: Tracer) -> None:
    """No workers through a flag that other lines read too, where a helper that turns persistent
    workers on by itself is told not to (frameworks/torch.py paste_for): every other call to that
    helper in the file is told the same. Their loaders get 0 workers from the flag as well, and
    the helper's DataLoader refuses persistent workers without any (timm's train.py: -j feeds the
    eval loader's create_loader too)."""
    zero = [flag for flag, value in plan.flags if value == "0" and flag.uses]
    told = [(path, line, names, positional) for (path, line, names, positional), knobs in plan.edits.items()
            if knobs.get("persistent_workers") is False and len(names) == 1]
    for path, line, names, positional in told if zero else ():
        src = load(path, tracer.cache)
        others = [n for n in ast.walk(src.tree) if isinstance(n, ast.Call) and n.lineno != line
                  and callee(n) == names[0]] if src is not None else []
        for call in others:
            if not tracer.passes([(path, call.lineno)], names, "persistent_workers", positional):
                plan.edits.setdefault((path, call.lineno, names, positional), {})["persistent_workers"] = False


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


def _call_at(frame: Tuple[str, int], names: Sequence[str]) -> Optional[ast.Call]:
    """The call to one of ``names`` at ``frame`` (or through a functools.partial of one)."""
    src = load(frame[0], {})
    return find_loader_call(src, frame[1], names)[0] if src is not None else None


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
        if origin is None or isinstance(origin, NotFound) or origin.path in inside:
            keyword = _helper_keyword(s, frames[-1], name, positional, params, tracer)
            if not keyword:
                plan.findings.append(HelperTakesNoSetting(knob=s.knob, call=name, site=site))
                continue
            origin = tracer.origin(frames, (name,), keyword, positional)
        _apply(origin, s, here, site, name, plan, script, argv)
    return True  # advised at the script's call: a line there only where something changes


def _helper_keyword(s: Setting, frame: Tuple[str, int], name: str, positional: Sequence[str],
                    params: Sequence[str], tracer: Tracer) -> str:
    """The helper's argument for ``s``: the one the script's call passes (by name, or
    in a ``**`` dict), else a parameter named like it, else the setting's own name
    where the helper takes any keyword (``**kwargs``); "": none."""
    names = (s.keyword, *s.aliases)
    takes_any = any(p.startswith("**") for p in params)
    return next((k for k in names if tracer.passes([frame], (name,), k, positional)), None) or \
        next((k for k in names if k in params), "") or (s.keyword if takes_any else "")


def _place(s: Setting, call: Call, frames: List[Tuple[str, int]], tracer: Tracer, plan: _Plan,
           script: str, argv: Sequence[str]) -> None:
    """Where one setting goes: nowhere (already so), a call, a dict, an assignment or a flag."""
    if s.default is not _ABSENT and s.default == s.value \
            and not tracer.passes(frames, call.names, s.keyword, call.positional):
        return  # absent, and the default is what is wanted
    origin = tracer.origin(frames, call.names, s.keyword, call.positional)
    if isinstance(origin, FromFlag) and _flag_value(origin, s.value) is _ABSENT:  # a switch for the other value
        expression, where = tracer.written(frames[-1], call.names, s.keyword, call.positional)
        origin = NotFound(expression, origin.path, origin.line, where)
    _apply(origin, s, (*frames[-1], call.names, call.positional), call.chain[-1], call.names[0],
           plan, script, argv)


def _apply(origin: Origin, s: Setting, here: tuple, site: str, call_name: str, plan: _Plan,
           script: str, argv: Sequence[str]) -> None:
    """Set ``s`` where ``origin`` says (``here``: the loader's call, or the
    script's call into a helper, that the advice is about)."""
    if isinstance(origin, (AtCall, AtKey, AtAssign)):
        _write(origin, s.value, plan)
        if not isinstance(origin, AtCall) or (origin.path, origin.line) != here[:2]:
            plan.findings.append(SetElsewhere(knob=s.knob, keyword=_written_name(origin), call=_written_in(origin),
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
    else:  # not followed: the literal where the keyword is written, if it is written where it can be changed
        where = origin.where if isinstance(origin, NotFound) else None
        if where is not None:
            _write(where, s.value, plan)
        expression = origin.expression if isinstance(origin, NotFound) else ""
        plan.findings.append(SettingSourceUnknown(knob=s.knob, expression=expression, site=site, call=call_name,
                                                  left_out=where is None, value=repr(s.value)))


def _write(where: Written, value: Any, plan: _Plan) -> None:
    """A literal ``value`` at ``where`` (AtCall, AtKey or AtAssign)."""
    if isinstance(where, AtCall):
        plan.edits.setdefault((where.path, where.line, where.names, where.positional), {})[where.keyword] = value
    elif isinstance(where, AtKey):
        plan.keys.setdefault((where.path, where.line), {})[where.key] = value
    else:
        plan.assigns[(where.path, where.line, where.name)] = value


def _written_name(where: Written) -> str:
    return where.keyword if isinstance(where, AtCall) else where.key if isinstance(where, AtKey) else where.name


def _written_in(where: Written) -> str:
    """What SetElsewhere calls the place: the call's name, ``{...}``, or ``name = ...``."""
    if isinstance(where, AtCall):
        return where.names[0]
    return "{...}" if isinstance(where, AtKey) else f"{where.name} = ..."


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
    """The plan's lines, each checked (paste_check.py) before it is kept."""
    lines = []
    for (path, line, names, positional), knobs in plan.edits.items():
        present = _present(path, line, names, plan.drops.get((path, line, names, positional), []))
        found = rewrite_statement(path, line, names, knobs, drop=present, positional=positional)
        if found:
            before = rewrite_statement(path, line, names, {}, positional=positional)
            check = check_statement(found[0], before[0] if before else "", _splats(path, line, names, knobs))
            lines += _shown(f"{found[0]}  # {display(path, line, script)}", check, display(path, line, script),
                            names[0], knobs, plan)
    for (path, line, name), value in plan.assigns.items():
        check = check_statement(f"{name} = {value!r}", statement_at(path, line) or "")
        lines += _shown(f"{name} = {value!r}  # {display(path, line, script)}", check, display(path, line, script),
                        "", {name: value}, plan)
    for (path, line), keys in plan.keys.items():
        rewritten = rewrite_keys(path, line, keys)
        if rewritten:
            lines += _shown(f"{rewritten[0]}  # {display(path, line, script)}", check_statement(*rewritten),
                            display(path, line, script), "", keys, plan)
    for (path, line, key), value in plan.yaml.items():
        lines.append(f"{key}: {configs.tokens('hydra', key, value)[0].split('=', 1)[1]}  # {display(path, line, script)}")
    if plan.flags or plan.overrides:
        text = command_line(script, argv, plan.flags, plan.overrides)
        check = check_command(text, command_line(script, argv, []), [_options(flag) for flag, _ in plan.flags])
        lines += _shown(text, check, "", "", {flag.flag: value for flag, value in plan.flags}, plan)
    return lines


def _splats(path: str, line: int, names: Sequence[str], knobs: Dict[str, Any]) -> Dict[str, bool]:
    """The knobs not on the call's line that its ``**`` splats pass (True) or may pass
    (False: a splat that cannot be read): a rewrite that adds one there passes it
    twice (paste_check.py). A dict its caller passes in was looked into by the tracer."""
    src = load(path, {})
    node = find_loader_call(src, line, names)[0] if src is not None else None
    out: Dict[str, bool] = {}
    for keyword in knobs if node is not None else ():
        passed = through_splats(node, keyword, src) if argument(node, keyword, ()) is None else None
        if passed is not None and (passed.expr is not None or passed.hidden):
            out[keyword] = passed.expr is not None
    return out


def _shown(text: str, check: Check, site: str, call: str, settings: Dict[str, Any], plan: _Plan) -> List[str]:
    """``[text]`` where it passed the check; otherwise nothing, and a finding that
    says what to set where (a line that changes nothing goes without one, and so do
    the words that would send the user to it)."""
    if check.ok:
        return [text]
    if check.problem == LineProblem.UNCHANGED:
        plan.findings = [f for f in plan.findings if not (isinstance(f, SetElsewhere) and f.site == site)]
        return []
    plan.findings.append(PasteLineWithheld(site=site, call=call, problem=check.problem, detail=check.detail,
                                           settings=dict(settings)))
    return []


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


def reservation_paste(script: str, cpus: int) -> Tuple[str, str]:
    """A Ray Train script's ``ScalingConfig(...)`` statement reserving ``cpus`` CPUs per training
    worker (frameworks/ray_config.py), checked as every paste line is, and its site: ("", "")
    where the script has no one such call, or its resources cannot be read."""
    from feedprof.frameworks.ray_config import RESOURCES_KEYWORD, SCALING_CONFIG, reserving, scaling_config_call
    from feedprof.frameworks.scope import Module

    tree = parse_file(script)
    call = scaling_config_call(Module(script, tree)) if tree is not None else None
    resources = reserving(call, cpus) if call is not None else None
    if resources is None:
        return "", display(script, call.lineno, script) if call is not None else ""
    site = display(script, call.lineno, script)
    found = rewrite_statement(script, call.lineno, (SCALING_CONFIG,), {RESOURCES_KEYWORD: resources})
    before = rewrite_statement(script, call.lineno, (SCALING_CONFIG,), {})
    if not found or not check_statement(found[0], before[0] if before else "").ok:
        return "", site
    return f"{found[0]}  # {site}", site
