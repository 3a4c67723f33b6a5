"""Inside the real run (``feedprof tune --online``): which config each batch is
served with, and the windows of the run that measure it.

NOTE [ Online tuning, the script's side ]  (tune/online.py is the parent's)

    decision.json (parent, atomic) ──► OnlineTuning.config_for(): read at most every POLL_S
    each batch of the tuned loader ──► delivered(): the window grows
        a new pool's first batches (its workers starting) are warm-up, not window
        window ≥ window_seconds and ≥ min_window_batches ──► event "online_window"
          {config, batches, samples, wait_s, load_cpu_s, workers_cpu_s, t_start_s, t_end_s}
    a pool that failed ──► event "online_failure"; the config is not served again
        until the parent decides anew (a later decision)
    each epoch's order check ──► event "online_order" (frameworks/torch_ledger.py)
    draws a switch would move ──► event "online_randomness"; a loader no longer switched
        (those draws, a failed check, a persistent loader past its first epoch) ──► "online_hold"

Only one loader is tuned: the one with the most batches per epoch seen so far
(a sanity-check validation pass may be iterated first). Every rank of a job
reads the same decision file and writes its own events.
"""
from __future__ import annotations

import json
import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from feedprof.analyse.diagnose import workers_of
from feedprof.analyse.evidence import config_key
from feedprof.record.pools import pool_threads_of
from feedprof.frameworks.contract import OnlineLoader, Pool

POLL_S = 0.05  # how often the decision file is looked at
HANG_MIN_S = 20.0  # an explored pool that delivers nothing this long is hung ...
HANG_BATCHES = 20.0  # ... or this many times the slowest batch so far, if longer
FOLLOW_WAIT = 0.5  # another loader waiting this share of its epoch so far takes the config in force too ...
FOLLOW_BATCHES, FOLLOW_SPAN_S = 3, 0.2  # ... once it has had this many batches over this long


@dataclass
class _Window:
    """Stretches of the run under one config: an epoch's tail goes on in the next epoch (after its
    workers' start, which is counted apart), so short epochs with many workers still fill a window."""

    config: Dict[str, Any]
    t_start_s: float
    span_s: float = 0.0  # the stretches' time, between epochs left out
    t_last_s: Optional[float] = None  # the stretch's last delivery (None: a new stretch begins)
    batches: int = 0
    samples: int = 0
    wait_s: float = 0.0
    load_cpu_s: float = 0.0  # the loop's own CPU time inside next() (at 0 workers: the loading itself)
    t_end_s: float = 0.0
    workers_cpu0_s: Optional[float] = None
    other_s: float = 0.0  # the loop's time in another iterator of the loader (a probe), left out of span_s


@dataclass
class _LoaderState:
    warmup_left: int = 0
    warm_t0_s: Optional[float] = None  # when the new pool's first batch was asked for
    warm_batches: int = 0
    restart: bool = False
    window: Optional[_Window] = None
    slowest_s: float = 0.0
    pids: List[int] = field(default_factory=list)
    pool: Optional[Pool] = None  # the pool whose workers' CPU the window reads
    epoch_batches: int = 0  # delivered this epoch (a loader of unknown length learns it from its epochs)
    other_s: float = 0.0  # time in another iterator of the loader since its last delivery


def _workers_cpu_s(st: _LoaderState) -> Optional[float]:
    """CPU time of the serving pool's workers so far: a pool that measures its own (threads in
    the loop's process) says it; else its worker processes by pid; 0 with none, None if unknown."""
    own = getattr(st.pool, "workers_cpu_s", None)
    value = own() if own is not None else None
    if value is not None:
        return value
    if st.pids:
        return _cpu_s(st.pids)
    return None if own is not None else 0.0


def _cpu_s(pids: List[int]) -> Optional[float]:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            return None
        total += t.user + t.system
    return total


def _batch_len(batch: object) -> int:
    from feedprof.record.steps import infer_batch_size

    try:
        return infer_batch_size(batch) or 0
    except Exception:  # noqa: BLE001 - a batch of a shape nobody foresaw: counted as batches only
        return 0


