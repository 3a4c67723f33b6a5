"""``tf.data`` pipelines: inject parallelism into the script's own calls, time
what the training loop pulls, replay one batch for the compute ceiling.

NOTE [ tf.data instrumentation in a trial child ]

    script: ds = tf.data.Dataset.from_tensor_slices(files)
            ds = ds.map(parse, num_parallel_calls=4)   ─ patched: num_parallel_calls / deterministic
            ds = ds.batch(32).prefetch(2)               ─ patched: prefetch buffer
              (every transformation called from the script's own code is tagged with the
               settings it asked for; the pipeline's settings are what the last one knows)
    script: for x, y in ds: step(x, y)       ─ patched __iter__: options (private threadpool),
                                                 a prefetch if the pipeline has none, the
                                                 ceiling's replay; each next() timed (data wait)
        or: model.fit(ds)                    ─ the fit's dataset adapter (Keras 3, tf_keras): the
                                                 same transformations; steps timed from the fit
                                                 callback only (the batch is pulled inside the
                                                 compiled train function, so data wait is not
                                                 observable there), and fit is handed TensorFlow's
                                                 own iterator: given anything else, Keras pulls in
                                                 Python and each step would be counted twice

Knobs: ``num_parallel_calls`` (an int, or "AUTOTUNE"), ``prefetch`` (buffer,
int or "AUTOTUNE"), ``deterministic``, ``private_threadpool_size``. The
threadpool matters: tf.data's default pool has as many threads as cores, which
caps a sleep- or I/O-bound map at about that parallelism whatever
``num_parallel_calls`` says (docs/architecture.md); AUTOTUNE does not lift it.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Tuple, Union

from feedprof.record.steps import LoaderInfo
from feedprof.record.loadprof import loading
from feedprof.store.codes import Framework
from feedprof.store.knobs.tfdata import AUTOTUNE, legalize
from feedprof.frameworks.contract import Controller, LoaderHandle

if TYPE_CHECKING:
    import tensorflow as tf

    from feedprof.frameworks.tfdata_autotune import AutotuneWatch

Knob = Union[int, str, None]  # a count, "AUTOTUNE", or unset
Method = Callable[..., Any]  # a tf.data.Dataset method: what it returns is the caller's (a dataset, an iterator)
PARALLEL = ("map", "interleave", "batch")
# Transformations that set neither parallelism nor prefetch: a pipeline stays the
# script's through them (``ds.map(f).cache().batch(32).repeat()``, ``fit(ds.take(200))``).
CARRIED = ("repeat", "take", "skip", "shuffle", "cache", "filter", "unbatch", "padded_batch", "rebatch",
           "shard", "apply", "with_options", "ignore_errors", "take_while", "enumerate")


def to_tf(value: Knob) -> Optional[int]:
    return -1 if value == AUTOTUNE else value


def from_tf(value: object) -> Knob:
    if value is None:
        return None
    try:
        value = int(value)
    except (TypeError, ValueError):
        return None
    return AUTOTUNE if value == -1 else value


@dataclass
class Pipeline:
    """What the script asked of one pipeline, gathered along its transformations."""

    sites: Tuple[str, ...] = ()  # the script's calls that set knobs (map, interleave, batch, prefetch)
    num_parallel_calls: Knob = None
    deterministic: Optional[bool] = None
    prefetch: Knob = None
    has_prefetch: bool = False
    batch_size: Optional[int] = None  # as the script asked (fit's callback never sees a batch)
    handle: Optional[LoaderHandle] = None
    runtime: Optional["tf.data.Dataset"] = None  # the dataset actually iterated (options, prefetch, replay applied)
    fed_to_fit: bool = False  # timed by the fit callback: iterating it must not time it again
    watch: Optional["AutotuneWatch"] = None  # its settings over the run, as AUTOTUNE set them

    def script_config(self) -> Dict[str, Any]:
        return legalize({"num_parallel_calls": self.num_parallel_calls, "prefetch": self.prefetch,
                         "deterministic": self.deterministic, "private_threadpool_size": None})


def profile_py_functions() -> None:
    """The Python a pipeline runs (tf.py_function, tf.numpy_function bodies, in tf.data's threads)
    marked for the loading profiler (record/loadprof.py), by the function's name."""
    import tensorflow as tf

    for name in ("py_function", "numpy_function"):
        orig = getattr(tf, name)
        if getattr(orig, "_feedprof_profiled", False):
            continue

        def wrapper(func: Optional[Method], inp: object = None, Tout: object = None, *args: Any, _orig: Method = orig,
                    **kwargs: Any) -> Any:
            return _orig(func if func is None else _profiled(func), inp, Tout, *args, **kwargs)  # (None: a decorator)

        wrapper._feedprof_profiled = True  # type: ignore[attr-defined]
        wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
        setattr(tf, name, wrapper)


def _profiled(func: Method) -> Method:
    label = getattr(func, "__name__", "py_function")

    def run(*args: Any) -> Any:
        with loading(label):
            return func(*args)

    run.__name__ = label
    return run


def install(ctl: Controller) -> None:
    from tensorflow.python.data.ops import dataset_ops

    D = dataset_ops.DatasetV2
    if getattr(D, "_feedprof_patched", False):
        return
    profile_py_functions()
    originals = {name: getattr(D, name) for name in PARALLEL + ("prefetch", "__iter__")}
    sigs = {name: inspect.signature(fn) for name, fn in originals.items()}

    def transformation(name: str) -> Method:
        orig, sig = originals[name], sigs[name]

        def patched(self: "tf.data.Dataset", *args: Any, **kwargs: Any) -> "tf.data.Dataset":
            chain = ctl.user_chain(sys._getframe(1))
            if not chain:  # TensorFlow's or Keras's own pipelines: left alone
                return orig(self, *args, **kwargs)
            try:
                bound = sig.bind(self, *args, **kwargs)
            except TypeError:
                return orig(self, *args, **kwargs)
            p = _parent_pipeline(self)
            _tag_and_inject(name, bound.arguments, p, chain[-1], ctl.injection(Framework.TF_DATA))
            out = orig(*bound.args, **bound.kwargs)
            try:
                out._feedprof_pipeline = p
            except AttributeError:
                pass
            return out

        patched.__wrapped__ = orig  # type: ignore[attr-defined]
        return patched

    for name in PARALLEL + ("prefetch",):
        setattr(D, name, transformation(name))
    for name in CARRIED:
        if hasattr(D, name):
            setattr(D, name, _carry_tag(ctl, getattr(D, name)))

    orig_iter = originals["__iter__"]

    def __iter__(self: "tf.data.Dataset") -> Iterator[Any]:
        p = getattr(self, "_feedprof_pipeline", None)
        if p is None or p.fed_to_fit or not _eager():
            # fit's steps are timed by its callback. Keras pulls inside its compiled train
            # function only from a tf.data.Iterator; a WatchedIterator would make it pull in
            # Python and every step would be counted twice (once here, once by the callback).
            it = orig_iter(self)
            if p is not None and p.fed_to_fit and p.watch is not None:
                p.watch.follow(it)  # (read at fit's steps: the callback ticks it)
            return it
        handle = register_dataset(ctl, self, p, sys._getframe(1))
        return ctl.iterate(handle, lambda: _followed(p, orig_iter(p.runtime)), replay=False)

    D.__iter__ = __iter__
    D._feedprof_patched = True
    install_keras_adapter(ctl)


def _followed(p: Pipeline, it: Iterator[Any]) -> Iterator[Any]:
    """The script's loop over the pipeline: AUTOTUNE's choices read as it goes (tfdata_autotune.py)."""
    from feedprof.frameworks.tfdata_autotune import Sampled

    if p.watch is None:
        return it
    p.watch.follow(it)
    return Sampled(it, p.watch)


def _copy(p: Pipeline) -> Pipeline:
    """What a derived dataset inherits (its handle and runtime are its own)."""
    return Pipeline(sites=p.sites, num_parallel_calls=p.num_parallel_calls, deterministic=p.deterministic,
                    prefetch=p.prefetch, has_prefetch=p.has_prefetch, batch_size=p.batch_size)


def _carry_tag(ctl: Controller, orig: Method) -> Method:
    def carried(self: "tf.data.Dataset", *args: Any, **kwargs: Any) -> "tf.data.Dataset":
        out = orig(self, *args, **kwargs)
        p = getattr(self, "_feedprof_pipeline", None)
        # only from the script's own code: Keras's and feedprof's derived datasets stay untagged
        if p is not None and getattr(out, "_feedprof_pipeline", None) is None and ctl.user_chain(sys._getframe(1)):
            try:
                out._feedprof_pipeline = _copy(p)
            except AttributeError:
                pass
        return out

    carried.__wrapped__ = orig  # type: ignore[attr-defined]
    return carried


def _parent_pipeline(ds: "tf.data.Dataset") -> Pipeline:
    p = getattr(ds, "_feedprof_pipeline", None)
    return _copy(p) if p else Pipeline()


def _tag_and_inject(name: str, args: Dict[str, Any], p: Pipeline, site: str,
                    inject: Optional[Dict[str, Any]]) -> None:
    """Record what the script asked of one transformation; set the injected knobs in ``args``."""
    inject = inject or {}
    if name == "batch":
        p.batch_size = _static_int(args.get("batch_size"))
    if name in ("map", "interleave", "prefetch") or (name == "batch" and args.get("num_parallel_calls") is not None):
        p.sites = _with_site(p.sites, site)
    if name in ("map", "interleave"):
        p.num_parallel_calls = from_tf(args.get("num_parallel_calls"))
        p.deterministic = args.get("deterministic")
        if inject.get("num_parallel_calls") is not None:
            args["num_parallel_calls"] = to_tf(inject["num_parallel_calls"])
        if inject.get("deterministic") is not None:
            args["deterministic"] = inject["deterministic"]
    elif name == "batch" and args.get("num_parallel_calls") is not None:
        if inject.get("num_parallel_calls") is not None:  # the script batches in parallel: same knob
            args["num_parallel_calls"] = to_tf(inject["num_parallel_calls"])
    elif name == "prefetch":
        p.prefetch = from_tf(args.get("buffer_size"))
        p.has_prefetch = True
        if inject.get("prefetch") is not None:
            args["buffer_size"] = to_tf(inject["prefetch"])


def _with_site(sites: Tuple[str, ...], site: str) -> Tuple[str, ...]:
    """The lines that set the pipeline's knobs, in the order the script set them (the last 8)."""
    return (tuple(s for s in sites if s != site) + (site,))[-8:]


def _eager() -> bool:
    import tensorflow as tf

    return tf.executing_eagerly()


def register_dataset(ctl: Controller, ds: "tf.data.Dataset", p: Pipeline, caller: FrameType) -> LoaderHandle:
    """The pipeline's handle and the dataset to iterate, made once per dataset object."""
    if p.handle is not None and p.runtime is not None:
        return p.handle
    import tensorflow as tf

    plan = ctl.plan(Framework.TF_DATA, caller)
    script_cfg = p.script_config()
    config = legalize({**script_cfg, **(plan.inject or {})})
    runtime = ds
    if plan.inject:
        if config.get("prefetch") is not None and not p.has_prefetch:
            runtime = runtime.prefetch(to_tf(config["prefetch"]))
        if config.get("private_threadpool_size"):
            options = tf.data.Options()
            options.threading.private_threadpool_size = int(config["private_threadpool_size"])
            runtime = runtime.with_options(options)
    n = _cardinality(ds)
    if plan.replay:  # compute ceiling: one batch, cached, as many times as an epoch has
        runtime = ds.take(1).cache().repeat()
        if n is not None:
            runtime = runtime.take(n)
    p.runtime = runtime
    info = LoaderInfo(config=config, script_config=script_cfg, dataset="tf.data.Dataset", batches_per_epoch=n,
                      batch_size=_batch_size(ds) or p.batch_size, config_sites=tuple(p.sites))
    if not plan.replay:
        from feedprof.frameworks.tfdata_autotune import AutotuneWatch

        p.watch = AutotuneWatch(ctl.now)
        info.autotune = p.watch.over_the_run
    p.handle = ctl.created(plan, info, ds)
    p.handle.tick = p.watch.tick if p.watch is not None else None
    return p.handle


def _cardinality(ds: "tf.data.Dataset") -> Optional[int]:
    try:
        n = int(ds.cardinality())
    except (TypeError, ValueError, AttributeError):
        return None
    return n if n > 0 else None  # -1 infinite, -2 unknown


def _static_int(value: object) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):  # a symbolic tensor
        return None


