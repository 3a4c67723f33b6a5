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
              are never drawn); it serves the next epoch too where the script's own loader
              keeps its workers (persistent_workers), or where fresh workers would see the
              same dataset (torch_carry.py: its state unchanged since the pool forked);
              else it is started anew each epoch, as the script's own loader's workers are
      switch, at a batch boundary: the old workers are shut down, what the old pool took
              but the loop did not have (taken[had:], in order) goes back to the front of
              the Feed, the new pool starts on the Feed
      another iter() while an epoch is live (zip(loader, loader), a probe batch): torch's
              own iterator with the script's settings, untouched (a persistent loader's
              iterators are one, as torch's are: each iter() restarts the shared stream)
      checks (torch_ledger.py, torch_rng.py): every batch the loop has is the sampler's
              next, torch's counters agree with feedprof's; a loader whose loading or
              lazily drawing sampler moves the script's random draws is not switched
              (unless allowed); a failed check keeps the script's settings from then on

The loop therefore sees exactly the batches, in the order, that the script's
own loader would have given it: none lost, none repeated, and checked so. A
worker pool that breaks (a worker killed, a hang) hands its batches back the
same way and the epoch goes on with a safe config; an error raised by the
user's dataset is raised again from the script's own config, as it would be
without feedprof.
"""
from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

from feedprof.frameworks.torch_carry import PoolCarry
from feedprof.frameworks.torch_feed import Feed
from feedprof.frameworks.torch_ledger import EXHAUSTED, LEFT, RUN_END, EpochLedger
from feedprof.frameworks.torch_pool import Pool, failure_kind
from feedprof.frameworks.torch_rng import DrawWatch, RandomnessWatch
from feedprof.store.codes import Framework, SwitchAt
from feedprof.store.knobs.dataloader import effective
from feedprof.store.online import CHECK_FAILED, PERSISTENT_FIRST_EPOCH
from feedprof.frameworks.contract import Tuning

if TYPE_CHECKING:
    from torch.utils.data import DataLoader



def online_capable(loader: "DataLoader") -> Optional[str]:
    """None if the loader can switch mid-epoch, else why not (a reason code)."""
    import torch.utils.data as tud

    from feedprof.frameworks.torch_support import why_unsupported

    unsupported = why_unsupported()
    if unsupported is not None:
        return unsupported
    if isinstance(loader.dataset, tud.IterableDataset):
        return "iterable_dataset"  # the worker count decides its sharding
    if not getattr(loader, "in_order", True):
        return "out_of_order"  # delivered batches are not a prefix of those taken
    if type(loader)._get_iterator is not tud.DataLoader._get_iterator:
        return "own_iterator"  # a subclass with its own iterator (StatefulDataLoader)
    return None


def draw_base_seed(loader: "DataLoader") -> int:
    """The one number the script's own ``iter(loader)`` draws (torch's
    _BaseDataLoaderIter): drawn here, so the script's streams move as they would."""
    import torch

    return int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())


