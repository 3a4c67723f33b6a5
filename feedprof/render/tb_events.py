"""One TensorBoard event file, written with TensorBoard's own record writer.

TensorBoard's ``EventFileWriter`` (and torch's ``SummaryWriter`` on top of it)
imports TensorFlow whenever it is installed, only to make directories and
open a file (``tensorboard.compat.tf.io.gfile``): ~3 s and ~560 MiB. This
writer keeps TensorBoard's protos and its ``RecordWriter`` (the framing and
checksums of the format) and opens the file itself, synchronously: nothing is
queued, so memory stays flat however long the series.
"""
from __future__ import annotations

import itertools
import os
import socket
import time
import types
from typing import Any

_FILE_UID = itertools.count()  # two files opened in one second by one process get different names
INSTALL_HINT = ("feedprof's TensorBoard export needs the tensorboard package: pip install tensorboard "
                "(from feedprof's clone: pip install -e '.[tensorboard]')")


def require_tensorboard() -> Any:
    """TensorBoard's proto modules, or an ImportError that says what to install."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.plugins.text import metadata as text_metadata
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return types.SimpleNamespace(event_pb2=event_pb2, summary_pb2=summary_pb2, tensor_pb2=tensor_pb2,
                                 tensor_shape_pb2=tensor_shape_pb2, types_pb2=types_pb2,
                                 text_metadata=text_metadata, RecordWriter=RecordWriter)


class EventFile:
    """``events.out.tfevents.*`` in ``logdir``: scalars and text, each with its own step and wall time."""

    def __init__(self, logdir: str):
        self._tb = tb = require_tensorboard()
        os.makedirs(logdir, exist_ok=True)
        # The name TensorBoard's own writer uses (its reader looks for "tfevents").
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}."
                f"{next(_FILE_UID)}.feedprof")
        self.path = os.path.join(logdir, name)
        self._writer = tb.RecordWriter(open(self.path, "wb"))
        self._text_meta = None
        self._event(wall_time=time.time(), file_version="brain.Event:2")

    def _event(self, **fields: Any) -> None:
        self._writer.write(self._tb.event_pb2.Event(**fields).SerializeToString())

    def scalar(self, tag: str, step: int, wall_time_s: float, value: float) -> None:
        summary_pb2 = self._tb.summary_pb2
        value_pb = summary_pb2.Summary.Value(tag=tag, simple_value=value)
        self._event(wall_time=wall_time_s, step=step, summary=summary_pb2.Summary(value=[value_pb]))

    def text(self, tag: str, markdown: str, step: int = 0, wall_time_s: float = 0.0) -> None:
        tb = self._tb
        if self._text_meta is None:
            self._text_meta = tb.text_metadata.create_summary_metadata(display_name="", description="")
        shape = tb.tensor_shape_pb2.TensorShapeProto(dim=[tb.tensor_shape_pb2.TensorShapeProto.Dim(size=1)])
        tensor = tb.tensor_pb2.TensorProto(dtype=tb.types_pb2.DT_STRING, tensor_shape=shape,
                                           string_val=[markdown.encode("utf-8")])
        value_pb = tb.summary_pb2.Summary.Value(tag=tag, metadata=self._text_meta, tensor=tensor)
        self._event(wall_time=wall_time_s or time.time(), step=step, summary=tb.summary_pb2.Summary(value=[value_pb]))

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()

    def __enter__(self) -> "EventFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
