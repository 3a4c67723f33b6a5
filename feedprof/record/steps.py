"""Data-wait timer: how long the training loop is blocked getting each batch.

NOTE [ What one step is ]

    __iter__()          next()            next()            next()
       │  first batch   │   ─ compute ─   │wait│ ─ compute ─ │wait│
       t_iter ───────► t_got0 ─────────► t_req1 ─► t_got1 ─────► t_req2 ─► t_got2
       └ epoch start-up ┘                 └──── wall of step 1 ────┘
                                                    wait_s = t_got - t_req
                                                    wall_s = t_got - previous t_got

The first batch of every epoch is start-up (worker launch, first fetch): it is
kept per epoch, because start-up is what ``persistent_workers`` saves, but it
is not a steady-state step. The first ``warmup_batches`` steps after that are
excluded too (pipelines filling, allocator and JIT warm-up). Everything else
is a steady-state step, stored in a DecimatingBuffer so a day-long run keeps
fixed memory (records are summed pairwise when it fills).

The hot path is :meth:`StepRecorder.batch`: two clock reads and two reads of
the thread's CPU clock (its own loading work inside ``__next__``: receiving a
batch, or all of the loading at 0 workers), a few additions and one list
append per batch, a couple of microseconds in all (tests/test_steps.py counts
them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from feedprof import defaults
from feedprof.record.buffer import DecimatingBuffer
from feedprof.record.clock import MONOTONIC
from feedprof.record.digest import batch_digest
from feedprof.store import EpochLog, LoaderRecord, StepLog

DEFAULT_WARMUP_BATCHES = defaults.PROFILE_WINDOW.warmup_batches
STEP_CAPACITY = 8192  # records per loader (~1 MB); halves resolution when full
EPOCH_CAPACITY = 1024


def _merge_steps(a: tuple, b: tuple) -> tuple:
    return (b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4])


def _merge_epochs(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4], a[5] + b[5], a[6] + b[6])


@dataclass
class LoaderInfo:
    """What is known of a loader where it is built (a framework adapter, or
    ``describe_loader`` for ``prof.watch``): mutable until its first epoch."""

    config: Dict[str, Any] = field(default_factory=dict)  # knobs in effect
    script_config: Dict[str, Any] = field(default_factory=dict)  # knobs the script asked for
    dataset: str = ""
    batch_size: Optional[int] = None
    batches_per_epoch: Optional[int] = None
    site: str = ""  # where users know it is built, if not the innermost user frame (Keras)
    config_sites: Tuple[str, ...] = ()  # where the knobs are set, if not at the site (tf.data: map calls)
    settings_call: str = ""  # a library builds the loader from this call's knobs ("TrainingArguments")
    in_flight: int = 0  # batches the loader holds ready or in the making (queue, prefetch)
    wait_observable: bool = True  # False: batches are pulled inside a framework's runtime
    gap_is_teardown: bool = False  # the time between epochs is the loader's (Keras stops its workers there)
    backend: str = ""  # Keras's backend
    iterable: bool = False  # an IterableDataset: what each worker yields is up to the dataset
    shuffle_rng: str = ""  # a shuffling loader's random source: "global", "loader", "sampler" (torch.shuffle_rng)
    own_rng: Tuple[str, ...] = ()  # random generators its dataset holds (torch.own_rng)
    # Did the loader's workers call get_worker_info()? Asked when the record is
    # written (the workers run after construction); None: not observable.
    worker_info_asked: Optional[Callable[[], Optional[bool]]] = None
    # tf.data: the pipeline's settings over the run (frameworks/tfdata_autotune.py), read when the record is
    # written; given the run's origin (its readings' times count from it)
    autotune: Optional[Callable[[float], Tuple[Any, ...]]] = None


@dataclass
class Binding:
    """Where a recorder's loader came from, as the trial controller saw it."""

    site: str = ""
    call_chain: Tuple[str, ...] = ()
    built_in: Tuple[str, ...] = ()  # library frames that built it (see LoaderRecord)
    ordinal: int = 0  # loaders alive together at the same call chain, counted from 0
    instances: int = 1  # loader objects this record spans (rebuilt every epoch)
    injected: bool = False
    replayed: bool = False  # compute ceiling: one cached batch replayed
    is_target: Optional[bool] = None  # None: no target was named