class OnlineLoader:
    """One DataLoader in online mode: its feed, the pool serving it, and the
    draws its own iterators would make. ``tuning`` (trial/online_child.py) says
    which config to serve and is told every batch."""

    framework = Framework.TORCH
    switch_at = SwitchAt.BATCH
    checks_order = True  # each epoch's order is checked and claimed (torch_ledger.py); see torch_switch.py

    def __init__(self, loader: "DataLoader", tuning: Tuning, loader_id: int, script_config: Dict[str, Any],
                 chain: Tuple[str, ...] = ()):
        self.loader = loader
        self.chain = tuple(chain)  # where the script builds it: a loader rebuilt there takes its place
        self.tuning = tuning
        self.loader_id = loader_id
        self.script_config = effective(script_config)  # decisions come in this form too
        self.own_persistent = bool(script_config.get("persistent_workers")) and bool(script_config.get("num_workers"))
        self.own_timeout_s = float(loader.timeout or 0)
        try:
            self.length = len(loader._index_sampler)
        except (TypeError, NotImplementedError):  # a sampler without __len__
            self.length = 0
        self.draws = DrawWatch()
        self.feed = Feed(self.length, self.draws)
        self.pool: Optional[Pool] = None
        self.starting: Dict[str, Any] = self.script_config
        self.served: Optional[Dict[str, Any]] = None  # the config of the last pool started
        self.pool_epoch = 0  # the epoch the pool's segment belongs to
        self.epochs = 0
        self.base_seed = 0
        self.pools_this_epoch = 0
        self.ledger: Optional[EpochLedger] = None
        self.iterators = 0  # iter() calls on the loader
        self.counts = tuning.counts(loader_id)  # [epochs, iterators] numbered on across loaders built again there
        self.own_iterators = 0  # of which the script's own (torch's, while an epoch was live)
        self.epoch_batches: Optional[int] = None  # what the loop had of its last epoch that ended
        self.hold_why = ""  # why it is no longer switched ("" while it may be)
        self.rng = RandomnessWatch(self, own_workers=bool(self.script_config.get("num_workers")))  # (torch_rng.py)
        self.carry = PoolCarry(self)  # whether its pool may serve the next epoch (torch_carry.py)
        self._live: Optional[weakref.ref] = None  # the epoch the script iterates
        self._done = True  # it ended (exhausted, or left by the loop)
        tuning.register(self)

    @property
    def rng_moved(self) -> bool:
        return self.rng.moved

    # -- epochs and iterators ------------------------------------------------

    @property
    def epoch_number(self) -> int:
        return self.counts[0]

    def busy(self) -> bool:
        """An epoch of this loader is live and unfinished: another iter() is the script's own
        iterator (torch gives each iterator of a loader without persistent workers a stream of
        its own; a persistent loader's iter() restarts its one shared stream, as here)."""
        return not (self.own_persistent or self._done or self._complete()) and self._live is not None \
            and self._live() is not None

    def _complete(self) -> bool:
        """The loop had every batch of the epoch (a trainer that counts its steps, Lightning, never
        asks for the StopIteration): a new iter() is the next epoch, not a second stream."""
        return bool(self.length) and self.ledger is not None and self.ledger.received >= self.length

    def serving(self, ep: "OnlineEpoch") -> bool:
        """Is ``ep`` the epoch this loader serves? (A persistent loader's iterators share one stream.)"""
        return self.own_persistent or (not self._done and self._live is not None and self._live() is ep)

    def own_iterator(self) -> None:
        self.iterators += 1
        self.counts[1] += 1
        self.own_iterators += 1

    def epoch(self) -> "OnlineEpoch":
        """What the script's ``iter(loader)`` returns."""
        self.iterators += 1
        if not self._done:  # the loop left the last epoch (or, persistent, restarted it)
            self._left()
        order = iter(self.loader._index_sampler)  # (before the seed, as torch's iterator does)
        if not (self.own_persistent and self.epochs):
            self.base_seed = draw_base_seed(self.loader)
        self.epochs += 1
        self.pools_this_epoch = 0
        self.counts[0] += 1
        self.counts[1] += 1
        self.ledger = EpochLedger(*self.counts)
        self.feed.new_epoch(order, self.ledger)
        self.draws.own = self.carry.new_epoch().generators  # (a generator made since counts from now)
        self.draws.new_epoch()
        if self.own_persistent and self.epochs == 2:
            self.hold(PERSISTENT_FIRST_EPOCH)
        self._prefetch_as_written()
        ep = OnlineEpoch(self)
        self._live, self._done = weakref.ref(ep, self._gone), False
        return ep

    def _prefetch_as_written(self) -> None:
        """The script's own workers would start fetching now: prefetch_factor x workers batches
        are taken from the sampler here, as torch's iterator takes them (a sampler drawing
        lazily draws at the same moment as in the run as written)."""
        n = int(self.script_config.get("num_workers") or 0)
        for _ in range(n * int(self.script_config.get("prefetch_factor") or 2)):
            try:
                self.feed.handed_back.append(self.feed.pull())
            except StopIteration:
                break

    def _gone(self, ref: "weakref.ref") -> None:
        """The script dropped the epoch's iterator before its end (``break``): the epoch is
        over, and its workers end now, as the script's own iterator's would."""
        if ref is self._live and not self._done:
            self._left()

    def _left(self) -> None:
        if self._complete():  # (every batch delivered: the epoch ended, only its StopIteration was not asked for)
            self.epoch_ended()
            return
        self._done = True
        self._close_ledger(LEFT)
        self.tuning.epoch_ended(self, left=True)
        if not self.carry.keeps():
            self._drop_pool()

    def epoch_ended(self) -> None:
        """The epoch's last batch was delivered: a loader without persistent workers shuts its
        workers down now, as the script's own does (the next epoch starts fresh ones)."""
        if self._done:
            return
        self._done = True
        self._close_ledger(EXHAUSTED)
        self.tuning.epoch_ended(self)
        if not self.carry.keeps():
            self._drop_pool()

    def drop_idle(self) -> None:
        """A pool kept for an epoch that will not come (the script built this loader again): closed."""
        if self._done and not self.own_persistent:
            self._drop_pool()

    def _close_ledger(self, ended: str) -> None:
        ledger = self.ledger
        if ledger is None or ledger.closed:
            return
        self.epoch_batches = ledger.received if ended != RUN_END else self.epoch_batches
        check = ledger.close(ended)
        if self.checks_order:
            self.tuning.order_checked(self, check)

    def close(self) -> None:
        """The run is over: no worker outlives it; an epoch still going is checked as far as it went."""
        if not self._done:
            self._done = True
            self._close_ledger(EXHAUSTED if self._complete() else RUN_END)
        self._drop_pool()

    def release(self) -> None:
        """Another loader is tuned now: this one's workers end (an epoch still going goes on with new
        ones, from what they held)."""
        self._drop_pool()

    def inherit(self, old: "OnlineLoader") -> None:
        """The script built this loader again where ``old`` was built (every epoch, as some scripts
        do): what was seen of its random streams, and a hold for them or a failed check, go on.
        A persistent loader's new workers start with it, as the script's own do."""
        self.draws = self.feed.draws = old.draws
        self.rng.inherit(old.rng)
        if old.hold_why and old.hold_why != PERSISTENT_FIRST_EPOCH:
            self.hold_why = old.hold_why

    # -- holds and checks ------------------------------------------------------

    def hold(self, why: str, detail: str = "") -> None:
        """No more switching: from now on the loader keeps ``kept()``."""
        if self.hold_why:
            return
        self.hold_why = why
        self.tuning.held(self, why, detail)

    @staticmethod
    def loads_in_loop(config: Dict[str, Any]) -> bool:
        """At 0 workers the loop loads each batch itself."""
        return not config.get("num_workers")

    def ready_to_switch(self) -> bool:
        """Its first batches, under the script's own settings, showed whether loading draws from
        the script's random streams (frameworks/torch_rng.py)."""
        return self.draws.ready()

    def kept(self) -> Dict[str, Any]:
        """What a held loader serves: the workers in force where a new pool would see the dataset
        otherwise than the script's own workers (persistent), else the script's own settings."""
        if self.hold_why == PERSISTENT_FIRST_EPOCH and self.pool is not None:
            return self.pool.config
        return self.script_config

    def check_failed(self, problem: str) -> None:
        if self.ledger is not None:
            self.ledger.fail(problem)
        self.hold(CHECK_FAILED, problem)

    def had_batch(self, pool: Pool) -> None:
        """The loop had the pool's next batch (or its error): checked, then told."""
        if self.ledger is not None and not self._done:
            self.ledger.receive(pool.last_had())
        problem = pool.accounting() if self.checks_order else ""
        if problem:
            self.check_failed(problem)
        self.rng.after_batch(pool)

    # -- pools -----------------------------------------------------------------

    def serve(self, config: Dict[str, Any]) -> Pool:
        """The pool for this epoch, built or switched to ``config``."""
        pool = self.pool
        same = pool is not None and pool.config == config
        if same and (self.pool_epoch == self.epochs or self.carry.carries()):
            if self.pool_epoch != self.epochs:
                self.pool_epoch = self.epochs
                pool.new_epoch(self.feed)  # (its segment is this epoch's even if the reset fails)
            return pool
        # A new epoch of a loader without persistent workers starts fresh workers, as the script's
        # own loader does: they see the dataset as the main process left it (set_epoch() and the like).
        restart = self.served == config
        self._drop_pool()
        if self.hold_why:  # (a check failed at that hand-back)
            config = self.kept()
        self.starting = config  # (a pool that fails to start is that config's failure)
        before = self.feed.segment
        seed = self._pool_seed()
        if config != self.script_config or self.pools_this_epoch > 1:
            self.rng.switched_away = True  # the script's own workers would not be these
        try:
            self.carry.forking(config)
            self.pool = Pool(self.loader, self.feed, config, seed, self.own_timeout_s)
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

    def _drop_pool(self, again: int = 0, check: bool = True) -> None:
        """The pool's workers are shut down first, then what it took this epoch and the loop never
        had goes back to the feed: taken == had + handed back, with torch's counters agreeing."""
        pool, self.pool = self.pool, None
        if pool is None:
            return
        try:
            pool.close()
        except (OSError, RuntimeError, AssertionError):  # a broken pool: its group is reaped at the end
            pass
        if self.pool_epoch != self.epochs or self._done:
            return
        self.feed.hand_back(pool.undelivered(again))
        problem = pool.accounting() if check else ""
        if problem:
            self.check_failed(f"at a hand-back, {problem}")

    def replays_on_failure(self) -> Optional[int]:
        """The batches of this epoch that a pool started now would deliver again (None: none; the
        feed hands back what the failed pool took and never delivered)."""
        return None

    def recover(self, exc: BaseException, now: Callable[[], float]) -> Any:
        """A pool failed mid-epoch: a kill or a hang goes back to a safe config;
        the dataset's own error is raised again from the script's own config,
        exactly as the unmodified run raises it."""
        if self.feed.failed is not None:  # the script's sampler: its error, as without feedprof
            raise exc
        signals = self.pool.signals_after(exc) if self.pool is not None else []
        # (a worker killed after it sent a batch breaks the channel first: its signal says killed)
        kind = failure_kind(exc) or ("killed" if signals else None)
        failed = self.pool.config if self.pool is not None else self.starting
        if kind is None and failed == self.script_config:
            if self.pool is not None:
                self.had_batch(self.pool)
            raise exc
        self.tuning.failed(self, failed, kind or "error", exc, signals, replayed=self.replays_on_failure())
        fallback = self.script_config if kind is None else self.tuning.safe_config(self, failed)
        # an error raised in a worker is the batch the loop had: fetched again with the script's settings
        self._drop_pool(again=1 if kind is None else 0, check=False)
        pool = self.serve(fallback)
        try:
            return pool.next_batch(None, now)
        except StopIteration:
            raise
        except Exception:  # the dataset's error, from the script's own settings: the loop has it
            self.had_batch(pool)
            raise


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
        if not ol.serving(self):
            raise StopIteration  # an epoch that ended ends again, as torch's iterator does
        now = tuning.now
        t_req, cpu0_s = now(), time.thread_time()
        ol.draws.begin()
        failure: Optional[Exception] = None
        try:
            pool = ol.serve(tuning.config_for(ol))  # a switch's cost is this batch's wait
            batch = pool.next_batch(tuning.hang_limit_s(ol, pool.config), now)
        except StopIteration:
            ol.draws.abandon()
            ol.epoch_ended()
            raise
        except Exception as exc:  # noqa: BLE001 - classified by recover(); the user's own is raised again
            failure = exc
        if failure is not None:  # (outside the handler: a re-raised error carries no feedprof context)
            ol.draws.abandon()
            try:
                batch = ol.recover(failure, now)
            except StopIteration:
                ol.epoch_ended()
                raise
        ol.had_batch(ol.pool)
        tuning.delivered(ol, t_req, now(), batch, time.thread_time() - cpu0_s)
        return batch
