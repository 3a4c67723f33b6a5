"""The memory and open-file budget: a config predicted not to fit is rejected before it runs."""
import dataclasses

import pytest

from feedprof.store.reasons import (GrowthOverMemoryBudget, OutOfMemoryKilled, OverFdLimit, OverMemoryBudget, OverShmBudget,
                              SharedMemoryExhausted)
from feedprof.store import Peaks, Role, Run, Samples, TrialState
from feedprof.tune.budget import SAFETY, MemoryBudget
from tests.records import make_trial

GiB = 2**30


def trial(peaks, shm_series=(), state=TrialState.OK):
    run = Run(samples=Samples(shm_used_bytes=tuple(shm_series), peaks=peaks))
    return make_trial(index=0, role=Role.SEARCH, config={}, state=state, run=run)


def test_nothing_is_rejected_before_a_trial_with_workers():
    budget = MemoryBudget(ram_bytes=1 * GiB, shm_bytes=64 * 2**20)
    budget.learn(trial(Peaks(tree_pss_bytes=int(0.5 * GiB))), workers=0, in_flight=0)
    assert budget.check(workers=64, in_flight=128) is None  # no per-worker figure yet


def test_ram_is_predicted_from_the_main_process_and_the_largest_worker():
    budget = MemoryBudget(ram_bytes=4 * GiB, shm_bytes=None)
    budget.learn(trial(Peaks(tree_pss_bytes=1 * GiB)), workers=0, in_flight=0)
    budget.learn(trial(Peaks(tree_pss_bytes=2 * GiB, worker_pss_bytes=GiB // 4)), workers=4, in_flight=8)
    assert budget.predict(8, 16)["ram_bytes"] == int(SAFETY * (1 * GiB + 8 * GiB // 4))
    assert budget.check(8, 16) is None  # 3.9 GiB of 4
    over = budget.check(16, 32)  # 6.5 GiB
    assert isinstance(over, OverMemoryBudget)
    assert over.per_worker_bytes == GiB // 4 and over.free_bytes == 4 * GiB and over.need_bytes > 4 * GiB


def test_shared_memory_per_batch_in_flight():
    budget = MemoryBudget(ram_bytes=None, shm_bytes=64 * 2**20)  # Docker's default /dev/shm
    budget.learn(trial(Peaks(worker_pss_bytes=1, shm_used_bytes=10 * 2**20), shm_series=(2 * 2**20, 10 * 2**20)),
                 workers=2, in_flight=4)  # 8 MiB for 4 batches: 2 MiB each
    assert budget.check(4, 16) is None  # 16 x 2 MiB x 1.3 = 41.6 MiB
    over = budget.check(8, 32)  # 83 MiB
    assert isinstance(over, OverShmBudget) and over.free_bytes == 64 * 2**20


def test_failed_trials_teach_nothing():
    budget = MemoryBudget(ram_bytes=GiB, shm_bytes=None)
    budget.learn(trial(Peaks(tree_pss_bytes=GiB, worker_pss_bytes=GiB), state=TrialState.KILLED), 4, 8)
    assert budget.per_worker_bytes is None and budget.check(64, 128) is None


def test_this_machine_has_a_budget():
    budget = MemoryBudget.of_this_machine()
    assert budget.ram_bytes > 0
    assert dataclasses.replace(budget).shm_bytes == budget.shm_bytes


# ------------------------------------------------- what a short trial does not reach

MiB = 2**20


def growing_trial(epoch_batches=10_000):
    """2 workers at 100 batches/s whose USS grows 10 MiB/s each: 0.2 MiB per batch a worker makes."""
    from feedprof.store import LoaderRecord, Window

    t = tuple(0.5 * i for i in range(7))
    run = Run(window=Window(loader_id=0, t_start_s=0.0, t_end_s=3.0),
              loaders=(LoaderRecord(loader_id=0, framework="torch", batches_per_epoch=epoch_batches),),
              samples=Samples(t_s=t, worker_uss_bytes=tuple(int(20 * MiB + 10 * MiB * x) for x in t),
                              worker_pid=(5,) * 7, main_rss_bytes=(300 * MiB,) * 7,
                              peaks=Peaks(tree_pss_bytes=400 * MiB, worker_pss_bytes=60 * MiB)))
    return make_trial(index=2, role=Role.SEARCH, config={}, state=TrialState.OK, batches_per_s=100.0, run=run)


def test_memory_that_grows_is_projected_to_the_end_of_an_epoch():
    budget = MemoryBudget(ram_bytes=2 * GiB, shm_bytes=None)
    budget.learn(growing_trial(), workers=2, in_flight=4)
    assert budget.growth_per_batch_bytes == pytest.approx(0.2 * MiB)
    assert budget.check(2, 4) is None  # 2 workers: 5,000 batches each, capped at a full copy (300 MiB)
    over = budget.check(8, 16)  # each worker makes 1,250 batches: 60 + 250 MiB
    assert isinstance(over, GrowthOverMemoryBudget)
    assert over.per_worker_bytes == 60 * MiB + 250 * MiB and over.epoch_batches == 10_000
    assert over.need_bytes > over.free_bytes == 2 * GiB


def test_a_short_epoch_grows_little():
    budget = MemoryBudget(ram_bytes=2 * GiB, shm_bytes=None)
    budget.learn(growing_trial(epoch_batches=100), workers=2, in_flight=4)
    assert budget.check(8, 16) is None  # 100 batches x 0.2 MiB: 20 MiB in all


def fd_trial(main_fds, worker_fds, limit=64):
    run = Run(samples=Samples(fd_limit=limit, peaks=Peaks(worker_pss_bytes=1, main_fds=main_fds,
                                                          worker_fds=worker_fds)))
    return make_trial(index=0, role=Role.SEARCH, config={}, state=TrialState.OK, run=run)


def test_open_files_are_fitted_over_workers_and_batches_in_flight():
    budget = MemoryBudget(ram_bytes=None, shm_bytes=None)
    budget.learn(fd_trial(6, None), workers=0, in_flight=0)
    assert budget.check(32, 64) is None  # one point: no line yet
    budget.learn(fd_trial(16, 17), workers=2, in_flight=4)  # 10 more for 2 workers and 4 batches: 5/3 each
    assert budget.predict(4, 8)["main_fds"] == 26
    assert budget.check(4, 8) is None  # 26 of 64
    over = budget.check(6, 24)  # 6 + 30 x 5/3 = 56 > 80 % of 64
    assert isinstance(over, OverFdLimit) and over.limit_fds == 64 and over.process == "main"


def test_a_kill_is_explained_with_the_config_and_what_it_needed():
    budget = MemoryBudget(ram_bytes=None, shm_bytes=64 * MiB, shm_per_batch_bytes=2 * MiB, per_worker_bytes=90 * MiB)
    shm = budget.explain(SharedMemoryExhausted(signal="SIGBUS", shm_total_bytes=64 * MiB), workers=8, in_flight=32)
    assert shm.need_bytes == 64 * MiB and shm.workers == 8 and shm.shm_total_bytes == 64 * MiB
    oom = budget.explain(OutOfMemoryKilled(signal="SIGKILL", workers=3), workers=16, in_flight=32)
    assert oom.workers == 16 and oom.worker_pss_bytes == 90 * MiB


def test_max_memory_replaces_what_is_free():
    assert MemoryBudget.of_this_machine(max_ram_bytes=GiB).ram_bytes == GiB
