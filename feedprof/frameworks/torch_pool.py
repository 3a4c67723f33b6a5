"""One worker pool of an online DataLoader (frameworks/torch_online.py): torch's own
iterator, built on a private copy of the user's loader that reads its batches from the
shared feed, its workers seeded as the script's own iterator seeds them, its deaths and
hangs found by polling rather than by torch's SIGCHLD handler."""
from __future__ import annotations

import copy
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional

from feedprof.frameworks.thread_limits import worker_init
from feedprof.frameworks.torch_worker_draws import WorkerDraws
from feedprof.store.knobs.threads import threads_of
from feedprof.frameworks.torch_feed import Feed

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

KILLED = re.compile(r"DataLoader worker \(pid.*(killed by signal|exited unexpectedly)")
TIMED_OUT = "DataLoader timed out after"
POLL_S = 1.0  # how often a waiting pool checks its workers are alive (torch's own check is every 5 s)
DEATH_WAIT_S = 1.0  # a worker's channel broke: how long to wait to read whether a signal ended the worker


def _copy_with(loader: "DataLoader", feed: Feed, config: Dict[str, Any], base_seed: int, timeout_s: float,
               draws: Optional[WorkerDraws] = None) -> "DataLoader":
    """A shallow copy of the loader that reads its batches from ``feed``, draws its workers'
    seed from a private generator seeded with ``base_seed``, and (``draws``) tells whether
    its workers draw from their random streams as they load."""
    import torch

    proxy = copy.copy(loader)
    put = object.__setattr__  # past DataLoader.__setattr__, which guards some of these
    put(proxy, "batch_sampler" if loader.batch_sampler is not None else "sampler", feed)
    n = int(config.get("num_workers") or 0)
    put(proxy, "num_workers", n)
    put(proxy, "prefetch_factor", (config.get("prefetch_factor") or 2) if n else None)
    put(proxy, "pin_memory", bool(config.get("pin_memory", loader.pin_memory)))
    put(proxy, "persistent_workers", True)  # the pool outlives the epoch: switching decides its end
    put(proxy, "timeout", timeout_s if n else 0)
    put(proxy, "_iterator", None)
    if n and threads_of(config):  # its workers' thread pools held (frameworks/thread_limits.py)
        put(proxy, "worker_init_fn", worker_init(loader.worker_init_fn, threads_of(config)))
    if draws is not None:
        put(proxy, "collate_fn", draws.wrap(loader.collate_fn))
    gen = torch.Generator()
    gen.manual_seed(base_seed & 0x7FFF_FFFF_FFFF_FFFF)
    put(proxy, "generator", gen)
    return proxy


