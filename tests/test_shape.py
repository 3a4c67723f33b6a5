"""The shape of the code, read from its source (ast, nothing imported), kept where issue 45 left
it: seams typed (few bare ``Any``), classes no longer than a concept, and every difference
between the two search modes a field the search reads."""
from __future__ import annotations

import ast
import dataclasses
import os
import re
from typing import Iterator, List, Tuple

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "feedprof")
# Half of the 477 bare Any annotations counted when issue 45 was filed (521 on main by then, 185 after it):
# a seam typed Any again must be one where a user's object really is anything.
BARE_ANY_BUDGET = 238
MAX_CLASS_LINES = 300


def _trees() -> Iterator[Tuple[str, ast.Module]]:
    for folder, _, files in os.walk(PACKAGE_DIR):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as fh:
                    yield os.path.relpath(path, os.path.dirname(PACKAGE_DIR)), ast.parse(fh.read(), path)


def _bare_any(annotation: ast.AST) -> bool:
    return (isinstance(annotation, ast.Name) and annotation.id == "Any") or \
        (isinstance(annotation, ast.Attribute) and annotation.attr == "Any") or \
        (isinstance(annotation, ast.Constant) and annotation.value == "Any")


def bare_any_annotations() -> List[str]:
    """Every parameter, return and attribute annotated with a bare ``Any`` (``*args`` and
    ``**kwargs`` aside), as "path:line name"."""
    found = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                found += [f"{path}:{node.lineno} {arg.arg}" for arg in a.posonlyargs + a.args + a.kwonlyargs
                          if arg.annotation is not None and _bare_any(arg.annotation)]
                if node.returns is not None and _bare_any(node.returns):
                    found.append(f"{path}:{node.lineno} {node.name}() ->")
            elif isinstance(node, ast.AnnAssign) and _bare_any(node.annotation):
                found.append(f"{path}:{node.lineno} {ast.unparse(node.target)}")
    return found


def test_bare_any_annotations_stay_within_their_budget():
    found = bare_any_annotations()
    assert len(found) <= BARE_ANY_BUDGET, f"{len(found)} bare Any annotations (budget {BARE_ANY_BUDGET})"


def test_the_counter_counts_what_it_says():
    tree = ast.parse("def f(x: Any, *a: Any, y: int = 0, **k: Any) -> Any: ...\nclass C:\n    z: Any = None\n"
                     "    w: Optional[Any] = None\n")
    assert [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and _bare_any(n.annotation)] == \
        ["z: Any = None"]
    f = tree.body[0]
    assert [a.arg for a in f.args.args if _bare_any(a.annotation)] == ["x"] and _bare_any(f.returns)


def test_no_class_is_longer_than_a_concept():
    long = [f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path, tree in _trees() for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES]
    assert long == []


def test_every_mode_field_is_one_the_search_or_its_rules_read():
    """A difference between offline and online that nothing reads is no difference (rules.Mode)."""
    from feedprof.analyse.rules import Mode

    read = ""
    for path in ("tune/search.py", "analyse/rules.py"):
        with open(os.path.join(PACKAGE_DIR, path), encoding="utf-8") as fh:
            read += fh.read()
    unread = [f.name for f in dataclasses.fields(Mode) if not re.search(rf"\bmode\.{f.name}\b", read)]
    assert unread == []
