"""The paste-ready advice for a tf.data pick: the statements that build the pipeline, with the knobs set on the
calls that set them, and where each setting is made.

NOTE [ Where a tf.data pipeline's knobs are set ]

    def make_dataset(n):                                   the trial child tags every transformation the
        ds = (ds.map(decode, num_parallel_calls=2)  :25  ─ script calls with its line (tfdata.py: the loader's
              .batch(32)                                    config_sites); the loop or fit that iterates
              .prefetch(1))                         :27  ─ the pipeline is the loader's site (fit at :41)
    def train(ds): model.fit(ds)                    :41

The paste is each statement holding those calls, rewritten whole (every map and interleave, a batch that
batches in parallel, its prefetch), ending in ``# file:line`` of the statement's first line; a prefetch or
a private threadpool the pipeline lacks is added at the end of its last statement. Each knob's lines are a
SetInPipeline finding. Nothing is imported: the script's source is read (ast).
"""
from __future__ import annotations

import ast
from typing import Any, Dict, List, Optional, Tuple

from feedprof.frameworks.origin import display
from feedprof.frameworks.paste import Paste
from feedprof.frameworks.paste_check import check_statement
from feedprof.frameworks.source import SIMPLE_STATEMENTS, parse_file, resolve_site
from feedprof.frameworks.tfdata import legalize
from feedprof.store.codes import LineProblem
from feedprof.store.reasons import PasteLineWithheld, Reason, SetInPipeline
from feedprof.store import LoaderRecord

# Positional parameters of each transformation, after the function (tf.data.Dataset's signatures).
POSITIONAL = {"map": ("map_func", "num_parallel_calls", "deterministic"),
              "interleave": ("map_func", "cycle_length", "block_length", "num_parallel_calls", "deterministic"),
              "batch": ("batch_size", "drop_remainder", "num_parallel_calls", "deterministic"),
              "prefetch": ("buffer_size",)}


def paste(config: Dict[str, Any], loader: Optional[LoaderRecord], script: str) -> Paste:
    """The statements that build the pipeline with ``config`` set, and SetInPipeline findings."""
    cfg = legalize(config)
    sites = tuple(getattr(loader, "config_sites", None) or ()) or tuple(getattr(loader, "call_chain", ())[-1:])
    statements = _statements(sites, script)
    loader_site = getattr(loader, "site", "") or ""
    if not statements:
        return Paste(_generic(cfg))
    where: Dict[str, List[str]] = {}
    lines: List[str] = []
    findings: List[Reason] = []
    for i, (path, statement) in enumerate(statements):
        last = i == len(statements) - 1
        before = ast.unparse(statement)
        text = _rewrite(statement, cfg, where, path, script, add=_missing(statements, cfg) if last else {})
        site = display(path, statement.lineno, script)
        shown = f"{text}  # {site}".replace("'AUTOTUNE'", "tf.data.AUTOTUNE")
        check = check_statement(shown, before)
        if check.ok:
            lines.append(shown)
        elif check.problem != LineProblem.UNCHANGED:  # said, not shown (paste_check.py)
            findings.append(PasteLineWithheld(site=site, problem=check.problem, detail=check.detail,
                                              settings={k: v for k, v in cfg.items() if v is not None}))
    last_site = display(statements[-1][0], statements[-1][1].lineno, script)
    for knob in ("num_parallel_calls", "prefetch", "private_threadpool_size"):
        if cfg[knob] is None or cfg[knob] == 0:
            continue
        found = where.get(knob, [])
        found = sorted(set(found), key=lambda site: (site.rpartition(":")[0], int(site.rpartition(":")[2])))
        findings.append(SetInPipeline(knob=knob, sites=tuple(found) or (last_site,),
                                      loader_site=loader_site, added=not found))
    return Paste("\n".join(lines), tuple(findings))


def paste_line(config: Dict[str, Any], loader: Optional[LoaderRecord], script: str) -> str:
    return paste(config, loader, script).line


def _statements(sites: Tuple[str, ...], script: str) -> List[Tuple[str, ast.stmt]]:
    """The simple statements holding ``sites``, once each, in the order the script set them."""
    out: List[Tuple[str, ast.stmt]] = []
    for site in sites:
        frame = resolve_site(site, script)
        tree = parse_file(frame[0]) if frame is not None else None
        if tree is None:
            continue
        found = [n for n in ast.walk(tree) if isinstance(n, SIMPLE_STATEMENTS)
                 and n.lineno <= frame[1] <= (n.end_lineno or n.lineno)]
        if found:
            statement = max(found, key=lambda n: n.lineno)  # the innermost
            if not any(p == frame[0] and s.lineno == statement.lineno for p, s in out):
                out.append((frame[0], statement))
    return out


def _calls(statement: ast.stmt) -> List[ast.Call]:
    """The transformations in the statement that take the knobs."""
    out = []
    for node in ast.walk(statement):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in POSITIONAL:
            if node.func.attr != "batch" or _argument(node, "num_parallel_calls") is not None:
                out.append(node)
    return out