class Pool:
    """One config's worker pool (or the main process, at 0 workers) serving a feed."""

    def __init__(self, loader: "DataLoader", feed: Feed, config: Dict[str, Any], base_seed: int, own_timeout_s: float):
        from torch.utils.data import dataloader as dl

        self.config = dict(config)
        self.workers = int(config.get("num_workers") or 0)
        # the script's own timeout where it set one; else a short poll (see next_batch)
        self.own_timeout_s = own_timeout_s
        self.draws = _worker_draws() if self.workers else None
        self.proxy = _copy_with(loader, feed, config, base_seed, own_timeout_s or POLL_S, self.draws)
        if self.workers:
            self.it = _start_workers(self.proxy, base_seed)
        else:
            self.it = dl._SingleProcessDataLoaderIter(self.proxy)
        self.segment = feed.segment
        self.had = 0  # batches of this epoch's segment the loop had (delivered, or raised: the dataset's error)

    def new_epoch(self, feed: Feed) -> None:
        try:
            if self.workers:  # (torch's reset waits on the workers: the script's own timeout, not the poll)
                self.it._timeout = self.own_timeout_s
                try:
                    self.it._reset(self.proxy)
                finally:
                    self.it._timeout = self.own_timeout_s or POLL_S
            else:
                from torch.utils.data import dataloader as dl

                self.it = dl._SingleProcessDataLoaderIter(self.proxy)
        finally:
            self.segment, self.had = feed.segment, 0

    def worker_pids(self) -> List[int]:
        return [w.pid for w in getattr(self.it, "_workers", ())] if self.workers else []

    def worker_signals(self) -> List[int]:
        """The signals that ended this pool's dead workers (SIGKILL: memory; SIGBUS: /dev/shm)."""
        codes = [getattr(w, "exitcode", None) for w in getattr(self.it, "_workers", ())] if self.workers else []
        return [-c for c in codes if isinstance(c, int) and c < 0]

    def signals_after(self, exc: BaseException, wait_s: float = DEATH_WAIT_S) -> List[int]:
        """worker_signals, once ``exc`` has been raised: where it says a worker's channel broke
        (lost_worker), the workers' ends are awaited briefly, since a worker killed after it sent
        a batch breaks the channel before its death can be read."""
        deadline = time.monotonic() + (wait_s if lost_worker(exc) else 0.0)
        while not self.worker_signals() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.worker_signals()

    def next_batch(self, hang_after_s: Optional[float], now: Callable[[], float]) -> Any:
        """The next batch; a pool that is only polling retries until ``hang_after_s``."""
        t0 = now()
        while True:
            try:
                batch = next(self.it)
            except StopIteration:
                raise
            except RuntimeError as exc:
                if not self.own_timeout_s and TIMED_OUT in str(exc):
                    if hang_after_s is not None and now() - t0 > hang_after_s:
                        raise PoolHung(now() - t0) from None
                    continue
                self._had_error(exc)
                raise
            except Exception as exc:
                self._had_error(exc)
                raise
            self.had += 1
            return batch

    def _had_error(self, exc: BaseException) -> None:
        """The dataset's own error reaches the loop in place of a batch (torch counts it as
        received); a killed worker, a broken channel or a timeout does not."""
        if failure_kind(exc) is None and not lost_worker(exc) and TIMED_OUT not in str(exc) \
                and self.segment is not None and self.segment.feed.failed is None:
            self.had += 1

    def last_had(self) -> Any:
        """The indices of the batch the loop had last (torch delivers in the order it sent)."""
        return self.segment.taken[self.had - 1] if self.segment is not None and self.had else None

    def accounting(self) -> str:
        """"" where torch's own counters agree with what feedprof counted, else what differs:
        the hand-back and the order check both rest on them."""
        taken = len(self.segment.taken) if self.segment is not None else 0
        if not self.workers:
            return "" if taken == self.had else f"the pool took {taken} batch(es) and the loop had {self.had}"
        received, sent = getattr(self.it, "_rcvd_idx", None), getattr(self.it, "_send_idx", None)
        if received != self.had:
            return f"torch counted {received} batch(es) received where the loop had {self.had}"
        if sent != taken:
            return f"torch sent {sent} batch(es) to its workers and took {taken} from the sampler"
        return ""

    def undelivered(self, again: int = 0) -> List[Any]:
        """What the pool took and the loop never had (and the last ``again`` it had: a batch whose
        error is to be raised again from the script's own settings)."""
        if self.segment is None:
            return []
        return list(self.segment.taken[max(0, self.had - again):])

    def close(self) -> None:
        if self.workers:
            self.it._shutdown_workers()


def _worker_draws() -> Optional[WorkerDraws]:
    try:
        return WorkerDraws()
    except OSError:  # no shared memory for one byte: the workers' draws go unseen
        return None


_SEEDED: Dict[type, type] = {}


def _start_workers(proxy: "DataLoader", base_seed: int) -> Iterator[Any]:
    """A multi-process DataLoader iterator whose worker i is seeded ``base_seed + i``, as the
    script's own iterator seeds them, and whose workers torch's SIGCHLD handler never hears of:
    that handler raises in the main thread wherever it is, the script's step included (this
    pool's deaths are found at next_batch instead)."""
    from torch.utils.data import dataloader as dl

    base = dl._MultiProcessingDataLoaderIter
    cls = _SEEDED.get(base)
    if cls is None:  # torch draws the seed in __init__ (from the proxy's private generator): ignored
        cls = _SEEDED[base] = type("OnlineWorkers", (base,), {
            "_base_seed": property(lambda it: it._feedprof_seed, lambda it, value: None)})
    it = cls.__new__(cls)
    it._feedprof_seed = base_seed
    handling = dl._utils.signal_handling
    register, handling._set_worker_pids = handling._set_worker_pids, lambda *_: None
    try:
        it.__init__(proxy)
    except BaseException:
        it._worker_pids_set = False  # (never registered: its __del__ must not unregister)
        if hasattr(it, "_workers"):
            it._shutdown_workers()
        raise
    finally:
        handling._set_worker_pids = register
    it._worker_pids_set = False
    return it


class PoolHung(Exception):
    def __init__(self, waited_s: float):
        super().__init__(f"no batch for {waited_s:.1f} s")
        self.waited_s = waited_s


def lost_worker(exc: BaseException) -> bool:
    """Did the channel from a worker break, rather than the worker raise? A batch's shared memory
    is passed as file descriptors from the worker that made it: where that worker is gone (killed
    after it sent the batch), receiving them ends in a bare EOFError or a connection error, or no
    descriptors at all. (A dataset's own error comes with its worker's traceback.)"""
    text = str(exc)
    if "Original Traceback" in text or "in DataLoader worker process" in text:
        return False
    return isinstance(exc, (EOFError, ConnectionError)) or "received 0 items of ancdata" in text


def failure_kind(exc: BaseException) -> Optional[str]:
    """killed | hung, for a pool's failure that is not the dataset's own error."""
    if isinstance(exc, PoolHung):
        return "hung"
    if isinstance(exc, RuntimeError) and KILLED.search(str(exc)):
        return "killed"
    return None
