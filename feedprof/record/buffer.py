"""Fixed-memory time series for day-long runs.

NOTE [ Bounded recording ]

    capacity C records   ──full──►  merge neighbours pairwise  ──►  C/2 records,
    stride 1 item/record                                            stride 2

A :class:`DecimatingBuffer` keeps the whole run at a resolution that halves
each time it fills, instead of a ring buffer that would forget the start. The
caller's ``merge`` decides what "neighbours merged" means: step records are
summed (nothing is lost from totals), sampler rows keep the earlier reading
(a thinned series; exact peaks are tracked beside it, see sampler.py).
Items arriving while the stride is ``s`` are merged ``s`` at a time before they
are stored, so every stored record covers the same number of items.
"""
from __future__ import annotations

from typing import Callable, Generic, List, Optional, TypeVar

T = TypeVar("T")


class DecimatingBuffer(Generic[T]):
    __slots__ = ("capacity", "stride", "_merge", "_items", "_pending", "_pending_n")

    def __init__(self, capacity: int, merge: Callable[[T, T], T]):
        if capacity < 2 or capacity % 2:
            raise ValueError(f"capacity must be an even number >= 2, got {capacity}")
        self.capacity = capacity
        self.stride = 1
        self._merge = merge
        self._items: List[T] = []
        self._pending: Optional[T] = None
        self._pending_n = 0

    def append(self, item: T) -> None:
        if self.stride > 1:
            self._pending = item if self._pending is None else self._merge(self._pending, item)
            self._pending_n += 1
            if self._pending_n < self.stride:
                return
            item, self._pending, self._pending_n = self._pending, None, 0
        items = self._items
        items.append(item)
        if len(items) >= self.capacity:
            merge = self._merge
            self._items = [merge(items[i], items[i + 1]) for i in range(0, len(items), 2)]
            self.stride *= 2

    def items(self) -> List[T]:
        """Stored records plus the partly filled one, oldest first."""
        if self._pending is None:
            return list(self._items)
        return self._items + [self._pending]

    def __len__(self) -> int:
        return len(self._items) + (self._pending is not None)
