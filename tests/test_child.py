"""The trial controller's window on a fake clock: warm-up covers the queue a
config builds, and a first chunk that is a draining queue is left out."""
import json

import pytest

from feedprof.frameworks.contract import Plan
from feedprof.record.steps import LoaderInfo
from feedprof.trial.controller import Controller, StopTrial
from feedprof.trial.window import QUEUE_MULTIPLE
from feedprof.trial.protocol import Mode, TrialSpec
from tests.fakes import FakeClock


def controller(tmp_path, clock, **window):
    spec = TrialSpec(script=str(tmp_path / "train.py"), argv=[], result_path=str(tmp_path / "result.json"),
                     events_path=str(tmp_path / "events.jsonl"), origin_s=clock.now_s(), mode=Mode.INJECT,
                     **{"window_batches": 100_000, "window_seconds": 2.0, "min_window_batches": 30,
                        "warmup_batches": 2, **window})
    return Controller(spec, clock)


def run_until_measured(ctl, clock, gaps_s, config):
    plan = Plan(framework="torch", chain=("train.py:9",), is_target=True, inject=None, replay=False)
    handle = ctl.created(plan, LoaderInfo(config=config))
    it = ctl.iterate(handle, lambda: iter(range(10**6)))
    with pytest.raises(StopTrial):
        for gap in gaps_s:
            clock.advance(gap)
            next(it)
    with open(ctl.spec.result_path) as fh:
        return json.load(fh), handle


def window_rate(result):
    w = result["window"]
    steps = result["loaders"][0]["steps"]
    inside = [(t, n) for t, n in zip(steps["t_end_s"], steps["n_steps"]) if w["t_start_s"] < t <= w["t_end_s"]]
    return sum(n for _, n in inside) / (w["t_end_s"] - w["t_start_s"])


def test_a_queue_filled_at_start_up_is_not_the_steady_rate(tmp_path):
    """16 workers x prefetch 2: the first 90 batches come from the queue at 1 ms
    each; then the loader delivers one every 10 ms (100 batches/s)."""
    clock = FakeClock(0.0)
    ctl = controller(tmp_path, clock)
    result, handle = run_until_measured(ctl, clock, [0.001] * 90 + [0.01] * 2000,
                                        {"num_workers": 16, "prefetch_factor": 2})
    assert handle.rec.warmup_batches == 32  # the warm-up covers the batches in flight
    assert window_rate(result) == pytest.approx(100.0, rel=0.03)  # what is left of the queue: under 3 %
    assert result["window"]["t_start_s"] > 0.09  # it starts after the queue drained


def test_a_steady_loader_keeps_its_window_start(tmp_path):
    clock = FakeClock(0.0)
    ctl = controller(tmp_path, clock)
    result, handle = run_until_measured(ctl, clock, [0.01] * 2000, {"num_workers": 2, "prefetch_factor": 2})
    assert handle.rec.warmup_batches == 4
    assert result["window"]["t_start_s"] == pytest.approx(0.05)  # first batch + 4 warm-up batches
    assert window_rate(result) == pytest.approx(100.0, rel=0.01)
    assert ctl.settle.moves == 0


def test_a_window_holds_several_times_the_queue(tmp_path):
    clock = FakeClock(0.0)
    ctl = controller(tmp_path, clock, window_seconds=0.1)
    result, _ = run_until_measured(ctl, clock, [0.01] * 5000, {"num_workers": 32, "prefetch_factor": 4})
    steps = sum(result["loaders"][0]["steps"]["n_steps"])
    assert steps >= QUEUE_MULTIPLE * 128  # not 0.1 s worth: 4 x 128 batches in flight


def test_workers_still_starting_are_not_the_steady_rate(tmp_path):
    """32 workers on 2 CPUs: past the warm-up the loop still gets a batch every
    25 ms for half a second while the last workers start, then one every 10 ms."""
    clock = FakeClock(0.0)
    ctl = controller(tmp_path, clock)
    result, _ = run_until_measured(ctl, clock, [0.001] * 64 + [0.025] * 20 + [0.01] * 2000,
                                   {"num_workers": 32, "prefetch_factor": 2})
    assert window_rate(result) == pytest.approx(100.0, rel=0.05)  # without the move: 90
    assert ctl.settle.moves >= 1


class CountingClock(FakeClock):
    """Counts every read: what the trial's hot path asks of the clocks per batch."""

    def __init__(self):
        super().__init__()
        self.now_reads = self.cpu_reads = 0

    def now_s(self):
        self.now_reads += 1
        return super().now_s()

    def thread_cpu_s(self):
        self.cpu_reads += 1
        return super().thread_cpu_s()


def test_the_hot_path_reads_two_clocks_twice_and_writes_nothing_per_batch(tmp_path):
    """What feedprof does inside the training process per batch (the part that runs beside the
    user's step, where a busy machine makes every extra cost show): counted, not timed."""
    clock = CountingClock()
    ctl = controller(tmp_path, clock, window_seconds=1e9)
    plan = Plan(framework="torch", chain=("train.py:9",), is_target=True, inject=None, replay=False)
    handle = ctl.created(plan, LoaderInfo(config={"num_workers": 0}))

    def loading():  # the loader's own work inside __next__: 2 ms of the thread's CPU a batch
        for i in range(10**6):
            clock.cpu += 0.002
            yield i

    it = ctl.iterate(handle, loading)
    for _ in range(50):  # warm-up and the first batch's one-off work (its event, the batch size)
        clock.advance(0.01)
        next(it)
    events = (tmp_path / "events.jsonl").stat().st_size
    clock.now_reads = clock.cpu_reads = 0
    n = 1000
    for _ in range(n):
        clock.advance(0.01)
        next(it)
    assert clock.now_reads == 2 * n and clock.cpu_reads == 2 * n
    assert (tmp_path / "events.jsonl").stat().st_size == events  # no event, no file write per batch
    log = handle.rec.step_log()
    assert log.cpu_s[-1] == pytest.approx(0.002)  # the thread's CPU in __next__, per step
