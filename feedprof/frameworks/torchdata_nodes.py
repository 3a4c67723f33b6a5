"""torchdata.nodes pipelines: read, inject, time, replay.

NOTE [ torchdata.nodes instrumentation in a trial child ]

    script: node = ParallelMapper(src, load, num_workers=0, method="thread")
              │ patched __init__ (only when the script's own code calls it): the knobs of
              │ ctl.injection("torchdata.nodes") replace num_workers / method, and the
              │ node remembers its call site and settings
    script: node = Prefetcher(Batcher(node, 32), prefetch_factor=2)     (the same for prefetch_factor)
    script: loader = Loader(node)
              │ patched __init__ ─► ctl.plan ─► the pipeline under the root is walked:
              │                     its ParallelMappers, Prefetcher and Batcher ─► LoaderInfo
    script: for batch in loader:             (or ``for batch in node:``, without a Loader)
              │ patched __iter__ ─► ctl.iterate: timed, or one batch replayed (ceiling)

Like tf.data, which pipeline trains is known only when it is iterated, after
its nodes are built: every node the script builds gets the knobs (a second
pipeline built by the script is tuned along). Nodes built inside torchdata
itself (``Mapper`` is a ParallelMapper with no workers) are left alone.
``method="process"`` workers are child processes (their memory is sampled);
threads share the training process.
"""
from __future__ import annotations

import inspect
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence

from feedprof.record.steps import LoaderInfo
from feedprof.store.codes import Framework
from feedprof.store.knobs.nodes import legalize
from feedprof.frameworks.contract import Controller

if TYPE_CHECKING:
    from torchdata.nodes import BaseNode
    from torchdata.nodes import Loader as NodesLoader

    from feedprof.frameworks.paste import Paste
from feedprof.store import LoaderRecord

FRAMEWORK = Framework.TORCHDATA_NODES


def paste_for(config: Dict[str, Any], loader: Optional[LoaderRecord], script: str, argv: Sequence[str] = ()) -> Paste:
    """The script's ParallelMapper(...) and Prefetcher(...) calls with the knobs set."""
    from feedprof.frameworks.paste import Call, Paste, Setting, paste
    from feedprof.frameworks.source import find_call, parse_file, resolve_site

    cfg = legalize(config)
    own = legalize(getattr(loader, "config", None) or {}) if loader is not None else {}
    calls = []
    for site in getattr(loader, "config_sites", ()) or ():
        where = resolve_site(site, script)
        tree = parse_file(where[0]) if where is not None else None
        if tree is None:
            continue
        if find_call(tree, where[1], ("ParallelMapper",)) is not None:
            settings = (Setting("num_workers", "num_workers", cfg["num_workers"]),
                        Setting("method", "method", cfg["method"], "thread"))
            calls.append(Call(chain=(site,), names=("ParallelMapper",), settings=settings,
                              positional=("source", "map_fn", "num_workers", "in_order", "method")))
        deeper = cfg["prefetch_factor"] is not None and cfg["prefetch_factor"] != own.get("prefetch_factor")
        if find_call(tree, where[1], ("Prefetcher",)) is not None and deeper:
            calls.append(Call(chain=(site,), names=("Prefetcher",), positional=("source", "prefetch_factor"),
                              settings=(Setting("prefetch_factor", "prefetch_factor", cfg["prefetch_factor"]),)))
    fallback = f"ParallelMapper(source, map_fn, num_workers={cfg['num_workers']}, method={cfg['method']!r})"
    return paste(calls, script, argv, fallback) if calls else Paste(fallback)


def install(ctl: Controller) -> None:
    """Patch ParallelMapper, Prefetcher and Loader so the controller sees the pipelines."""
    from torchdata import nodes

    if nodes.Loader.__dict__.get("_feedprof_patched", False):
        return
    _patch_node(ctl, nodes.ParallelMapper, ("num_workers", "method"))
    _patch_node(ctl, nodes.Prefetcher, ("prefetch_factor",))
    _patch_loader(ctl, nodes)
    nodes.Loader._feedprof_patched = True


