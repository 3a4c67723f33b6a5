"""The feed that worker pools share in online mode (frameworks/torch_online.py): what one
pool took but did not deliver is served first by the next, so the loop sees the order once."""
from feedprof.frameworks.torch_feed import Feed
from feedprof.frameworks.torch_pool import PoolHung, failure_kind, lost_worker


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


def test_a_broken_channel_from_a_worker_is_told_from_the_datasets_own_error():
    """A worker killed after it sent a batch: receiving the batch's descriptors fails before its
    death can be read (then the pool awaits its end, and its signal says killed)."""
    assert lost_worker(EOFError()) and lost_worker(ConnectionResetError(104, "Connection reset by peer"))
    assert lost_worker(RuntimeError("received 0 items of ancdata"))
    wrapped = EOFError("Caught EOFError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):")
    assert not lost_worker(wrapped)  # the dataset's own EOFError, raised in its worker
    assert not lost_worker(ValueError("corrupt record 37"))


# ------------------------------------------------ what online mode checks (fast: 0 workers, no processes)

import random  # noqa: E402

import pytest  # noqa: E402

from feedprof.frameworks.torch_ledger import EXHAUSTED, LEFT, EpochLedger  # noqa: E402
from feedprof.frameworks.torch_rng import CHECK_BATCHES, DrawWatch  # noqa: E402


def test_the_ledger_claims_an_epoch_only_when_every_batch_was_the_samplers_next():
    given = [[0, 1], [2, 3], [4, 5]]
    ok = EpochLedger(epoch=1, iterator=1)
    for b in given:
        ok.give(b)
    for b in given:
        ok.receive(b)
    check = ok.close(EXHAUSTED)
    assert check["same"] and check["given_digest"] == check["delivered_digest"] and check["delivered_batches"] == 3

    swapped = EpochLedger(epoch=1, iterator=1)
    for b in given:
        swapped.give(b)
    for b in (given[1], given[0], given[2]):
        swapped.receive(list(b))  # (equal indices, other objects: compared by value)
    assert not swapped.close(EXHAUSTED)["same"]

    lost = EpochLedger(epoch=1, iterator=1)
    for b in given:
        lost.give(b)
    lost.receive(given[0])
    assert not lost.close(EXHAUSTED)["same"]  # the epoch ended with batches never delivered
    left = EpochLedger(epoch=1, iterator=1)
    for b in given:
        left.give(b)
    left.receive(given[0])
    assert left.close(LEFT)["same"]  # the loop broke out: what it had is a prefix of what was given


def _batches(watch, n, fetch=lambda: None, step=lambda: None, loop=lambda: None, in_main=True):
    watch.new_epoch()
    for k in range(n):
        watch.begin()
        watch.step(step, first=k == 0)
        fetch()
        watch.end(in_main=in_main, own=True)
        loop()


def test_draws_in_the_main_process_are_told_apart(torch):
    np = pytest.importorskip("numpy")
    quiet = DrawWatch()
    _batches(quiet, CHECK_BATCHES)
    assert quiet.ready() and quiet.verdict() == ""

    augments = DrawWatch()
    _batches(augments, 3, fetch=lambda: torch.rand(1))
    assert augments.verdict() == "rng_loading" and augments.streams() == ("torch",)
    masks = DrawWatch()
    _batches(masks, 3, fetch=lambda: np.random.rand(4))
    assert masks.verdict() == "rng_loading" and masks.streams() == ("numpy",)
    in_workers = DrawWatch()  # the fetch happens in workers: the main process sees nothing of it
    _batches(in_workers, 3, fetch=lambda: None, in_main=False)
    assert in_workers.verdict() == ""

    lazy = DrawWatch()  # a sampler drawing every batch, the loop drawing nothing: switching moves nothing
    _batches(lazy, 4, step=lambda: random.random())
    assert lazy.sampler == {"random"} and lazy.verdict() == ""
    lazy_and_loop = DrawWatch()
    _batches(lazy_and_loop, 4, step=lambda: torch.randint(0, 9, (2,)), loop=lambda: torch.rand(1))
    assert lazy_and_loop.verdict() == "rng_sampler"
    seeded_once = DrawWatch()  # RandomSampler: a seed drawn at the epoch's first step only
    _batches(seeded_once, 4, step=lambda: None, loop=lambda: torch.rand(1))
    assert seeded_once.verdict() == ""


def test_online_mode_refuses_a_torch_it_was_not_checked_against(torch, monkeypatch):
    from torch.utils.data import dataloader as dl

    from feedprof.frameworks import torch_support
    from feedprof.render.online import why_not_words

    assert torch_support.why_unsupported() is None
    for version in ("2.4.1", "2.15.0", "3.0.0"):
        monkeypatch.setattr(torch, "__version__", version)
        code = torch_support.why_unsupported()
        assert code == f"torch_version:{version}"
        assert f"torch {version}" in why_not_words(code) and "2.5 to 2.14" in why_not_words(code)
    monkeypatch.setattr(torch, "__version__", "2.13.0")

    def _reset(self, loader, first_iter=False):  # a torch whose iterator counts otherwise
        self._sent, self._received = 0, 0

    monkeypatch.setattr(dl._MultiProcessingDataLoaderIter, "_reset", _reset)
    code = torch_support.why_unsupported()
    assert code.startswith("torch_private:_MultiProcessingDataLoaderIter._reset")
    assert "not as online switching expects" in why_not_words(code)