class StepRecorder:
    """Mutable per-loader recorder. Feed it times; take an inert snapshot."""

    def __init__(
        self,
        loader_id: int,
        framework: str = "iterable",
        name: str = "",
        warmup_batches: int = DEFAULT_WARMUP_BATCHES,
        step_capacity: int = STEP_CAPACITY,
        origin_s: float = 0.0,
        info: Optional[LoaderInfo] = None,
        binding: Optional[Binding] = None,
    ):
        self.loader_id = loader_id
        self.framework = framework
        self.name = name
        self.origin_s = origin_s
        self.warmup_batches = warmup_batches
        self.info = info or LoaderInfo()
        self.binding = binding or Binding(site=self.info.site)
        self.batches = 0
        self.deliveries = 0  # calls of batch(): one can carry several steps (Keras steps_per_execution)
        self.warmup_left = warmup_batches
        self.warmup_s = 0.0
        self.steady_batches = 0
        self.steady_wall_s = 0.0
        self.steady_wait_s = 0.0
        self.t_steady_start: Optional[float] = None  # delivery time of the batch before the first steady step
        self.t_last: Optional[float] = None
        # Where a measured window starts (the trial controller moves it past a
        # draining queue): steady batches before it, and its time.
        self.window_from_batches = 0
        self.window_from_s: Optional[float] = None
        self._steps: DecimatingBuffer = DecimatingBuffer(step_capacity, _merge_steps)
        self._epochs: DecimatingBuffer = DecimatingBuffer(EPOCH_CAPACITY, _merge_epochs)
        self._t_iter: Optional[float] = None
        self._t_prev: Optional[float] = None
        # The open epoch: [t_start, 1, first_batch_s, n_batches, teardown_s, between_s, n_between]
        self._epoch: Optional[list] = None
        self._t_stop: Optional[float] = None  # when the open epoch's iterator ended (StopIteration)
        self.epochs_started = 0
        self.cpu_measured = True  # every steady step came with the thread's CPU time in __next__
        self.digests: List[str] = []  # of the first epoch's first batches (see fingerprint)
        self.digests_wanted = 0

    # -- the hot path -----------------------------------------------------

    def epoch_started(self, t_s: float) -> None:
        if self.info.gap_is_teardown and self._epoch is not None and self.t_last is not None:
            # the loader's own end of epoch happens between the last batch and now
            self._epoch[4] += max(0.0, t_s - self.t_last)
        elif self._epoch is not None and self._t_stop is not None:
            self._epoch[5] += max(0.0, t_s - self._t_stop)
            self._epoch[6] += 1
        self._t_stop = None
        self._close_epoch()
        self._t_iter = t_s
        self._t_prev = None
        self.epochs_started += 1

    def batch(self, t_req_s: float, t_got_s: float, n_steps: int = 1, cpu_s: Optional[float] = None) -> None:
        """``n_steps`` > 1: several steps ran since the last delivery, timed as one
        (a fit callback under steps_per_execution); the first of an epoch counts
        as start-up with them. ``cpu_s``: the training thread's CPU time between the
        two (None: not measured, as where a callback times the steps)."""
        self.batches += n_steps
        self.deliveries += 1
        self.t_last = t_got_s
        prev = self._t_prev
        self._t_prev = t_got_s
        if prev is None:  # first batch of an epoch: start-up, not a step
            t_iter = self._t_iter if self._t_iter is not None else t_req_s
            self._epoch = [t_iter, 1, t_got_s - t_iter, n_steps, 0.0, 0.0, 0]
            return
        self._epoch[3] += n_steps
        wall = t_got_s - prev
        if self.warmup_left > 0:
            self.warmup_left = max(0, self.warmup_left - n_steps)
            self.warmup_s += wall
            return
        if self.t_steady_start is None:
            self.t_steady_start = prev
        wait = t_got_s - t_req_s
        self.steady_batches += n_steps
        self.steady_wall_s += wall
        self.steady_wait_s += wait
        if cpu_s is None:
            self.cpu_measured = False
        self._steps.append((t_got_s, n_steps, wait, wall, cpu_s or 0.0))

    def epoch_teardown(self, seconds: float) -> None:
        """Time spent ending the epoch on the loader's side (stopping its workers):
        a per-epoch cost like start-up (tf_keras stalls ~5 s here with workers)."""
        if self._epoch is not None:
            self._epoch[4] += seconds

    def epoch_ended(self, t_req_s: float, t_end_s: float) -> None:
        """The iterator said StopIteration: asked at ``t_req_s``, told at ``t_end_s``."""
        self.epoch_teardown(t_end_s - t_req_s)
        self._t_stop = t_end_s

    def fingerprint(self, batch: Any) -> None:
        """Keep a digest of each of the first epoch's first ``digests_wanted``
        batches (an IterableDataset's: are they repeated once per worker?)."""
        if self.epochs_started == 1 and len(self.digests) < self.digests_wanted:
            self.digests.append(batch_digest(batch))
        else:
            self.digests_wanted = 0  # done: off the hot path

    # -- snapshots --------------------------------------------------------

    def _close_epoch(self) -> None:
        if self._epoch is not None:
            self._epochs.append(tuple(self._epoch))
            self._epoch = None

    def window_start_s(self) -> Optional[float]:
        return self.window_from_s if self.window_from_s is not None else self.t_steady_start

    def window_batches(self) -> int:
        return self.steady_batches - self.window_from_batches

    def step_log(self) -> StepLog:
        """The steady-state steps so far, times relative to the origin."""
        o = self.origin_s
        steps = self._steps.items()
        return StepLog(t_end_s=tuple(s[0] - o for s in steps), n_steps=tuple(s[1] for s in steps),
                       wait_s=tuple(s[2] for s in steps), wall_s=tuple(s[3] for s in steps),
                       cpu_s=tuple(s[4] for s in steps) if self.cpu_measured else ())

    def snapshot(self) -> LoaderRecord:
        o = self.origin_s
        epochs = self._epochs.items() + ([tuple(self._epoch)] if self._epoch is not None else [])
        info, where = self.info, self.binding
        return LoaderRecord(
            loader_id=self.loader_id,
            framework=self.framework,
            name=self.name or where.site,
            site=where.site,
            call_chain=tuple(where.call_chain),
            built_in=tuple(where.built_in),
            ordinal=where.ordinal,
            instances=where.instances,
            wait_observable=info.wait_observable,
            config_sites=tuple(info.config_sites),
            settings_call=info.settings_call,
            dataset=info.dataset,
            batch_size=info.batch_size,
            batches_per_epoch=info.batches_per_epoch,
            in_flight=info.in_flight,
            config=dict(info.config),
            script_config=dict(info.script_config),
            injected=where.injected,
            replayed=where.replayed,
            iterable=info.iterable,
            shuffle_rng=info.shuffle_rng,
            own_rng=tuple(info.own_rng),
            batch_digests=tuple(self.digests),
            worker_info_asked=info.worker_info_asked() if info.worker_info_asked is not None else None,
            autotune=tuple(info.autotune(o)) if info.autotune is not None else (),
            batches=self.batches,
            warmup_batches=self.warmup_batches - self.warmup_left,
            warmup_s=self.warmup_s,
            steps=self.step_log(),
            epochs=EpochLog(
                t_start_s=tuple(e[0] - o for e in epochs),
                n_epochs=tuple(e[1] for e in epochs),
                first_batch_s=tuple(e[2] for e in epochs),
                n_batches=tuple(e[3] for e in epochs),
                teardown_s=tuple(e[4] for e in epochs),
                between_s=tuple(e[5] for e in epochs),
                n_between=tuple(e[6] for e in epochs),
            ),
        )


