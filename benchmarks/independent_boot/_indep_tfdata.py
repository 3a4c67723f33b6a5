"""tf.data: force num_parallel_calls / deterministic in the script's own map and
interleave calls and the buffer of its prefetch calls; apply a private thread
pool (and a prefetch, if the pipeline has none) to the dataset the script
iterates or hands to fit; time the iterator's deliveries in a custom loop.

With a site (FILE:LINE of a map/interleave/prefetch call), the pipeline is forced
from that call on: the script's later map/interleave/prefetch calls on it too;
earlier stages and other pipelines (validation) keep their own settings. Only
calls from the script's own code are touched, never TensorFlow's or Keras's."""
from __future__ import annotations

import inspect
from typing import Any, Dict, List, Optional

import _indep_core as core

AUTOTUNE = "AUTOTUNE"
_ORIG: Dict[str, Any] = {}


def to_tf(value: Any) -> Any:
    return -1 if value == AUTOTUNE else value


def from_tf(value: Any) -> Any:
    try:
        value = int(value)
    except (TypeError, ValueError):
        return None
    return AUTOTUNE if value == -1 else value


def is_dataset(x: Any) -> bool:
    D = _ORIG.get("class")
    return D is not None and isinstance(x, D)


def install(tf: Any) -> None:
    from tensorflow.python.data.ops import dataset_ops, iterator_ops

    D = dataset_ops.DatasetV2
    if getattr(D, "_indep_patched", False):
        return
    _ORIG.update(map=D.map, interleave=D.interleave, prefetch=D.prefetch, iter=D.__iter__, tf=tf,
                 next=iterator_ops.OwnedIterator.__next__)
    _ORIG["class"] = D
    st = core.STATE
    if st.config is not None and st.framework == "tf.data":  # observing only: touch as little as we can
        D.map = _transformation("map", ("num_parallel_calls", "deterministic"))
        D.interleave = _transformation("interleave", ("num_parallel_calls", "deterministic"))
        D.prefetch = _transformation("prefetch", ("buffer_size",))
    D.__iter__ = _iter
    iterator_ops.OwnedIterator.__next__ = _next
    D._indep_patched = True


def _upstream_forced(ds: Any) -> bool:
    return any(t.get("forced") for t in tags_upstream(ds))


def _transformation(name: str, knobs: tuple) -> Any:
    orig = _ORIG[name]
    sig = inspect.signature(orig)

    def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not core.called_from_user(2):  # TensorFlow's or Keras's own pipelines: left alone
            return orig(self, *args, **kwargs)
        config = core.force_config("tf.data")
        st = core.STATE
        if config is None and st.config is not None and st.framework == "tf.data" and _upstream_forced(self):
            config = st.config  # downstream of a forced map (e.g. its prefetch on another line)
        bound = sig.bind(self, *args, **kwargs)
        if config is not None:
            if name == "prefetch":
                if config.get("prefetch") is not None:
                    bound.arguments["buffer_size"] = to_tf(config["prefetch"])
            else:
                if config.get("num_parallel_calls") is not None:
                    bound.arguments["num_parallel_calls"] = to_tf(config["num_parallel_calls"])
                if config.get("deterministic") is not None:
                    bound.arguments["deterministic"] = config["deterministic"]
        out = orig(*bound.args, **bound.kwargs)
        tag = {"op": name, "site": core.user_site(2), "forced": config is not None}
        for k in knobs:
            v = bound.arguments.get(k)
            tag["prefetch" if k == "buffer_size" else k] = v if k == "deterministic" else from_tf(v)
        out._indep_tag = tag
        return out

    return patched


def upstream(ds: Any) -> List[Any]:
    """ds and every dataset it reads from, nearest first."""
    seen, order, todo = set(), [], [ds]
    while todo:
        d = todo.pop(0)
        if id(d) in seen:
            continue
        seen.add(id(d))
        order.append(d)
        try:
            todo.extend(d._inputs())
        except (AttributeError, TypeError, NotImplementedError):
            pass
    return order


def tags_upstream(ds: Any) -> List[Dict[str, Any]]:
    return [d._indep_tag for d in upstream(ds) if getattr(d, "_indep_tag", None)]


def _effective(ds: Any) -> Dict[str, Any]:
    cfg: Dict[str, Any] = {"num_parallel_calls": None, "deterministic": None, "prefetch": None,
                           "private_threadpool_size": None}
    maps = [t for t in tags_upstream(ds) if t["op"] in ("map", "interleave")]
    pre = [t for t in tags_upstream(ds) if t["op"] == "prefetch"]
    if maps:
        cfg["num_parallel_calls"], cfg["deterministic"] = maps[0]["num_parallel_calls"], maps[0]["deterministic"]
    if pre:
        cfg["prefetch"] = pre[0]["prefetch"]
    return cfg


def _has_prefetch(ds: Any) -> bool:
    return any("Prefetch" in type(d).__name__ for d in upstream(ds))


def prepare(ds: Any, how: str) -> tuple:
    """The record of a pipeline the script iterates (or fits on), and the dataset to use:
    the script's own, with the forced thread pool and missing prefetch applied."""
    rec = getattr(ds, "_indep", None)
    if rec is not None:
        return rec, ds._indep_runtime
    st = core.STATE
    tags = tags_upstream(ds)
    forced = st.config is not None and st.framework == "tf.data" and (not st.site or any(t["forced"] for t in tags))
    cfg, runtime = _effective(ds), ds
    if forced:
        if st.config.get("prefetch") is not None and not _has_prefetch(ds):
            runtime = _ORIG["prefetch"](runtime, to_tf(st.config["prefetch"]))
            cfg["prefetch"] = st.config["prefetch"]
        pool = st.config.get("private_threadpool_size")
        if pool:
            options = _ORIG["tf"].data.Options()
            options.threading.private_threadpool_size = int(pool)
            runtime = runtime.with_options(options)
            cfg["private_threadpool_size"] = int(pool)
    site = next((t["site"] for t in tags if t["op"] in ("map", "interleave")), None) or core.user_site(3)
    rec = core.register(f"tf.data/{how}", site, forced, cfg, _in_flight(cfg), _static_batch(ds), _cardinality(ds))
    ds._indep, ds._indep_runtime = rec, runtime
    return rec, runtime


def _in_flight(cfg: Dict[str, Any]) -> int:
    buf = cfg.get("prefetch")
    return 16 if buf == AUTOTUNE else int(buf or 0)


def _cardinality(ds: Any) -> Optional[int]:
    try:
        n = int(ds.cardinality())
    except (TypeError, ValueError, AttributeError):
        return None
    return n if n > 0 else None  # -1: infinite, -2: unknown


def _static_batch(ds: Any) -> Optional[int]:
    try:
        first = _ORIG["tf"].nest.flatten(ds.element_spec)[0]
        dim = first.shape[0]
    except (IndexError, TypeError, AttributeError, ValueError):
        return None
    return int(dim) if dim is not None else None


def _iter(self: Any) -> Any:
    if not core.called_from_user(2) or not _ORIG["tf"].executing_eagerly():
        return _ORIG["iter"](self)
    rec, runtime = prepare(self, "loop")
    core.epoch_start(rec)
    it = _ORIG["iter"](runtime)
    it._indep = rec
    return it


def _next(self: Any) -> Any:
    batch = _ORIG["next"](self)
    rec = getattr(self, "_indep", None)
    if rec is not None:
        core.delivered(rec, 1, batch)
    return batch