class _Indices:
    def __len__(self):
        return 40

    def __getitem__(self, i):
        return i


def _online_loader(loader):
    """The loader served online at the script's own settings (0 workers: no processes), and the
    events its checks emitted; ``iterate()`` is what the script's iter(loader) gets."""
    import time

    from feedprof.frameworks.torch import KNOBS, legalize
    from feedprof.frameworks.torch_online import OnlineLoader
    from feedprof.trial.online_child import OnlineTuning

    events = []
    tuning = OnlineTuning("", lambda event, **fields: events.append(dict(event=event, **fields)), time.monotonic,
                          0.0, 0.5, 3)
    ol = OnlineLoader(loader, tuning, 0, legalize({k: getattr(loader, k, None) for k in KNOBS}))

    def iterate():
        if ol.busy():
            ol.own_iterator()
            return iter(loader)
        tuning.consider(ol)
        return ol.epoch()

    return ol, iterate, events


def _run(torch, shape, iterate):
    torch.manual_seed(0)
    seen = shape(iterate)
    return seen, torch.rand(1).item()


@pytest.mark.parametrize("shape", [
    lambda it: [[a.tolist(), b.tolist()] for _ in range(2) for a, b in zip(it(), it())],
    lambda it: [[a.tolist(), next(it()).tolist()] for _ in range(2) for k, a in enumerate(it()) if k % 3 == 0],
    lambda it: [a.tolist() for _ in range(3) for k, a in zip(range(4), it())],
], ids=["zip_loader_loader", "probe_batch", "break_after_4"])
def test_every_iterator_is_its_own_stream_as_torch_gives_it(torch, DataLoader, shape):
    loader = DataLoader(_Indices(), batch_size=4, shuffle=True)
    want = _run(torch, shape, lambda: iter(loader))
    ol, iterate, events = _online_loader(loader)
    got = _run(torch, shape, iterate)
    ol.close()
    assert got == want
    checks = [e for e in events if e["event"] == "online_order"]
    assert checks and all(c["same"] for c in checks), checks


def test_an_epoch_whose_every_batch_was_had_is_over_without_its_stop_iteration(torch, DataLoader):
    """A trainer that counts its steps (Lightning) takes len(loader) batches, never asks for the
    StopIteration, and keeps the iterator until the next epoch's iter(): that one is the next
    epoch, served online, not a second stream."""
    loader = DataLoader(_Indices(), batch_size=4, shuffle=True)
    ol, iterate, events = _online_loader(loader)
    kept = []
    for _ in range(3):
        kept.append(iterate())
        for _, batch in zip(range(len(loader)), kept[-1]):
            pass
    ol.close()
    checks = [e for e in events if e["event"] == "online_order"]
    assert [(c["epoch"], c["ended"], c["same"], c["own_iterators"]) for c in checks] == \
        [(1, "exhausted", True, 0), (2, "exhausted", True, 0), (3, "exhausted", True, 0)]


class _OwnRng:
    """A dataset that draws its augmentation from a generator of its own (``self.rng``)."""

    def __init__(self, np):
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return float(i + self.rng.random())


def test_draws_from_a_generator_the_dataset_holds_are_the_scripts_too(torch, DataLoader):
    np = pytest.importorskip("numpy")
    ds = _OwnRng(np)
    watch = DrawWatch(own=(ds.rng,))
    _batches(watch, 3, fetch=lambda: ds[0])
    assert watch.verdict() == "rng_loading" and watch.streams() == ("own",)
    untouched = DrawWatch(own=(ds.rng,))
    _batches(untouched, CHECK_BATCHES)
    assert untouched.verdict() == ""

    loader = DataLoader(_OwnRng(np), batch_size=4, shuffle=True)  # 0 workers: it draws in the main process
    ol, iterate, events = _online_loader(loader)
    for _ in iterate():
        pass
    ol.close()
    said = [e for e in events if e["event"] == "online_randomness"]
    assert said and said[0]["where"] == "rng_loading" and said[0]["streams"] == ["own"]
    assert ol.hold_why == "rng_loading"  # not switched without --allow-rng-change


class _Storage:
    """Each sample waits 5 ms on "storage"."""

    def __len__(self):
        return 48

    def __getitem__(self, i):
        import time

        time.sleep(0.005)
        return i


def test_a_probe_batch_is_left_out_of_the_tuned_loader_s_windows(torch, DataLoader):
    """A probe (next(iter(loader)) inside the epoch: torch's own iterator, the script's settings)
    costs the loop the same whatever config the tuned loader serves: its time is told apart in the
    window it falls in and left out of the window's span, never booked as the config's."""
    import time

    from feedprof.frameworks.contract import OwnIterator

    loader = DataLoader(_Storage(), batch_size=4)
    ol, iterate, events = _online_loader(loader)
    in_probes_s = 0.0
    for _ in range(3):
        for k, _batch in enumerate(iterate()):
            if k % 2 == 0:  # a probe every other batch: as long as a batch of the tuned loader's
                assert ol.busy()
                t0 = time.monotonic()
                next(OwnIterator(ol, ol.tuning, lambda: iter(loader)))
                in_probes_s += time.monotonic() - t0
    ol.close()
    windows = [e for e in events if e["event"] == "online_window"]
    assert windows
    other_s, span_s = sum(w["other_s"] for w in windows), sum(w["span_s"] for w in windows)
    assert 0.2 < other_s / (other_s + span_s) < 0.5  # a third of the loop's time was the probes'
    assert other_s <= in_probes_s + 1e-6
