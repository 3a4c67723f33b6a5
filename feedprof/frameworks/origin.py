"""Where a loader setting's value comes from in the script's own code.

NOTE [ Following a keyword to where it is set ]

    train.py:31  DataLoader(ds, num_workers=args.workers)     the loader's call (the last frame)
                   │ a literal, or absent ─────────────────────► AtCall: edit this call
                   │ args.workers, args = parser.parse_args()
                   │   └─ parser.add_argument("--workers", default=0) ─► FromFlag: "run with --workers 8"
                   │ workers, a parameter of the function ──► the caller's frame (one out in the
                   │   call chain): its argument there, followed the same way (absent: add it there)
                   │ workers = <expr> in the function, or WORKERS = 0 in the module ─► followed, or
                   │   AtAssign: edit the assignment
                   │ self.workers / self.hparams.workers ─► the class's __init__ parameter ─► the one
                   │   call that builds the class in the file ─► its argument, followed
                   │ cfg.workers, cfg = Config(...) a class of the script ─► that call's keyword
                   │ cfg.data.num_workers, cfg["loader"]["workers"] from Hydra, LightningCLI, yacs
                   │   or a YAML file ─► configs.FromConfig: the override, or the key's line
                   │ config["workers"] in a Ray Train training function ─► the trainer call's
                   │   train_loop_config dict (ray_config.py), followed the same way
                   │ not on the line: in a **splat's dict(...) or {...} (or a write to it before
                   │   the call), through the function's own **kwargs (the caller's keyword), or
                   │   a functools.partial's ─► kwargs.py, then followed the same way
                   └ anything else (the environment, another module, a dict that cannot be read)
                       ─► NotFound: say so (``where``: the literal's place, if there is one)

Only the files of the call chain are read (a library's too, where it builds the
loader: paste.py never gives a line there), and config files; nothing is
imported or run.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from feedprof.frameworks import configs
from feedprof.frameworks.kwargs import (AtAssign, AtCall, AtKey, Passed, Target, find_loader_call, in_mapping,
                                        partial_positional, passed)
from feedprof.frameworks.ray_config import CONFIG_KEYWORD, from_loop_config
from feedprof.frameworks.scope import (FUNCS, Module, argument, assignment, callee, is_literal, kwargs_param, load,
                                       params, positional_params)
from feedprof.frameworks.source import find_call

__all__ = ["AtAssign", "AtCall", "AtKey", "FromFlag", "NotFound", "Origin", "Tracer", "display"]

MAX_DEPTH = 6  # expressions followed through at most this many steps
PARSE_CALLS = ("parse_args", "parse_known_args", "parse_intermixed_args")
Frame = Tuple[str, int]  # (absolute path, line)


@dataclass(frozen=True)
class FromFlag:
    """The script's command-line flag (an ``add_argument`` call at ``path:line``)."""

    flag: str
    dest: str
    path: str
    line: int
    default: Optional[str]  # as written in the script
    action: str  # store | store_true | store_false
    uses: Tuple[int, ...] = ()  # other lines of the file that read it (``args.workers``)
    options: Tuple[str, ...] = ()  # every option string (``-j``, ``--workers``); ``flag`` is one of them


@dataclass(frozen=True)
class NotFound:
    """``expression`` (at ``path:line``) cannot be followed; ``where``: the place the
    keyword is written (a literal goes there instead), None where the keyword is
    not written where it can be changed (a ``**`` splat that cannot be read)."""

    expression: str
    path: str
    line: int
    where: Optional[Target] = None


Origin = Union[AtCall, AtAssign, AtKey, FromFlag, NotFound, configs.FromConfig]


