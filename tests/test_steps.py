"""Data-wait timing math, driven by an injected clock."""
import pytest

from feedprof.record.steps import StepRecorder, Watched, infer_batch_size
from tests.fakes import FakeClock


def feed(rec, fetch_s, compute_s, n, t0=0.0):
    """Simulate n batches: each fetch blocks fetch_s, then compute_s of work."""
    t = t0
    rec.epoch_started(t)
    for _ in range(n):
        t_req = t
        t += fetch_s
        rec.batch(t_req, t)
        t += compute_s
    return t


def test_wait_fraction_of_a_known_loop():
    rec = StepRecorder(0, warmup_batches=0)
    feed(rec, fetch_s=0.03, compute_s=0.01, n=101)
    assert rec.steady_batches == 100  # the first batch is epoch start-up
    assert rec.steady_wait_s == pytest.approx(100 * 0.03)
    assert rec.steady_wall_s == pytest.approx(100 * 0.04)
    snap = rec.snapshot()
    assert sum(snap.steps.wait_s) / sum(snap.steps.wall_s) == pytest.approx(0.75)


def test_first_batch_of_each_epoch_is_startup_not_a_step():
    rec = StepRecorder(0, warmup_batches=0)
    rec.epoch_started(0.0)
    rec.batch(0.0, 0.5)  # 0.5 s to the first batch (worker start)
    rec.batch(0.5, 0.6)
    rec.epoch_started(1.0)
    rec.batch(1.0, 1.2)
    rec.batch(1.2, 1.3)
    snap = rec.snapshot()
    assert snap.epochs.first_batch_s == pytest.approx((0.5, 0.2))
    assert snap.epochs.n_batches == (2, 2)
    assert sum(snap.steps.n_steps) == 2
    assert snap.steps.wall_s == pytest.approx((0.1, 0.1))


def test_warmup_steps_are_excluded_and_counted():
    rec = StepRecorder(0, warmup_batches=3)
    feed(rec, 0.01, 0.01, 10)
    snap = rec.snapshot()
    assert snap.warmup_batches == 3
    assert snap.warmup_s == pytest.approx(3 * 0.02)
    assert sum(snap.steps.n_steps) == 6  # 10 - first - 3 warm-up


def test_several_steps_timed_as_one_delivery():
    # fit with steps_per_execution=4: one callback every 4 steps of 25 ms
    rec = StepRecorder(0, warmup_batches=2)
    rec.epoch_started(0.0)
    for k in range(1, 11):
        rec.batch(k * 0.1, k * 0.1, n_steps=4)
    snap = rec.snapshot()
    assert rec.deliveries == 10 and snap.batches == 40
    assert snap.warmup_batches == 2  # the first timed delivery covers all of the warm-up
    assert sum(snap.steps.n_steps) == 32 and sum(snap.steps.wall_s) == pytest.approx(0.8)
    assert snap.epochs.n_batches == (40,)


def test_long_runs_keep_fixed_memory_and_exact_totals():
    rec = StepRecorder(0, warmup_batches=0, step_capacity=64)
    feed(rec, 0.001, 0.003, 100_001)
    snap = rec.snapshot()
    assert len(snap.steps.n_steps) <= 64
    assert sum(snap.steps.n_steps) == 100_000
    assert sum(snap.steps.wait_s) / sum(snap.steps.wall_s) == pytest.approx(0.25)


def test_times_are_relative_to_origin():
    rec = StepRecorder(0, warmup_batches=0, origin_s=1000.0)
    feed(rec, 0.1, 0.1, 3, t0=1000.0)
    snap = rec.snapshot()
    assert snap.steps.t_end_s[0] == pytest.approx(0.3)


def test_watched_iterator_times_with_injected_clock():
    clock = FakeClock(0.0)

    class SlowSource:
        def __iter__(self):
            for i in range(5):
                clock.advance(0.2)  # the loader blocks 0.2 s
                yield [i] * 4

    rec = StepRecorder(0, warmup_batches=0)
    watched = Watched(SlowSource(), rec, now=clock.now_s)
    for _ in watched:
        clock.advance(0.05)  # the training step
    assert rec.batches == 5
    assert rec.steady_wait_s == pytest.approx(4 * 0.2)
    assert rec.steady_wall_s == pytest.approx(4 * 0.25)
    assert rec.info.batch_size == 4  # read off the first batch


def test_time_between_epochs_is_measured_from_the_loaders_end_of_epoch():
    clock = FakeClock(0.0)

    class Source:
        def __len__(self):
            return 4

        def __iter__(self):
            for i in range(4):
                clock.advance(0.01)
                yield [i]
            clock.advance(0.1)  # the loader ending its epoch (workers stopped)

    rec = StepRecorder(0, warmup_batches=0)
    watched = Watched(Source(), rec, now=clock.now_s)
    for _ in range(3):
        for _ in watched:
            clock.advance(0.02)
        clock.advance(0.5)  # validation, outside the loader
    e = rec.snapshot().epochs
    assert e.teardown_s == pytest.approx((0.1, 0.1, 0.1))
    assert e.between_s == pytest.approx((0.5, 0.5, 0.0))  # the last epoch's next one never came
    assert e.n_between == (1, 1, 0)


def test_watched_is_transparent():
    data = [1, 2, 3]
    watched = Watched(data, StepRecorder(0))
    assert list(watched) == data
    assert list(watched) == data  # a second epoch
    assert len(watched) == 3
    assert watched.count(2) == 1  # attributes pass through


class Shaped:
    def __init__(self, *shape):
        self.shape = shape


@pytest.mark.parametrize("batch,expected", [
    (Shaped(32, 3), 32),
    ((Shaped(16, 3), Shaped(16)), 16),
    ({"x": Shaped(8, 2), "y": Shaped(8)}, 8),
    ([Shaped(4), Shaped(4)], 4),
    ([1, 2, 3], 3),
    (Shaped(), None),
    ("text", None),
])
def test_infer_batch_size(batch, expected):
    assert infer_batch_size(batch) == expected
