"""What the script's sampler gave in one epoch and what the loop received, batch by batch:
the check behind "the same samples in the same order" (docs/online.md).

NOTE [ The order check ]

    the sampler gives batch k (Feed.pull) ─► pending: [k, k+1, ...]
    the loop receives a batch ─► the pool's record of what it took says which indices it
        holds (taken[had - 1]: torch delivers in the order it sent, and its own counters
        are compared with feedprof's at every batch, torch_pool.Pool.accounting)
        ─► it must be pending's first, the very object the sampler gave
    the epoch ends ─► exhausted: nothing may be left pending; left (the loop broke out) or
        the run's end: what was received is a prefix of what was given

Each side has a digest (8 bytes of BLAKE2b over the indices received and the same number
given), written per loader, per epoch and per iterator; ``same`` is true only where every
batch matched and no counter disagreed in that epoch.
"""
from __future__ import annotations

import collections
import hashlib
from array import array
from typing import Any, Deque, Dict

EXHAUSTED, LEFT, RUN_END = "exhausted", "left", "run_end"


def index_bytes(batch: Any) -> bytes:
    """A batch of indices (a list of ints, or one index at batch_size=None) as bytes."""
    try:
        return array("q", batch if isinstance(batch, (list, tuple, range)) else [batch]).tobytes()
    except (TypeError, OverflowError):
        return repr(batch).encode()


class EpochLedger:
    def __init__(self, epoch: int, iterator: int):
        self.epoch = epoch
        self.iterator = iterator  # which iter() of the loader this epoch is (1: its first)
        self.pending: Deque[Any] = collections.deque()
        self.given = 0
        self.received = 0
        self.problem = ""  # the first thing that did not match
        self.closed = False
        self._given_hash = hashlib.blake2b(digest_size=8)
        self._received_hash = hashlib.blake2b(digest_size=8)

    def give(self, batch: Any) -> None:
        self.pending.append(batch)
        self.given += 1

    def receive(self, batch: Any) -> None:
        self.received += 1
        data = index_bytes(batch)
        self._received_hash.update(data)
        if not self.pending:
            self.fail(f"batch {self.received} reached the loop but the sampler had not given it")
            return
        expected = self.pending.popleft()
        if expected is not batch:
            data_expected = index_bytes(expected)
            self._given_hash.update(data_expected)
            if data_expected != data:
                self.fail(f"batch {self.received} was not the sampler's batch {self.received}")
            return
        self._given_hash.update(data)

    def fail(self, problem: str) -> None:
        if not self.problem:
            self.problem = problem

    def close(self, ended: str) -> Dict[str, Any]:
        """The epoch's check, as the event online_order carries it."""
        self.closed = True
        if ended == EXHAUSTED and self.pending:
            self.fail(f"{len(self.pending)} batch(es) the sampler gave never reached the loop")
        return dict(epoch=self.epoch, iterator=self.iterator, given_batches=self.given,
                    delivered_batches=self.received, given_digest=self._given_hash.hexdigest(),
                    delivered_digest=self._received_hash.hexdigest(), same=not self.problem,
                    ended=ended, problem=self.problem)
