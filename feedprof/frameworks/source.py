"""Paste-ready recommendations: the script's own code with the knobs changed.

Rather than a generic ``DataLoader(dataset, num_workers=4)``, feedprof reads
the statement at the loader's site from the script, swaps in the recommended
keyword arguments and leaves everything else (dataset, batch size, sampler,
collate_fn, the variable it is assigned to...) exactly as the user wrote it.
"""
from __future__ import annotations

import ast
import os
from typing import Any, Dict, Optional, Sequence, Tuple

SIMPLE_STATEMENTS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)


def resolve_site(site: str, script: str) -> Optional[Tuple[str, int]]:
    """``"train.py:54"`` (a path relative to the script's directory, or absolute)
    as (absolute path, line); None if it is not FILE:LINE."""
    path, _, line = (site or "").rpartition(":")
    if not path or not line.isdigit():
        return None
    full = path if os.path.isabs(path) else os.path.join(os.path.dirname(os.path.abspath(script)), path)
    return full, int(line)


def _callee_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def parse_file(path: str) -> Optional[ast.Module]:
    """The file's syntax tree (None: unreadable, or not Python)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return ast.parse(fh.read())
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None


def _spans(node: ast.AST, line: int) -> bool:
    return node.lineno <= line <= getattr(node, "end_lineno", node.lineno)


def find_call(tree: ast.AST, line: int, names: Sequence[str]) -> Optional[ast.Call]:
    """The innermost call to one of ``names`` (any callee if empty) spanning ``line``."""
    best: Optional[ast.Call] = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (not names or _callee_name(node) in names) and _spans(node, line):
            if best is None or (node.lineno, node.col_offset) >= (best.lineno, best.col_offset):
                best = node
    return best


class Code(str):
    """A knob's value written as code (a name the paste defines: ``worker_init_fn=hold_worker_pools``),
    not as a literal."""


def _node(value: Any) -> ast.expr:
    return ast.parse(value, mode="eval").body if isinstance(value, Code) else ast.Constant(value)


def _with_knobs(call: ast.Call, knobs: Dict[str, Any], drop: Sequence[str],
                positional: Sequence[str]) -> ast.Call:
    """A copy of ``call`` with ``knobs`` set: a knob the user passed positionally is
    replaced where it stands, the others become keywords; ``drop`` keywords go."""
    args = list(call.args)
    as_keywords = dict(knobs)
    for i, name in enumerate(positional[: len(args)]):
        if name in as_keywords:
            args[i] = _node(as_keywords.pop(name))
    kept = [k for k in call.keywords if k.arg not in knobs and k.arg not in drop]
    new = [ast.keyword(arg=name, value=_node(value)) for name, value in as_keywords.items()]
    return ast.Call(func=call.func, args=args, keywords=kept + new)


def rewrite_call(path: str, line: int, names: Sequence[str], knobs: Dict[str, Any],
                 drop: Sequence[str] = (), positional: Sequence[str] = ()) -> Optional[str]:
    """The call at ``path:line`` with ``knobs`` set, as source text (None if not found)."""
    tree = parse_file(path)
    call = find_call(tree, line, names) if tree is not None else None
    return None if call is None else ast.unparse(_with_knobs(call, knobs, drop, positional))


def rewrite_statement(path: str, line: int, names: Sequence[str], knobs: Dict[str, Any],
                      drop: Sequence[str] = (), positional: Sequence[str] = ()
                      ) -> Optional[Tuple[str, Optional[str]]]:
    """The whole statement around the call (``loader = DataLoader(...)``,
    ``ds = ds.map(...).batch(32)``) with the knobs set, to paste over the line as
    it is, and the name it assigns to (or None). Inside a compound statement
    (``for batch in DataLoader(...):``) only the call is given."""
    tree = parse_file(path)
    call = find_call(tree, line, names) if tree is not None else None
    if call is None:
        return None
    return _swapped(tree, call, _with_knobs(call, knobs, drop, positional))


def _swapped(tree: ast.AST, old: ast.AST, new: ast.AST) -> Tuple[str, Optional[str]]:
    """The simple statement around ``old`` with ``new`` in its place, and the name it
    assigns to; inside a compound statement, ``new`` alone."""
    statement = next((node for node in ast.walk(tree)
                      if isinstance(node, SIMPLE_STATEMENTS) and _spans(node, old.lineno)), None)
    if statement is None:
        return ast.unparse(new), None

    class Swap(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> Any:
            return new if node is old else self.generic_visit(node)

    swapped = Swap().visit(statement)
    name = None
    if isinstance(swapped, ast.Assign) and len(swapped.targets) == 1 and isinstance(swapped.targets[0], ast.Name):
        name = swapped.targets[0].id
    return ast.unparse(swapped), name


def rewrite_keys(path: str, line: int, keys: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    """The statement holding the ``{...}`` dict display whose keys are on ``line``,
    with those keys' values set: (the new statement, the statement as it is)."""
    tree = parse_file(path)
    displays = [node for node in ast.walk(tree) if isinstance(node, ast.Dict) and _spans(node, line)
                and any(isinstance(k, ast.Constant) and k.value in keys for k in node.keys)] if tree else []
    if not displays:
        return None
    old = max(displays, key=lambda node: (node.lineno, node.col_offset))  # the innermost
    values = [ast.Constant(keys[k.value]) if isinstance(k, ast.Constant) and k.value in keys else v
              for k, v in zip(old.keys, old.values)]
    before = statement_at(path, old.lineno) or ""
    return _swapped(tree, old, ast.Dict(keys=old.keys, values=values))[0], before


def statement_at(path: str, line: int) -> Optional[str]:
    """The innermost simple statement spanning ``path:line``, as source text."""
    tree = parse_file(path)
    found = [node for node in ast.walk(tree) if isinstance(node, SIMPLE_STATEMENTS) and _spans(node, line)] \
        if tree is not None else []
    return ast.unparse(max(found, key=lambda node: node.lineno)) if found else None


def enclosing_def(path: str, line: int) -> Optional[Tuple[str, Tuple[str, ...], Tuple[str, ...]]]:
    """The function whose body holds ``path:line``: (the name its callers use, its
    parameters that can be passed by position, all its named parameters, then
    ``**kwargs`` where it takes any keyword); a class's ``__init__`` is called by
    the class's name. None: not in a function."""
    tree = parse_file(path)
    if tree is None:
        return None
    best, owner = None, None
    for node in ast.walk(tree):
        kids = node.body if isinstance(node, ast.ClassDef) else []
        for item in kids:  # a class's methods, with their class
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _spans(item, line) \
                    and (best is None or item.lineno > best.lineno):
                best, owner = item, node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _spans(node, line) \
                and (best is None or node.lineno > best.lineno):
            best, owner = node, None
    if best is None:
        return None
    a = best.args
    positional = [p.arg for p in a.posonlyargs + a.args]
    if positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    name = owner.name if owner is not None and best.name == "__init__" else best.name
    anything = (f"**{a.kwarg.arg}",) if a.kwarg is not None else ()
    return name, tuple(positional), tuple(positional) + tuple(p.arg for p in a.kwonlyargs) + anything
