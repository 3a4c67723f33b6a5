"""The memory budget: a config predicted not to fit is rejected before it runs."""
import dataclasses

from feedprof.reasons import OverMemoryBudget, OverShmBudget
from feedprof.store import Peaks, Role, Run, Samples, Trial, TrialState
from feedprof.tune.budget import SAFETY, MemoryBudget

GiB = 2**30


def trial(peaks, shm_series=(), state=TrialState.OK):
    run = Run(samples=Samples(shm_used_bytes=tuple(shm_series), peaks=peaks))
    return Trial(index=0, role=Role.SEARCH, config={}, state=state, run=run)


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