def _batch_size(ds: "tf.data.Dataset") -> Optional[int]:
    import tensorflow as tf

    try:
        first = tf.nest.flatten(ds.element_spec)[0]
        dim = first.shape[0]
    except (IndexError, TypeError, AttributeError, ValueError):
        return None
    return int(dim) if dim is not None else None


# Where fit wraps a tf.data.Dataset, per Keras flavour: (package, module, class).
FIT_ADAPTERS = (("keras", "keras.src.trainers.data_adapters.tf_dataset_adapter", "TFDatasetAdapter"),
                ("tf_keras", "tf_keras.src.engine.data_adapter", "DatasetAdapter"))


def install_keras_adapter(ctl: Controller) -> None:
    """model.fit(ds) on a tagged pipeline, for each Keras flavour already imported
    (never importing one): same settings, steps timed by the fit callback."""
    import importlib

    for package, module, name in FIT_ADAPTERS:
        if package not in sys.modules:
            continue
        try:
            adapter = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):  # a version we do not know: its fit is not measured
            continue
        if not adapter.__dict__.get("_feedprof_patched", False):
            _patch_fit_adapter(ctl, adapter)


def _patch_fit_adapter(ctl: Controller, adapter: type) -> None:
    orig_init = adapter.__init__

    def __init__(self: object, dataset: "tf.data.Dataset", *args: Any, **kwargs: Any) -> None:
        p = getattr(dataset, "_feedprof_pipeline", None)
        if p is not None:
            handle = register_dataset(ctl, dataset, p, sys._getframe(1))
            ctl.timed_by_callback(handle)
            p.fed_to_fit = True
            dataset = p.runtime
        orig_init(self, dataset, *args, **kwargs)

    adapter.__init__ = __init__
    adapter._feedprof_patched = True
