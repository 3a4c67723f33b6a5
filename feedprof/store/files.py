"""Records to files and back: ``run.json`` and ``results.json``, of the one
version of each this feedprof writes (store/schema.py says the rule)."""
from __future__ import annotations

import errno
import json
from typing import Union

from feedprof.store.codec import DecodeError, dumps, from_dict, write_text_atomic
from feedprof.store.run import SCHEMA_RUN, Run
from feedprof.store.tune import SCHEMA_TUNE, TuneResult


Record = Union[Run, TuneResult]  # what feedprof writes at the top of an output directory
READS = {SCHEMA_RUN: Run, SCHEMA_TUNE: TuneResult}  # the versions this feedprof reads: those it writes


class StoreError(ValueError):
    """A file that is not a readable feedprof run or tune."""


# What the machine, not feedprof, refuses: a full disk or quota, a file size
# limit, a read-only or failing filesystem, no permission.
NOT_WRITABLE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES,
                          errno.EPERM})


def write_refused(exc: BaseException) -> bool:
    """An OSError from writing a named file that the machine refused (exit code 2, not a bug)."""
    return isinstance(exc, OSError) and exc.errno in NOT_WRITABLE and bool(exc.filename)


class NotSaved(Exception):
    """What was measured (a Run or a TuneResult, in memory) could not be written:
    ``error`` names the file and why; the file on disk holds ``trials_on_disk`` trials."""

    def __init__(self, record: object, error: OSError, trials_on_disk: int = 0):
        super().__init__(f"{error.filename}: {error.strerror}")
        self.record = record
        self.error = error
        self.trials_on_disk = trials_on_disk


def save(obj: object, path: str) -> None:
    write_text_atomic(path, dumps(obj))


def load(path: str) -> Record:
    """Read a ``run.json`` (-> :class:`Run`) or ``results.json`` (-> :class:`TuneResult`)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise StoreError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise StoreError(f"{path}: is a directory, not a feedprof JSON file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{path}: not JSON ({exc})") from None
    return from_json_data(data, source=path)


def from_json_data(data: object, source: str = "input") -> Record:
    schema = data.get("schema") if isinstance(data, dict) else None
    if not isinstance(schema, str) or not schema.startswith("feedprof."):
        raise StoreError(f"{source}: not a feedprof file (no 'schema': '{SCHEMA_RUN}' or '{SCHEMA_TUNE}')")
    cls = READS.get(schema)
    if cls is None:
        kind = schema.partition("/")[0]
        named = [tag for tag in READS if tag.partition("/")[0] == kind] or list(READS)  # the same kind's, else all
        raise StoreError(f"{source}: schema {schema!r} is not one this feedprof reads ({' or '.join(named)})")
    try:
        return from_dict(cls, data)
    except (DecodeError, TypeError, KeyError, IndexError, AttributeError, ValueError) as exc:
        raise StoreError(f"{source}: malformed {schema} file ({exc})") from None


RECORD_NAMES = ("results.json", "run.json")  # what feedprof writes at the top of an output directory


def records_in(directory: str) -> list:
    """The records of a directory that ``feedprof report DIR`` reads: its own results.json or
    run.json, else those of its subdirectories (one feedprof per task writes ``DIR/<node>-rank<N>/``)."""
    import os

    for name in RECORD_NAMES:
        if os.path.isfile(os.path.join(directory, name)):
            return [os.path.join(directory, name)]
    found = []
    for sub in sorted(os.listdir(directory)):
        path = os.path.join(directory, sub)
        if os.path.isdir(path) and not sub.startswith("."):
            found += [os.path.join(path, name) for name in RECORD_NAMES if os.path.isfile(os.path.join(path, name))][:1]
    return found
