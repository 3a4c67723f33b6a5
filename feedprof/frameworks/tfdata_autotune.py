"""What AUTOTUNE chose for a running tf.data pipeline, read from the pipeline itself.

NOTE [ Reading AUTOTUNE's choices ]

    the training pipeline's iterator (tfdata.py: the script's loop, or the one fit makes)
      ─► AutotuneWatch.follow(iterator)        (a weak reference: the pipeline's life is the script's)
    every step, at most every SAMPLE_S (the loop's next(), or fit's batch-end callback)
      ─► IteratorGetModelProto(iterator)       TensorFlow's own op (~0.1 ms): the autotuning model,
                                               one node per op, each with its parameters
      ─► a reading: each op's parallelism / buffer_size as in force (the parameter's shared state,
         which the op reads), the most AUTOTUNE may choose there, whether it is AUTOTUNE's
      kept only when it differs from the last one (at most MAX_READINGS)
    the record is written ─► a last reading, with each op's elements and processing time (tf.data's
         own statistics: where the pipeline's time goes, per op); LoaderRecord.autotune

The ops are TensorFlow's after its own rewrites (a map followed by a batch may run as one
MapAndBatch op; a Prefetch AUTOTUNE injected itself may appear at the end), listed from the
source. AUTOTUNE chooses parallelism up to its CPU budget (the cores) and never sizes the
thread pool those calls run on: what it cannot reach is tuned offline (tune/space_tf.py).
"""
from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Callable, List, Optional, Tuple

from feedprof.store.run import AutotunedKnob, AutotuneReading, OpTime

SAMPLE_S = 1.0  # read the model at most this often
MAX_READINGS = 256  # a long run keeps its first readings and its latest ones
KNOBS = ("parallelism", "buffer_size", "cycle_length")
UNBOUNDED = 1e15  # a parameter's max beyond this is "no limit" (TensorFlow writes int64 max)


def read_model(iterator: Any) -> Any:
    """The pipeline's autotuning model as its iterator holds it now, or None where TensorFlow cannot say."""
    import tensorflow as tf
    from tensorflow.core.framework import model_pb2

    try:
        proto = tf.raw_ops.IteratorGetModelProto(iterator=iterator._iterator_resource)
        model = model_pb2.ModelProto()
        model.ParseFromString(proto.numpy())
    except (AttributeError, TypeError, ValueError, tf.errors.OpError):  # no model (autotune off) or a gone iterator
        return None
    return model


def read_ops(model: Any) -> Tuple[OpTime, ...]:
    """Each op's elements and time, as tf.data's own statistics count them, source first."""
    chain = list(reversed(_from_output(model)))
    return tuple(OpTime(position=k, op=n.name, elements=int(n.num_elements), processing_s=n.processing_time / 1e9)
                 for k, n in enumerate(chain))


def knobs_of(model: Any) -> Tuple[AutotunedKnob, ...]:
    """The pipeline's settings as its model holds them."""
    chain = _from_output(model)
    knobs: List[AutotunedKnob] = []
    for position, node in enumerate(reversed(chain)):
        for p in node.parameters:
            if p.name not in KNOBS or (p.name == "cycle_length" and not p.tunable):
                continue
            value = p.state_value if p.state_value > 0 else p.value
            knobs.append(AutotunedKnob(position=position, op=node.name, knob=p.name, value=float(value),
                                       max_value=float(p.max) if 0 < p.max < UNBOUNDED else None,
                                       autotuned=bool(p.tunable)))
    return tuple(knobs)


def _from_output(model: Any) -> List[Any]:
    """The model's nodes from the pipeline's output to its source, along each op's first input."""
    chain, seen = [], set()
    node_id: Optional[int] = model.output
    while node_id is not None and node_id in model.nodes and node_id not in seen:
        seen.add(node_id)
        node = model.nodes[node_id]
        if node.name != "Root":
            chain.append(node)
        node_id = node.inputs[0] if node.inputs else None
    return chain


class AutotuneWatch:
    """One pipeline's settings over the run, read from the iterator it runs as now."""

    def __init__(self, now: Callable[[], float]):
        self.now = now
        self.readings: List[AutotuneReading] = []  # times on the clock of ``now``
        self.iterator: Callable[[], Any] = lambda: None
        self.t_read = float("-inf")
        self.ops: Tuple[OpTime, ...] = ()  # the latest iterator's ops' time, at the last reading

    def follow(self, iterator: Any) -> None:
        """A new iterator over the pipeline (an epoch, a fit): the last one's final reading first."""
        self.read()
        try:
            self.iterator = weakref.ref(iterator)
        except TypeError:
            self.iterator = lambda: iterator
        self.t_read = self.now()  # (a new iterator's model starts from nothing: read once it has run a while)

    def tick(self) -> None:
        """A step went by: read the pipeline if SAMPLE_S passed since the last reading."""
        if self.now() - self.t_read >= SAMPLE_S:
            self.read()

    def read(self) -> None:
        it = self.iterator()
        if it is None:
            return
        self.t_read = self.now()
        try:
            model = read_model(it)
            knobs = knobs_of(model) if model is not None else None
            self.ops = read_ops(model) if model is not None else self.ops
        except Exception:  # noqa: BLE001 - feedprof's side must never end the job: no more readings
            self.iterator = lambda: None
            return
        if not knobs or (self.readings and self.readings[-1].knobs == knobs):
            return
        self.readings.append(AutotuneReading(t_s=self.t_read, knobs=knobs))
        if len(self.readings) > MAX_READINGS:  # keep the first half, thin the rest
            del self.readings[MAX_READINGS // 2]

    def over_the_run(self, origin_s: float) -> Tuple[AutotuneReading, ...]:
        """Every reading (times from ``origin_s``), the latest taken now (the record is being written)."""
        self.read()
        out = [dataclasses.replace(r, t_s=r.t_s - origin_s) for r in self.readings]
        if out:
            out[-1] = dataclasses.replace(out[-1], ops=self.ops)
        return tuple(out)


class Sampled:
    """An iterator that ticks the watch at each batch (a script's own loop over the pipeline)."""

    def __init__(self, inner: Any, watch: AutotuneWatch):
        self.inner, self.watch = inner, watch

    def __iter__(self) -> "Sampled":
        return self

    def __next__(self) -> Any:
        self.watch.tick()
        return next(self.inner)