def _patch_node(ctl: Controller, cls: type, knobs: Sequence[str]) -> None:
    orig_init = cls.__init__
    sig = inspect.signature(orig_init)

    def __init__(self: "BaseNode", *args: Any, **kwargs: Any) -> None:
        chain = ctl.user_chain(sys._getframe(1))  # () unless the script's own code builds it
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError:
            return orig_init(self, *args, **kwargs)
        script_cfg = {k: bound.arguments.get(k, sig.parameters[k].default) for k in knobs}
        inject = ctl.injection(FRAMEWORK) if chain else None
        if inject:
            for k in knobs:
                if k in inject and inject[k] is not None:
                    bound.arguments[k] = inject[k]
            limit = bound.arguments.get("max_concurrent")  # torchdata refuses more than num_workers
            if "num_workers" in knobs and isinstance(limit, int) and limit > bound.arguments["num_workers"]:
                bound.arguments["max_concurrent"] = None
        orig_init(*bound.args, **bound.kwargs)
        self._feedprof_node = (chain[-1] if chain else "", script_cfg)

    __init__.__signature__ = sig  # type: ignore[attr-defined]
    cls.__init__ = __init__


def _patch_loader(ctl: Controller, nodes: ModuleType) -> None:
    Loader = nodes.Loader
    orig_init, orig_iter = Loader.__init__, Loader.__iter__

    def __init__(self: "NodesLoader", root: "BaseNode", *args: Any, **kwargs: Any) -> None:
        plan = ctl.plan(FRAMEWORK, sys._getframe(1))
        orig_init(self, root, *args, **kwargs)
        self._feedprof_handle = ctl.created(plan, describe(root, nodes), self)

    def __iter__(self: "NodesLoader") -> Iterator[Any]:
        handle = getattr(self, "_feedprof_handle", None)
        if handle is None:
            return orig_iter(self)
        return ctl.iterate(handle, lambda: orig_iter(self))

    Loader.__init__ = __init__
    Loader.__iter__ = __iter__
    _patch_node_iter(ctl, nodes)


def _patch_node_iter(ctl: Controller, nodes: ModuleType) -> None:
    """A pipeline the script iterates itself, without a Loader (``for batch in node``):
    the node is the loader, known by the line that iterates it. torchdata's own
    ``iter(source)`` calls (its prefetch threads) are left alone."""
    orig_iter = nodes.BaseNode.__iter__

    def __iter__(self: "BaseNode") -> Iterator[Any]:
        caller = sys._getframe(1)
        if not ctl.user_chain(caller):
            return orig_iter(self)
        handle = getattr(self, "_feedprof_handle", None)
        if handle is None:
            handle = ctl.created(ctl.plan(FRAMEWORK, caller), describe(self, nodes), self)
            self._feedprof_handle = handle
        return ctl.iterate(handle, lambda: orig_iter(self))

    nodes.BaseNode.__iter__ = __iter__


def pipeline(root: "BaseNode", base: type) -> List["BaseNode"]:
    """Every node under ``root`` (its sources, followed through attributes)."""
    seen: Dict[int, "BaseNode"] = {}
    todo = [root]
    while todo:
        node = todo.pop()
        if not isinstance(node, base) or id(node) in seen:
            continue
        seen[id(node)] = node
        for value in vars(node).values():
            values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            todo.extend(v for v in values if isinstance(v, base))
    return list(seen.values())


def describe(root: "BaseNode", nodes: ModuleType) -> LoaderInfo:
    """The pipeline's knobs: the busiest ParallelMapper's workers and method, the
    Prefetcher's depth, and where the script built each of them (config_sites)."""
    all_nodes = pipeline(root, nodes.BaseNode)
    mappers = [n for n in all_nodes if isinstance(n, nodes.ParallelMapper)]
    prefetchers = [n for n in all_nodes if isinstance(n, nodes.Prefetcher)]
    busiest: Optional["BaseNode"] = max(mappers, key=lambda n: n.num_workers, default=None)
    config = legalize({"num_workers": getattr(busiest, "num_workers", 0), "method": getattr(busiest, "method", None),
                       "prefetch_factor": prefetchers[0].prefetch_factor if prefetchers else None})
    marks = {id(n): getattr(n, "_feedprof_node", ("", {})) for n in mappers + prefetchers}
    script_cfg = {**(marks[id(prefetchers[0])][1] if prefetchers else {}),
                  **(marks[id(busiest)][1] if busiest is not None else {})}
    batcher = next((n for n in all_nodes if isinstance(n, nodes.Batcher)), None)
    return LoaderInfo(config=config, script_config=legalize({**config, **script_cfg}), dataset=type(root).__name__,
                      batch_size=getattr(batcher, "batch_size", None),
                      config_sites=tuple(dict.fromkeys(site for site, _ in marks.values() if site)))
