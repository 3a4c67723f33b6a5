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
                   └ anything else (a dict, the environment, another module) ─► NotFound: say so

Only the files of the call chain are read (a library's too, where it builds the
loader: paste.py never gives a line there), and config files; nothing is
imported or run.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

from feedprof.frameworks import configs
from feedprof.frameworks.source import find_call

MAX_DEPTH = 6  # expressions followed through at most this many steps
PARSE_CALLS = ("parse_args", "parse_known_args", "parse_intermixed_args")
Frame = Tuple[str, int]  # (absolute path, line)


@dataclass(frozen=True)
class AtCall:
    """Set ``keyword`` in the call to one of ``names`` at ``path:line`` (added if absent)."""

    path: str
    line: int
    names: Tuple[str, ...]
    keyword: str
    positional: Tuple[str, ...] = ()


@dataclass(frozen=True)
class AtAssign:
    """``name = <literal>`` at ``path:line``: rewrite the assignment."""

    path: str
    line: int
    name: str


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
    expression: str
    path: str
    line: int


Origin = Union[AtCall, AtAssign, FromFlag, NotFound, configs.FromConfig]


class _Source:
    def __init__(self, path: str, tree: ast.Module):
        self.path = path
        self.tree = tree
        self.parents: Dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node

    def enclosing(self, node: ast.AST, kinds: tuple) -> Optional[ast.AST]:
        node = self.parents.get(node)
        while node is not None and not isinstance(node, kinds):
            node = self.parents.get(node)
        return node


_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _load(path: str, cache: Dict[str, Optional[_Source]]) -> Optional[_Source]:
    if path not in cache:
        try:
            with open(path, encoding="utf-8") as fh:
                cache[path] = _Source(path, ast.parse(fh.read()))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            cache[path] = None
    return cache[path]


def _is_literal(node: Optional[ast.AST]) -> bool:
    try:
        ast.literal_eval(node)  # type: ignore[arg-type]
        return True
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False


def argument(call: ast.Call, keyword: str, positional: Sequence[str]) -> Optional[ast.AST]:
    """The expression passed for ``keyword`` (by name or position), or None."""
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if keyword in positional:
        i = list(positional).index(keyword)
        if i < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: i + 1]):
            return call.args[i]
    return None


def _params(func: ast.AST) -> List[str]:
    a = func.args  # type: ignore[attr-defined]
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


