"""Paste-ready recommendations: the script's own loader call with the knobs changed.

Rather than a generic ``DataLoader(dataset, num_workers=4)``, feedprof reads
the call at the loader's site from the script, swaps in the recommended
keyword arguments and leaves everything else (dataset, batch size, sampler,
collate_fn...) exactly as the user wrote it.
"""
from __future__ import annotations

import ast
from typing import Any, Dict, Optional, Sequence


def _callee_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def find_call(source: str, line: int, names: Sequence[str]) -> Optional[ast.Call]:
    """The innermost call to one of ``names`` whose span includes ``line``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    best: Optional[ast.Call] = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee_name(node) in names:
            end = getattr(node, "end_lineno", node.lineno)
            if node.lineno <= line <= end:
                if best is None or node.lineno >= best.lineno:
                    best = node
    return best


def rewrite_call(path: str, line: int, names: Sequence[str], knobs: Dict[str, Any],
                 drop: Sequence[str] = (), positional: Sequence[str] = ()) -> Optional[str]:
    """The call at ``path:line`` with ``knobs`` set (and the keywords in
    ``drop`` removed), as source text; None if not found. ``positional``
    names the callee's positional parameters in order, so a knob the user
    passed positionally is replaced where it stands."""
    try:
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    call = find_call(source, line, names)
    if call is None:
        return None
    args = list(call.args)
    as_keywords = dict(knobs)
    for i, name in enumerate(positional[: len(args)]):
        if name in as_keywords:
            args[i] = ast.Constant(as_keywords.pop(name))
    kept = [k for k in call.keywords if k.arg not in knobs and k.arg not in drop]
    new = [ast.keyword(arg=name, value=ast.Constant(value)) for name, value in as_keywords.items()]
    return ast.unparse(ast.Call(func=call.func, args=args, keywords=kept + new))
