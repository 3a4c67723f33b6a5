"""Online mode for a torch ``DataLoader``: change its workers mid-epoch, invisibly.

NOTE [ Switching a DataLoader's workers mid-epoch ]

    script: for batch in loader:          (the patched __iter__, online mode)
      OnlineEpoch(loader) ─► the draws the script's own loader makes at iter(): one base
                             seed from loader.generator (or torch's global RNG); none on a
                             persistent loader's later epochs
                          ─► order = iter(loader._index_sampler): the epoch's batches, drawn
                             lazily and once, where the unmodified run draws them
      Feed:   batches handed back first, then `order`; each Pool pulls from it and
              remembers what it took (Segment.taken)
      Pool:   a DataLoader iterator built from a copy of the loader whose batch sampler
              is the Feed and whose generator is private (the script's random streams
              are never drawn); started anew each epoch unless the script's own loader
              keeps its workers (persistent_workers), as the script's own loader does
      switch, at a batch boundary: what the old pool took but did not deliver
              (taken[delivered:], in order) goes back to the front of the Feed, the
              old workers are shut down, the new pool starts on the Feed

The loop therefore sees exactly the batches, in the order, that the script's
own loader would have given it: none lost, none repeated. A worker pool that
breaks (a worker killed, a hang) hands its batches back the same way and the
epoch goes on with a safe config; an error raised by the user's dataset is
raised again from the script's own config, as it would be without feedprof.
"""
from __future__ import annotations

import collections
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from feedprof.frameworks.torch_pool import Pool, failure_kind


def online_capable(loader: Any) -> Optional[str]:
    """None if the loader can switch mid-epoch, else why not (a reason code)."""
    import torch.utils.data as tud

    if isinstance(loader.dataset, tud.IterableDataset):
        return "iterable_dataset"  # the worker count decides its sharding
    if not getattr(loader, "in_order", True):
        return "out_of_order"  # delivered batches are not a prefix of those taken
    if type(loader)._get_iterator is not tud.DataLoader._get_iterator:
        return "own_iterator"  # a subclass with its own iterator (StatefulDataLoader)
    return None


class Segment:
    """What one pool pulled from the feed in one epoch, in order."""

    def __init__(self, feed: "Feed"):
        self.feed = feed
        self.taken: List[Any] = []

    def __iter__(self) -> "Segment":
        return self

    def __next__(self) -> Any:
        feed = self.feed
        if feed.handed_back:
            batch = feed.handed_back.popleft()
        else:
            try:
                batch = next(feed.order)  # StopIteration ends the epoch, as always
            except StopIteration:
                raise
            except Exception as exc:  # the script's sampler failed: its error, raised as the script's
                feed.failed = exc
                raise
        self.taken.append(batch)
        return batch


class Feed:
    """The epoch's batch indices, shared by the pools that serve it: what a
    pool's DataLoader iterator sees as its batch sampler."""

    def __init__(self, length: int):
        self.length = length
        self.order: Any = iter(())
        self.handed_back: Deque[Any] = collections.deque()
        self.segment: Optional[Segment] = None
        self.failed: Optional[BaseException] = None  # the script's own sampler raised this

    def new_epoch(self, order: Any) -> None:
        self.order = order
        self.handed_back.clear()
        self.failed = None

    def hand_back(self, batches: List[Any]) -> None:
        self.handed_back.extendleft(reversed(batches))

    def __iter__(self) -> Segment:
        self.segment = Segment(self)
        return self.segment

    def __len__(self) -> int:
        return self.length


def draw_base_seed(loader: Any) -> int:
    """The one number the script's own ``iter(loader)`` draws (torch's
    _BaseDataLoaderIter): drawn here, so the script's streams move as they would."""
    import torch

    return int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())


