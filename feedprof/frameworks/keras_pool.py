"""The pools that fetch a Keras ``PyDataset``'s batches online (frameworks/switching.py drives
them), one per config, as Keras's own ``OrderedEnqueuer`` would for that config:

    workers=1, no processes   the loop's own thread calls dataset[i] when the batch is asked for
    workers=N (threads)       N threads, up to max_queue_size batches asked for ahead, in order
    use_multiprocessing=True  N processes forked as Keras forks its own, the same

Each takes its indices from the shared feed and delivers their batches in the feed's order.
A dead worker process is found by polling (Keras would wait for its batch forever), so an
explored config that loses one hands its batches back instead of hanging the run.
"""
from __future__ import annotations

import collections
import multiprocessing
import queue
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Tuple, Union

from feedprof.frameworks.switching import Feed, PoolHung, PoolKilled
from feedprof.store.knobs.pydataset import legalize

if TYPE_CHECKING:
    import keras

POLL_S = 0.5  # how often a pool waiting for a batch checks its workers are alive
BROKEN_WAIT_S = 1.0  # a broken pool's workers are ended by it: how long to wait to read how each ended


class InLoopPool:
    """workers=1 without processes: each batch loaded in the loop's own thread when asked for."""

    def __init__(self, dataset: "keras.utils.PyDataset", feed: Feed, config: Dict[str, Any]):
        self.dataset, self.feed, self.config = dataset, feed, dict(config)

    def next_batch(self, hang_after_s: Optional[float], now: Callable[[], float]) -> Any:
        return self.dataset[self.feed.take()]

    def undelivered(self, again: int = 0) -> List[Any]:
        return []  # nothing is taken ahead

    def close(self) -> None:
        pass

    def worker_pids(self) -> List[int]:
        return []

    def worker_signals(self) -> List[int]:
        return []

    def workers_cpu_s(self) -> Optional[float]:
        return None  # the loading is the loop's own (its thread time is measured apart)


class _Threads:
    """Daemon threads fetching by index (as Keras's thread pool: they never hold up the exit);
    closed, they drop what they have not started."""

    def __init__(self, n: int, fetch: Callable[[Any], Any]):
        self.fetch = fetch
        self.tasks: "queue.SimpleQueue[Optional[Tuple[Any, Future]]]" = queue.SimpleQueue()
        self.closed = False
        self.threads = [threading.Thread(target=self._work, name=f"feedprof_keras_worker_{k}", daemon=True)
                        for k in range(n)]
        for t in self.threads:
            t.start()

    def submit(self, index: Any) -> Future:
        future: Future = Future()
        self.tasks.put((index, future))
        return future

    def _work(self) -> None:
        while True:
            task = self.tasks.get()
            if task is None or self.closed:
                return
            index, future = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self.fetch(index))
            except BaseException as exc:  # noqa: BLE001 - the dataset's error, raised where the batch is asked for
                future.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        for _ in self.threads:
            self.tasks.put(None)

    def cpu_s(self) -> Optional[float]:
        """CPU time of these threads (Linux: /proc per thread, through psutil)."""
        import psutil

        ids = {t.native_id for t in self.threads}
        try:
            return sum(t.user_time + t.system_time for t in psutil.Process().threads() if t.id in ids)
        except psutil.Error:
            return None


_DATASET: Optional["keras.utils.PyDataset"] = None  # a worker process's dataset (set by _adopt when the pool forks it)


def _adopt(dataset: "keras.utils.PyDataset") -> None:
    global _DATASET
    _DATASET = dataset


def _fetch(index: Any) -> Any:
    return _DATASET[index]