AfterBatch = Callable[["WatchedIterator", Any], None]


class WatchedIterator:
    """Times ``__next__`` of the wrapped iterator; otherwise transparent.

    ``after(iterator, batch)``, when set, runs after each batch (the trial
    controller ends the window there); it may set ``iterator.after = None``
    to take itself off the hot path.
    """

    __slots__ = ("_it", "_next", "recorder", "after", "_now", "_cpu")

    def __init__(self, it: Iterator, rec: StepRecorder, after: Optional[AfterBatch] = None,
                 now: Callable[[], float] = MONOTONIC.now_s, cpu: Callable[[], float] = MONOTONIC.thread_cpu_s):
        self._it = it
        self._next = it.__next__
        self.recorder = rec
        self.after = after
        self._now = now
        self._cpu = cpu

    def __iter__(self) -> "WatchedIterator":
        return self

    def __next__(self) -> Any:
        now, cpu = self._now, self._cpu
        c_req = cpu()
        t_req = now()
        try:
            batch = self._next()
        except StopIteration:  # the loader ending its epoch (shutting workers down) is its cost
            self.recorder.epoch_ended(t_req, now())
            raise
        t_got = now()
        self.recorder.batch(t_req, t_got, 1, cpu() - c_req)
        if self.after is not None:
            self.after(self, batch)
        return batch

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name: str) -> Any:  # e.g. a DataLoader iterator's private helpers
        return getattr(self._it, name)


def learn_batch_size(it: WatchedIterator, batch: Any) -> None:
    """One-shot ``after`` hook: read the batch size off the first batch."""
    if it.recorder.info.batch_size is None:
        it.recorder.info.batch_size = infer_batch_size(batch)
    it.after = None


class Watched:
    """An iterable whose every iteration (epoch) is timed by one recorder."""

    def __init__(self, iterable: Iterable, rec: StepRecorder,
                 now: Callable[[], float] = MONOTONIC.now_s, cpu: Callable[[], float] = MONOTONIC.thread_cpu_s):
        self._iterable = iterable
        self.recorder = rec
        self._now = now
        self._cpu = cpu

    def __iter__(self) -> WatchedIterator:
        self.recorder.epoch_started(self._now())
        it = iter(self._iterable)
        after = learn_batch_size if self.recorder.info.batch_size is None else None
        return WatchedIterator(it, self.recorder, after=after, now=self._now, cpu=self._cpu)

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._iterable, name)


def infer_batch_size(batch: Any) -> Optional[int]:
    """Leading dimension of the first array-like in a batch, if there is one."""
    for _ in range(4):  # descend a few levels of (x, y) / {"x": ...} nesting
        shape = getattr(batch, "shape", None)
        if shape is not None:
            try:
                return int(shape[0]) if len(shape) else None
            except (TypeError, IndexError):
                return None
        if isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        elif isinstance(batch, (list, tuple)) and batch:
            if not hasattr(batch[0], "shape") and not isinstance(batch[0], (list, tuple, dict)):
                return len(batch)  # a list of samples
            batch = batch[0]
        else:
            return None
    return None
