"""The pools that serve a Keras PyDataset online (frameworks/keras_pool.py), on a plain
indexable dataset: the loop's own thread, threads, forked processes; switched between at any
batch, they deliver the epoch's indices once each, in the order drawn."""
import random
import time

import pytest

from feedprof.frameworks.keras_pool import InLoopPool, QueuedPool, open_pool
from feedprof.frameworks.switching import Feed, PoolKilled, SwitchingLoader

pytestmark = pytest.mark.usefixtures("e2e")  # (forks worker processes)


class Batches:
    """A PyDataset's shape: batch i after a short wait on storage."""

    def __len__(self):
        return 48

    def __getitem__(self, i):
        time.sleep(0.002)
        return ("batch", i)


class Tuning:
    def __init__(self, schedule):
        self.schedule, self.n, self.switches = schedule, 0, []
        self.now = time.monotonic

    def register(self, ol):
        self.registered = ol

    def config_for(self, ol):
        return self.schedule(self.n)

    def hang_limit_s(self, ol, config):
        return 20.0

    def safe_config(self, ol, failed):
        return ol.script_config

    def switched(self, ol, config, restart=False):
        self.switches.append((config["workers"], config["use_multiprocessing"]))

    def delivered(self, ol, *args):
        self.n += 1

    def failed(self, *args, **kwargs):
        pass

    def epoch_ended(self, ol):
        pass


def cfg(workers, processes=False, queue=4):
    return {"workers": workers, "use_multiprocessing": processes, "max_queue_size": queue}


def test_each_config_gets_the_pool_keras_would_run():
    feed = Feed()
    feed.new_epoch(iter(range(48)))
    assert isinstance(open_pool(Batches(), cfg(1), feed), InLoopPool)
    threads = open_pool(Batches(), cfg(4), feed)
    assert isinstance(threads, QueuedPool) and threads.worker_pids() == []
    threads.close()
    processes = open_pool(Batches(), cfg(1, processes=True), feed)  # one process is still an enqueuer
    assert isinstance(processes, QueuedPool) and len(processes.worker_pids()) == 1
    processes.close()


def test_switching_between_the_loop_threads_and_processes_keeps_the_order():
    data = Batches()
    order = random.Random(5).sample(range(len(data)), len(data))
    schedule = lambda n: cfg(1) if n < 6 else cfg(6) if n < 20 else cfg(3, processes=True) if n < 35 else cfg(2)  # noqa
    tuning = Tuning(schedule)
    ol = SwitchingLoader(lambda config, feed: open_pool(data, config, feed), tuning, 0, cfg(1), (), len(data))
    ol.start_epoch(iter(order))
    got = []
    while True:
        try:
            got.append(ol.next_batch())
        except StopIteration:
            break
    ol.end_epoch()
    assert got == [("batch", i) for i in order]
    assert tuning.switches == [(1, False), (6, False), (3, True), (2, False)]


def test_a_dead_worker_process_is_found_not_waited_for():
    import os
    import signal

    feed = Feed()
    feed.new_epoch(iter(range(48)))
    pool = open_pool(Batches(), cfg(2, processes=True, queue=2), feed)
    try:
        pool.next_batch(None, time.monotonic)
        for pid in pool.worker_pids():
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(PoolKilled) as killed:
            for _ in range(48):
                pool.next_batch(None, time.monotonic)
        assert signal.SIGKILL in killed.value.signals
        assert pool.undelivered()  # what it held goes back to the feed
    finally:
        pool.close()


def test_closing_a_process_pool_mid_epoch_raises_nothing_in_its_threads(monkeypatch):
    """Its workers are ended (or one was just killed) with batches still asked for: the executor's
    own threads must end quietly, as an exception there prints a traceback into the user's run.
    (Python 3.11's executor raises InvalidStateError in its manager thread where a future it fails
    for a broken pool was cancelled by its caller first: CPython gh-107219, fixed in 3.12. The pool
    leaves the cancelling to the executor's shutdown.) The race is rare: this is the guard."""
    import os
    import signal
    import threading

    from concurrent.futures import Future

    raised, cancelled_here = [], []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(repr(args.exc_value)))
    cancel = Future.cancel

    def watched_cancel(future):  # the race's first half, whether or not this run hits it
        if threading.current_thread() is threading.main_thread():
            cancelled_here.append(future)
        return cancel(future)

    monkeypatch.setattr(Future, "cancel", watched_cancel)
    for k in range(6):
        feed = Feed()
        feed.new_epoch(iter(range(48)))
        pool = open_pool(Batches(), cfg(2, processes=True, queue=8), feed)
        pool.next_batch(None, time.monotonic)
        manager = pool.workers.executor._executor_manager_thread
        if k % 2:
            os.kill(pool.worker_pids()[0], signal.SIGKILL)
        pool.close()
        manager.join(10)
        assert not manager.is_alive()
    assert raised == []
    assert cancelled_here == []  # (only the executor's own thread cancels what had not started)
