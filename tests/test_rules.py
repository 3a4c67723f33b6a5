"""analyse/rules.py: the rules both searches decide by, and the one list of where they differ."""
import math

import pytest

from feedprof.analyse import rules
from feedprof.analyse.rules import OFFLINE, ONLINE
from feedprof.store import ConfigEvidence


@pytest.mark.parametrize("workers,cores,runq,cap,bound", [
    (4, 0.4, 0.0, 2, False),  # 0.1 core each: they wait on I/O, more than the CPUs can pay off
    (4, 3.8, 0.0, 8, True),  # nearly a core each: computing
    (2, 1.2, 0.8, 8, True),  # running plus waiting for a CPU: the demand is what counts
    (8, 1.95, 0.0, 2, True),  # together they fill the two usable CPUs
    (1, 0.6, 0.0, 4, False),  # 0.6 core: not CPU-bound, offline and online alike
    (0, None, None, 2, None),
])
def test_one_cpu_rule(workers, cores, runq, cap, bound):
    assert rules.cpu_bound(workers, cores, runq, cap) is bound


def test_loading_in_the_loop_is_judged_by_the_same_threshold():
    assert rules.loading_cpu_bound(0.95) is True and rules.loading_cpu_bound(0.6) is False
    assert rules.loading_cpu_bound(None) is None


def test_the_most_workers_measured_decide_whether_more_may_outnumber_the_cpus():
    idle_then_busy = {0: False, 2: False, 16: True}  # 16 I/O workers that together fill the CPUs
    assert not rules.may_pass_cpus(idle_then_busy, OFFLINE) and not rules.may_pass_cpus(idle_then_busy, ONLINE)
    busy_then_idle = {2: True, 8: False, 12: None}  # 12 not measured: 8 decides
    assert rules.may_pass_cpus(busy_then_idle, OFFLINE) and rules.may_pass_cpus(busy_then_idle, ONLINE)
    # before any verdict the modes differ, by their named parameter
    assert rules.may_pass_cpus({2: None}, OFFLINE) is OFFLINE.pass_cpus_unmeasured is True
    assert rules.may_pass_cpus({}, ONLINE) is ONLINE.pass_cpus_unmeasured is False


def test_the_jump_aims_at_the_ceiling_within_the_cpu_budget_and_the_start_up():
    assert rules.jump_target(2, 10.0, 100.0, OFFLINE) == 20  # 2 workers x 10, less the tolerance
    assert rules.jump_target(2, 10.0, 100.0, ONLINE) == 22  # 10 % past it: refined down later
    assert rules.jump_target(2, 10.0, 100.0, OFFLINE, job_cores=1.0, cpu_cap=2) == 4  # the CPUs' limit
    assert rules.jump_target(4, 10.0, 100.0, OFFLINE, worker_start_s=2.0) == 20  # workers start slowly
    assert rules.jump_target(0, 90.0, 100.0, OFFLINE) == 2  # never less than a doubling


def _picked(rates, tolerance):
    """rules.pick over configs with these rates (by worker count), as the worker count it picks."""
    evidence = [ConfigEvidence(config={"num_workers": n}, rate=r, rates=(r,), measurements=1) for n, r in rates.items()]
    chosen = rules.pick(evidence, lambda c: (c["num_workers"],), tolerance)
    return chosen.config["num_workers"] if chosen is not None else None


def test_the_pick_is_the_cheapest_within_tolerance_of_the_fastest():
    rates = {0: 10.0, 2: 50.0, 4: 98.0, 8: 100.0}
    assert _picked(rates, 0.03) == 4
    assert _picked(rates, 0.01) == 8
    assert _picked({}, 0.03) is None


def test_the_same_evidence_gives_the_same_pick_offline_and_online():
    """Where no difference parameter applies, the two modes pick alike (the tolerance is one)."""
    rates = {0: 11.0, 2: 25.0, 8: 90.0, 12: 93.0, 16: 94.0}
    assert _picked(rates, OFFLINE.pick_tolerance) == _picked(rates, ONLINE.pick_tolerance) == 12


def test_what_ends_a_config_caps_the_workers_or_not():
    # 8 workers ended so, where at most 4 ran well: every config with 8 or more is ruled out
    assert all(rules.caps_workers(k, 8, 4) for k in ("killed", "memory", "rejected", "hung", "worker_hazard"))
    assert not rules.caps_workers("error", 8, 4)  # (that config alone)
    # where 16 workers ran well with other settings, a kill and memory measured over budget still cap
    assert rules.caps_workers("killed", 8, 16) and rules.caps_workers("memory", 8, 16)
    assert not any(rules.caps_workers(k, 8, 16) for k in ("rejected", "hung", "worker_hazard", "error"))
    with pytest.raises(ValueError):
        rules.caps_workers("crashed", 8, 4)


def test_the_noise_floor():
    assert rules.noise_floor(None, 0.05, 0.15) == 0.05
    assert rules.noise_floor(0.08, 0.05, 0.15) == 0.08
    assert rules.noise_floor(0.4, 0.05, 0.15) == 0.15


def test_one_charge_for_what_an_epoch_costs_beyond_its_batches():
    """100 batches at 100 b/s take 1 s; a second more per epoch halves the rate, whoever charges it:
    a trial's time to its first batch (diagnose), a gap another trial saw between epochs
    (measured), the online run's workers started anew (online_strategy, rules.charge_per_epoch)."""
    from feedprof.analyse.diagnose import effective_rate

    assert rules.charge_per_epoch(100.0, 100, 1.0) == pytest.approx(50.0)
    assert effective_rate(100.0, 100, 1.0 + 1 / 100.0) == pytest.approx(50.0)  # (the first batch's own 10 ms)
    assert effective_rate(100.0, 100, None) == 100.0


def test_the_offline_ladder_reads_its_tolerance_where_its_mode_says_so():
    """The ladder aims its jump and stops near the ceiling at 1 - its tolerance (--tolerance moves
    both): OFFLINE's fields must say the same of the default, or the one list of differences lies."""
    assert OFFLINE.jump_margin == OFFLINE.near_ceiling == pytest.approx(1 - OFFLINE.pick_tolerance)
    five = rules.offline_mode(0.05)
    assert (five.pick_tolerance, five.jump_margin, five.near_ceiling) == pytest.approx((0.05, 0.95, 0.95))


def test_what_one_worker_supplies_and_the_fewest_that_supply_a_rate():
    # the loop loading itself: 10 batches/s with 80 % of the time waiting is 12.5 batches/s of loading
    assert rules.supply_per_worker(10.0, 0, True, 0.8) == pytest.approx(12.5)
    # 4 workers that kept the loop waiting delivered 40: 10 each at most
    assert rules.supply_per_worker(40.0, 4, False, 0.5) == pytest.approx(10.0)
    # a loop that barely waited, or whose wait was not measured, says nothing of its workers' supply
    assert rules.supply_per_worker(40.0, 4, False, 0.01) == math.inf
    assert rules.supply_per_worker(40.0, 4, False, None) == math.inf
    assert rules.fewest_workers_to_supply(95.0, 10.0) == 10
    assert rules.fewest_workers_to_supply(100.0, 10.0) == 10  # (exactly: no float ceiling past it)
    assert rules.fewest_workers_to_supply(100.0, math.inf) is None
    assert rules.fewest_workers_to_supply(100.0, 0.0) is None
