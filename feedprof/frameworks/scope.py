"""Reading a script's syntax to follow a value: a parsed file with each node's
parent, the assignment that binds a name, the argument a call passes, a
function's parameters (origin.py and kwargs.py follow values with these).
Nothing is imported or run: files are read and parsed (ast)."""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Sequence

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class Module:
    """One parsed file, and each node's parent."""

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


def load(path: str, cache: Dict[str, Optional[Module]]) -> Optional[Module]:
    """The file at ``path``, parsed once per cache (None: unreadable, or not Python)."""
    if path not in cache:
        try:
            with open(path, encoding="utf-8") as fh:
                cache[path] = Module(path, ast.parse(fh.read()))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            cache[path] = None
    return cache[path]


def is_literal(node: Optional[ast.AST]) -> bool:
    try:
        ast.literal_eval(node)  # type: ignore[arg-type]
        return True
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False


def argument(call: ast.Call, keyword: str, positional: Sequence[str]) -> Optional[ast.AST]:
    """The expression passed for ``keyword`` by name or position, or None (not
    on the call's own line: kwargs.passed looks into its ``**`` splats too)."""
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if keyword in positional:
        i = list(positional).index(keyword)
        if i < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: i + 1]):
            return call.args[i]
    return None


def params(func: ast.AST) -> List[str]:
    """Every named parameter (not ``*args``, ``**kwargs``)."""
    a = func.args  # type: ignore[attr-defined]
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


def positional_params(func: ast.AST) -> List[str]:
    """Parameters that can be passed by position (a method's self left out)."""
    a = func.args  # type: ignore[attr-defined]
    names = [p.arg for p in a.posonlyargs + a.args]
    return names[1:] if names and names[0] in ("self", "cls") else names


def kwargs_param(func: Optional[ast.AST]) -> str:
    """The name of the function's ``**kwargs`` parameter ("" where it takes none)."""
    kwarg = getattr(getattr(func, "args", None), "kwarg", None)
    return kwarg.arg if kwarg is not None else ""


def callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def assignment(name: str, src: Module, func: Optional[ast.AST], before: ast.AST,
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