class Tracer:
    """Follows expressions through the script's files (one tracer per question)."""

    def __init__(self) -> None:
        self.cache: Dict[str, Optional[Module]] = {}

    def origin(self, frames: Sequence[Frame], names: Sequence[str], keyword: str,
               positional: Sequence[str] = ()) -> Origin:
        """Where ``keyword`` of the call at the last frame gets its value."""
        path, line = frames[-1]
        src = load(path, self.cache)
        call, p, own = self._loader_call(src, path, line, names, keyword, positional)
        if call is None:
            return NotFound("", path, line)
        return self._resolved(p, own, keyword, src, call, list(frames), 0)  # type: ignore[arg-type]

    def passes(self, frames: Sequence[Frame], names: Sequence[str], keyword: str,
               positional: Sequence[str] = ()) -> bool:
        """Does the call at the last frame pass ``keyword`` (or may it: a splat that
        cannot be read)? Through a function's own ``**kwargs``: does its caller?"""
        src = load(frames[-1][0], self.cache)
        call, p, _ = self._loader_call(src, *frames[-1], names, keyword, positional)
        frames = list(frames)
        while call is not None and (p.forwarded or p.param) and len(frames) >= 2:
            func = src.enclosing(call, FUNCS)  # type: ignore[union-attr]
            src, at = self._caller(func, src, frames)
            frames = frames[:-1]
            call, p = at, self._in_caller(p, func, keyword, src, at)
        return call is not None and p.found

    @staticmethod
    def _in_caller(p: Passed, func: ast.AST, keyword: str, outer: Optional[Module], at: Optional[ast.Call]) -> Passed:
        """What the caller's call ``at`` passes for ``keyword`` where the function
        gets it from its caller (its own ``**kwargs``, or a dict it takes as ``p.param``)."""
        if at is None or outer is None:
            return Passed(hidden="**")
        if p.forwarded:
            return passed(at, keyword, (), outer)
        expr = argument(at, p.param, positional_params(func))
        if expr is None:
            return Passed(hidden=f"**{p.param}")
        return in_mapping(expr, keyword, outer, outer.enclosing(at, FUNCS), at)

    def written(self, frame: Frame, names: Sequence[str], keyword: str,
                positional: Sequence[str] = ()) -> Tuple[str, Optional[Target]]:
        """The expression the call at ``frame`` passes for ``keyword`` and where it is
        written (a literal for it goes there); ("", None): not passed, or not readable."""
        src = load(frame[0], self.cache)
        call, p, own = self._loader_call(src, *frame, names, keyword, positional)
        if call is None or p.expr is None:
            return p.hidden, None
        return ast.unparse(p.expr), own if p.node is call else p.where

    def _loader_call(self, src: Optional[Module], path: str, line: int, names: Sequence[str], keyword: str,
                     positional: Sequence[str]) -> Tuple[Optional[ast.Call], Passed, Optional[AtCall]]:
        """The call at ``path:line``, what it passes for ``keyword``, and where a literal
        for it goes: the call itself, or the ``functools.partial`` it is made from."""
        call, made = find_loader_call(src, line, names) if src is not None else (None, None)
        if call is None:
            return None, Passed(), None
        if made is None:
            return call, passed(call, keyword, positional, src), AtCall(path, line, tuple(names), keyword,
                                                                        tuple(positional))
        bound = tuple(positional[max(0, len(made.args) - 1):])  # what the partial leaves to the call
        p = passed(call, keyword, bound, src)  # type: ignore[arg-type]
        if not p.found:  # not at the call: the partial's
            call, bound = made, partial_positional(positional)
            p = passed(call, keyword, bound, src)  # type: ignore[arg-type]
        return call, p, AtCall(path, call.lineno, (callee(call),), keyword, bound)

    def _resolved(self, p: Passed, own: AtCall, keyword: str, src: Module, call: ast.Call, frames: List[Frame],
                  depth: int) -> Origin:
        """Where what ``call`` passes for ``keyword`` (``p``) comes from; ``own``: the
        call's own keyword, where a literal goes when it passes none."""
        where = own if p.node is call else p.where
        if p.hidden:
            return NotFound(p.hidden, src.path, call.lineno)
        if p.forwarded:
            func = src.enclosing(call, FUNCS)
            found = self._forwarded(func, keyword, src, frames, depth + 1) if func is not None else None
            return found or NotFound(f"**{kwargs_param(func)}", src.path, call.lineno)
        if p.param:  # a dict passed in: looked into where the caller passes it
            func = src.enclosing(call, FUNCS)
            outer, at = self._caller(func, src, frames)  # type: ignore[arg-type]
            inner = self._in_caller(p, func, keyword, outer, at)  # type: ignore[arg-type]
            if at is None or inner.hidden or depth > MAX_DEPTH:
                return NotFound(inner.hidden or f"**{p.param}", src.path, call.lineno)
            return self._resolved(inner, own, keyword, outer, at, frames[:-1], depth + 1)
        if p.expr is None:
            return own
        if is_literal(p.expr):
            return where  # type: ignore[return-value]
        found = self._follow(p.expr, src, p.node or call, frames, depth)
        return replace(found, where=where or found.where) if isinstance(found, NotFound) else found

    def _follow(self, expr: ast.AST, src: Module, at: ast.AST, frames: List[Frame], depth: int) -> Origin:
        not_found = NotFound(ast.unparse(expr), src.path, getattr(at, "lineno", 0))
        if depth > MAX_DEPTH:
            return not_found
        func = src.enclosing(at, FUNCS)
        if isinstance(expr, ast.Attribute):
            found = self._attribute(expr, src, at, func, frames, depth)
        elif isinstance(expr, ast.Name):
            found = self._name(expr.id, src, at, func, frames, depth)
        elif isinstance(expr, ast.Subscript):
            found = self._config(expr, src, at, func, frames, depth)
        else:
            found = None
        return found or self._loop_config(expr, src, depth) or not_found

    def _loop_config(self, expr: ast.AST, src: Module, depth: int) -> Optional[Origin]:
        """``config["workers"]`` in a Ray Train training function: the trainer's train_loop_config."""
        given = from_loop_config(expr, src, src.enclosing(expr, FUNCS))
        if given is None:
            return None
        p, call = given
        own = AtCall(src.path, call.lineno, (callee(call),), CONFIG_KEYWORD, ())
        return self._resolved(p, own, CONFIG_KEYWORD, src, call, [(src.path, call.lineno)], depth + 1)

    # -- names ------------------------------------------------------------

    def _name(self, name: str, src: Module, at: ast.AST, func: Optional[ast.AST], frames: List[Frame],
              depth: int) -> Optional[Origin]:
        if func is not None and name in params(func):
            return self._from_caller(func, name, src, frames, depth)
        assign = assignment(name, src, func, at)
        if assign is None:
            return None
        if is_literal(assign.value):
            return AtAssign(src.path, assign.lineno, name)
        return self._follow(assign.value, src, assign, frames, depth + 1)

    def _from_caller(self, func: ast.AST, param: str, src: Module, frames: List[Frame],
                     depth: int) -> Optional[Origin]:
        """A parameter: its argument in the caller's frame (one out in the chain)."""
        outer, call = self._caller(func, src, frames)
        if call is None:
            return None
        return self._argument_of(call, param, positional_params(func), outer, frames[:-1], depth)

    def _forwarded(self, func: ast.AST, keyword: str, src: Module, frames: List[Frame],
                   depth: int) -> Optional[Origin]:
        """A keyword the function takes in its ``**kwargs``: the caller's keyword."""
        outer, call = self._caller(func, src, frames)
        if call is None or depth > MAX_DEPTH:
            return None
        return self._argument_of(call, keyword, (), outer, frames[:-1], depth)

    def _caller(self, func: ast.AST, src: Module, frames: List[Frame]) -> Tuple[Any, Optional[ast.Call]]:
        """The call to ``func`` in the caller's frame (one out in the chain)."""
        if len(frames) < 2:
            return None, None
        path, line = frames[-2]
        outer = load(path, self.cache)
        name = func.name  # type: ignore[attr-defined]
        if name == "__init__":
            cls = src.enclosing(func, (ast.ClassDef,))
            name = cls.name if cls is not None else name  # type: ignore[attr-defined]
        return outer, find_call(outer.tree, line, (name,)) if outer is not None else None

    def _argument_of(self, call: ast.Call, param: str, positional: Sequence[str], src: Module,
                     frames: List[Frame], depth: int) -> Origin:
        own = AtCall(src.path, call.lineno, (callee(call),), param, tuple(positional))
        return self._resolved(passed(call, param, positional, src), own, param, src, call, frames, depth + 1)

    # -- attributes ---------------------------------------------------------

    def _attribute(self, expr: ast.Attribute, src: Module, at: ast.AST, func: Optional[ast.AST],
                   frames: List[Frame], depth: int) -> Optional[Origin]:
        base, attr = expr.value, expr.attr
        if self._is_parsed_args(base, src, at, func, frames, depth):
            return _flag(src, attr, read=expr)
        if _is_self(base) or (isinstance(base, ast.Attribute) and base.attr == "hparams" and _is_self(base.value)):
            return self._from_self(attr, src, func, frames, depth)
        if isinstance(base, ast.Name):
            assign = assignment(base.id, src, func, at)
            if assign is not None and isinstance(assign.value, ast.Call):
                found = self._from_construction(assign.value, attr, src, frames, depth)
                if found is not None:
                    return found
        return self._config(expr, src, at, func, frames, depth)

    def _config(self, expr: ast.AST, src: Module, at: ast.AST, func: Optional[ast.AST], frames: List[Frame],
                depth: int, keys: Sequence[str] = ()) -> Optional[configs.FromConfig]:
        """``cfg.data.num_workers``: a key of a config system's object (configs.py)."""
        keys = list(keys)
        while isinstance(expr, (ast.Attribute, ast.Subscript)):
            key = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr.slice, "value", None)
            if not isinstance(key, str) or depth > MAX_DEPTH:
                return None
            keys.insert(0, key)
            expr = expr.value
        if not isinstance(expr, ast.Name) or not keys:
            return None
        line = getattr(at, "lineno", 0)
        if func is not None and expr.id in params(func):
            found = configs.hydra(func, keys, src.path, line)
            if found is not None or len(frames) < 2:
                return found
            outer = load(frames[-2][0], self.cache)  # passed in (build(cfg.data)): the caller's argument
            call = find_call(outer.tree, frames[-2][1], (func.name,)) if outer is not None else None  # type: ignore
            given = argument(call, expr.id, positional_params(func)) if call is not None else None
            return None if given is None else self._config(given, outer, call, outer.enclosing(call, FUNCS),
                                                            frames[:-1], depth + 1, keys)
        assign = assignment(expr.id, src, func, at)
        found = configs.yacs(src.tree, expr.id, keys, src.path, line)
        if found is None and assign is not None and isinstance(assign.value, ast.Call):
            found = configs.yaml_file(assign.value, keys, src.path, line)
        if found is None and assign is not None and isinstance(assign.value, (ast.Attribute, ast.Subscript)):
            found = self._config(assign.value, src, assign, func, frames, depth + 1, keys)
        return found

    def _is_parsed_args(self, node: ast.AST, src: Module, at: ast.AST, func: Optional[ast.AST],
                        frames: List[Frame], depth: int) -> bool:
        """Is ``node`` the namespace argparse returned (directly, through a
        variable, passed in as a parameter, or returned by a function of the
        script's: timm's ``args, args_text = _parse_args()``)?"""
        if depth > MAX_DEPTH:
            return False
        if isinstance(node, ast.Call):
            return callee(node) in PARSE_CALLS or self._returns_parsed_args(node, src, depth)
        if not isinstance(node, ast.Name):
            return False
        if func is not None and node.id in params(func) and len(frames) >= 2:
            path, line = frames[-2]
            outer = load(path, self.cache)
            call = find_call(outer.tree, line, (func.name,)) if outer is not None else None  # type: ignore
            expr = argument(call, node.id, positional_params(func)) if call is not None else None
            return expr is not None and self._is_parsed_args(expr, outer, call, outer.enclosing(call, FUNCS),
                                                             frames[:-1], depth + 1)
        assign = assignment(node.id, src, func, at, unpack=True)
        return assign is not None and self._is_parsed_args(assign.value, src, assign, func, frames, depth + 1)

    def _returns_parsed_args(self, call: ast.Call, src: Module, depth: int) -> bool:
        """Does ``call``, to a function defined at the top of the script's module, return the
        namespace (alone, or first of a tuple: ``return args, args_text``) on every path?"""
        defined = next((n for n in src.tree.body if isinstance(n, FUNCS) and n.name == callee(call)), None)
        if defined is None:
            return False
        returns = [n for n in ast.walk(defined) if isinstance(n, ast.Return) and n.value is not None
                   and src.enclosing(n, FUNCS) is defined]
        values = [r.value.elts[0] if isinstance(r.value, ast.Tuple) and r.value.elts else r.value for r in returns]
        # (no frames: the function is not on the loader's call chain, so its parameters are not followed)
        return bool(values) and all(self._is_parsed_args(v, src, r, defined, [], depth + 1)
                                    for v, r in zip(values, returns))

    def _from_self(self, attr: str, src: Module, func: Optional[ast.AST], frames: List[Frame],
                   depth: int) -> Optional[Origin]:
        """``self.attr``: set from a parameter of the class's __init__ (or
        save_hyperparameters), which the one construction of the class passes."""
        cls = src.enclosing(func, (ast.ClassDef,)) if func is not None else None
        init = next((n for n in getattr(cls, "body", ()) if isinstance(n, FUNCS) and n.name == "__init__"), None)
        if cls is None or init is None:
            return None
        param = attr if attr in params(init) else None
        for node in ast.walk(init):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == attr and _is_self(t.value)
                                                    for t in node.targets):
                if isinstance(node.value, ast.Name) and node.value.id in params(init):
                    param = node.value.id
                elif is_literal(node.value):
                    return AtAssign(src.path, node.lineno, f"self.{attr}")
        calls = [n for n in ast.walk(src.tree) if isinstance(n, ast.Call) and callee(n) == cls.name]  # type: ignore
        if param is not None and not calls:  # built by a CLI from the command line (LightningCLI)
            trees = [(s.path, s.tree) for s in (load(p, self.cache) for p, _ in frames) if s is not None]
            return configs.lightning_cli(trees, cls.name, param)  # type: ignore[attr-defined]
        if param is None or len(calls) != 1:
            return None
        return self._argument_of(calls[0], param, positional_params(init), src, [(src.path, calls[0].lineno)], depth)

    def _from_construction(self, call: ast.Call, attr: str, src: Module, frames: List[Frame],
                           depth: int) -> Optional[Origin]:
        """``cfg.attr`` with ``cfg = Config(...)``, a class of the script that takes ``attr``."""
        cls = next((n for n in ast.walk(src.tree) if isinstance(n, ast.ClassDef) and n.name == callee(call)), None)
        if cls is None:
            return None
        init = next((n for n in cls.body if isinstance(n, FUNCS) and n.name == "__init__"), None)
        fields = positional_params(init) if init is not None else [
            n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
        if attr not in fields:
            return None
        return self._argument_of(call, attr, fields, src, [(src.path, call.lineno)], depth)


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _flag(src: Module, dest: str, read: Optional[ast.AST] = None) -> Optional[FromFlag]:
    """The ``add_argument`` call in the file whose destination is ``dest`` (``read``: the
    expression that led here; the flag's other readers are listed)."""
    for node in ast.walk(src.tree):
        if not (isinstance(node, ast.Call) and callee(node) == "add_argument"):
            continue
        options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        longs = [o for o in options if o.startswith("--")]
        named = longs[0][2:] if longs else (options[0].lstrip("-") if options else "")
        own = kw["dest"].value if isinstance(kw.get("dest"), ast.Constant) else named.replace("-", "_")
        if own != dest or not options:
            continue
        action = kw["action"].value if isinstance(kw.get("action"), ast.Constant) else "store"
        default = ast.unparse(kw["default"]) if "default" in kw else None
        base = getattr(getattr(read, "value", None), "id", None)  # the namespace's name ("args")
        uses = sorted({n.lineno for n in ast.walk(src.tree) if isinstance(n, ast.Attribute) and n.attr == dest
                       and isinstance(n.value, ast.Name) and n.value.id == base} - {getattr(read, "lineno", 0)})
        return FromFlag(flag=(longs or options)[0], dest=dest, path=src.path, line=node.lineno, default=default,
                        action=str(action), uses=tuple(uses), options=tuple(options))
    return None


def display(path: str, line: int, script: str) -> str:
    """"train.py:31" (relative to the script's directory where it is inside it)."""
    rel = os.path.relpath(path, os.path.dirname(os.path.abspath(script)))
    return f"{path if rel.startswith('..') else rel}:{line}"
