"""Whether an online loader's worker pool may live on into the next epoch.

A script written without persistent workers starts fresh workers every epoch: each
forks the dataset as the main process holds it then. feedprof's own pool may serve the
next epoch too, saving that start (0.4-0.5 s for a dozen workers, every epoch, on each
rank), only where fresh workers would see nothing else:

    the dataset, collate_fn and worker_init_fn are as they were when the pool's workers
        forked (a fingerprint of their state, taken at the fork and again as the next
        epoch starts: ``ds.level = epoch``, ``set_epoch()``, a grown list all differ);
    the workers draw nothing from their random streams as they load, or the pool is not
        the script's own settings (its workers' draws follow the worker count already);
    the epoch order is checked (a map-style dataset: an IterableDataset's workers hold
        where they are in it).

The state is followed through attributes, containers, partials and closures, and into
the module-level values the user's own code reads (a dataset's methods reading an
``EPOCH`` counter). Once it differs, the loader restarts its workers every epoch, as
written, to the end of the run. What it cannot see: the middle of a large array or list
(their ends, length and a tensor's version counter are hashed), state held by a library's
module, or files on disk the workers read.
"""
from __future__ import annotations

import hashlib
import itertools
import types
from typing import Any, Dict, List, Optional, Tuple

from feedprof.record.userframes import is_user_file

NODES = 4000  # objects looked at per fingerprint: a few ms, at each epoch start
DEPTH = 6  # attribute levels followed (a Subset of a dataset holding a transform's parameters)
ITEMS = 32  # a container's items hashed from each end, beyond its length
ARRAY_BYTES = 1 << 20  # arrays up to this size are hashed whole; larger ones by their ends

DATASET_CHANGED = "dataset_changed"
WORKERS_DRAW = "workers_draw"


def state_fingerprint(*objs: Any) -> str:
    """A digest of what a worker forked now would be given of ``objs``: their attributes'
    values, followed through containers, partials and closures."""
    walk = _Walk()
    for obj in objs:
        walk.visit(obj, DEPTH)
    return walk.h.hexdigest()


class _Walk:
    def __init__(self) -> None:
        self.h = hashlib.blake2b(digest_size=16)
        self.left = NODES
        self.seen: Dict[int, Any] = {}  # (holding each object: a temporary's id is never reused during the walk)

    def put(self, *parts: Any) -> None:
        self.h.update(repr(parts).encode("utf-8", "replace"))

    def visit(self, x: Any, depth: int) -> None:
        self.left -= 1
        if self.left < 0:
            self.put("…")  # (the budget ends the walk at the same place each time)
            return
        if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
            self.put(type(x).__name__, x if not isinstance(x, (str, bytes)) or len(x) <= 4096 else hash(x))
            return
        if id(x) in self.seen or depth <= 0 or isinstance(x, (type, types.ModuleType)):  # (not a module's namespace)
            self.put("ref", type(x).__qualname__, id(x))
            return
        self.seen[id(x)] = x
        self.put(type(x).__qualname__)
        if self._array(x):
            return
        if isinstance(x, (dict, list, tuple, set, frozenset)):
            self.put(len(x))
            for item in _ends(x):
                self.visit(item, depth - 1)
        else:
            self._attributes(x, depth)
            self._code_globals(x, depth)

    def _attributes(self, x: Any, depth: int) -> None:
        fields: Dict[str, Any] = {}
        state = getattr(x, "__dict__", None)
        if isinstance(state, dict):
            fields.update(state)
        for name in getattr(type(x), "__slots__", ()):
            if isinstance(name, str) and hasattr(x, name):
                fields[name] = getattr(x, name)
        for name in _PARTS:  # a partial's parts; a function's captured values; a cell's
            if name in dir(type(x)):
                try:
                    fields[name] = getattr(x, name)
                except Exception:  # noqa: BLE001 - (an empty cell)
                    continue
        for name in sorted(fields):
            self.put(name)
            self.visit(fields[name], depth - 1)

    def _code_globals(self, x: Any, depth: int) -> None:
        """The module-level values the user's code reads: a function's, or the methods' of the
        object's own classes (a dataset reading an ``EPOCH`` counter the loop sets: fresh workers
        fork with its new value)."""
        funcs = ([x] if is_user_file(x.__code__.co_filename) else []) if isinstance(x, types.FunctionType) \
            else _user_methods(type(x))
        for fn in funcs:
            names = fn.__globals__
            for name in sorted(_names_read(fn.__code__)):
                value = names.get(name)
                if value is not None and not isinstance(value, (types.ModuleType, type)):
                    self.put("global", name)
                    self.visit(value, depth - 1)

    def _array(self, x: Any) -> bool:
        """A numpy array or a torch tensor: its shape, type and contents (a tensor's in-place
        changes move its version counter; a large array is hashed by its ends)."""
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is None or dtype is None:
            return False
        self.put(tuple(shape), str(dtype), getattr(x, "_version", None))
        data = _bytes_of(x)
        if data is None:
            self.put("at", _address(x))
        elif len(data) <= ARRAY_BYTES:
            self.h.update(data)
        else:
            self.h.update(data[:ARRAY_BYTES // 2])
            self.h.update(data[-ARRAY_BYTES // 2:])
        return True


_PARTS = ("func", "args", "keywords", "__closure__", "__defaults__", "__kwdefaults__", "cell_contents")


_METHODS: Dict[type, Tuple[types.FunctionType, ...]] = {}


def _user_methods(cls: type) -> Tuple[types.FunctionType, ...]:
    """The methods of a class and its bases written in the user's own files (a library's classes
    have none: a Hugging Face dataset's hundreds of methods are looked at once, not every epoch)."""
    found = _METHODS.get(cls)
    if found is None:
        found = _METHODS[cls] = tuple(f for c in cls.__mro__ for f in vars(c).values()
                                      if isinstance(f, types.FunctionType) and is_user_file(f.__code__.co_filename))
    return found


def _names_read(code: types.CodeType) -> set:
    """Global names a code object and those nested in it (a lambda, a comprehension) read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_read(const)
    return names


def _ends(x: Any) -> List[Any]:
    """A container's items, or only its first and last ITEMS (its length is hashed too)."""
    if len(x) <= 2 * ITEMS:
        return list(x.items()) if isinstance(x, dict) else list(x)
    if isinstance(x, dict):
        return list(itertools.islice(x.items(), ITEMS)) + list(itertools.islice(reversed(x.items()), ITEMS))
    if isinstance(x, (set, frozenset)):
        return list(itertools.islice(x, 2 * ITEMS))
    return list(x[:ITEMS]) + list(x[-ITEMS:])


def _bytes_of(x: Any) -> Optional[memoryview]:
    """The array's contents as bytes, without a copy; None where that is not possible."""
    try:
        if hasattr(x, "detach"):  # a torch tensor: a CPU one's memory (a CUDA one's version counter says)
            if x.device.type != "cpu" or x.layout.__repr__() != "torch.strided" or not x.is_contiguous():
                return None
            if not x.numel():
                return memoryview(b"")
            x = x.detach().view(-1).numpy()
        if not x.flags["C_CONTIGUOUS"]:
            return None
        return memoryview(x).cast("B")
    except Exception:  # noqa: BLE001 - an array type nobody foresaw (object, bfloat16): its shape and type stand for it
        return None


def _address(x: Any) -> Any:
    try:
        return x.data_ptr() if hasattr(x, "data_ptr") else x.__array_interface__["data"][0]
    except Exception:  # noqa: BLE001
        return None
