"""The compute-ceiling iterator: one real batch handed out again and again."""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

from feedprof.record.steps import StepRecorder


class ReplayCache:
    """The batch a ceiling trial replays, shared by every epoch's iterator."""

    batch: Any = None
    filled = False


class ReplayIterator:
    """Compute ceiling: hand out one real batch again and again, so loading
    costs nothing. The same object is returned each step (no copy): the
    ceiling is an upper bound, and a copy would be a loading cost."""

    __slots__ = ("recorder", "after", "_make", "_cache", "_left", "_now")

    def __init__(self, rec: StepRecorder, make_iter: Callable[[], Iterator], cache: ReplayCache,
                 n_batches: Optional[int], after: Callable, now: Callable[[], float]):
        self.recorder = rec
        self.after = after
        self._make = make_iter
        self._cache = cache
        self._left = n_batches
        self._now = now

    def __iter__(self) -> "ReplayIterator":
        return self

    def __next__(self) -> Any:
        t_req = self._now()
        if self._left is not None:
            if self._left <= 0:
                raise StopIteration
            self._left -= 1
        cache = self._cache
        if not cache.filled:
            real = self._make()
            cache.batch = next(real)
            cache.filled = True
            del real  # shuts its workers down; later epochs never build one
        self.recorder.batch(t_req, self._now())
        if self.after is not None:
            self.after(self, cache.batch)
        return cache.batch

    def __len__(self) -> int:
        return self._left or 0