class OnlineLoader:
    """One DataLoader in online mode: its feed, the pool serving it, and the
    draws its own iterators would make. ``tuning`` (trial/online_child.py) says
    which config to serve and is told every batch."""

    def __init__(self, loader: Any, tuning: Any, loader_id: int, script_config: Dict[str, Any],
                 chain: Tuple[str, ...] = ()):
        self.loader = loader
        self.chain = tuple(chain)  # where the script builds it: a loader rebuilt there takes its place
        self.tuning = tuning
        self.loader_id = loader_id
        from feedprof.frameworks.torch import effective

        self.script_config = effective(script_config)  # decisions come in this form too
        self.own_persistent = bool(script_config.get("persistent_workers")) and bool(script_config.get("num_workers"))
        self.own_timeout_s = float(loader.timeout or 0)
        try:
            self.length = len(loader._index_sampler)
        except (TypeError, NotImplementedError):  # a sampler without __len__
            self.length = 0
        self.feed = Feed(self.length)
        self.pool: Optional[Pool] = None
        self.starting: Dict[str, Any] = self.script_config
        self.served: Optional[Dict[str, Any]] = None  # the config of the last pool started
        self.pool_epoch = 0  # the epoch the pool's segment belongs to
        self.epochs = 0
        self.base_seed = 0
        self.pools_this_epoch = 0

    def epoch(self) -> "OnlineEpoch":
        """What the script's ``iter(loader)`` returns."""
        order = iter(self.loader._index_sampler)  # (before the seed, as torch's iterator does)
        if not (self.own_persistent and self.epochs):
            self.base_seed = draw_base_seed(self.loader)
        self.epochs += 1
        self.pools_this_epoch = 0
        self.feed.new_epoch(order)
        if self.script_config.get("num_workers"):
            # the script's own workers would start fetching now: the sampler draws here
            try:
                self.feed.handed_back.append(next(self.feed.order))
            except StopIteration:
                pass
        return OnlineEpoch(self)

    def serve(self, config: Dict[str, Any]) -> Pool:
        """The pool for this epoch, built or switched to ``config``."""
        pool = self.pool
        same = pool is not None and pool.config == config
        if same and (self.pool_epoch == self.epochs or self.own_persistent):
            if self.pool_epoch != self.epochs:
                self.pool_epoch = self.epochs
                pool.new_epoch(self.feed)  # (its segment is this epoch's even if the reset fails)
            return pool
        # A new epoch of a loader without persistent workers starts fresh workers, as the script's
        # own loader does: they see the dataset as the main process left it (set_epoch() and the like).
        restart = self.served == config
        self._drop_pool()
        self.starting = config  # (a pool that fails to start is that config's failure)
        before = self.feed.segment
        try:
            self.pool = Pool(self.loader, self.feed, config, self._pool_seed(), self.own_timeout_s)
        except BaseException:
            started = self.feed.segment  # what its workers took before it failed: served by the next pool
            if started is not None and started is not before:
                self.feed.hand_back(started.taken)
            raise
        self.pool_epoch, self.served = self.epochs, config
        self.tuning.switched(self, config, restart=restart)
        return self.pool

    def _pool_seed(self) -> int:
        """The epoch's first pool seeds its workers as the script's own iterator would (base seed
        + worker id); a later pool in the same epoch gets seeds of its own, so no worker stream
        starts over."""
        k, self.pools_this_epoch = self.pools_this_epoch, self.pools_this_epoch + 1
        return (self.base_seed + k * 0x9E3779B97F4A7C15) & 0x7FFF_FFFF_FFFF_FFFF if k else self.base_seed

    def close(self) -> None:
        """The run is over: no worker outlives it."""
        self._drop_pool()

    def epoch_ended(self) -> None:
        """The epoch's last batch was delivered: a loader without persistent workers shuts its
        workers down now, as the script's own does (the next epoch starts fresh ones)."""
        self.tuning.epoch_ended(self)
        if not self.own_persistent:
            self._drop_pool()

    def _drop_pool(self, again: int = 0) -> None:
        pool, self.pool = self.pool, None
        if pool is None:
            return
        if self.pool_epoch == self.epochs:  # taken this epoch, not delivered: the next pool serves them
            self.feed.hand_back(pool.undelivered(again))
        try:
            pool.close()
        except (OSError, RuntimeError, AssertionError):  # a broken pool: its group is reaped at the end
            pass

    def recover(self, exc: BaseException, now: Callable[[], float]) -> Any:
        """A pool failed mid-epoch: a kill or a hang goes back to a safe config;
        the dataset's own error is raised again from the script's own config,
        exactly as the unmodified run raises it."""
        if self.feed.failed is not None:  # the script's sampler: its error, as without feedprof
            raise exc
        kind = failure_kind(exc)
        failed = self.pool.config if self.pool is not None else self.starting
        if kind is None and failed == self.script_config:
            raise exc
        signals = self.pool.worker_signals() if self.pool is not None else []
        self.tuning.failed(self, failed, kind or "error", exc, signals)
        fallback = self.script_config if kind is None else self.tuning.safe_config(self, failed)
        # an error raised in a worker is the batch the loop had: fetched again with the script's settings
        self._drop_pool(again=1 if kind is None else 0)
        return self.serve(fallback).next_batch(None, now)


class OnlineEpoch:
    """The iterator the script gets for one epoch of an online loader."""

    def __init__(self, ol: OnlineLoader):
        self.ol = ol

    def __iter__(self) -> "OnlineEpoch":
        return self

    def __len__(self) -> int:
        return self.ol.length

    def __next__(self) -> Any:
        ol, tuning = self.ol, self.ol.tuning
        now = tuning.now
        t_req, cpu0_s = now(), time.thread_time()
        failure: Optional[Exception] = None
        try:
            pool = ol.serve(tuning.config_for(ol))  # a switch's cost is this batch's wait
            batch = pool.next_batch(tuning.hang_limit_s(ol, pool.config), now)
        except StopIteration:
            ol.epoch_ended()
            raise
        except Exception as exc:  # noqa: BLE001 - classified by recover(); the user's own is raised again
            failure = exc
        if failure is not None:  # (outside the handler: a re-raised error carries no feedprof context)
            try:
                batch = ol.recover(failure, now)
            except StopIteration:
                ol.epoch_ended()
                raise
        tuning.delivered(ol, t_req, now(), batch, time.thread_time() - cpu0_s)
        return batch
