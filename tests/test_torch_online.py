"""The feed that worker pools share in online mode (frameworks/torch_online.py): what one
pool took but did not deliver is served first by the next, so the loop sees the order once."""
from feedprof.frameworks.torch_online import Feed
from feedprof.frameworks.torch_pool import PoolHung, failure_kind


def test_batches_taken_but_not_delivered_are_served_first_by_the_next_pool():
    feed = Feed(length=10)
    feed.new_epoch(iter(range(10)))
    first = iter(feed)  # a pool with workers prefetches 5 batches ...
    taken = [next(first) for _ in range(5)]
    delivered = taken[:2]  # ... and delivered 2 when the switch came
    feed.hand_back(first.taken[len(delivered):])
    second = iter(feed)
    rest = list(second)
    assert delivered + rest == list(range(10))
    assert second.taken == rest


def test_a_pool_that_fails_to_start_hands_back_everything_it_took():
    feed = Feed(length=6)
    feed.new_epoch(iter(range(6)))
    broken = iter(feed)
    next(broken), next(broken)
    feed.hand_back(broken.taken)
    assert list(iter(feed)) == list(range(6))


def test_a_new_epoch_forgets_what_the_last_left_over():
    feed = Feed(length=4)
    feed.new_epoch(iter(range(4)))
    seg = iter(feed)
    next(seg)
    feed.hand_back([99])
    feed.new_epoch(iter(range(4)))
    assert list(iter(feed)) == [0, 1, 2, 3]


def test_failures_are_told_from_the_datasets_own_errors():
    killed = RuntimeError("DataLoader worker (pid(s) 123, 456) exited unexpectedly")
    by_signal = RuntimeError("DataLoader worker (pid 17353) is killed by signal: Killed. ")
    assert failure_kind(killed) == "killed" and failure_kind(by_signal) == "killed"
    assert failure_kind(PoolHung(21.0)) == "hung"
    assert failure_kind(ValueError("corrupt record 37")) is None
    assert failure_kind(RuntimeError("CUDA error")) is None