class Tracer:
    """Follows expressions through the script's files (one tracer per question)."""

    def __init__(self) -> None:
        self.cache: Dict[str, Optional[_Source]] = {}

    def origin(self, frames: Sequence[Frame], names: Sequence[str], keyword: str,
               positional: Sequence[str] = ()) -> Origin:
        """Where ``keyword`` of the call at the last frame gets its value."""
        path, line = frames[-1]
        src = _load(path, self.cache)
        call = find_call(src.tree, line, names) if src is not None else None
        if call is None:
            return NotFound("", path, line)
        expr = argument(call, keyword, positional)
        if expr is None or _is_literal(expr):
            return AtCall(path, line, tuple(names), keyword, tuple(positional))
        return self._follow(expr, src, call, list(frames), 0)

    def _follow(self, expr: ast.AST, src: _Source, at: ast.AST, frames: List[Frame], depth: int) -> Origin:
        not_found = NotFound(ast.unparse(expr), src.path, getattr(at, "lineno", 0))
        if depth > MAX_DEPTH:
            return not_found
        func = src.enclosing(at, _FUNCS)
        if isinstance(expr, ast.Attribute):
            found = self._attribute(expr, src, at, func, frames, depth)
        elif isinstance(expr, ast.Name):
            found = self._name(expr.id, src, at, func, frames, depth)
        elif isinstance(expr, ast.Subscript):
            found = self._config(expr, src, at, func, frames, depth)
        else:
            found = None
        return found or not_found

    # -- names ------------------------------------------------------------

    def _name(self, name: str, src: _Source, at: ast.AST, func: Optional[ast.AST], frames: List[Frame],
              depth: int) -> Optional[Origin]:
        if func is not None and name in _params(func):
            return self._from_caller(func, name, src, frames, depth)
        assign = _assignment(name, src, func, at)
        if assign is None:
            return None
        if _is_literal(assign.value):
            return AtAssign(src.path, assign.lineno, name)
        return self._follow(assign.value, src, assign, frames, depth + 1)

    def _from_caller(self, func: ast.AST, param: str, src: _Source, frames: List[Frame],
                     depth: int) -> Optional[Origin]:
        """A parameter: its argument in the caller's frame (one out in the chain)."""
        if len(frames) < 2:
            return None
        path, line = frames[-2]
        outer = _load(path, self.cache)
        name = func.name  # type: ignore[attr-defined]
        is_init = name == "__init__"
        if is_init:
            cls = src.enclosing(func, (ast.ClassDef,))
            name = cls.name if cls is not None else name  # type: ignore[attr-defined]
        call = find_call(outer.tree, line, (name,)) if outer is not None else None
        if call is None:
            return None
        return self._argument_of(call, param, _positional(func), outer, frames[:-1], depth)

    def _argument_of(self, call: ast.Call, param: str, positional: Sequence[str], src: _Source,
                     frames: List[Frame], depth: int) -> Origin:
        expr = argument(call, param, positional)
        if expr is None or _is_literal(expr):
            return AtCall(src.path, call.lineno, (_callee(call),), param, tuple(positional))
        return self._follow(expr, src, call, frames, depth + 1)

    # -- attributes ---------------------------------------------------------

    def _attribute(self, expr: ast.Attribute, src: _Source, at: ast.AST, func: Optional[ast.AST],
                   frames: List[Frame], depth: int) -> Optional[Origin]:
        base, attr = expr.value, expr.attr
        if self._is_parsed_args(base, src, at, func, frames, depth):
            return _flag(src, attr, read=expr)
        if _is_self(base) or (isinstance(base, ast.Attribute) and base.attr == "hparams" and _is_self(base.value)):
            return self._from_self(attr, src, func, frames, depth)
        if isinstance(base, ast.Name):
            assign = _assignment(base.id, src, func, at)
            if assign is not None and isinstance(assign.value, ast.Call):
                found = self._from_construction(assign.value, attr, src, frames, depth)
                if found is not None:
                    return found
        return self._config(expr, src, at, func, frames, depth)

    def _config(self, expr: ast.AST, src: _Source, at: ast.AST, func: Optional[ast.AST], frames: List[Frame],
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
        if func is not None and expr.id in _params(func):
            found = configs.hydra(func, keys, src.path, line)
            if found is not None or len(frames) < 2:
                return found
            outer = _load(frames[-2][0], self.cache)  # passed in (build(cfg.data)): the caller's argument
            call = find_call(outer.tree, frames[-2][1], (func.name,)) if outer is not None else None  # type: ignore
            passed = argument(call, expr.id, _positional(func)) if call is not None else None
            return None if passed is None else self._config(passed, outer, call, outer.enclosing(call, _FUNCS),
                                                            frames[:-1], depth + 1, keys)
        assign = _assignment(expr.id, src, func, at)
        found = configs.yacs(src.tree, expr.id, keys, src.path, line)
        if found is None and assign is not None and isinstance(assign.value, ast.Call):
            found = configs.yaml_file(assign.value, keys, src.path, line)
        if found is None and assign is not None and isinstance(assign.value, (ast.Attribute, ast.Subscript)):
            found = self._config(assign.value, src, assign, func, frames, depth + 1, keys)
        return found

    def _is_parsed_args(self, node: ast.AST, src: _Source, at: ast.AST, func: Optional[ast.AST],
                        frames: List[Frame], depth: int) -> bool:
        """Is ``node`` the namespace argparse returned (directly, through a
        variable, or passed in as a parameter)?"""
        if depth > MAX_DEPTH:
            return False
        if isinstance(node, ast.Call):
            return _callee(node) in PARSE_CALLS
        if not isinstance(node, ast.Name):
            return False
        if func is not None and node.id in _params(func) and len(frames) >= 2:
            path, line = frames[-2]
            outer = _load(path, self.cache)
            call = find_call(outer.tree, line, (func.name,)) if outer is not None else None  # type: ignore
            expr = argument(call, node.id, _positional(func)) if call is not None else None
            return expr is not None and self._is_parsed_args(expr, outer, call, outer.enclosing(call, _FUNCS),
                                                             frames[:-1], depth + 1)
        assign = _assignment(node.id, src, func, at, unpack=True)
        return assign is not None and self._is_parsed_args(assign.value, src, assign, func, frames, depth + 1)

    def _from_self(self, attr: str, src: _Source, func: Optional[ast.AST], frames: List[Frame],
                   depth: int) -> Optional[Origin]:
        """``self.attr``: set from a parameter of the class's __init__ (or
        save_hyperparameters), which the one construction of the class passes."""
        cls = src.enclosing(func, (ast.ClassDef,)) if func is not None else None
        init = next((n for n in getattr(cls, "body", ()) if isinstance(n, _FUNCS) and n.name == "__init__"), None)
        if cls is None or init is None:
            return None
        param = attr if attr in _params(init) else None
        for node in ast.walk(init):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == attr and _is_self(t.value)
                                                    for t in node.targets):
                if isinstance(node.value, ast.Name) and node.value.id in _params(init):
                    param = node.value.id
                elif _is_literal(node.value):
                    return AtAssign(src.path, node.lineno, f"self.{attr}")
        calls = [n for n in ast.walk(src.tree) if isinstance(n, ast.Call) and _callee(n) == cls.name]  # type: ignore
        if param is not None and not calls:  # built by a CLI from the command line (LightningCLI)
            trees = [(s.path, s.tree) for s in (_load(p, self.cache) for p, _ in frames) if s is not None]
            return configs.lightning_cli(trees, cls.name, param)  # type: ignore[attr-defined]
        if param is None or len(calls) != 1:
            return None
        return self._argument_of(calls[0], param, _positional(init), src, [(src.path, calls[0].lineno)], depth)

    def _from_construction(self, call: ast.Call, attr: str, src: _Source, frames: List[Frame],
                           depth: int) -> Optional[Origin]:
        """``cfg.attr`` with ``cfg = Config(...)``, a class of the script that takes ``attr``."""
        cls = next((n for n in ast.walk(src.tree) if isinstance(n, ast.ClassDef) and n.name == _callee(call)), None)
        if cls is None:
            return None
        init = next((n for n in cls.body if isinstance(n, _FUNCS) and n.name == "__init__"), None)
        fields = _positional(init) if init is not None else [
            n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
        if attr not in fields:
            return None
        return self._argument_of(call, attr, fields, src, [(src.path, call.lineno)], depth)


def _positional(func: ast.AST) -> List[str]:
    """Parameters that can be passed by position (a method's self left out)."""
    a = func.args  # type: ignore[attr-defined]
    names = [p.arg for p in a.posonlyargs + a.args]
    return names[1:] if names and names[0] in ("self", "cls") else names


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _assignment(name: str, src: _Source, func: Optional[ast.AST], before: ast.AST,
                unpack: bool = False) -> Optional[ast.Assign]:
    """The last ``name = ...`` before ``before``: in the function, else at module level.
    ``unpack``: ``name, rest = ...`` counts too (``args, _ = parser.parse_known_args()``)."""
    line = getattr(before, "lineno", 0)

    def binds(node: ast.AST) -> bool:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            return False
        target = node.targets[0]
        if isinstance(target, ast.Name):
            return target.id == name
        return unpack and isinstance(target, ast.Tuple) and bool(target.elts) and \
            isinstance(target.elts[0], ast.Name) and target.elts[0].id == name

    for scope in ([func] if func is not None else []) + [src.tree]:
        nodes = ast.walk(scope) if scope is func else iter(src.tree.body)
        found = [n for n in nodes if binds(n) and n.lineno <= line]
        if found:
            return max(found, key=lambda n: n.lineno)
    return None


def _flag(src: _Source, dest: str, read: Optional[ast.AST] = None) -> Optional[FromFlag]:
    """The ``add_argument`` call in the file whose destination is ``dest`` (``read``: the
    expression that led here; the flag's other readers are listed)."""
    for node in ast.walk(src.tree):
        if not (isinstance(node, ast.Call) and _callee(node) == "add_argument"):
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
