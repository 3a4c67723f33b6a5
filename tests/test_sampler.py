"""Sampler schedule (fake clock), bounded memory, and real psutil readings."""
import multiprocessing as mp
import os
import time

import pytest

from feedprof.store.reasons import GpuUnavailable, SamplingStopped
from feedprof.store import GpuStatus

from feedprof.record.gpu import NullGpu
from feedprof.record.sampler import Sampler, next_tick
from tests.fakes import FakeClock, fake_pynvml


def test_next_tick_does_not_drift():
    # a sample that takes 30 % of the interval still lands on the grid
    assert next_tick(0.0, 0.2, 0.06, 0) == 1
    assert next_tick(0.0, 0.2, 0.26, 1) == 2


def test_next_tick_skips_missed_ticks_instead_of_bursting():
    assert next_tick(0.0, 0.2, 1.05, 1) == 6  # ticks 2..5 were missed: not made up


def test_thread_loop_waits_on_the_grid():
    clock = FakeClock(0.0)
    s = Sampler(interval_s=0.2, gpu=NullGpu(GpuStatus.NO_GPU), clock=clock)
    slow = s.sample_once

    def sample_taking_50ms():
        slow()
        clock.advance(0.05)
        if len(clock.waits) >= 5:
            s._stop.set()

    s.sample_once = sample_taking_50ms
    s._loop()
    assert clock.waits[:4] == pytest.approx([0.15, 0.15, 0.15, 0.15])  # interval minus the work


def test_rows_are_bounded_and_peaks_exact():
    clock = FakeClock(0.0)
    s = Sampler(interval_s=0.2, gpu=NullGpu(GpuStatus.NO_GPU), clock=clock, capacity=16,
                memory_detail_interval_s=1e9)
    for _ in range(1000):
        s.sample_once()
        clock.advance(0.2)
    snap = s.snapshot()
    assert len(snap.t_s) <= 16
    assert snap.n_taken == 1000
    assert snap.stride >= 64
    assert snap.peaks.tree_rss_bytes is not None and snap.peaks.tree_rss_bytes >= max(snap.main_rss_bytes)
    assert snap.notes == (GpuUnavailable(status="no_gpu"),)


def _busy(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.serial
def test_real_process_tree_is_sampled_workers_included(e2e):  # spinning workers
    ctx = mp.get_context("fork")
    workers = [ctx.Process(target=_busy, args=(3.0,)) for _ in range(2)]
    for w in workers:
        w.start()
    try:
        s = Sampler(interval_s=0.1, gpu=False, children_refresh_s=0.1, memory_detail_interval_s=0.5).start()
        time.sleep(1.5)
        snap = s.stop()
    finally:
        for w in workers:
            w.terminate()
            w.join()
    assert max(snap.n_workers) == 2
    busy = [c for c in snap.workers_cpu_pct[3:] if c is not None]
    assert max(busy) > 50  # two spinning children show up as CPU of the tree
    assert all(r > 0 for r in snap.main_rss_bytes)
    assert snap.peaks.tree_pss_bytes is not None and snap.peaks.worker_uss_bytes is not None
    assert len(snap.per_core_cpu_pct[-1]) == os.cpu_count()
    assert GpuUnavailable(status="off") in snap.notes


def test_observing_a_process_that_exits_ends_quietly():
    ctx = mp.get_context("fork")
    child = ctx.Process(target=time.sleep, args=(0.3,))
    child.start()
    s = Sampler(pid=child.pid, interval_s=0.05, gpu=False).start()
    child.join()
    time.sleep(0.3)
    snap = s.stop()
    assert snap.n_taken >= 2
    assert not any(isinstance(n, SamplingStopped) for n in snap.notes)


def test_gpu_columns_and_a_gpu_lost_mid_run():
    nv = fake_pynvml(["GPU-aaa", "GPU-bbb"])
    from feedprof.record.gpu import open_gpu
    gpu = open_gpu(nvml=nv, visible_devices=None)
    clock = FakeClock(0.0)
    s = Sampler(interval_s=0.2, gpu=gpu, clock=clock)
    s.sample_once()
    nv.lost.add(1)  # cuda:1 falls off the bus
    clock.advance(0.2)
    s.sample_once()
    snap = s.snapshot()
    g0, g1 = snap.gpus
    assert g0.util_pct == (10.0, 10.0)
    assert g1.util_pct == (20.0, None)  # a gap, and sampling carried on
    assert g1.mem_used_bytes[0] == 2 * 2**30
    assert snap.main_rss_bytes[1] is not None
    assert snap.peaks.gpu_mem_used_bytes == (2**30, 2 * 2**30)
