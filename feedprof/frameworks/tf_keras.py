"""Legacy tf.keras (Keras 2, the ``tf_keras`` package): ``fit(Sequence or
generator, workers=, use_multiprocessing=, max_queue_size=)``.

The knobs are arguments of ``fit``; they reach tf_keras's data adapter, which
is where they are injected (found by the fit call's site). The adapter always
feeds the model through ``tf.data.Dataset.from_generator(...).prefetch()``, so
the rate at which batches are pulled is the step rate but the time spent
pulling them is loading, not waiting: data wait is reported as unknown and
the compute ceiling tells how input-bound the job is.

Known trap (docs/architecture.md, Keras): with workers > 1 or use_multiprocessing,
tf_keras stalls about 5 s at every epoch end (the old iterator's generator
waits on a queue with a 5 s timeout before the next epoch can start). That
gap between epochs is counted as the loader's teardown, so the amortised
throughput pays for it: with short epochs, more workers can lose.
"""
from __future__ import annotations

import inspect
import sys
from typing import Any, Callable, Dict, Optional

from feedprof.frameworks.keras import make_end_window, replay_items, with_callback
from feedprof.store.knobs.pydataset import DEFAULTS, KNOBS, legalize
from feedprof.store.reasons import EpochEndStall
from feedprof.record.steps import LoaderInfo
from feedprof.store.codes import Framework
from feedprof.frameworks.contract import Controller
from feedprof.store import LoaderRecord


def paste_line(config: Dict[str, Any], loader: Optional[LoaderRecord], script: str) -> str:
    from feedprof.frameworks.source import resolve_site, rewrite_statement

    cfg = legalize(config)
    chain = list(getattr(loader, "call_chain", ()) or ())
    where = resolve_site(chain[-1], script) if chain else None
    if where is not None:
        found = rewrite_statement(*where, ("fit", "fit_generator"), cfg)
        if found:
            return found[0]
    return (f"model.fit(data, workers={cfg['workers']}, use_multiprocessing={cfg['use_multiprocessing']}, "
            f"max_queue_size={cfg['max_queue_size']})")


def install(ctl: Controller) -> None:
    from tf_keras.src.engine import data_adapter as da
    from tf_keras.src.utils import data_utils

    if getattr(da.GeneratorDataAdapter, "_feedprof_patched", False):
        return
    replayed: Dict[type, Callable[..., Any]] = {}

    def patch(cls: type) -> None:
        orig_init = cls.__init__
        orig_multi = cls._handle_multiprocessing
        sig = inspect.signature(orig_init)

        def __init__(self: Any, x: Any, *args: Any, **kwargs: Any) -> None:
            if getattr(self, "_feedprof_in_init", False):  # KerasSequenceAdapter calls the base __init__
                return orig_init(self, x, *args, **kwargs)
            try:
                bound = sig.bind(self, x, *args, **kwargs)
            except TypeError:
                return orig_init(self, x, *args, **kwargs)
            script_cfg = legalize({k: bound.arguments.get(k, bound.arguments.get("kwargs", {}).get(k, DEFAULTS[k]))
                                   for k in KNOBS})
            plan = ctl.plan(Framework.TF_KERAS, sys._getframe(1))
            cfg = legalize({**script_cfg, **(plan.inject or {})})
            for key, value in cfg.items():
                bound.arguments[key] = value
            self._feedprof_handle = ctl.created(plan, LoaderInfo(
                config=cfg, script_config=script_cfg, dataset=type(x).__name__, wait_observable=False,
                gap_is_teardown=True, batches_per_epoch=len(x) if isinstance(x, data_utils.Sequence) else None), x)
            if cfg["workers"] > 1 or cfg["use_multiprocessing"]:
                ctl.note(EpochEndStall())
            if plan.replay and isinstance(x, data_utils.Sequence):
                replay_items(type(x), replayed)
            self._feedprof_in_init = True
            try:
                orig_init(*bound.args, **bound.kwargs)
            finally:
                self._feedprof_in_init = False

        def _handle_multiprocessing(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
            generator_fn = orig_multi(self, x, *args, **kwargs)
            handle = getattr(self, "_feedprof_handle", None)
            if handle is None:
                return generator_fn
            is_sequence = isinstance(x, data_utils.Sequence)
            # A Sequence replays at __getitem__; a plain generator is replayed here.
            return lambda: ctl.iterate(handle, generator_fn, replay=None if not is_sequence else False)

        cls.__init__ = __init__
        cls._handle_multiprocessing = _handle_multiprocessing

    patch(da.KerasSequenceAdapter)
    patch(da.GeneratorDataAdapter)
    da.GeneratorDataAdapter._feedprof_patched = True
    _patch_fit(ctl)


def _patch_fit(ctl: Controller) -> None:
    import tf_keras

    Model = tf_keras.Model
    for name in ("fit", "fit_generator"):
        orig = getattr(Model, name, None)
        if orig is None or getattr(orig, "_feedprof", False):
            continue
        setattr(Model, name, with_callback(orig, make_end_window(ctl, tf_keras.callbacks.Callback)))
