"""The batch indices of one online loader's epoch, shared by the worker pools that serve it
(frameworks/torch_online.py): what a pool's DataLoader iterator sees as its batch sampler.
Batches a pool took and never delivered are handed back and served first by the next."""
from __future__ import annotations

import collections
from typing import Any, Deque, Iterator, List, Optional

from feedprof.frameworks.torch_ledger import EpochLedger
from feedprof.frameworks.torch_rng import DrawWatch


class Segment:
    """What one pool pulled from the feed in one epoch, in order."""

    def __init__(self, feed: "Feed"):
        self.feed = feed
        self.taken: List[Any] = []

    def __iter__(self) -> "Segment":
        return self

    def __next__(self) -> Any:
        feed = self.feed
        batch = feed.handed_back.popleft() if feed.handed_back else feed.pull()
        self.taken.append(batch)
        return batch


class Feed:
    def __init__(self, length: int, draws: Optional[DrawWatch] = None):
        self.length = length
        self.order: Iterator[Any] = iter(())
        self.handed_back: Deque[Any] = collections.deque()
        self.segment: Optional[Segment] = None
        self.failed: Optional[BaseException] = None  # the script's own sampler raised this
        self.draws = draws if draws is not None else DrawWatch()
        self.ledger: Optional[EpochLedger] = None

    def new_epoch(self, order: Iterator[Any], ledger: Optional[EpochLedger] = None) -> None:
        self.order = order
        self.handed_back.clear()
        self.failed = None
        self.ledger = ledger

    def pull(self) -> Any:
        """The script's sampler's next batch (its StopIteration ends the epoch, as always)."""
        ledger = self.ledger
        first = ledger is None or ledger.given == 0
        try:
            batch = self.draws.step(self._next, first)
        except StopIteration:
            raise
        except Exception as exc:  # the script's sampler failed: its error, raised as the script's
            self.failed = exc
            raise
        if ledger is not None:
            ledger.give(batch)
        return batch

    def _next(self) -> Any:
        return next(self.order)

    def hand_back(self, batches: List[Any]) -> None:
        self.handed_back.extendleft(reversed(batches))

    def __iter__(self) -> Segment:
        self.segment = Segment(self)
        return self.segment

    def __len__(self) -> int:
        return self.length