class _Processes:
    """Worker processes forked as Keras's use_multiprocessing=True forks them (the start method
    multiprocessing uses here), each holding the dataset as the main process had it. A worker
    that dies breaks the pool at once (Keras's own multiprocessing.Pool would wait for its batch
    forever, and cannot be terminated safely then)."""

    def __init__(self, n: int, dataset: "keras.utils.PyDataset"):
        self.executor = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context(), initializer=_adopt,
                                            initargs=(dataset,))
        self.procs: List[multiprocessing.process.BaseProcess] = []

    def submit(self, index: Any) -> Future:
        future = self.executor.submit(_fetch, index)
        if not self.procs:  # (started at the first task)
            self.procs = list(self.executor._processes.values())
        return future

    def dead(self) -> List[int]:
        """The signals that ended workers of this pool."""
        codes = [p.exitcode for p in self.procs]
        return [-c for c in codes if isinstance(c, int) and c < 0]

    def broken(self) -> List[int]:
        """The pool broke: the signals that ended its workers, once their ends are known (briefly awaited)."""
        for p in self.procs:
            p.join(BROKEN_WAIT_S)
        return self.dead()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        for p in self.procs:  # what they still fetch is dropped: no worker outlives its pool
            if p.exitcode is None:
                p.terminate()


class QueuedPool:
    """workers=N threads, or processes: up to max_queue_size batches asked for ahead, delivered
    in the order taken."""

    def __init__(self, dataset: "keras.utils.PyDataset", feed: Feed, config: Dict[str, Any]):
        cfg = legalize(config)
        self.config, self.feed = dict(config), feed
        self.depth = cfg["max_queue_size"]
        if cfg["use_multiprocessing"]:
            self.workers: Union[_Processes, _Threads] = _Processes(cfg["workers"], dataset)
        else:
            self.workers = _Threads(cfg["workers"], dataset.__getitem__)
        self.ahead: Deque[Tuple[Any, Any]] = collections.deque()  # (index, its future), in the feed's order
        self.ended = False
        self._top_up()  # (as Keras's enqueuer fills its queue when it starts: the workers start now)

    def _top_up(self) -> None:
        while not self.ended and len(self.ahead) < self.depth:
            try:
                index = self.feed.take()
            except StopIteration:
                self.ended = True
                return
            self.ahead.append((index, self.workers.submit(index)))

    def next_batch(self, hang_after_s: Optional[float], now: Callable[[], float]) -> Any:
        self._top_up()
        if not self.ahead:
            raise StopIteration
        future, t0 = self.ahead[0][1], now()
        while True:
            try:
                batch = future.result(POLL_S)
                break
            except TimeoutError:
                signals = self.worker_signals()
                if signals:
                    raise PoolKilled(signals) from None
                if hang_after_s is not None and now() - t0 > hang_after_s:
                    raise PoolHung(now() - t0) from None
            except BrokenProcessPool:
                raise PoolKilled(self.workers.broken()) from None
        self.ahead.popleft()  # (only once delivered: a batch whose fetch raised is still undelivered)
        self._top_up()
        return batch

    def undelivered(self, again: int = 0) -> List[Any]:
        return [index for index, _ in self.ahead]

    def close(self) -> None:
        if isinstance(self.workers, _Threads):
            # (a process pool's executor cancels what has not started itself: a future cancelled here
            # too, as its ended workers break the pool, makes its manager thread raise in the user's run)
            for _, future in self.ahead:
                future.cancel()
        self.workers.close()

    def worker_pids(self) -> List[int]:
        return [p.pid for p in self.workers.procs] if isinstance(self.workers, _Processes) else []

    def worker_signals(self) -> List[int]:
        return self.workers.dead() if isinstance(self.workers, _Processes) else []

    def workers_cpu_s(self) -> Optional[float]:
        """Threads: their CPU time (processes are measured by their pids)."""
        return self.workers.cpu_s() if isinstance(self.workers, _Threads) else None


def open_pool(dataset: Any, config: Dict[str, Any], feed: Feed) -> Any:
    """The pool Keras's own enqueuer would run for ``config`` (none: the loop's thread)."""
    cfg = legalize(config)
    if cfg["workers"] > 1 or cfg["use_multiprocessing"]:
        return QueuedPool(dataset, feed, config)
    return InLoopPool(dataset, feed, config)
