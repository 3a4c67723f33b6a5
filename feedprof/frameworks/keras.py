"""Keras 3 ``keras.utils.PyDataset`` (any backend): inject, time, replay, stop.

NOTE [ PyDataset instrumentation in a trial child ]

    script: class Images(keras.utils.PyDataset): __init__(..., **kw): super().__init__(**kw)
              │ patched PyDataset.__init__ ─► ctl.plan("keras") ─► workers / use_multiprocessing /
              │                               max_queue_size injected (by call site)
    script: model.fit(Images(...))          │ patched Model.fit adds a callback (ends the window)
              │ PyDatasetAdapter.__init__   ─► a subclass that skipped super().__init__ is
              │                               caught here: Keras ignores its knobs, we say so
              │ PyDatasetAdapter._get_iterator ─► ctl.iterate(): every batch Keras pulls is timed
              │                                   (or replayed, for the compute ceiling)

Between epochs Keras stops its workers and re-creates the iterator around
them: that gap is counted as the loader's per-epoch cost (tf_keras stalls 5 s
there with workers > 1). It includes the script's per-epoch validation, if any.

Where the batches are pulled decides what can be measured. The torch and jax
backends, and the TF backend with workers > 1, pull each batch when the step
needs it: the time blocked is the data wait. The TF backend with workers=1
prefetches the generator in a tf.data thread: the rate is still the step
rate, but the time blocked there is loading, not waiting, so data wait is
reported as unknown and the compute ceiling says how input-bound the job is.
The window is ended from the callback, on the main thread: raising inside
tf.data's generator thread would come back as a TensorFlow error.
"""
from __future__ import annotations

import inspect
import os
import sys
from inspect import BoundArguments
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional

from feedprof.store.reasons import NoSuperInit
from feedprof.record.loadprof import loading
from feedprof.record.steps import LoaderInfo
from feedprof.store import LoaderRecord
from feedprof.store.codes import Framework
from feedprof.store.knobs.pydataset import DEFAULTS, legalize
from feedprof.frameworks.contract import Controller, LoaderHandle

if TYPE_CHECKING:
    import keras

Method = Callable[..., Any]  # a Keras method patched: what it returns is the caller's
from feedprof.frameworks.keras_switch import fit_started



def _backend() -> str:
    try:
        import keras

        return keras.backend.backend()
    except (ImportError, AttributeError):
        return os.environ.get("KERAS_BACKEND", "tensorflow")


def wait_observable(config: Dict[str, Any], backend: str) -> bool:
    """Is the time blocked pulling a batch the step's data wait (see NOTE)?"""
    cfg = legalize(config)
    uses_enqueuer = cfg["workers"] > 1 or cfg["use_multiprocessing"]
    return backend != "tensorflow" or uses_enqueuer


def _num_batches(ds: "keras.utils.PyDataset") -> Optional[int]:
    try:
        n = ds.num_batches
    except (NotImplementedError, TypeError, AttributeError):
        return None
    return n if isinstance(n, int) else None


def paste_line(config: Dict[str, Any], loader: Optional[LoaderRecord], script: str) -> str:
    """Where to set the knobs: the dataset's construction, if its __init__
    forwards **kwargs to super().__init__, else that super call itself."""
    from feedprof.frameworks.source import resolve_site, rewrite_call, rewrite_statement

    cfg = legalize(config)
    own = legalize(getattr(loader, "script_config", None) or {})
    knobs = {k: v for k, v in cfg.items() if v != own[k]} or cfg  # the settings that change, as they are written
    chain = list(getattr(loader, "call_chain", ()) or ())
    if chain:
        where = resolve_site(chain[-1], script)  # innermost: the super().__init__(...) call
        if where is not None:
            inner = rewrite_call(*where, ("__init__",), {}, drop=())
            if inner is None or "**" not in inner:  # it does not forward **kwargs: set the knobs there
                found = rewrite_statement(*where, ("__init__",), knobs)
                if found:
                    return f"{found[0]}  # in {os.path.basename(where[0])}:{where[1]}"
        where = resolve_site(chain[-2], script) if len(chain) > 1 else None  # where the dataset is built
        dataset = getattr(loader, "dataset", "") or ""
        if where is not None:
            found = rewrite_statement(*where, (dataset,) if dataset else (), knobs)
            if found:
                return found[0]
    return f"super().__init__(workers={cfg['workers']}, use_multiprocessing={cfg['use_multiprocessing']}, " \
           f"max_queue_size={cfg['max_queue_size']}, **kwargs)"