def _argument(call: ast.Call, name: str) -> Optional[ast.AST]:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    positional = POSITIONAL[call.func.attr]  # type: ignore[attr-defined]
    i = positional.index(name) if name in positional else len(call.args)
    return call.args[i] if i < len(call.args) else None


def _missing(statements: List[Tuple[str, ast.stmt]], cfg: Dict[str, Any]) -> Dict[str, Any]:
    """What the pipeline lacks and the paste adds at its end: a prefetch, a private threadpool."""
    prefetches = any(c.func.attr == "prefetch" for _, s in statements for c in _calls(s))  # type: ignore
    add = {}
    if cfg["prefetch"] is not None and not prefetches:
        add["prefetch"] = cfg["prefetch"]
    if cfg["private_threadpool_size"]:
        add["private_threadpool_size"] = cfg["private_threadpool_size"]
    return add


def _knobs_for(attr: str, cfg: Dict[str, Any]) -> Dict[str, Any]:
    if attr == "prefetch":
        return {"buffer_size": cfg["prefetch"]} if cfg["prefetch"] is not None else {}
    knobs = {"num_parallel_calls": cfg["num_parallel_calls"]} if cfg["num_parallel_calls"] is not None else {}
    if attr != "batch" and cfg["deterministic"] is not None:
        knobs["deterministic"] = cfg["deterministic"]
    return knobs


def _set(call: ast.Call, knobs: Dict[str, Any]) -> None:
    """Set ``knobs`` on ``call`` in place: where the user passed one positionally, there."""
    positional = POSITIONAL[call.func.attr]  # type: ignore[attr-defined]
    for name, value in knobs.items():
        i = positional.index(name)
        if i < len(call.args):
            call.args[i] = ast.Constant(value)
        elif name == "buffer_size" and not call.args and not call.keywords:
            call.args.append(ast.Constant(value))
        else:
            call.keywords = [k for k in call.keywords if k.arg != name] + [ast.keyword(arg=name,
                                                                                       value=ast.Constant(value))]


def _rewrite(statement: ast.stmt, cfg: Dict[str, Any], where: Dict[str, List[str]], path: str, script: str,
             add: Dict[str, Any]) -> str:
    """The statement with the knobs set on its calls (``where``: knob -> the lines that set it)."""
    statement = _copy(statement)
    calls = _calls(statement)
    for call in calls:
        knobs = _knobs_for(call.func.attr, cfg)  # type: ignore[attr-defined]
        line = display(path, call.func.end_lineno or call.lineno, script)
        for name in knobs:
            where.setdefault("prefetch" if name == "buffer_size" else name, []).append(line)
        _set(call, knobs)
    prefix = ""
    if add and calls:
        top = _chain_top(statement, max(calls, key=lambda c: (c.func.end_lineno or 0, c.func.end_col_offset or 0)))
        wrapped: ast.expr = top
        if "prefetch" in add:
            wrapped = ast.Call(ast.Attribute(wrapped, "prefetch", ast.Load()), [ast.Constant(add["prefetch"])], [])
        if "private_threadpool_size" in add:
            prefix = ("options = tf.data.Options(); "
                      f"options.threading.private_threadpool_size = {add['private_threadpool_size']}; ")
            wrapped = ast.Call(ast.Attribute(wrapped, "with_options", ast.Load()), [ast.Name("options")], [])
        _replace(statement, top, wrapped)
    return prefix + ast.unparse(statement)


def _copy(node: ast.stmt) -> ast.stmt:
    import copy

    return copy.deepcopy(node)


def _chain_top(statement: ast.stmt, call: ast.Call) -> ast.expr:
    """The outermost call of the method chain ``call`` is part of (``ds.map(f).batch(8)`` for the map)."""
    parents = {id(child): parent for parent in ast.walk(statement) for child in ast.iter_child_nodes(parent)}
    node: ast.expr = call
    while True:
        attr = parents.get(id(node))
        outer = parents.get(id(attr)) if isinstance(attr, ast.Attribute) else None
        if not (isinstance(outer, ast.Call) and outer.func is attr):
            return node
        node = outer


def _replace(statement: ast.stmt, old: ast.expr, new: ast.expr) -> None:
    for parent in ast.walk(statement):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
            elif isinstance(value, list):
                parent_list = value
                for i, item in enumerate(parent_list):
                    if item is old:
                        parent_list[i] = new


def _generic(cfg: Dict[str, Any]) -> str:
    """No statement found: the calls to make, on a dataset called ``ds``."""
    knobs = _knobs_for("map", cfg)
    parts = ["ds = ds.map(fn, " + ", ".join(f"{k}={v!r}" for k, v in knobs.items()) + ")"] if knobs else []
    if cfg["prefetch"] is not None:
        parts.append(f"ds = ds.prefetch({cfg['prefetch']!r})")
    if cfg["private_threadpool_size"]:
        parts.append("options = tf.data.Options(); "
                     f"options.threading.private_threadpool_size = {cfg['private_threadpool_size']}; "
                     "ds = ds.with_options(options)")
    return "; ".join(parts).replace("'AUTOTUNE'", "tf.data.AUTOTUNE")
