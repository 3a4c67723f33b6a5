"""Switching a loader's pools at batch boundaries, for any framework whose loader fetches
batches by index (contract.Pool): the epoch's feed, the pool serving it, the switch.

NOTE [ Switching pools at a batch boundary ]

    the framework's loader ─► start_epoch(order): the epoch's batch indices, drawn where and
                              as the unmodified loader draws them (never by feedprof)
      Feed:  indices handed back first, then `order`, each taken once
      Pool:  one per config (the loop's own thread, threads, processes); takes indices from
             the feed in order, delivers their batches in that order
      next batch: config = tuning.config_for(loader)
        same config ─► the pool's next batch
        another     ─► what the old pool took and never delivered goes back to the front of
                       the feed (in order), the old pool closes, the new one starts on the feed
      a pool that breaks (a worker killed, a hang) ─► its batches are handed back, the epoch goes
        on with the script's own config; an error raised by the dataset is raised again from
        the script's own config, as the unmodified run raises it
      end_epoch ─► the pool closes (a loader that restarts its workers every epoch)

So the loop receives each index of the epoch once, in the order drawn: none lost, none
repeated. What a closed pool had fetched ahead is fetched again (loading, not training,
is repeated). torch's map-style DataLoader has its own driver (torch_online.py).
"""
from __future__ import annotations

import collections
import time
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

from feedprof.store.codes import SwitchAt
from feedprof.frameworks.contract import OnlineLoader, Pool, Tuning


class PoolHung(Exception):
    """An explored pool delivered nothing for too long."""

    def __init__(self, waited_s: float):
        super().__init__(f"no batch for {waited_s:.1f} s")
        self.waited_s = waited_s


class PoolKilled(Exception):
    """A worker of the pool died (a signal: the OOM killer, a bus error)."""

    def __init__(self, signals: List[int]):
        super().__init__(f"a worker was killed by signal {', '.join(str(s) for s in signals)}")
        self.signals = signals


def failure_kind(exc: BaseException) -> Optional[str]:
    """killed | hung, for a pool's failure that is not the dataset's own error."""
    if isinstance(exc, PoolHung):
        return "hung"
    if isinstance(exc, PoolKilled):
        return "killed"
    return None


class Feed:
    """One epoch's batch indices, shared by the pools that serve it in turn."""

    def __init__(self) -> None:
        self.order: Iterator[Any] = iter(())
        self.handed_back: Deque[Any] = collections.deque()
        self.taken = 0  # indices taken this epoch (handed back ones again)

    def new_epoch(self, order: Iterator[Any]) -> None:
        self.order = order
        self.handed_back.clear()
        self.taken = 0

    def take(self) -> Any:
        """The next index (StopIteration: the epoch has no more)."""
        index = self.handed_back.popleft() if self.handed_back else next(self.order)
        self.taken += 1
        return index

    def hand_back(self, indices: List[Any]) -> None:
        self.handed_back.extendleft(reversed(indices))


OpenPool = Callable[[Dict[str, Any], Feed], Any]  # (config, feed) -> a contract.Pool serving it


