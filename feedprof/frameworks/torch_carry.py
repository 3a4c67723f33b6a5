"""Whether an online loader's worker pool may live on into the next epoch.

NOTE [ Whether an online pool may outlive its epoch ]

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

The state is followed through attributes, containers, partials, closures and bound methods
(which function, by its code), and into the module-level values the user's own code reads
(a dataset's methods reading an ``EPOCH`` counter, in its own module or ``cfg.EPOCH`` in
another of the user's). Once it differs, the loader restarts its workers every epoch, as
written, to the end of the run. So it does where the walk cannot vouch for the state:

    a random generator object in it (``random.Random``, numpy's, a ``torch.Generator``):
        fresh workers get the main process's copy every epoch, a kept pool's would go on;
    more state than the walk's budget (NODES objects, DEPTH levels): a change past it
        would go unseen.

What it cannot see: the middle of a large array or list (their ends, length and a tensor's
version counter are hashed), state held by a library's module, state the workers change
in their own copy (a counter the dataset keeps), or files on disk the workers read.
"""
from __future__ import annotations

import hashlib
import itertools
import types
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Tuple

from feedprof.record.userframes import is_user_file

if TYPE_CHECKING:
    from feedprof.frameworks.torch_online import OnlineLoader

NODES = 4000  # objects looked at per fingerprint: a few ms, at each epoch start
DEPTH = 6  # attribute levels followed (a Subset of a dataset holding a transform's parameters)
ITEMS = 32  # a container's items hashed from each end, beyond its length
ARRAY_BYTES = 1 << 20  # arrays up to this size are hashed whole; larger ones by their ends

DATASET_CHANGED = "dataset_changed"
WORKERS_DRAW = "workers_draw"
OWN_RNG = "own_rng"  # a generator object in the state: a kept pool's copy would go on drawing
STATE_UNSEEN = "state_unseen"  # past the walk's budget: a change there would go unseen


class CarryState(NamedTuple):
    """What one walk over a loader's dataset, collate_fn and worker_init_fn found."""

    digest: str  # of what a worker forked now would be given of them
    why_not: str  # "" or why a pool forked with them may not serve another epoch whatever the digest
    generators: Tuple[Any, ...]  # the random generator objects they hold (a dataset's ``self.rng``):
    # draws from them are the script's too (frameworks/torch_rng.py watches them)


def state_of(*objs: Any) -> CarryState:
    """One walk over ``objs``: their attributes' values, followed through containers, partials,
    closures and bound methods. A walk that fails on an object nobody foresaw (a property that
    raises) vouches for nothing, and never stops the run."""
    walk = _Walk()
    try:
        for obj in objs:
            walk.visit(obj, DEPTH)
    except Exception:  # noqa: BLE001
        walk.why_not = walk.why_not or STATE_UNSEEN
    return CarryState(walk.h.hexdigest(), walk.why_not, tuple(walk.generators))


def generator_names(generators: Tuple[Any, ...]) -> Tuple[str, ...]:
    """The kinds of random generator ``generators`` are, each once, as users write them
    ("random.Random", "numpy.random.Generator", "torch.Generator")."""
    names = []
    for g in generators:
        kind = type(g)
        module = kind.__module__ or ""
        root = "numpy.random" if module.startswith("numpy.random") else module.split(".")[0]
        names.append(f"{root}.{kind.__qualname__}")
    return tuple(sorted(set(names)))


def state_fingerprint(*objs: Any) -> str:
    """The digest alone (state_of)."""
    return state_of(*objs).digest


class _Walk:
    def __init__(self) -> None:
        self.h = hashlib.blake2b(digest_size=16)
        self.left = NODES
        self.seen: Dict[int, Any] = {}  # (holding each object: a temporary's id is never reused during the walk)
        self.why_not = ""  # the first reason found that the digest cannot vouch for the state
        self.generators: List[Any] = []

    def put(self, *parts: Any) -> None:
        self.h.update(repr(parts).encode("utf-8", "replace"))

    def visit(self, x: Any, depth: int) -> None:
        self.left -= 1
        if self.left < 0:
            self.why_not = self.why_not or STATE_UNSEEN
            return
        if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
            self.put(type(x).__name__, x if not isinstance(x, (str, bytes)) or len(x) <= 4096 else hash(x))
            return
        if id(x) in self.seen or isinstance(x, (type, types.ModuleType)):  # (not a module's namespace)
            self.put("ref", type(x).__qualname__, id(x))
            return
        if depth <= 0:
            self.why_not = self.why_not or STATE_UNSEEN
            return
        self.seen[id(x)] = x
        self.put(type(x).__qualname__)
        if _is_generator(x):
            self.why_not = self.why_not or OWN_RNG
            self.generators.append(x)
            return
        if self._array(x):
            return
        self._code(x)
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
            read = _names_read(fn.__code__)
            for name in sorted(read):
                value = names.get(name)
                if isinstance(value, types.ModuleType) and is_user_file(getattr(value, "__file__", None) or ""):
                    self._module_values(value, read, depth - 1)  # (``cfg.EPOCH``: the user's own module)
                elif value is not None and not isinstance(value, (types.ModuleType, type)):
                    self.put("global", name)
                    self.visit(value, depth - 1)

    def _module_values(self, module: types.ModuleType, read: set, depth: int) -> None:
        """The values of the user's own module that the code reads by name (``cfg.EPOCH``): only
        those, as its whole namespace may hold the model."""
        if id(module) in self.seen:
            return
        self.seen[id(module)] = module
        space = vars(module)
        for name in sorted(read & space.keys()):
            if not isinstance(space[name], (types.ModuleType, type)):
                self.put("module", module.__name__, name)
                self.visit(space[name], depth)

    def _code(self, x: Any) -> None:
        """Which function it is (two lambdas, or a transform swapped for another, differ), by
        its code; another callable by its name."""
        if isinstance(x, types.FunctionType):  # (a bound method's function: its __func__)
            code = x.__code__
            self.put("code", code.co_filename, code.co_firstlineno, x.__qualname__)
            self.h.update(code.co_code)
        elif callable(x):  # a builtin, a ufunc, a class's instance with __call__ (its name, if it has one)
            try:
                self.put("callable", getattr(x, "__module__", None), getattr(x, "__qualname__", None),
                         getattr(x, "__name__", None))
            except Exception:  # noqa: BLE001 - an object whose __getattr__ raises: its type stands for it
                pass

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


