"""What a call passes for a keyword when the keyword is not on its line: inside
a ``**`` splat's dict, through a function's own ``**kwargs``, or bound by
``functools.partial``; and where a new value for it would be written.

NOTE [ A keyword passed through a dict ]

    kw = dict(batch_size=32, num_workers=args.workers)   :20 ─ a dict(...) keyword ─► AtCall("dict")
    kw = {"num_workers": args.workers, **common}          :20 ─ a {...} key ─► AtKey; **common looked into
    kw["num_workers"] = 4                                 :21 ─ a later write ─► AtAssign kw['num_workers']
    kw.update(num_workers=4) / kw.update({...})           :22 ─ ─► AtCall("update") / AtKey
    loader = DataLoader(ds, **common, **kw)               :30 ─ the keyword is looked for in each splat
    def build(ds, **kwargs): DataLoader(ds, **kwargs)         ─ forwarded: the caller's call (origin.py)
    def build(ds, kw): DataLoader(ds, **kw)                   ─ a parameter: the caller's argument (origin.py)
    make = partial(DataLoader, num_workers=2); make(ds)       ─ the call's own keywords, then the partial's

A splat whose dict cannot be read (a function's result, an attribute, a key
written in two places, popped or deleted) hides what it passes: Passed.hidden,
and the advice never adds the keyword beside it (Python would reject a keyword
passed twice). Only the enclosing function (or the module) is read, up to the
call: nothing is imported or run.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from feedprof.frameworks.scope import FUNCS, Module, argument, assignment, callee, kwargs_param, params
from feedprof.frameworks.source import find_call

MAX_DEPTH = 6  # dicts followed through at most this many steps (kw = dict(base), base = {...})
PARTIALS = ("partial",)  # functools.partial, however imported


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
    """``name = <literal>`` at ``path:line``: rewrite the assignment (``name`` may be
    ``kw['num_workers']``)."""

    path: str
    line: int
    name: str


@dataclass(frozen=True)
class AtKey:
    """The key ``key`` of the ``{...}`` dict display at ``path:line``: rewrite its value."""

    path: str
    line: int
    key: str


Target = Union[AtCall, AtAssign, AtKey]


@dataclass(frozen=True)
class Passed:
    """What a call passes for one keyword. ``expr`` None and nothing else: not passed."""

    expr: Optional[ast.AST] = None  # the value's expression
    node: Optional[ast.AST] = None  # the node that holds it (the call, a dict, a write): followed from there
    where: Optional[Target] = None  # where a literal for it is written
    hidden: str = ""  # a splat feedprof cannot read, which may pass it ("**loader_kwargs")
    forwarded: bool = False  # through the enclosing function's own **kwargs: its caller passes it
    param: str = ""  # a dict the function takes as this parameter: its caller's argument holds it

    @property
    def found(self) -> bool:
        return self.expr is not None or bool(self.hidden) or self.forwarded or bool(self.param)


def passed(call: ast.Call, keyword: str, positional: Sequence[str], src: Module) -> Passed:
    """What ``call`` passes for ``keyword``: by name, by position, or in one of its ``**`` splats."""
    expr = argument(call, keyword, positional)
    if expr is not None:
        return Passed(expr, call, AtCall(src.path, call.lineno, (callee(call),), keyword, tuple(positional)))
    if keyword in positional:
        starred = [a for a in call.args[: list(positional).index(keyword) + 1] if isinstance(a, ast.Starred)]
        if starred:
            return Passed(hidden=ast.unparse(starred[0]))
    return through_splats(call, keyword, src)


def through_splats(call: ast.Call, keyword: str, src: Module) -> Passed:
    """``keyword`` in the call's ``**`` splats (Python refuses a keyword two of them
    pass, so the first that surely passes it is the one; else one that may)."""
    func = src.enclosing(call, FUNCS)
    found = [in_mapping(kw.value, keyword, src, func, call) for kw in call.keywords if kw.arg is None]
    return next((p for p in found if p.expr is not None), None) or next((p for p in found if p.found), Passed())


def in_mapping(expr: ast.AST, keyword: str, src: Module, func: Optional[ast.AST], at: ast.AST,
               depth: int = 0) -> Passed:
    """``keyword`` in the dict ``expr`` evaluates to at ``at``."""
    hidden = Passed(hidden=f"**{ast.unparse(expr)}")
    if depth > MAX_DEPTH:
        return hidden
    if isinstance(expr, ast.Name):
        assign = assignment(expr.id, src, func, at)
        param = assign is None and func is not None and expr.id in (kwargs_param(func), *params(func))
        if assign is None and not param:
            return hidden
        after = (assign.end_lineno or assign.lineno) if assign is not None else func.body[0].lineno - 1  # type: ignore
        writes = [w for w in (_write(n, expr.id, keyword, src, func, depth) for n in _between(src, func, after, at))
                  if w.found]
        if len(writes) > 1 or any(w.hidden for w in writes):
            return Passed(hidden=f"**{expr.id}")  # written in more than one place, popped, or deleted
        if writes:
            return writes[0]
        if param:
            return Passed(forwarded=True) if expr.id == kwargs_param(func) else Passed(param=expr.id)
        return in_mapping(assign.value, keyword, src, func, assign, depth + 1)
    if isinstance(expr, ast.Dict):
        return _in_display(expr, keyword, src, func, depth)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict":
        return _in_dict_call(expr, keyword, src, func, depth)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "copy" \
            and not expr.args and not expr.keywords:
        return in_mapping(expr.func.value, keyword, src, func, expr, depth + 1)
    return hidden


def _in_display(expr: ast.Dict, keyword: str, src: Module, func: Optional[ast.AST], depth: int) -> Passed:
    """``{"num_workers": 2, **base}``: the last entry that may set it wins."""
    for key, value in reversed(list(zip(expr.keys, expr.values))):
        if key is None:
            found = in_mapping(value, keyword, src, func, expr, depth + 1)
            if found.found:
                return found
        elif not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return Passed(hidden=f"**{{{ast.unparse(key)}: ...}}")
        elif key.value == keyword:
            return Passed(value, expr, AtKey(src.path, key.lineno, keyword))
    return Passed()


def _in_dict_call(expr: ast.Call, keyword: str, src: Module, func: Optional[ast.AST], depth: int,
                  names: Tuple[str, ...] = ("dict",)) -> Passed:
    """``dict(base, num_workers=2, **more)`` (or ``kw.update(...)``, ``names``
    ("update",)): its keywords, then the mapping it copies."""
    for kw in reversed(expr.keywords):
        if kw.arg == keyword:
            return Passed(kw.value, expr, AtCall(src.path, expr.lineno, names, keyword))
        if kw.arg is None:
            found = in_mapping(kw.value, keyword, src, func, expr, depth + 1)
            if found.found:
                return found
    if expr.args:
        return in_mapping(expr.args[0], keyword, src, func, expr, depth + 1)
    return Passed()


def _between(src: Module, func: Optional[ast.AST], after: int, at: ast.AST) -> Iterator[ast.stmt]:
    """The simple statements of the function and of the module after line ``after``
    and before ``at`` (nested functions and classes left out: they run at another time)."""
    end = getattr(at, "lineno", 0)
    todo: List[ast.AST] = list(func.body if func is not None else []) + list(src.tree.body)  # type: ignore
    while todo:
        node = todo.pop(0)
        if isinstance(node, (*FUNCS, ast.ClassDef)):
            continue
        if isinstance(node, ast.stmt) and after < node.lineno < end and \
                not isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            todo.extend(getattr(node, field, []))


def _key_of(node: ast.AST) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _write(node: ast.stmt, name: str, keyword: str, src: Module, func: Optional[ast.AST], depth: int) -> Passed:
    """What the statement ``node`` does to ``name[keyword]``: sets it (``name[k] = v``,
    ``name.update(...)``), hides it (a key not written as a constant, pop, del), or nothing."""
    hidden = Passed(hidden=f"**{name}")

    def on_name(target: ast.AST) -> bool:
        return isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name

    if isinstance(node, ast.Assign) and any(on_name(t) for t in node.targets):
        key = _key_of(node.targets[0].slice) if on_name(node.targets[0]) else None  # type: ignore[attr-defined]
        if key == keyword and len(node.targets) == 1:
            return Passed(node.value, node, AtAssign(src.path, node.lineno, f"{name}[{keyword!r}]"))
        return Passed() if key is not None else hidden
    if isinstance(node, ast.Delete) and any(on_name(t) for t in node.targets):
        keys = [_key_of(t.slice) for t in node.targets if on_name(t)]  # type: ignore[attr-defined]
        return hidden if keyword in keys or None in keys else Passed()
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
        return hidden  # kw |= {...}
    call = node.value if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) else None
    if call is None or not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                            and call.func.value.id == name):
        return Passed()
    method = call.func.attr
    if method == "update":
        return _in_dict_call(call, keyword, src, func, depth + 1, names=("update",))
    if method in ("pop", "setdefault"):
        return hidden if not call.args or _key_of(call.args[0]) in (keyword, None) else Passed()
    return hidden if method in ("clear", "popitem") else Passed()


def partial_of(call: ast.Call, names: Sequence[str], src: Module) -> Optional[ast.Call]:
    """The ``functools.partial(<one of names>, ...)`` that ``call``'s function is bound
    to (``make = partial(DataLoader, num_workers=2)``, then ``make(ds)``), or None."""
    if not isinstance(call.func, ast.Name):
        return None
    assign = assignment(call.func.id, src, src.enclosing(call, FUNCS), call)
    value = assign.value if assign is not None else None
    if isinstance(value, ast.Call) and callee(value) in PARTIALS and value.args:
        inner = value.args[0]
        name = inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", "")
        return value if name in names else None
    return None


def partial_positional(positional: Sequence[str]) -> Tuple[str, ...]:
    """A partial's positional parameters: the function, then the function's own."""
    return ("func", *positional)


def find_loader_call(src: Module, line: int, names: Sequence[str]) -> Tuple[Optional[ast.Call], Optional[ast.Call]]:
    """The call to one of ``names`` spanning ``line``, or a call there through a
    partial of one of them: (the call, the partial or None)."""
    call = find_call(src.tree, line, names)
    if call is not None:
        return call, None
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno):
            made = partial_of(node, names, src)
            if made is not None:
                return node, made
    return None, None
