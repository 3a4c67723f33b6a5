"""The script's random streams in the main process, seen around one online loader.

NOTE [ Draws a switch would move ]

    torch's default CPU generator, numpy's legacy global RandomState (once numpy is
    imported), Python's random and the generator objects the loader's dataset, collate_fn
    and worker_init_fn hold ("own": a dataset's ``self.rng``, found by torch_carry.py's
    walk at each epoch's start) are compared, in the main process:

      around a fetch + collate at 0 workers   loading draws there; a worker pool draws them
                                              in its workers instead: the batches' random
                                              values, and every later draw of the script
                                              (the next epoch's shuffle), change
      around a sampler step past the first    the sampler draws lazily: a pool of N workers
                                              pulls prefetch_factor x N batches ahead ...
      between two batches of one epoch        ... and when the loop draws too, the two
                                              streams interleave otherwise

    Every batch is checked until CHECK_BATCHES were seen under the script's own settings
    (no switch happens before), then one in SAMPLE_EVERY, or every one once the sampler is
    seen drawing lazily. Draws that numpy serves from its cached second normal deviate
    leave its generator as it was: the next draw shows.
"""
from __future__ import annotations

import ctypes
import random
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Set, Tuple

if TYPE_CHECKING:
    from feedprof.frameworks.torch_online import OnlineLoader
    from feedprof.frameworks.torch_pool import Pool

STREAMS = ("torch", "numpy", "random", "own")
CHECK_BATCHES = 8
SAMPLE_EVERY = 32

Snapshot = Tuple[Any, Any, Any, Tuple[Any, ...]]


class _NumpyState:
    """numpy's global generator state, cheaply: its MT19937 key and position read in place
    (50 µs for get_state() against 1 µs), else get_state()."""

    def __init__(self) -> None:
        self._np: Any = None
        self._read: Callable[[], Any] = lambda: None

    def __call__(self) -> Any:
        np = sys.modules.get("numpy")
        if np is None:
            return None
        if np is not self._np:
            self._np, self._read = np, self._reader(np)
        return self._read()

    @staticmethod
    def _reader(np: Any) -> Callable[[], Any]:
        try:
            bitgen = np.random.mtrand._rand._bit_generator
            view = (ctypes.c_uint32 * 625).from_address(bitgen.ctypes.state_address)  # key[624], pos
        except (AttributeError, TypeError, ValueError):
            return lambda: np.random.get_state()
        return lambda: (bitgen, bytes(view))[1]  # (keeps the generator alive while read)


_numpy_state = _NumpyState()


def snapshot(own: Tuple[Any, ...] = ()) -> Snapshot:
    """The streams' states; ``own``: generator objects of the loader's (torch_carry.state_of)."""
    import torch

    return torch.get_rng_state(), _numpy_state(), random.getstate(), tuple(_own_state(g) for g in own)


def _own_state(g: Any) -> Any:
    """A generator object's state, comparable with ==."""
    import pickle

    if isinstance(g, random.Random):
        return g.getstate()
    if hasattr(g, "get_state") and not hasattr(g, "bit_generator"):  # torch.Generator, numpy's RandomState
        state = g.get_state()
        return state.numpy().tobytes() if hasattr(state, "numpy") else pickle.dumps(state)
    bitgen = getattr(g, "bit_generator", g)  # numpy's Generator, or a bit generator itself
    try:
        return pickle.dumps(bitgen.state)
    except (AttributeError, TypeError):  # (a SeedSequence: no state to draw from)
        return None


def moved(a: Snapshot, b: Snapshot) -> Set[str]:
    """The streams that differ between two snapshots."""
    import torch

    out = set()
    if not torch.equal(a[0], b[0]):
        out.add("torch")
    if a[1] is not None and b[1] is not None and not _same(a[1], b[1]):
        out.add("numpy")
    if a[2] != b[2]:
        out.add("random")
    if a[3] != b[3]:
        out.add("own")
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bytes):
        return a == b
    return a[0] == b[0] and a[2:] == b[2:] and bytes(a[1].data) == bytes(b[1].data)  # get_state()'s tuple


