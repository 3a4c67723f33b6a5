"""Keras 3: force the config in PyDataset.__init__; time fit from a callback
appended to it (steps from on_train_batch_end, steps_per_execution aware) and
the whole fit call end to end (the external timing)."""
from __future__ import annotations

import inspect
import time
from typing import Any, Dict, Optional

import _indep_core as core

KNOBS = ("workers", "use_multiprocessing", "max_queue_size")


def install(keras: Any) -> None:
    _patch_pydataset(keras.utils.PyDataset)
    _patch_fit(keras)


def _patch_pydataset(PyDataset: Any) -> None:
    if getattr(PyDataset, "_indep_patched", False):
        return
    orig_init = PyDataset.__init__
    sig = inspect.signature(orig_init)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        config = core.force_config("keras")
        if config is not None:
            bound = sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            bound.arguments.update({k: config[k] for k in KNOBS if k in config})
            args, kwargs = bound.args[1:], bound.kwargs
        orig_init(self, *args, **kwargs)
        cfg = {k: getattr(self, k, None) for k in KNOBS}
        self._indep = core.register("keras", core.user_site(), config is not None, cfg,
                                    int(cfg.get("max_queue_size") or 0), None)

    PyDataset.__init__ = __init__
    PyDataset._indep_patched = True


def _fit_input(args: tuple, kwargs: Dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("x")


def _with_input(args: tuple, kwargs: Dict[str, Any], x: Any) -> tuple:
    if args:
        return (x,) + tuple(args[1:]), kwargs
    return args, {**kwargs, "x": x}


def _patch_fit(keras: Any) -> None:
    Model = keras.Model
    if getattr(Model, "_indep_patched", False):
        return
    orig_fit = Model.fit
    Clock = _clock_class(keras.callbacks.Callback)

    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        x = _fit_input(args, kwargs)
        rec, x2 = _loader_for_fit(x)
        if x2 is not x:
            args, kwargs = _with_input(args, kwargs, x2)
        rec.batches_per_epoch = kwargs.get("steps_per_epoch") or _num_batches(x2) or rec.batches_per_epoch
        clock = Clock(rec, core.STATE.spec.get("fit_steps"))
        callbacks = kwargs.get("callbacks")
        if callbacks is None or isinstance(callbacks, (list, tuple)):
            kwargs["callbacks"] = list(callbacks or []) + [clock]
        t0 = time.perf_counter()
        out = orig_fit(self, *args, **kwargs)
        core.fit_done(rec, time.perf_counter() - t0, clock.steps)
        return out

    Model.fit = fit
    Model._indep_patched = True


def _num_batches(x: Any) -> Any:
    """A PyDataset's batches per epoch (tf.data's cardinality is taken when it is prepared)."""
    try:
        n = getattr(x, "num_batches", None)
    except (TypeError, ValueError, NotImplementedError):
        return None
    return int(n) if isinstance(n, int) and n > 0 else None


def _loader_for_fit(x: Any) -> tuple:
    """The loader record fit's steps count for, and the input to hand fit."""
    rec = getattr(x, "_indep", None)
    if rec is not None:  # a PyDataset built by the script
        return rec, x
    import _indep_tfdata

    if _indep_tfdata.is_dataset(x):
        return _indep_tfdata.prepare(x, "fit")
    return core.register("fit", core.user_site(3), False, {}, 0, None), x


def _clock_class(Callback: Any) -> Any:
    class IndependentClock(Callback):
        """Counts training steps; ends fit after fit_steps when timing a whole call."""

        def __init__(self, rec: Any, fit_steps: Optional[int]):
            super().__init__()
            self.rec, self.fit_steps, self.steps, self.begin = rec, fit_steps, 0, None

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            core.epoch_start(self.rec)

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.begin = batch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            # Keras 3 passes the first and last step of the execution (steps_per_execution)
            n = max(1, batch - self.begin + 1) if self.begin is not None else 1
            self.steps += n
            core.delivered(self.rec, n)
            if self.fit_steps and self.steps >= self.fit_steps:
                self.model.stop_training = True

    return IndependentClock