class OnlineTuning:
    def __init__(self, decision_path: str, emit: Callable[..., None], now: Callable[[], float],
                 origin_s: float, window_s: float, min_window_batches: int, allow_rng_change: bool = False):
        self.decision_path = decision_path
        self.allow_rng_change = allow_rng_change  # --allow-rng-change: switch loaders whose draws would move
        self.origin_s = origin_s
        self.emit = emit
        self.now = now
        self.window_s = window_s
        self.min_window_batches = min_window_batches
        self.seq = 0
        self.config: Optional[Dict[str, Any]] = None  # None: the script's own
        self.final = False
        self.broken = False  # feedprof's own side failed: the run goes on, no more switching
        self._t_polled = float("-inf")
        self._seen: tuple = ()
        self._banned_until_seq: Dict[tuple, int] = {}  # a failed config's key -> the decision that may bring it back
        self.target: Optional[OnlineLoader] = None
        self._state: Dict[int, _LoaderState] = {}
        self._others: Dict[int, List[float]] = {}  # another loader's epoch: [first request, wait, batches]
        self._followers: set = set()  # other loaders that take the settled config (they waited too)
        self.loaders: List["weakref.ref[OnlineLoader]"] = []  # weak references to the run's online loaders
        self._counts: Dict[int, List[int]] = {}

    def register(self, ol: OnlineLoader) -> None:
        """A loader in online mode; one the script built again where it built ``ol`` (every epoch,
        as some scripts do) will not start another epoch: a pool kept for one ends now."""
        live = [ref for ref in self.loaders if ref() is not None]
        for ref in live:
            old = ref()
            if old is not None and old.loader_id == ol.loader_id and hasattr(old, "drop_idle"):
                old.drop_idle()
        self.loaders = live + [weakref.ref(ol)]

    def counts(self, loader_id: int) -> List[int]:
        """[epochs, iterators] of a loader: one the script builds again where an earlier one was
        (the same loader_id) numbers its epochs on from it."""
        return self._counts.setdefault(loader_id, [0, 0])

    def finish(self) -> None:
        """The script ended: every loader's pools end, and an epoch still going is checked as far as it went."""
        for ref in self.loaders:
            ol = ref()
            if ol is not None:
                ol.close()

    # -- which loader, which config ---------------------------------------

    def consider(self, ol: OnlineLoader) -> None:
        """A loader starts an epoch: the one with the most batches per epoch is tuned (a loader
        of unknown length counts as the longest), and a loader the script builds again where
        the tuned one was built takes its place."""
        old = self.target
        if old is ol:
            return
        longer = (ol.length or float("inf")) > (old.length or float("inf")) if old is not None else True
        if not (longer or (ol.chain and ol.chain == old.chain)):
            return
        self.target = ol
        if old is not None:
            old.release()  # (a loader rebuilt every epoch: its predecessor's workers end here)
            if ol.chain and ol.chain == old.chain:
                self._rebuilt(old, ol)
        self._say("online_target", loader_id=ol.loader_id, batches_per_epoch=ol.length,
                  per_epoch=not ol.own_persistent, script_config=ol.script_config, framework=ol.framework,
                  switch_at=ol.switch_at)

    def _rebuilt(self, old: OnlineLoader, ol: OnlineLoader) -> None:
        """The script built the tuned loader again (every epoch, as some scripts do): its window
        goes on, and its first pool with the config in force is that config's epoch start (a
        cost inside the window, as a loader without persistent workers pays every epoch), not a
        switch. Otherwise short epochs would never fill a window."""
        st = self._state.pop(old.loader_id, None)
        if st is not None:
            self._state[ol.loader_id] = st
        if old.served is not None:
            ol.served = dict(old.served)
        ol.inherit(old)

    def _say(self, event: str, **fields: Any) -> None:
        """An event for the parent; a failure of feedprof's own (a full disk) never reaches the
        script's loop: the run goes on with the config in force, and no more switching."""
        if self.broken:
            return
        try:
            self.emit(event, **fields)
        except Exception:  # noqa: BLE001 - feedprof's side, whatever it is, must not end the job
            self.broken = True

    def _poll(self) -> None:
        t = self.now()
        if not self.decision_path or t - self._t_polled < POLL_S:
            return
        self._t_polled = t
        try:
            st = os.stat(self.decision_path)
        except OSError:
            return
        seen = (st.st_mtime_ns, st.st_ino, st.st_size)  # (written by rename: a new inode each time)
        if seen == self._seen:
            return
        try:
            with open(self.decision_path, encoding="utf-8") as fh:
                d = json.load(fh)
        except (OSError, ValueError):
            return  # written atomically: a partial read is a race with a rename; next poll
        self._seen = seen
        if d.get("seq", 0) > self.seq:
            self.seq, self.config, self.final = d["seq"], d.get("config"), bool(d.get("final"))

    def apply(self, decision: Dict[str, Any]) -> None:
        """A decision made in this process (the in-process decider's publish)."""
        if decision.get("seq", 0) > self.seq:
            self.seq, self.config, self.final = decision["seq"], decision.get("config"), bool(decision.get("final"))

    def config_for(self, ol: OnlineLoader) -> Dict[str, Any]:
        if ol.hold_why:
            return ol.kept()
        if not ol.ready_to_switch():  # (torch: the script's random streams are watched under its own settings first)
            return ol.script_config
        if ol is not self.target:
            follows = ol.loader_id in self._followers and self.config is not None and not self.broken
            config = self.config if follows else ol.script_config
        elif self.broken:
            return ol.pool.config if ol.pool is not None else ol.script_config
        else:
            self._poll()
            config = self.config if self.config is not None else ol.script_config
            if self._banned_until_seq.get(config_key(config), -1) >= self.seq:
                return ol.pool.config if ol.pool is not None else ol.script_config
        if ol.loads_in_loop(config) and not ol.loads_in_loop(ol.script_config):
            return ol.script_config  # loading written for workers never moves into the script's process
        return config

    def hang_limit_s(self, ol: OnlineLoader, config: Dict[str, Any]) -> Optional[float]:
        """Only an explored config is given up on when it hangs; the script's own,
        and the settled pick, wait as the unmodified run would."""
        if ol is not self.target or self.final or config == ol.script_config:
            return None
        st = self._state.get(ol.loader_id)
        return max(HANG_MIN_S, HANG_BATCHES * (st.slowest_s if st else 0.0))

    def safe_config(self, ol: OnlineLoader, failed: Dict[str, Any]) -> Dict[str, Any]:
        """After a kill or a hang: the script's own settings (the parent decides what next)."""
        return ol.script_config

    # -- what happened ------------------------------------------------------

    def switched(self, ol: OnlineLoader, config: Dict[str, Any], restart: bool = False) -> None:
        """A new pool serves ``config``: a switch, or (``restart``) the config's own start of an
        epoch, which is its cost and stays inside its window."""
        st = self._state.setdefault(ol.loader_id, _LoaderState())
        st.pids = ol.pool.worker_pids() if ol.pool is not None else []
        st.pool = ol.pool
        if st.window is not None:
            st.window.workers_cpu0_s = None  # other workers now: their CPU is not comparable
        if not restart:
            st.window = None
        st.warmup_left = (workers_of(config) or 0) + 1  # the pool filling is not its rate ...
        st.warm_t0_s, st.warm_batches, st.restart = None, 0, restart  # ... but its cost (online_warmup)
        if ol is self.target and not restart:
            self._say("online_switch", loader_id=ol.loader_id, config=config, seq=self.seq)

    def failed(self, ol: OnlineLoader, config: Dict[str, Any], kind: str, exc: BaseException,
               signals: Optional[List[int]] = None, replayed: Optional[int] = None) -> None:
        """A pool of the tuned loader broke (another loader's pool breaking is only recovered).
        ``replayed``: the batches of the epoch the loop will have again (an IterableDataset's)."""
        if ol is not self.target:
            self._followers.discard(ol.loader_id)  # (another loader: back to its own settings for good)
            return
        self._banned_until_seq[config_key(config)] = self.seq
        self._say("online_failure", loader_id=ol.loader_id, config=config, kind=kind,
                  error=f"{type(exc).__name__}: {exc}"[:500], signals=list(signals or ()), seq=self.seq,
                  replayed_batches=replayed, epoch=ol.epoch_number)

    def epoch_ended(self, ol: OnlineLoader, left: bool = False) -> None:
        """An epoch ended: exhausted, or ``left`` by the loop (a break). Either way the time until
        the next epoch's batches (its workers' start, counted as start-up) is in no window."""
        if ol is not self.target:
            self._others.pop(ol.loader_id, None)
        st = self._state.get(ol.loader_id)
        if st is not None and st.window is not None:
            st.window.t_last_s = None  # the window goes on in the next epoch, if its config does
        batches = st.epoch_batches if st is not None else 0
        if st is not None:
            st.epoch_batches = 0
        if ol is self.target:
            self._say("online_epoch_end", loader_id=ol.loader_id, epoch=ol.epochs, left=left,
                      batches=batches)

    def order_checked(self, ol: OnlineLoader, check: Dict[str, Any]) -> None:
        """One epoch's order check (frameworks/torch_ledger.py), every loader's."""
        self._say("online_order", loader_id=ol.loader_id, rng_moved=ol.rng_moved, own_iterators=ol.own_iterators,
                  **check)

    def randomness(self, ol: OnlineLoader, where: str, streams: tuple, moved: bool) -> None:
        """Draws from the script's random streams that a switch moves (frameworks/torch_rng.py)."""
        self._say("online_randomness", loader_id=ol.loader_id, where=where, streams=list(streams), moved=moved,
                  allowed=self.allow_rng_change, epoch=ol.epochs, target=ol is self.target)

    def carried(self, ol: OnlineLoader, carried: bool, why: str, epoch: int) -> None:
        """A pool served the loader's next epoch without the restart its script makes, or (not
        ``carried``) its pools restart every epoch from now on, as written (frameworks/torch_carry.py)."""
        self._say("online_carry", loader_id=ol.loader_id, carried=carried, why=why, epoch=epoch,
                  target=ol is self.target)

    def held(self, ol: OnlineLoader, why: str, detail: str) -> None:
        """The loader is no longer switched; the tuned one's search settles on what it keeps."""
        self._say("online_hold", loader_id=ol.loader_id, why=why, detail=detail[:300], config=ol.kept(),
                  target=ol is self.target, epoch=ol.epochs)

    def delivered(self, ol: OnlineLoader, t_req_s: float, t_got_s: float, batch: object, cpu_s: float = 0.0) -> None:
        if ol is not self.target:
            self._other_batch(ol, t_req_s, t_got_s)
            return
        st = self._state.setdefault(ol.loader_id, _LoaderState())
        st.slowest_s = max(st.slowest_s, t_got_s - t_req_s)
        st.epoch_batches += 1
        if st.warmup_left > 0:
            self._warming(ol, st, t_req_s, t_got_s)
            return
        w = st.window
        if w is not None and w.config != ol.pool.config:
            w = st.window = None
        if w is None:
            w = st.window = _Window(config=dict(ol.pool.config), t_start_s=t_req_s, workers_cpu0_s=_workers_cpu_s(st))
        gap_s = t_got_s - (t_req_s if w.t_last_s is None else w.t_last_s)
        other_s = min(st.other_s, max(0.0, gap_s - (t_got_s - t_req_s)))  # (it ran between deliveries)
        st.other_s = 0.0
        w.span_s += gap_s - other_s
        w.other_s += other_s
        w.t_last_s = t_got_s
        w.batches += 1
        w.samples += _batch_len(batch)
        w.wait_s += t_got_s - t_req_s
        w.load_cpu_s += cpu_s
        w.t_end_s = t_got_s
        if w.span_s >= self.window_s and w.batches >= self.min_window_batches:
            self._close(ol, st)

    def other_iterator(self, ol: OnlineLoader, seconds: float) -> None:
        """The loop's time in another live iterator of the tuned loader (a probe batch, the second
        of zip(loader, loader)): torch's own, with the script's settings whatever the tuned loader
        serves, so it is no config's cost: left out of the window it falls in."""
        if ol is self.target:
            self._state.setdefault(ol.loader_id, _LoaderState()).other_s += max(0.0, seconds)

    def _other_batch(self, ol: OnlineLoader, t_req_s: float, t_got_s: float) -> None:
        """Another loader's batch (a validation pass): once a few of its batches show it waits
        most of the time with its own settings, it follows the config in force (switched at
        its next batch, in order like the tuned loader: what it delivers is unchanged)."""
        seen = self._others.setdefault(ol.loader_id, [t_req_s, 0.0, 0])
        seen[1] += t_got_s - t_req_s
        seen[2] += 1
        span_s = t_got_s - seen[0]
        if ol.loader_id in self._followers or self.broken or not workers_of(self.config or {}) \
                or ol.pool is None or ol.pool.config != ol.script_config \
                or self.target is None or ol.framework != self.target.framework:  # (its settings' keywords)
            return
        if seen[2] >= FOLLOW_BATCHES and span_s >= FOLLOW_SPAN_S and seen[1] / span_s >= FOLLOW_WAIT:
            self._followers.add(ol.loader_id)
            self._say("online_follow", loader_id=ol.loader_id, config=self.config, wait_fraction=seen[1] / span_s)

    def _warming(self, ol: OnlineLoader, st: _LoaderState, t_req_s: float, t_got_s: float) -> None:
        """A new pool's first batches: once it is full, what starting it cost (workers forked,
        the first fetch), which the run pays again every epoch where the loader restarts its workers."""
        if st.warm_t0_s is None:
            st.warm_t0_s = t_req_s
        st.warm_batches += 1
        st.warmup_left -= 1
        if st.warmup_left == 0:
            self._say("online_warmup", loader_id=ol.loader_id, config=ol.pool.config, warm_batches=st.warm_batches,
                      warm_s=t_got_s - st.warm_t0_s, restart=st.restart, per_epoch=not ol.own_persistent,
                      batches_per_epoch=ol.epoch_batches or ol.length)

    def _close(self, ol: OnlineLoader, st: _LoaderState) -> None:
        w, st.window = st.window, None
        cpu1 = _workers_cpu_s(st)
        workers_cpu = None if cpu1 is None or w.workers_cpu0_s is None else cpu1 - w.workers_cpu0_s
        self._say("online_window", loader_id=ol.loader_id, config=w.config, batches=w.batches, samples=w.samples,
                  wait_s=w.wait_s, load_cpu_s=w.load_cpu_s, span_s=w.span_s, other_s=w.other_s,
                  t_start_s=w.t_start_s - self.origin_s,
                  t_end_s=w.t_end_s - self.origin_s, workers_cpu_s=workers_cpu, epoch=ol.epochs, seq=self.seq,
                  pool_threads=pool_threads_of(st.pids))