def install(ctl: Controller) -> None:
    """Patch PyDataset, its adapter and Model.fit so the controller sees them."""
    from keras.src.trainers.data_adapters import py_dataset_adapter as pda

    PyDataset, Adapter = pda.PyDataset, pda.PyDatasetAdapter
    if getattr(PyDataset, "_feedprof_patched", False):
        return
    orig_init = PyDataset.__init__
    orig_adapter_init = Adapter.__init__
    orig_get_iterator = Adapter._get_iterator
    orig_getitem_owner: Dict[type, Method] = {}

    def __init__(self: "keras.utils.PyDataset", workers: int = 1, use_multiprocessing: bool = False, max_queue_size: int = 10) -> None:
        script_cfg = legalize({"workers": workers, "use_multiprocessing": use_multiprocessing,
                               "max_queue_size": max_queue_size})
        plan = ctl.plan(Framework.KERAS, sys._getframe(1))
        cfg = legalize({**script_cfg, **(plan.inject or {})})
        orig_init(self, **cfg)
        # the site users know is where the dataset is built, one frame out of its __init__
        site = plan.chain[-2] if len(plan.chain) >= 2 else (plan.chain[-1] if plan.chain else "")
        self._feedprof_handle = ctl.created(plan, LoaderInfo(config=cfg, script_config=script_cfg,
                                                             dataset=type(self).__name__, site=site), self)
        if plan.replay:
            replay_items(type(self), orig_getitem_owner)
        else:
            profile_items(type(self))

    def adapter_init(self: object, x: object, *args: Any, **kwargs: Any) -> None:
        handle = getattr(x, "_feedprof_handle", None)
        if handle is None and isinstance(x, PyDataset):
            handle = _no_super_init(ctl, x, sys._getframe(1), orig_getitem_owner)
        orig_adapter_init(self, x, *args, **kwargs)
        if handle is not None:
            backend = _backend()
            handle.info.batches_per_epoch = _num_batches(x)
            handle.info.backend = backend
            handle.info.wait_observable = wait_observable(handle.info.config, backend)
            online = ctl.switching(handle)  # online mode: this fit's epochs served by switching pools
            if online is not None:
                online.bind(self)
                handle.info.wait_observable = True  # (its batches are pulled when the step needs them)
            # Between epochs Keras stops and restarts the workers (and the tf.data iterator
            # around them): that time is the loader's, counted as the epoch's teardown.
            # It also holds per-epoch validation, if the script runs one.
            handle.info.gap_is_teardown = True

    def _get_iterator(self: Any) -> Iterator[Any]:
        handle = getattr(self.py_dataset, "_feedprof_handle", None)
        if handle is None:
            return orig_get_iterator(self)
        return ctl.iterate(handle, lambda: orig_get_iterator(self), replay=False)

    PyDataset.__init__ = __init__
    Adapter.__init__ = adapter_init
    Adapter._get_iterator = _get_iterator
    PyDataset._feedprof_patched = True
    _patch_fit(ctl)


def _fit_called(bound: BoundArguments) -> None:
    """What a fit call trains on, for online switching (keras_switch.py): a PyDataset read in
    fit's own steps_per_epoch cannot be switched the way its epochs are served."""
    fit_started(bound.arguments.get("x"), bound.arguments.get("steps_per_epoch"))


def _no_super_init(ctl: Controller, x: "keras.utils.PyDataset", caller: FrameType,
                   replayed: Dict[type, Method]) -> LoaderHandle:
    """The subclass never called super().__init__(**kwargs): Keras falls back to
    workers=1 and ignores what was passed. Measure it anyway, and say so."""
    plan = ctl.plan(Framework.KERAS, caller)
    cfg = legalize({**DEFAULTS, **(plan.inject or {})})
    for key, value in cfg.items():  # what super().__init__ would have set
        setattr(x, f"_{key}", value)
    ctl.note(NoSuperInit(dataset=type(x).__name__))
    handle = ctl.created(plan, LoaderInfo(config=cfg, script_config=dict(DEFAULTS), dataset=type(x).__name__), x)
    x._feedprof_handle = handle
    if plan.replay:
        replay_items(type(x), replayed)
    return handle


