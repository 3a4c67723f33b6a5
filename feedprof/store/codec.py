"""Frozen dataclasses to JSON and back, by their type hints; atomic writes.

Knows nothing of feedprof's records or schemas (the rest of this package does).
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import sys
import types
import typing
from typing import Any, Dict, List, Type, TypeVar, Union

TAG = "code"  # the key that names a tagged union's member (see _member)
Json = Union[None, bool, int, float, str, List["Json"], Dict[str, "Json"]]
T = TypeVar("T")


class DecodeError(ValueError):
    """JSON data that does not fit the dataclass it should rebuild."""


def to_dict(obj: object) -> Json:
    """Dataclasses to plain JSON-able data; non-finite floats become None."""
    if dataclasses.is_dataclass(obj):
        fields = {name: to_dict(getattr(obj, name)) for name in json_names(type(obj))}
        tag = getattr(type(obj), TAG, None) if hasattr(type(obj), "tagged") else None
        return {TAG: tag, **fields} if tag is not None else fields
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def json_names(cls: type) -> List[str]:
    """The keys a record is written with: its fields, and before the field
    named by ``derived_from`` the properties named in ``derived`` (figures
    derived from that field, written for readers of the JSON, never read back)."""
    derived, source = getattr(cls, "derived", ()), getattr(cls, "derived_from", None)
    names: List[str] = []
    for f in dataclasses.fields(cls):
        if f.name == source:
            names.extend(derived)
        names.append(f.name)
    return names


def from_dict(cls: Type[T], data: Json) -> T:
    """Rebuild ``cls`` from :func:`to_dict` output; unknown keys are ignored and
    missing keys take the field's default (the shipped JSON Schema is the strict check)."""
    return _convert(cls, data)


def _convert(tp: object, value: Json) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Union or (sys.version_info >= (3, 10) and origin is types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(args[0], value) if len(args) == 1 else value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise DecodeError(f"{value!r} is not a {tp.__name__}") from None
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise DecodeError(f"expected an object for {tp.__name__}, got {type(value).__name__}")
        tp = _member(tp, value)
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = _convert(hints[f.name], value[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise DecodeError(f"{tp.__name__} lacks the required field {f.name!r}")
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v) for v in value)
        return tuple(_convert(a, v) for a, v in zip(args, value))
    if origin is dict:
        return dict(value)
    if tp is float and isinstance(value, int):
        return float(value)
    return value


def _member(tp: type, value: dict) -> type:
    """A tagged union (a base class with ``tagged(code)``): the member the data names."""
    tagged = getattr(tp, "tagged", None)
    return tagged(value.get(TAG)) if tagged is not None else tp


_HINTS: Dict[type, Dict[str, Any]] = {}


def _hints(tp: type) -> Dict[str, Any]:
    if tp not in _HINTS:
        _HINTS[tp] = typing.get_type_hints(tp)
    return _HINTS[tp]


def dumps(obj: object) -> str:
    return json.dumps(to_dict(obj), indent=1, allow_nan=False)


def write_text_atomic(path: str, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file.
    A script's words that are not text (undecodable bytes Python carries as
    lone surrogates, in a file name or an error) are written as "?".
    An OSError (a full disk) names ``path``, and leaves no temporary file behind.
    A path that is not a regular file (/dev/null, /dev/full, a FIFO) is written
    to as it is: a rename would replace the device itself."""
    if os.path.exists(path) and not os.path.isfile(path):
        try:
            with open(path, "w", encoding="utf-8", errors="replace") as fh:
                fh.write(text)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        return
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise OSError(exc.errno, exc.strerror, path) from None
