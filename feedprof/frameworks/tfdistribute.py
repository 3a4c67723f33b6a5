"""``tf.distribute`` custom training loops: a tagged tf.data pipeline handed to
``strategy.experimental_distribute_dataset`` (or built inside the function
given to ``strategy.distribute_datasets_from_function``) is timed where the
script iterates the distributed dataset, as one loader (one process, every
replica: MirroredStrategy's devices are fed from it).

``model.fit`` under ``strategy.scope()`` needs none of this: Keras distributes
the dataset itself, and tfdata.install_keras_adapter times its steps.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Iterator

from feedprof.frameworks.contract import Controller
from feedprof.frameworks.tfdata import register_dataset

if TYPE_CHECKING:
    import tensorflow as tf


def install(ctl: Controller) -> None:
    from tensorflow.python.distribute import distribute_lib, input_lib

    Strategy = distribute_lib.StrategyBase
    if getattr(Strategy, "_feedprof_patched", False):
        return
    orig_distribute = Strategy.experimental_distribute_dataset
    orig_from_function = Strategy.distribute_datasets_from_function

    def experimental_distribute_dataset(self: Any, dataset: Any, *args: Any, **kwargs: Any) -> Any:
        p = getattr(dataset, "_feedprof_pipeline", None)
        # only the script's own loop: Keras's fit distributes the dataset itself, and must get
        # TensorFlow's own iterator to pull inside its compiled train function
        if p is None or not ctl.user_chain(sys._getframe(1)):
            return orig_distribute(self, dataset, *args, **kwargs)
        handle = register_dataset(ctl, dataset, p, sys._getframe(1))
        distributed = orig_distribute(self, p.runtime, *args, **kwargs)  # the knobs' options, or the replay
        distributed._feedprof_handle = handle
        return distributed

    def distribute_datasets_from_function(self: Any, dataset_fn: Any, *args: Any, **kwargs: Any) -> Any:
        made: list = []
        caller = sys._getframe(1)
        if not ctl.user_chain(caller):
            return orig_from_function(self, dataset_fn, *args, **kwargs)

        def fn(context: "tf.distribute.InputContext") -> "tf.data.Dataset":
            dataset = dataset_fn(context)
            p = getattr(dataset, "_feedprof_pipeline", None)
            if p is None:
                return dataset
            made.append(register_dataset(ctl, dataset, p, caller))
            return p.runtime

        distributed = orig_from_function(self, fn, *args, **kwargs)
        if made:
            distributed._feedprof_handle = made[0]
        return distributed

    Strategy.experimental_distribute_dataset = experimental_distribute_dataset
    Strategy.distribute_datasets_from_function = distribute_datasets_from_function
    for cls in (input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction):
        _time_iteration(ctl, cls)
    Strategy._feedprof_patched = True


def _time_iteration(ctl: Controller, cls: type) -> None:
    orig_iter = cls.__iter__

    def __iter__(self: object) -> Iterator[Any]:
        handle = getattr(self, "_feedprof_handle", None)
        if handle is None:
            return orig_iter(self)
        return ctl.iterate(handle, lambda: orig_iter(self), replay=False)

    cls.__iter__ = __iter__