@dataclass
class DrawWatch:
    """What one loader's batches showed of the main process's random streams."""

    loading: Set[str] = field(default_factory=set)  # fetch + collate drew (0 workers: in the main process)
    sampler: Set[str] = field(default_factory=set)  # a sampler step past the epoch's first drew
    loop: Set[str] = field(default_factory=set)  # something drew between two batches of one epoch
    checked_own: int = 0  # batches checked under the script's own settings
    own: Tuple[Any, ...] = ()  # the loader's own generator objects (set at each epoch's start)
    _batches: int = 0
    _on: bool = False  # this batch is checked
    _start: Optional[Snapshot] = None  # at this batch's request
    _stepped: Optional[Snapshot] = None  # after its last sampler step
    _end: Optional[Snapshot] = None  # at the end of the last checked batch of this epoch

    def ready(self) -> bool:
        """Checked enough under the script's own settings to say whether a switch moves draws."""
        return self.checked_own >= CHECK_BATCHES

    def verdict(self) -> str:
        """"" where a switch moves no draw that was seen, else what would move:
        rng_loading | rng_sampler."""
        if self.loading:
            return "rng_loading"
        if self.sampler and self.loop:
            return "rng_sampler"
        return ""

    def streams(self) -> Tuple[str, ...]:
        seen = self.loading | (self.sampler | self.loop if self.sampler and self.loop else set())
        return tuple(s for s in STREAMS if s in seen)

    def new_epoch(self) -> None:
        self._end = None  # what draws between epochs (a new iterator's seed) moves with nothing

    def begin(self) -> None:
        """A batch is asked for."""
        self._batches += 1
        self._on = not self.ready() or bool(self.sampler) or self._batches % SAMPLE_EVERY == 0
        if not self._on:
            self._end = None
            return
        self._start, self._stepped = snapshot(self.own), None
        if self._end is not None:
            self.loop |= moved(self._end, self._start)

    def step(self, pull: Callable[[], Any], first: bool) -> Any:
        """One step of the script's sampler (``first``: the epoch's first)."""
        if not self._on:
            return pull()
        before = snapshot(self.own)
        try:
            return pull()
        finally:
            self._stepped = snapshot(self.own)
            if not first:
                self.sampler |= moved(before, self._stepped)

    def end(self, in_main: bool, own: bool) -> None:
        """The batch was delivered; ``in_main``: loaded in this process (0 workers);
        ``own``: under the script's own settings."""
        if not self._on:
            return
        self._end = snapshot(self.own)
        if in_main:
            self.loading |= moved(self._stepped or self._start, self._end)
        if own:
            self.checked_own += 1

    def abandon(self) -> None:
        """The batch did not come (an error, the epoch's end): nothing to compare."""
        self._on, self._end = False, None


class RandomnessWatch:
    """One online loader's watch on the script's random streams (see NOTE): after each batch,
    the draws its loading made and where; a verdict told once, the loader held where a switch
    moving them is not allowed, and told again once a switch moved them. Draws in the script's
    own workers (augmentation) follow the worker count, as in any run with other settings: said
    once a switch moved them."""

    def __init__(self, ol: "OnlineLoader", own_workers: bool):
        self.ol = ol
        self.own_workers = own_workers  # the script's own loader has workers (their draws are theirs)
        self.said = ""  # the verdict told so far
        self.moved = False  # a switch moved the draws the verdict told
        self.switched_away = False  # a pool other than the script's own arrangement served the loader
        self.worker_draws: Tuple[str, ...] = ()  # streams the script's own workers draw from as they load
        self.worker_draws_moved = False

    def inherit(self, old: "RandomnessWatch") -> None:
        """The loader built again at its place: what was seen and said of the streams goes on."""
        self.said, self.moved, self.switched_away = old.said, old.moved, old.switched_away

    def after_batch(self, pool: "Pool") -> None:
        """The script's random streams after the pool's batch: draws its loading made, and where."""
        ol = self.ol
        ol.draws.end(in_main=not pool.workers, own=pool.config == ol.script_config and not self.switched_away)
        if pool.draws is not None:
            self._workers_drew(pool.draws.streams())
        self._say()

    def _workers_drew(self, streams: Tuple[str, ...]) -> None:
        """Draws a pool's workers made as they loaded: the script's own workers' augmentation; or,
        for a script written with 0 workers, its loading's draws, moved out of its process (begun
        after the checks before the first switch): seen late, and said."""
        if not streams:
            return
        if self.own_workers:
            self.worker_draws = self.worker_draws or streams
        else:
            self.ol.draws.loading |= set(streams)

    def _say(self) -> None:
        ol, tuning = self.ol, self.ol.tuning
        if self.worker_draws and self.switched_away and not self.worker_draws_moved:
            self.worker_draws_moved = True
            tuning.randomness(ol, "rng_workers", self.worker_draws, moved=True)
        verdict = ol.draws.verdict()
        if not verdict:
            return
        if verdict != self.said:
            self.said = verdict
            tuning.randomness(ol, verdict, ol.draws.streams(), moved=self.switched_away)
            self.moved = self.switched_away
            if not tuning.allow_rng_change:
                ol.hold(verdict)
        elif self.switched_away and not self.moved:
            self.moved = True
            tuning.randomness(ol, verdict, ol.draws.streams(), moved=True)