def profile_items(cls: type) -> None:
    """Every __getitem__ of this dataset class marked for the loading profiler (record/loadprof.py),
    wherever Keras calls it: the main thread, its thread pool, its forked processes."""
    if cls.__dict__.get("_feedprof_profiled", False):
        return
    orig = cls.__getitem__
    label = cls.__name__

    def __getitem__(self: "keras.utils.PyDataset", index: int) -> Any:
        with loading(label):
            return orig(self, index)

    __getitem__.__wrapped__ = orig  # type: ignore[attr-defined]
    cls.__getitem__ = __getitem__
    cls._feedprof_profiled = True


def replay_items(cls: type, saved: Dict[type, Method]) -> None:
    """Compute ceiling: every __getitem__ of this dataset class returns the first
    batch it ever loaded, so the workers (threads or processes) cost nothing."""
    if cls in saved:
        return
    orig = cls.__getitem__
    saved[cls] = orig
    cache: Dict[str, Any] = {}

    def __getitem__(self: "keras.utils.PyDataset", index: int) -> Any:
        if "batch" not in cache:
            cache["batch"] = orig(self, index)
        return cache["batch"]

    cls.__getitem__ = __getitem__


def make_end_window(ctl: Controller, base: type) -> type:
    """A factory of fit callbacks (``base``: the Keras flavour's Callback class).

    The callback times the steps of tf.data pipelines that fit pulls inside its
    compiled train function (claimed at train begin, so a validation pipeline
    is never timed as training), and ends the trial once the window is measured.
    """

    class EndWindow(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            # Made as fit is called: pipelines registered before are not this fit's training
            # data (the last fit's validation, an evaluate or predict call): never timed.
            ctl.claim_callback_handles()

        def on_train_begin(self, logs: Optional[Dict[str, float]] = None) -> None:
            self.handles = ctl.claim_callback_handles()

        def on_epoch_begin(self, epoch: int, logs: Optional[Dict[str, float]] = None) -> None:
            self.last_step = -1
            for handle in getattr(self, "handles", ()):
                ctl.epoch_begins(handle)

        def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, float]] = None) -> None:
            # ``batch`` is the last step this call ends: with steps_per_execution=N
            # fit runs N steps per call (Keras 3 and tf_keras alike)
            now = ctl.now()
            n_steps = max(1, batch - getattr(self, "last_step", -1))
            self.last_step = batch
            for handle in getattr(self, "handles", ()):
                ctl.timed_step(handle, now, n_steps)
                if handle.tick is not None:
                    handle.tick()
            ctl.check_stop()

    return EndWindow


def _patch_fit(ctl: Controller) -> None:
    """Model.fit gets one more callback: it ends the window on the main thread."""
    import keras

    if not getattr(keras.Model.fit, "_feedprof", False):
        keras.Model.fit = with_callback(keras.Model.fit, make_end_window(ctl, keras.callbacks.Callback), _fit_called)


def with_callback(orig_fit: Method, make_callback: Callable[[], object],
                  called: Optional[Callable[[BoundArguments], None]] = None) -> Method:
    """``orig_fit`` with ``make_callback()`` appended to its callbacks (both Keras flavours);
    ``called`` is told the call's arguments first."""
    sig = inspect.signature(orig_fit)

    def fit(self: "keras.Model", *args: Any, **kwargs: Any) -> Any:
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError:  # e.g. fit(workers=...) on Keras 3: let Keras say it, in its words
            return orig_fit(self, *args, **kwargs)
        bound.arguments["callbacks"] = list(bound.arguments.get("callbacks") or []) + [make_callback()]
        if called is not None:
            called(bound)
        return orig_fit(*bound.args, **bound.kwargs)

    fit._feedprof = True  # type: ignore[attr-defined]
    return fit