class SwitchingLoader:
    """A loader whose batches are fetched by index, served by one pool per config (see NOTE).
    A framework's subclass draws the epoch's order (start_epoch) and hands the script its
    batches (epoch); ``tuning`` (trial/online_child.py) picks the config and is told each batch."""

    framework = ""
    switch_at = SwitchAt.BATCH
    own_persistent = False  # its workers start anew every epoch

    def __init__(self, open_pool: OpenPool, tuning: Tuning, loader_id: int, script_config: Dict[str, Any],
                 chain: Tuple[str, ...], length: int):
        self.open_pool = open_pool
        self.tuning = tuning
        self.loader_id = loader_id
        self.script_config = dict(script_config)
        self.chain = tuple(chain)
        self.length = length
        self.feed = Feed()
        self.pool: Optional[Pool] = None
        self.served: Optional[Dict[str, Any]] = None
        self.starting: Dict[str, Any] = self.script_config
        self.epochs = 0
        self.in_epoch = False
        self.epoch_batches: Optional[int] = None  # what the loop had of its last epoch that ended
        self._delivered = 0  # batches handed to the loop this epoch
        tuning.register(self)  # (the run's end closes its pools, also mid-epoch)

    hold_why = ""  # never held: nothing here checks the order at run time (see NOTE)
    rng_moved = False  # (no draws are watched here)
    own_iterators = 0  # (see busy)

    @property
    def epoch_number(self) -> int:
        return self.epochs

    def kept(self) -> Dict[str, Any]:
        return self.script_config

    def ready_to_switch(self) -> bool:
        return True

    def loads_in_loop(self, config: Dict[str, Any]) -> bool:
        """Whether ``config`` loads each batch in the loop's own thread (a framework's subclass says)."""
        return False

    def inherit(self, old: OnlineLoader) -> None:
        """A loader built again at the same place starts from the script's settings."""

    def busy(self) -> bool:
        """Never: a framework that iterates its dataset itself (Keras's fit) runs one epoch at a time."""
        return False

    def own_iterator(self) -> None:
        """(Not called: see busy.)"""

    def start_epoch(self, order: Iterator[Any]) -> None:
        """The epoch's indices, drawn by the caller as the unmodified loader draws them."""
        self._drop_pool(hand_back=False)
        self.epochs += 1
        self.feed.new_epoch(order)
        self.in_epoch = True
        self._delivered = 0

    def end_epoch(self) -> None:
        """The epoch is over: its workers end, as the framework's own do."""
        if not self.in_epoch:
            return
        self.in_epoch = False
        self.epoch_batches = self._delivered
        self._drop_pool(hand_back=False)
        self.tuning.epoch_ended(self)

    def close(self) -> None:
        self._drop_pool(hand_back=False)

    def release(self) -> None:
        """Another loader is tuned now: this one's workers end; an epoch still going goes on with
        new ones, from what they fetched but did not deliver."""
        self._drop_pool(hand_back=True)

    def serve(self, config: Dict[str, Any]) -> Any:
        """The pool for ``config``: the one serving, or a new one on what is left of the feed."""
        if self.pool is not None and self.pool.config == config:
            return self.pool
        restart = self.pool is None and self.served == config  # an epoch's fresh workers, not a switch
        self._drop_pool(hand_back=True)
        self.starting = config
        self.pool = self.open_pool(config, self.feed)
        self.served = config
        self.tuning.switched(self, config, restart=restart)
        return self.pool

    def _drop_pool(self, hand_back: bool, again: int = 0) -> None:
        pool, self.pool = self.pool, None
        if pool is None:
            return
        if hand_back:
            self.feed.hand_back(pool.undelivered(again))
        pool.close()

    def next_batch(self) -> Any:
        """The epoch's next batch, timed and told (StopIteration: none left)."""
        tuning = self.tuning
        now = tuning.now
        t_req, cpu0_s = now(), time.thread_time()
        failure: Optional[Exception] = None
        try:
            pool = self.serve(tuning.config_for(self))  # a switch's cost is this batch's wait
            batch = pool.next_batch(tuning.hang_limit_s(self, pool.config), now)
        except StopIteration:
            raise
        except Exception as exc:  # noqa: BLE001 - classified in recover(); the dataset's own is raised again
            failure = exc
        if failure is not None:  # (outside the handler: a re-raised error carries no feedprof context)
            batch = self.recover(failure, now)
        self._delivered += 1
        tuning.delivered(self, t_req, now(), batch, time.thread_time() - cpu0_s)
        return batch

    def recover(self, exc: BaseException, now: Callable[[], float]) -> Any:
        """A pool failed: a kill or a hang goes back to a safe config; the dataset's own error is
        raised again from the script's own config, exactly as the unmodified run raises it."""
        kind = failure_kind(exc)
        failed = self.pool.config if self.pool is not None else self.starting
        if failed == self.script_config:
            raise exc
        signals = exc.signals if isinstance(exc, PoolKilled) else []
        self.tuning.failed(self, failed, kind or "error", exc, signals)
        fallback = self.script_config if kind is None else self.tuning.safe_config(self, failed)
        # an error raised in a worker is the batch the loop asked for: fetched again, by the script's settings
        self._drop_pool(hand_back=True, again=0)
        return self.serve(fallback).next_batch(None, now)
