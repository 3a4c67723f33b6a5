"""The shape of the package, read from its source (ast, nothing imported):
imports flow down the layers, no package imports another module's private
names, and packages do not import each other in a circle.

    cli, app, notebook, the public API (feedprof/__init__.py)
      └─► session (feedprof.profile()) and tune
    tune ─► trial ─► frameworks ─► record ─► store, reasons, codes, defaults
    render ─► analyse ─► store          (neither reads record/, trial/, tune/ or frameworks/)
An arrow says "may import" (and skipping a layer is fine): FORBIDDEN below.
Lazy imports (inside a function) count: they close a circle all the same.
The public API (feedprof/__init__.py) imports the layers lazily, so nothing it
reaches may import it back (the version has a module of its own).
"""
from __future__ import annotations

import ast
import os
from typing import Dict, Iterator, List, Set, Tuple

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "feedprof")
TOP = ("feedprof.session", "feedprof.cli", "feedprof.app")
# package -> what it may not import (directly or lazily)
FORBIDDEN = {
    "feedprof.record": TOP + ("feedprof.trial", "feedprof.tune", "feedprof.analyse", "feedprof.render",
                              "feedprof.frameworks"),
    "feedprof.trial": TOP + ("feedprof.tune", "feedprof.render"),
    "feedprof.tune": TOP + ("feedprof.render",),
    "feedprof.analyse": TOP + ("feedprof.record", "feedprof.trial", "feedprof.tune", "feedprof.render",
                               "feedprof.frameworks"),
    # render reads records and analyse's figures: a config's words are store/knobs's, not an adapter's
    "feedprof.render": TOP + ("feedprof.record", "feedprof.trial", "feedprof.tune", "feedprof.frameworks"),
    "feedprof.store": TOP + ("feedprof.record", "feedprof.trial", "feedprof.tune", "feedprof.analyse",
                             "feedprof.render", "feedprof.frameworks"),
}


def _modules() -> Dict[str, str]:
    """Module name -> its file, for every module of the package."""
    found = {}
    for folder, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path, os.path.dirname(PACKAGE_DIR))[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _tree(module: str) -> ast.Module:
    path = MODULES[module]
    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read(), path)


def _imports(module: str) -> Iterator[Tuple[str, str, int]]:
    """(imported module, imported name or "", line) for each import in ``module``."""
    path, tree = MODULES[module], _tree(module)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    yield f"{base}.{alias.name}", "", node.lineno
                else:
                    yield base, alias.name, node.lineno


def _owner(name: str) -> str:
    """The package module ``name`` is in (an import of a.b.c names module a.b when c is not one)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _unit(module: str) -> str:
    """A subpackage (feedprof.record, ...) or a top-level module (feedprof.store, ...)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _edges() -> List[Tuple[str, str, str, int]]:
    """(importer, imported module, imported name, line) within the package."""
    out = []
    for module in sorted(MODULES):
        for target, name, line in _imports(module):
            if target.split(".")[0] == "feedprof":
                owner = _owner(target)
                if owner and owner != module:
                    out.append((module, owner, name, line))
    return out


EDGES = _edges()


def _within(module: str, packages: Tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_nothing_below_imports_the_layers_above():
    up = [f"{m}:{line} imports {t}" for m, t, _, line in EDGES
          for package, above in FORBIDDEN.items() if _within(m, (package,)) and _within(t, above)]
    assert up == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_another_modules_private_names():
    private = [f"{m}:{line} imports {t}.{name}" for m, t, name, line in EDGES if _private(name)]
    assert private == []


def test_no_module_reads_another_modules_private_names():
    """``from feedprof.render import plots`` then ``plots._figure``: the same thing."""
    found = []
    for module in sorted(MODULES):
        as_module = {}  # local name -> the package module it stands for
        for target, name, _ in _imports(module):
            if not name and target in MODULES and target != module:
                as_module[target.rpartition(".")[2]] = target
        for node in ast.walk(_tree(module)):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in as_module and _private(node.attr)):
                found.append(f"{module}:{node.lineno} reads {as_module[node.value.id]}.{node.attr}")
    assert found == []


def test_packages_import_each_other_in_no_circle():
    graph: Dict[str, Set[str]] = {}
    for m, t, _, _ in EDGES:
        if _unit(m) != _unit(t):
            graph.setdefault(_unit(m), set()).add(_unit(t))
    circles = _cycles(graph)
    why = {c: sorted(f"{m} -> {t}" for m, t, _, _ in EDGES if _unit(m) in c and _unit(t) in c and _unit(m) != _unit(t))
           for c in circles}
    assert circles == [], why


def _type_checking_lines(module: str) -> Set[int]:
    """Lines of imports made for annotations only (``if TYPE_CHECKING:``): never run."""
    lines: Set[int] = set()
    for node in _tree(module).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines |= {sub.lineno for sub in ast.walk(node) if isinstance(sub, (ast.Import, ast.ImportFrom))}
    return lines


def test_modules_import_each_other_in_no_circle():
    """Not even through an import inside a function: a circle is broken by moving what both
    sides need into a module of its own."""
    annotations_only = {m: _type_checking_lines(m) for m in MODULES}
    graph: Dict[str, Set[str]] = {}
    for m, t, _, line in EDGES:
        if line not in annotations_only[m]:
            graph.setdefault(m, set()).add(t)
    circles = _cycles(graph)
    assert circles == [], circles


def _cycles(graph: Dict[str, Set[str]]) -> List[Tuple[str, ...]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[Tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for node in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if node not in index:
            visit(node)
    return found
