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

The hot path is :meth:`StepRecorder.batch`: two clock reads, a few additions
and one list append per batch, a couple of microseconds in all.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional

from feedprof.record.buffer import DecimatingBuffer
from feedprof.record.clock import MONOTONIC
from feedprof.store import EpochLog, LoaderRecord, StepLog

DEFAULT_WARMUP_BATCHES = 5
STEP_CAPACITY = 8192  # records per loader (~1 MB); halves resolution when full
EPOCH_CAPACITY = 1024


def _merge_steps(a: tuple, b: tuple) -> tuple:
    return (b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3])


def _merge_epochs(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4])


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
    ):
        self.loader_id = loader_id
        self.framework = framework
        self.name = name
        self.origin_s = origin_s
        self.warmup_batches = warmup_batches
        self.info: dict = {}  # site, dataset, batch_size, config... set by whoever built the loader
        self.gap_is_teardown = False  # count the time between epochs as the loader's (Keras: see frameworks/)
        self.batches = 0
        self.deliveries = 0  # calls of batch(): one can carry several steps (Keras steps_per_execution)
        self.warmup_left = warmup_batches
        self.warmup_s = 0.0
        self.steady_batches = 0
        self.steady_wall_s = 0.0
        self.steady_wait_s = 0.0
        self.t_steady_start: Optional[float] = None  # delivery time of the batch before the first steady step
        self.t_last: Optional[float] = None
        self._steps: DecimatingBuffer = DecimatingBuffer(step_capacity, _merge_steps)
        self._epochs: DecimatingBuffer = DecimatingBuffer(EPOCH_CAPACITY, _merge_epochs)
        self._t_iter: Optional[float] = None
        self._t_prev: Optional[float] = None
        self._epoch: Optional[list] = None  # [t_start, 1, first_batch_s, n_batches, teardown_s] of the open epoch

    # -- the hot path -----------------------------------------------------

    def epoch_started(self, t_s: float) -> None:
        if self.gap_is_teardown and self._epoch is not None and self.t_last is not None:
            # the loader's own end of epoch happens between the last batch and now
            self._epoch[4] += max(0.0, t_s - self.t_last)
        self._close_epoch()
        self._t_iter = t_s
        self._t_prev = None

    def batch(self, t_req_s: float, t_got_s: float, n_steps: int = 1) -> None:
        """``n_steps`` > 1: several steps ran since the last delivery, timed as one
        (a fit callback under steps_per_execution); the first of an epoch counts
        as start-up with them."""
        self.batches += n_steps
        self.deliveries += 1
        self.t_last = t_got_s
        prev = self._t_prev
        self._t_prev = t_got_s
        if prev is None:  # first batch of an epoch: start-up, not a step
            t_iter = self._t_iter if self._t_iter is not None else t_req_s
            self._epoch = [t_iter, 1, t_got_s - t_iter, n_steps, 0.0]
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
        self._steps.append((t_got_s, n_steps, wait, wall))

    def epoch_teardown(self, seconds: float) -> None:
        """Time spent ending the epoch on the loader's side (stopping its workers):
        a per-epoch cost like start-up (tf_keras stalls ~5 s here with workers)."""
        if self._epoch is not None:
            self._epoch[4] += seconds

    # -- snapshots --------------------------------------------------------

    def _close_epoch(self) -> None:
        if self._epoch is not None:
            self._epochs.append(tuple(self._epoch))
            self._epoch = None

    def snapshot(self) -> LoaderRecord:
        o = self.origin_s
        steps = self._steps.items()
        epochs = self._epochs.items() + ([tuple(self._epoch)] if self._epoch is not None else [])
        info = self.info
        return LoaderRecord(
            loader_id=self.loader_id,
            framework=self.framework,
            name=self.name or info.get("site", ""),
            site=info.get("site", ""),
            call_chain=tuple(info.get("call_chain", ())),
            ordinal=int(info.get("ordinal", 0)),
            instances=int(info.get("instances", 1)),
            wait_observable=bool(info.get("wait_observable", True)),
            config_sites=tuple(info.get("config_sites", ())),
            dataset=info.get("dataset", ""),
            batch_size=info.get("batch_size"),
            batches_per_epoch=info.get("batches_per_epoch"),
            config=dict(info.get("config", {})),
            script_config=dict(info.get("script_config", {})),
            injected=bool(info.get("injected", False)),
            replayed=bool(info.get("replayed", False)),
            batches=self.batches,
            warmup_batches=self.warmup_batches - self.warmup_left,
            warmup_s=self.warmup_s,
            steps=StepLog(
                t_end_s=tuple(s[0] - o for s in steps),
                n_steps=tuple(s[1] for s in steps),
                wait_s=tuple(s[2] for s in steps),
                wall_s=tuple(s[3] for s in steps),
            ),
            epochs=EpochLog(
                t_start_s=tuple(e[0] - o for e in epochs),
                n_epochs=tuple(e[1] for e in epochs),
                first_batch_s=tuple(e[2] for e in epochs),
                n_batches=tuple(e[3] for e in epochs),
                teardown_s=tuple(e[4] for e in epochs),
            ),
        )


AfterBatch = Callable[["WatchedIterator", Any], None]


class WatchedIterator:
    """Times ``__next__`` of the wrapped iterator; otherwise transparent.

    ``after(iterator, batch)``, when set, runs after each batch (the trial
    controller ends the window there); it may set ``iterator.after = None``
    to take itself off the hot path.
    """

    __slots__ = ("_it", "_next", "recorder", "after", "_now")

    def __init__(self, it: Iterator, rec: StepRecorder, after: Optional[AfterBatch] = None,
                 now: Callable[[], float] = MONOTONIC.now_s):
        self._it = it
        self._next = it.__next__
        self.recorder = rec
        self.after = after
        self._now = now

    def __iter__(self) -> "WatchedIterator":
        return self

    def __next__(self) -> Any:
        now = self._now
        t_req = now()
        try:
            batch = self._next()
        except StopIteration:  # the loader ending its epoch (shutting workers down) is its cost
            self.recorder.epoch_teardown(now() - t_req)
            raise
        self.recorder.batch(t_req, now())
        if self.after is not None:
            self.after(self, batch)
        return batch

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name: str) -> Any:  # e.g. a DataLoader iterator's private helpers
        return getattr(self._it, name)


def learn_batch_size(it: WatchedIterator, batch: Any) -> None:
    """One-shot ``after`` hook: read the batch size off the first batch."""
    if it.recorder.info.get("batch_size") is None:
        it.recorder.info["batch_size"] = infer_batch_size(batch)
    it.after = None


class Watched:
    """An iterable whose every iteration (epoch) is timed by one recorder."""

    def __init__(self, iterable: Iterable, rec: StepRecorder,
                 now: Callable[[], float] = MONOTONIC.now_s):
        self._iterable = iterable
        self.recorder = rec
        self._now = now

    def __iter__(self) -> WatchedIterator:
        self.recorder.epoch_started(self._now())
        it = iter(self._iterable)
        after = learn_batch_size if self.recorder.info.get("batch_size") is None else None
        return WatchedIterator(it, self.recorder, after=after, now=self._now)

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