_PARTS = ("func", "args", "keywords", "__closure__", "__defaults__", "__kwdefaults__", "cell_contents",
          "__self__", "__func__")  # (a bound method's object and function)


def _is_generator(x: Any) -> bool:
    """A random generator object: Python's ``random.Random``, numpy's ``Generator``,
    ``RandomState`` or bit generator, a ``torch.Generator`` (by type name: nothing imported)."""
    import random

    if isinstance(x, random.Random):
        return True
    kind = type(x)
    module, name = kind.__module__ or "", kind.__qualname__
    if module.startswith("numpy.random"):
        return name in ("Generator", "RandomState", "SeedSequence") or any(
            c.__qualname__ == "BitGenerator" for c in kind.__mro__)
    return module.startswith("torch") and name == "Generator"


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


class PoolCarry:
    """Whether one online loader's pool may serve its next epoch (see NOTE): the state its
    workers forked with against the state at each epoch's iter(); once not, every epoch
    restarts its workers, as written, told to the tuning."""

    def __init__(self, ol: "OnlineLoader"):
        self.ol = ol
        self.forked = ""  # the state's digest when the pool's workers forked
        self.epoch_state = CarryState("", "", ())  # ... and at this epoch's iter(), where torch's fresh workers fork
        self.why_not = ""  # why the loader's pools restart every epoch after all ("": they may carry on)
        self.carried = 0  # epochs a pool served without a restart the script's own loader makes

    def new_epoch(self) -> CarryState:
        """At an epoch's iter(): one walk, for this check and for the draws of the loader's own generators."""
        loader = self.ol.loader
        self.epoch_state = state_of(loader.dataset, loader.collate_fn, loader.worker_init_fn)
        return self.epoch_state

    def forking(self, config: Dict[str, Any]) -> None:
        """A pool of ``config`` is about to fork its workers: what they will be given, noted."""
        ol = self.ol
        if config.get("num_workers") and not ol.own_persistent and not self.why_not:
            loader = ol.loader
            forked = state_of(loader.dataset, loader.collate_fn, loader.worker_init_fn)
            self.forked = forked.digest
            if forked.why_not:
                self.stop(forked.why_not, ol.epochs + 1)

    def keeps(self) -> bool:
        """At an epoch's end: do its workers wait for the next epoch? The script's own persistent
        workers do; feedprof's own pool does where it may carry on (checked again when the next
        epoch starts), saving the start the script's loader pays every epoch."""
        ol = self.ol
        if ol.own_persistent:
            return True
        pool = ol.pool
        if pool is None or not pool.workers or not ol.checks_order or ol.hold_why or self.why_not:
            return False
        if ol.rng.worker_draws and pool.config == ol.script_config:  # its workers' draws would not start over
            self.stop(WORKERS_DRAW, ol.epochs + 1)
            return False
        return True

    def carries(self) -> bool:
        """The next epoch starts on a kept pool: only if a worker forked now would see what its
        workers saw (the dataset's state unchanged); once not, every epoch restarts, as written."""
        ol = self.ol
        if ol.own_persistent:
            return True
        now = self.epoch_state
        if self.why_not or now.why_not or now.digest != self.forked:
            self.stop(now.why_not or DATASET_CHANGED, ol.epochs)
            return False
        self.carried += 1
        if self.carried == 1:
            ol.tuning.carried(ol, True, "", ol.epochs)
        return True

    def stop(self, why: str, from_epoch: int) -> None:
        """From ``from_epoch`` (counted from 1) on, every epoch restarts its workers, as written."""
        if not self.why_not:
            self.why_not = why
            self.ol.tuning.carried(self.ol, False, why, from_epoch)
