"""Keras 3 ``PyDataset`` online: ``workers``, ``use_multiprocessing`` and ``max_queue_size``
switched at batch boundaries inside ``model.fit``, the script unmodified.

NOTE [ A PyDataset switched inside fit ]

    fit(x=dataset) ─► PyDatasetAdapter.__init__ (patched, keras.py) ─► ctl.switching(handle):
                      a KerasOnlineLoader, bound to this fit's adapter: the adapter's enqueuer is
                      replaced by a StandInEnqueuer, so Keras runs none of its own workers, and its
                      tf.data wrapper (TensorFlow backend) pulls each batch when the step needs it
                      (no prefetch thread: the time blocked is the step's data wait, on every backend)
      on_epoch_begin ─► StandInEnqueuer.start ─► the epoch begins; where the script's own settings
                      run an enqueuer, the epoch's order is drawn here, as its _run thread draws it
      _get_iterator (patched) ─► ctl.iterate ─► KerasOnlineLoader.epoch: a generator, lazy like
                      Keras's own; at its first batch, where the script's own settings load in the
                      loop, the order is drawn there, as Keras's _finite_generator draws it
      the order: range(num_batches), and with fit(shuffle=True) one random.shuffle of Python's
                 global `random`, per epoch: the draw Keras makes, from the same stream
      each batch ─► switching.SwitchingLoader.next_batch (the pool of the config in force,
                    keras_pool.py) ─► adapter._standardize_batch, as Keras's generators do
      on_epoch_end ─► StandInEnqueuer.stop ─► the pool ends (Keras stops its workers every epoch)

So the model gets the batches of the epoch in the order the run as written gives them.
"""
from __future__ import annotations

import random
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Tuple

from feedprof.frameworks.contract import SwitchAllowed, Tuning
from feedprof.frameworks.keras_pool import open_pool
from feedprof.frameworks.switching import SwitchingLoader
from feedprof.store.codes import Framework
from feedprof.store.knobs.pydataset import legalize

if TYPE_CHECKING:
    import keras

_FIT: Dict[str, Any] = {}  # the fit call now running: its training x and steps_per_epoch (keras.py)


def fit_started(x: object, steps_per_epoch: Optional[int]) -> None:
    _FIT.update(x=weakref.ref(x) if _weak(x) else None, steps_per_epoch=steps_per_epoch)


def _weak(x: object) -> bool:
    try:
        weakref.ref(x)
    except TypeError:
        return False
    return True


def _uses_enqueuer(config: Dict[str, Any]) -> bool:
    """Keras's PyDatasetAdapter runs an OrderedEnqueuer for these settings (else loads in the loop)."""
    cfg = legalize(config)
    return cfg["workers"] > 1 or cfg["use_multiprocessing"]


class StandInEnqueuer:
    """What the adapter holds instead of Keras's OrderedEnqueuer: Keras's epoch calls reach the
    online loader, and no worker of Keras's own ever starts."""

    def __init__(self, online: "KerasOnlineLoader"):
        self.online = online

    def start(self) -> None:
        self.online.begin_epoch()

    def stop(self, drain_queue_and_join: bool = True) -> None:
        self.online.end_epoch()

    def is_running(self) -> bool:
        return self.online.in_epoch


class KerasOnlineLoader(SwitchingLoader):
    """One PyDataset online (see NOTE)."""

    framework = Framework.KERAS

    def __init__(self, dataset: Any, tuning: Tuning, loader_id: int, script_config: Dict[str, Any],
                 chain: Tuple[str, ...]):
        self.dataset = dataset
        super().__init__(lambda config, feed: open_pool(dataset, config, feed), tuning, loader_id,
                         legalize(script_config), chain, int(dataset.num_batches))
        self.draws_at_start = _uses_enqueuer(self.script_config)  # where the script's own Keras draws the order
        self.adapter: Callable[[], Any] = lambda: None

    def loads_in_loop(self, config: Dict[str, Any]) -> bool:
        return not _uses_enqueuer(config)

    def bind(self, adapter: Any) -> None:
        """This fit's adapter: its epochs come here, and its batches are standardized by it."""
        self.adapter = weakref.ref(adapter)
        adapter.enqueuer = StandInEnqueuer(self)

    def _order(self) -> Iterator[int]:
        """The epoch's indices as Keras draws them (PyDatasetAdapter / OrderedEnqueuer)."""
        indices = range(self.length)
        adapter = self.adapter()
        if adapter is not None and adapter.shuffle:
            indices = list(indices)
            random.shuffle(indices)
        return iter(indices)

    def begin_epoch(self) -> None:
        """Keras's on_epoch_begin: where the script's own settings run an enqueuer, its _run draws
        the order now; where they load in the loop, it is drawn at the epoch's first batch."""
        if not self.in_epoch and self.draws_at_start:
            self._start()

    def _start(self) -> None:
        self.start_epoch(self._order())

    def epoch(self, own: Optional[Callable[[], Iterator]] = None) -> Iterator:
        """The generator fit pulls one epoch from (lazy: nothing happens until its first batch)."""
        return self._batches()

    def _batches(self) -> Iterator:
        while True:
            if not self.in_epoch:  # its first batch: the order drawn where Keras draws it
                self._start()
            try:
                batch = self.next_batch()
            except StopIteration:
                return
            adapter = self.adapter()
            yield adapter._standardize_batch(batch) if adapter is not None else batch


class KerasSwitcher:
    """contract.Switcher for Keras 3 PyDatasets."""

    framework = Framework.KERAS

    def switch_capable(self, dataset: "keras.utils.PyDataset", allowed: SwitchAllowed) -> Optional[str]:
        try:
            n = dataset.num_batches
        except NotImplementedError:
            n = None
        if not isinstance(n, int):
            return "pydataset_unbounded"  # its batches are drawn on without an epoch's order
        fit_x = _FIT.get("x")
        steps = _FIT.get("steps_per_epoch")
        if fit_x is not None and fit_x() is dataset and steps not in (None, n):
            return "steps_per_epoch"  # Keras carries an iterator over epochs that a switch cannot keep
        return None

    def online_loader(self, dataset: Any, tuning: Tuning, loader_id: int, script_config: Dict[str, Any],
                      chain: Tuple[str, ...], allowed: SwitchAllowed) -> KerasOnlineLoader:
        return KerasOnlineLoader(dataset, tuning, loader_id, script_config, chain)


SWITCHER = KerasSwitcher()
