"""The search on simulated workloads: no processes, a throughput model per case."""
import pytest

from feedprof.analyse import rules
from feedprof.analyse.measured import measured_configs

from feedprof.analyse.recommend import recommend
from feedprof.store.reasons import FlatRung, FewerWorkersDoAsWell, JumpedAhead, MeasuredRepeatedly, RivalsRemeasured
from feedprof.store import Phase, Role, TrialState
from feedprof.tune.space import TorchSpace, ladder_rungs
from feedprof.tune.history import GridStrategy, Proposal
from feedprof.tune.strategy import LadderStrategy
from tests.records import make_trial


def pick(trials, cost, tol=rules.OFFLINE.pick_tolerance):
    """The pick (rules.pick) over each config's trials pooled (analyse/measured.py)."""
    return rules.pick([m.evidence for m in measured_configs(trials)], cost, tol)


def simulate(model, baseline, cpu_cap=2, max_workers=32, cuda=False, budget_trials=30, proposals=None,
             other_cores=None):
    """Run the strategy against ``model(config) -> (batches/s, workers_cpu_pct, data_wait)``.
    ``proposals``, if a list, receives every proposal as the strategy made it; ``other_cores``:
    the cores other processes took in every trial (a busy machine)."""
    space = TorchSpace(baseline, cpu_cap=cpu_cap, max_primary=max_workers, cuda_used=cuda)
    strat = LadderStrategy(space)
    trials = []

    def measure(index, role, phase, config):
        rate, cpu, wait, *extra = model(space.legalize(config), role)
        # the job alone on the machine: its main process uses what the system's busy share leaves
        system_pct = extra[0] if extra else min(100.0, (cpu + 30.0) / cpu_cap)
        runq_pct = extra[1] if len(extra) > 1 else None  # the workers' wait for a CPU
        t = make_trial(index=index, role=role, config=space.legalize(config), state=TrialState.OK, phase=phase,
                  batches_per_s=rate, batches_per_s_low=rate * 0.98, batches_per_s_high=rate * 1.02,
                  workers_cpu_pct=cpu, workers_runq_pct=runq_pct, data_wait_fraction=wait, system_cpu_pct=system_pct,
                  main_cpu_pct=max(0.0, system_pct * cpu_cap - cpu), other_cpu_cores=other_cores)
        trials.append(t)
        strat.tell(t)

    measure(0, Role.BASELINE, Phase.BASELINE, baseline)
    while len(trials) < budget_trials:
        prop = strat.ask()
        if prop is None:
            break
        if proposals is not None:
            proposals.append(prop)
        measure(len(trials), prop.role, prop.phase, prop.config)
    return space, strat, trials


def notes_of(strat, kind):
    return [n for n in strat.notes if isinstance(n, kind)]


def io_bound(config, role, ceiling=100.0, per_worker=13.0):
    """Each worker waits on a remote read: throughput scales until the ceiling."""
    if role == Role.CEILING:
        return ceiling, 0.0, 0.0
    n = config["num_workers"]
    rate = min(ceiling, 10.0 if n == 0 else per_worker * n)
    return rate, 5.0 * n, max(0.0, 1 - rate / ceiling)


def cpu_bound(config, role, cpus=2):
    """Decode is CPU work: workers beyond the CPU count only compete."""
    if role == Role.CEILING:
        return 200.0, 0.0, 0.0
    n = config["num_workers"]
    rate = {0: 10.0, 1: 12.0}.get(n, 10.0 * min(n, cpus) + (0.5 if n > cpus else 0.0))
    return rate, 95.0 * min(n, cpus), 0.8


def idle_cpu_workers(config, role):
    """Decode is CPU work, but each worker idles while handing a batch over:
    two workers leave the 2 CPUs 15 % idle, and 8 fill them (as measured on
    the 2-core dev VM: 136 -> 158 batches/s), and then wait for a CPU too."""
    if role == Role.CEILING:
        return 3000.0, 0.0, 0.0, 50.0
    n = config["num_workers"]
    rate = {0: 94.0, 1: 70.0, 2: 136.0, 4: 148.0, 8: 158.0, 16: 131.0}.get(n, 120.0)
    cpu_each = {2: 0.68, 4: 0.42, 8: 0.22, 16: 0.11}.get(n, 0.5)
    runq_pct = {2: 5.0, 4: 10.0, 8: 40.0}.get(n, 80.0)
    return rate, 100 * cpu_each * n, 0.8, {2: 85.0, 4: 93.0, 8: 98.0}.get(n, 99.0), runq_pct


def compute_bound(config, role):
    if role == Role.CEILING:
        return 50.0, 0.0, 0.0
    n = config["num_workers"]
    return (49.5 if n == 0 else 50.0), 2.0 * n, 0.01


def test_ladder_rungs():
    assert ladder_rungs(32, extra=(2,)) == [0, 2, 4, 8, 16, 32]
    assert ladder_rungs(12, extra=(6,)) == [0, 2, 4, 6, 8, 12]
    assert ladder_rungs(1, extra=(1,)) == [0, 1]


def test_io_bound_goes_past_the_cpu_count_and_stops_at_the_ceiling():
    space, strat, trials = simulate(io_bound, {"num_workers": 0})
    tried = [t.config["num_workers"] for t in trials if t.role == "search"]
    assert max(tried) > 2  # past the 2 usable CPUs
    assert 16 not in tried and 32 not in tried  # stopped once 8 workers reached the ceiling (13 x 8 > 100)
    best = pick(trials, space.cost)
    assert best.config["num_workers"] >= 8 and best.rate == pytest.approx(100.0)
    assert notes_of(strat, JumpedAhead) or any(n.code == "past_cpu_count" for n in strat.notes)


def test_cpu_bound_stops_at_the_cpu_count():
    space, strat, trials = simulate(cpu_bound, {"num_workers": 0})
    tried = [t.config["num_workers"] for t in trials if t.role == "search"]
    assert max(tried) <= 2  # never past the 2 usable CPUs
    assert pick(trials, space.cost).config["num_workers"] == 2
    assert any(n.code == "cpus_saturated" for n in strat.notes)


def test_workers_that_leave_cpu_idle_go_past_the_cpu_count():
    space, strat, trials = simulate(idle_cpu_workers, {"num_workers": 0})
    tried = [t.config["num_workers"] for t in trials if t.role == "search"]
    assert 4 in tried and 8 in tried
    assert 16 not in tried  # 8 saturated the CPUs (98 %): the ladder stops there
    assert pick(trials, space.cost).config["num_workers"] == 8


def io_workers_beside_a_cpu_step(config, role):
    """The training step computes on the CPU (the main process keeps a core and
    more busy) while the workers sleep on reads: the machine is full, yet more
    workers than CPUs pay off, as each one's wait is I/O, not a CPU."""
    if role == Role.CEILING:
        return 60.0, 0.0, 0.0, 95.0, 0.0
    n = config["num_workers"]
    rate = min(55.0, 4.0 + 3.0 * n)
    return rate, 3.0 * n, max(0.05, 1 - rate / 60.0), 99.0, 1.0 * n


def test_io_workers_go_past_the_cpu_count_while_the_step_fills_the_cpus():
    space, strat, trials = simulate(io_workers_beside_a_cpu_step, {"num_workers": 0})
    tried = [t.config["num_workers"] for t in trials if t.role == "search"]
    assert max(tried) >= 16  # the machine's total (99 %) did not stop the ladder at 2
    assert pick(trials, space.cost).config["num_workers"] >= 16
    assert not any(n.code == "cpus_saturated" for n in strat.notes)


def handoff_bound(config, role):
    """Two workers gain nothing over none: each idles while the loop takes its
    batch (CPUs 17 % idle, the loop still waits); four overlap the hand-over and
    fill the CPUs (as measured on the 2-core dev VM: 114, 108, then 140 batches/s)."""
    if role == Role.CEILING:
        return 4000.0, 0.0, 0.0, 51.0
    n = config["num_workers"]
    rate = {0: 114.0, 1: 90.0, 2: 108.0, 3: 125.0, 4: 140.0}.get(n, 145.0)
    return rate, {0: 0.0, 2: 124.0}.get(n, 190.0), 0.86, {0: 51.0, 2: 83.0}.get(n, 99.0)


def test_a_flat_rung_with_cpu_to_spare_gets_one_more_rung():
    space, strat, trials = simulate(handoff_bound, {"num_workers": 0})
    tried = [t.config["num_workers"] for t in trials if t.role == "search"]
    assert 4 in tried and 8 not in tried  # 4 filled the CPUs: the ladder stops there
    assert pick(trials, space.cost).config["num_workers"] == 4
    assert [n.forgiven for n in notes_of(strat, FlatRung)][:1] == [True]


def test_two_flat_rungs_stop_the_ladder():
    def flat(config, role):
        if role == Role.CEILING:
            return 4000.0, 0.0, 0.0, 51.0
        n = config["num_workers"]
        return 100.0, 40.0 * n, 0.9, 60.0  # waits, CPUs idle, yet no worker count helps (a lock, a disk)

    space, strat, trials = simulate(flat, {"num_workers": 0}, cpu_cap=8)
    tried = [t.config["num_workers"] for t in trials if t.role == "search"]
    assert 2 in tried and 4 in tried and 8 not in tried
    assert pick(trials, space.cost).config["num_workers"] == 0


def test_compute_bound_with_too_many_workers_recommends_fewer():
    space, strat, trials = simulate(compute_bound, {"num_workers": 8})
    # baseline, ceiling, 0 workers (already at the ceiling), then 0 and 8 confirmed: within noise,
    # and 0 once more for its figure (a second window that agrees with the first)
    assert [t.config["num_workers"] for t in trials if t.role == Role.SEARCH] == [0]
    assert len(trials) <= 6
    rec = recommend(trials, space)
    assert rec.config["num_workers"] == 0
    assert rec.input_bound == "not"
    assert rec.verdict.kind == "fewer_workers" and (rec.verdict.workers_before, rec.verdict.workers_after) == (8, 0)
    assert any(isinstance(r, FewerWorkersDoAsWell) for r in rec.reasons)


def test_a_within_noise_pick_with_fewer_workers_is_not_called_faster():
    """The script asks for 4 workers; 0 is as fast, and the loop waits a little
    (6 %): the headline says the workers add nothing, not "1.0x faster"."""
    def compute_bound_waiting_a_little(config, role):
        if role == Role.CEILING:
            return 52.0, 0.0, 0.0
        n = config["num_workers"]
        return 50.0, 3.0 * n, 0.06

    space, strat, trials = simulate(compute_bound_waiting_a_little, {"num_workers": 4})
    rec = recommend(trials, space)
    assert rec.config["num_workers"] == 0
    assert rec.verdict.kind == "fewer_workers" and rec.verdict.input_bound == "moderately"


def test_fewer_workers_that_make_the_job_faster_are_not_called_not_the_loader():
    """4 workers compete with the step for the 2 CPUs: 0 workers run 1.45x as fast, at the ceiling.
    The script's loader settings were what held it back: no "Not the loader ... cannot make it
    meaningfully faster" beside a 1.45x speedup, and the headline says the workers slowed it."""
    from feedprof.render.words import headline
    from feedprof.store.reasons import NotTheLoader

    def workers_compete(config, role):
        if role == Role.CEILING:
            return 50.0, 0.0, 0.0
        n = config["num_workers"]
        return (49.0, 0.0, 0.02) if n == 0 else (34.0, 40.0 * n, 0.02)

    space, strat, trials = simulate(workers_compete, {"num_workers": 4})
    rec = recommend(trials, space)
    assert rec.config["num_workers"] == 0 and rec.verdict.kind == "fewer_workers" and rec.speedup > 1.4
    assert not any(isinstance(r, NotTheLoader) for r in rec.reasons)
    assert headline(rec.verdict, "torch").startswith("Too many workers: the 4 workers slow the job down;")


def test_a_rival_whose_lead_does_not_hold_beside_the_scripts_own_settings_is_not_advised():
    """4 workers were chosen at 118 batches/s on their search windows; measured again beside the
    script's 2 they ran 101 against 100: no gain and no saving, so nothing is advised (a keras-io
    tf.data example was told "as fast as the script's own, for less" on such a 1.03x)."""
    from feedprof.store.reasons import KeepScriptSettings, LeadNotConfirmed

    space = TorchSpace({"num_workers": 2}, cpu_cap=2, max_primary=8, cuda_used=False)
    two, four = space.legalize({"num_workers": 2}), space.legalize({"num_workers": 4})
    rows = [(Role.BASELINE, Phase.BASELINE, two, 100.0), (Role.CEILING, Phase.CEILING, two, 200.0),
            (Role.SEARCH, Phase.LADDER, four, 120.0), (Role.SEARCH, Phase.LADDER, four, 118.0),
            (Role.CONFIRM, Phase.REPORT, four, 101.0), (Role.CONFIRM, Phase.REPORT, two, 100.0)]
    trials = [make_trial(index=i, role=role, phase=phase, config=c, state=TrialState.OK, batches_per_s=rate,
                         data_wait_fraction=0.3, workers_cpu_pct=30.0 * c["num_workers"])
              for i, (role, phase, c, rate) in enumerate(rows)]
    rec = recommend(trials, space)
    assert rec.config["num_workers"] == 2
    lost = next(r for r in rec.reasons if isinstance(r, LeadNotConfirmed))
    assert lost.rival["num_workers"] == 4 and lost.speedup == pytest.approx(1.01)
    assert any(isinstance(r, KeepScriptSettings) for r in rec.reasons)


def test_refinement_finds_a_cheaper_config_within_tolerance():
    def plateau(config, role):
        if role == Role.CEILING:
            return 100.0, 0.0, 0.0
        n = config["num_workers"]
        return {0: 10.0, 2: 54.0, 3: 79.0, 4: 80.0}.get(n, 80.5), 10.0 * n, 0.2

    space, strat, trials = simulate(plateau, {"num_workers": 0}, cpu_cap=8)
    assert 3 in [t.config["num_workers"] for t in trials if t.phase == Phase.REFINE]  # halfway between 2 and 4
    assert pick(trials, space.cost).config["num_workers"] == 3  # as good as 4, for less


def test_refinement_never_tries_fewer_workers_than_could_supply_the_pick():
    # 6.5 batches/s per worker: the rung at 10 reads 65, so the pick's 100 (16 workers) needs at
    # least 15 of them within tolerance; bisecting from 10 tried 13 and 14 first, trials lost for certain
    space, strat, trials = simulate(lambda c, r: io_bound(c, r, per_worker=6.5), {"num_workers": 0}, cpu_cap=2)
    chosen = pick(trials, space.cost).config["num_workers"]
    refined = [t.config["num_workers"] for t in trials if t.phase == Phase.REFINE]
    assert refined == [15] and chosen == 15  # (the ladder: 2, then a jump to 10, then 16 at the ceiling)


def test_secondary_knobs_only_where_they_can_matter():
    space, strat, trials = simulate(io_bound, {"num_workers": 0}, cuda=False)
    assert not any(t.config.get("pin_memory") for t in trials)  # no GPU: pin_memory is never tried
    space, strat, trials = simulate(io_bound, {"num_workers": 0}, cuda=True)
    assert any(t.config.get("pin_memory") for t in trials)


def test_proposals_are_legal_dataloader_configs():
    proposals = []
    simulate(io_bound, {"num_workers": 0, "prefetch_factor": None}, cuda=True, proposals=proposals)
    assert len(proposals) >= 4
    for prop in proposals:  # as proposed, before the harness measures them
        c = prop.config
        assert set(c) == {"num_workers", "pin_memory", "prefetch_factor", "persistent_workers"}
        if c["num_workers"] == 0:
            assert c["prefetch_factor"] is None and c["persistent_workers"] is False
        else:
            assert c["prefetch_factor"] >= 1


def test_no_config_is_measured_twice():
    space, strat, trials = simulate(cpu_bound, {"num_workers": 2})
    keys = [space.key(t.config) for t in trials if t.role not in (Role.CEILING, Role.CONFIRM)]
    assert len(keys) == len(set(keys))
    assert sum(t.phase == Phase.CONFIRM for t in trials) <= 2  # rival rounds; the figures' windows besides


def test_cheapest_within_tolerance():
    from feedprof.tune.space import TorchSpace

    space = TorchSpace({"num_workers": 0}, 2, 8, False)
    mk = lambda i, n, r: make_trial(index=i, role=Role.SEARCH, config=space.legalize({"num_workers": n}),  # noqa: E731
                                state=TrialState.OK, batches_per_s=r)
    trials = [mk(0, 2, 100.0), mk(1, 4, 102.0), mk(2, 8, 110.0)]
    assert pick(trials, space.cost).config["num_workers"] == 8  # 2 and 4 are more than 3 % slower
    trials.append(mk(3, 6, 108.0))
    assert pick(trials, space.cost).config["num_workers"] == 6


def test_a_lucky_first_measurement_is_caught_by_confirmation():
    """0 workers measures 112 once by luck (truly ~94); 2 workers truly ~130 but first
    measured 105. Interleaved re-measurement and medians recommend 2 workers."""
    readings = {0: iter([112.0, 94.0, 95.0]), 2: iter([105.0, 131.0, 129.0])}

    def drifting(config, role):
        if role == Role.CEILING:
            return 3000.0, 0.0, 0.0
        n = config["num_workers"]
        return next(readings[n]), 95.0 * n, 0.85

    space, strat, trials = simulate(drifting, {"num_workers": 0})
    assert [t.phase for t in trials].count(Phase.CONFIRM) == 2
    assert notes_of(strat, RivalsRemeasured)
    rec = recommend(trials, space)
    assert rec.config["num_workers"] == 2
    assert MeasuredRepeatedly(times=3) in rec.reasons  # searched, confirmed beside its rival, for its figure


def test_clear_winner_is_not_confirmed():
    def step(config, role):  # two workers feed the step fully; one does half as well
        if role == Role.CEILING:
            return 50.0, 0.0, 0.0
        n = config["num_workers"]
        return {0: 10.0, 1: 25.0}.get(n, 50.0), 10.0 * n, 0.0 if n >= 2 else 0.5

    space, strat, trials = simulate(step, {"num_workers": 0})
    assert pick(trials, space.cost).config["num_workers"] == 2
    confirms = [t for t in trials if t.role == Role.CONFIRM]
    # no rival re-measured: the pick's own confirmation window after it was chosen, then the
    # script's own settings beside it (the speedup from two windows side by side), then the
    # pick once more: one window alone cannot show it was not an outlier
    assert [t.config["num_workers"] for t in confirms] == [2, 0, 2] and confirms == trials[-3:]
    assert all(t.phase == Phase.REPORT for t in confirms)
    assert not any(n.code == "rivals_remeasured" for n in strat.notes)


def test_a_window_that_spread_is_measured_again_before_it_decides():
    """The script's own settings read 3.0 ±63 %: a measurement that failed. It
    is measured again, in a longer window, before the search builds on it."""
    space = TorchSpace({"num_workers": 0}, cpu_cap=2, max_primary=32, cuda_used=False)
    strat = LadderStrategy(space)
    spread = make_trial(index=0, role=Role.BASELINE, phase=Phase.BASELINE, config=space.legalize({"num_workers": 0}),
                        state=TrialState.OK, batches_per_s=3.0, batches_per_s_low=1.1, batches_per_s_high=4.9,
                        data_wait_fraction=0.95, workers_cpu_pct=0.0, main_cpu_pct=5.0)
    strat.tell(spread)
    again = strat.ask()
    assert again.config == spread.config and again.role == Role.BASELINE and again.phase == Phase.BASELINE
    assert again.window_factor > 1
    assert any(n.code == "measured_again" and n.why == "spread" for n in strat.notes)
    strat.tell(make_trial(index=1, role=Role.BASELINE, phase=Phase.BASELINE, config=spread.config,
                          state=TrialState.OK, batches_per_s=3.6, batches_per_s_low=3.4, batches_per_s_high=3.8,
                          data_wait_fraction=0.95))
    assert strat.ask().role == Role.CEILING  # once: the search goes on
    assert strat.believed_trial(spread.config, strat.trials).batches_per_s == 3.6  # the window that did not spread


def test_a_rung_that_dips_below_fewer_workers_is_measured_again():
    readings = {8: iter([20.0, 44.0])}  # 8 workers read 20 (below 4's 27), then 44 when measured again

    def dip(config, role):
        if role == Role.CEILING:
            return 100.0, 0.0, 0.0
        n = config["num_workers"]
        rate = next(readings[n]) if n in readings else min(100.0, 4.0 + 5.5 * n)
        return rate, 3.0 * n, 0.4  # the loop waits, but not enough to jump rungs

    space, strat, trials = simulate(dip, {"num_workers": 0})
    eights = [t for t in trials if t.config["num_workers"] == 8 and t.role != Role.CONFIRM]
    assert len(eights) == 2  # measured again before the ladder believed the dip
    assert max(t.config["num_workers"] for t in trials) >= 16  # and the ladder went on
    assert any(n.code == "measured_again" and n.why == "dip" for n in strat.notes)


@pytest.mark.parametrize("model,baseline", [
    (io_bound, {"num_workers": 0}), (cpu_bound, {"num_workers": 0}), (idle_cpu_workers, {"num_workers": 0}),
    (handoff_bound, {"num_workers": 0}), (compute_bound, {"num_workers": 8}),
])
def test_the_next_proposal_is_a_function_of_the_history(model, baseline):
    """Resuming is telling a fresh strategy the trials so far, then asking: at
    every point of a search, it proposes what the live strategy proposed."""
    proposals = []
    space, live, trials = simulate(model, baseline, cuda=True, proposals=proposals)
    for k, prop in enumerate(proposals):
        fresh = LadderStrategy(space)
        for t in trials[:k + 1]:  # the baseline and every trial before proposal k
            fresh.tell(t)
        again = fresh.ask()
        assert again is not None and (again.role, again.phase) == (prop.role, prop.phase)
        assert space.key(again.config) == space.key(prop.config), k
    fresh = LadderStrategy(space)
    for t in trials:
        fresh.tell(t)
    assert fresh.ask() is None and fresh.notes == live.notes


def test_grid_strategy_measures_each_config_once_in_order():
    space = TorchSpace({"num_workers": 0}, 2, 8, False)
    grid = GridStrategy(space, [{"num_workers": n} for n in (0, 2, 4)] + [{"num_workers": 2}])
    seen = []
    while (prop := grid.ask()) is not None:
        assert (prop.role, prop.phase) == (Role.SEARCH, Phase.GRID)
        seen.append(prop.config["num_workers"])
        grid.tell(make_trial(index=len(seen), role=prop.role, config=prop.config, state=TrialState.OK, phase=prop.phase,
                        batches_per_s=1.0))
    assert seen == [0, 2, 4]


def test_a_busy_machine_is_not_blamed_on_io_bound_workers():
    """Other processes keep the 2 CPUs at 100 %; the workers sleep on I/O (a
    tenth of a core between them): the ladder still goes past the CPU count."""
    space = TorchSpace({"num_workers": 0}, cpu_cap=2, max_primary=32, cuda_used=False)
    strat = LadderStrategy(space)

    def trial(i, role, phase, n, rate):
        return make_trial(index=i, role=role, phase=phase, config=space.legalize({"num_workers": n}),
                     state=TrialState.OK, batches_per_s=rate, data_wait_fraction=0.8, system_cpu_pct=100.0,
                     main_cpu_pct=8.0, workers_cpu_pct=10.0 * n, workers_runq_pct=1.0 * n, other_cpu_cores=1.8)

    for t in (trial(0, Role.BASELINE, Phase.BASELINE, 0, 10.0), trial(1, Role.CEILING, Phase.CEILING, 0, 400.0),
              trial(2, Role.SEARCH, Phase.LADDER, 2, 20.0)):
        strat.tell(t)
    nxt = strat.ask()
    assert nxt is not None and nxt.phase == Phase.LADDER and nxt.config["num_workers"] > 2


def test_cpu_bound_workers_starved_by_other_work_stop_at_the_cpu_count():
    """The same busy machine, but the workers would compute: half a core each
    running and half waiting for a CPU. More workers cannot help."""
    space = TorchSpace({"num_workers": 0}, cpu_cap=2, max_primary=32, cuda_used=False)
    strat = LadderStrategy(space)
    base = dict(state=TrialState.OK, data_wait_fraction=0.8, system_cpu_pct=100.0, main_cpu_pct=10.0)
    strat.tell(make_trial(index=0, role=Role.BASELINE, phase=Phase.BASELINE, config=space.legalize({"num_workers": 0}),
                     batches_per_s=10.0, **base))
    strat.tell(make_trial(index=1, role=Role.CEILING, phase=Phase.CEILING, config=space.legalize({"num_workers": 0}),
                     batches_per_s=400.0, **base))
    strat.tell(make_trial(index=2, role=Role.SEARCH, phase=Phase.LADDER, config=space.legalize({"num_workers": 2}),
                     batches_per_s=15.0, workers_cpu_pct=100.0, workers_runq_pct=90.0, **base))
    nxt = strat.ask()
    assert nxt is None or nxt.phase != Phase.LADDER
    assert any(n.code == "cpus_saturated" for n in strat.notes)


def two_rivals(readings):
    """2 and 4 workers read in turn from ``readings`` (their noisy windows); other counts are slower."""
    def model(config, role):
        if role == Role.CEILING:
            return 3000.0, 0.0, 0.0
        n = config["num_workers"]
        rate = next(readings[n], 100.0) if n in readings else {0: 40.0, 1: 60.0, 3: 80.0}.get(n, 50.0)
        return rate, 40.0 * n, 0.6
    return model


def test_confirmation_goes_on_while_the_two_cannot_be_told_apart():
    """Two configs 4 % apart with ±8 % run-to-run noise: one round is not enough
    to tell them apart, so the rounds go on, up to the most allowed."""
    readings = {2: iter([100.0, 108.0, 92.0, 101.0, 99.0]), 4: iter([104.0, 96.0, 112.0, 103.0, 105.0])}
    space, strat, trials = simulate(two_rivals(readings), {"num_workers": 0}, cpu_cap=8, max_workers=4)
    confirms = [t for t in trials if t.phase == Phase.CONFIRM]
    assert 2 < len(confirms) <= 6 and len(confirms) % 2 == 0
    assert notes_of(strat, RivalsRemeasured)[0].repeats == len(confirms) // 2


def test_on_a_busy_machine_rivals_get_longer_windows_and_one_more_round():
    """The same two configs 4 % apart, ±8 % noise, that two rounds cannot tell apart:
    quiet, the rivals are measured twice each in windows twice the usual; with a core
    of other work beside the search, three times each, in windows three times the usual."""
    def run(other_cores):
        readings = {2: iter([100.0, 110.0, 90.0, 112.0, 88.0, 100.0]),
                    4: iter([104.0, 94.0, 114.0, 92.0, 116.0, 104.0])}
        proposals = []
        _, strat, _ = simulate(two_rivals(readings), {"num_workers": 0}, cpu_cap=8, max_workers=4, proposals=proposals,
                               other_cores=other_cores)
        confirms = [p for p in proposals if p.phase == Phase.CONFIRM]
        return confirms, notes_of(strat, RivalsRemeasured)[0]

    quiet, quiet_note = run(other_cores=0.05)
    busy, busy_note = run(other_cores=0.9)
    assert (len(quiet), len(busy)) == (4, 6)
    assert {p.window_factor for p in quiet} == {2.0}
    assert {p.window_factor for p in busy} == {3.0}
    assert (quiet_note.busy, busy_note.busy) == (False, True)


# ------------------------------------------------ what more workers break


def simulate_kills(killed_from, cap=2, max_workers=32, budget_trials=30):
    """io_bound, except that the OOM killer takes any config with ``killed_from`` workers or more."""
    from feedprof.store.reasons import OutOfMemoryKilled

    space = TorchSpace({"num_workers": 0}, cpu_cap=cap, max_primary=max_workers, cuda_used=False)
    strat = LadderStrategy(space)
    trials = []
    for i in range(budget_trials):
        prop = Proposal({"num_workers": 0}, Role.BASELINE, Phase.BASELINE) if i == 0 else strat.ask()
        if prop is None:
            break
        config = space.legalize(prop.config)
        if config["num_workers"] >= killed_from and prop.role != Role.CEILING:
            t = make_trial(index=i, role=prop.role, config=config, state=TrialState.KILLED, phase=prop.phase,
                      cause=OutOfMemoryKilled(signal="SIGKILL"))
        else:
            rate, cpu, wait = io_bound(config, prop.role)
            t = make_trial(index=i, role=prop.role, config=config, state=TrialState.OK, phase=prop.phase,
                      batches_per_s=rate, batches_per_s_low=rate * 0.98, batches_per_s_high=rate * 1.02,
                      workers_cpu_pct=cpu, data_wait_fraction=wait, system_cpu_pct=40.0, main_cpu_pct=10.0)
        trials.append(t)
        strat.tell(t)
    return space, strat, trials


def test_a_kill_sets_the_limit_and_the_ladder_bisects_below_it():
    space, strat, trials = simulate_kills(killed_from=6)
    tried = [t.config["num_workers"] for t in trials if t.role == Role.SEARCH]
    first_kill = next(i for i, t in enumerate(trials) if t.state == TrialState.KILLED)
    for i, t in enumerate(trials):
        if t.state == TrialState.KILLED:  # nothing with more workers than a killed config after it
            assert all(u.config["num_workers"] < t.config["num_workers"] for u in trials[i + 1:])
    assert 5 in tried  # found by bisecting between the last rung that ran and the kill
    rec = recommend(trials, space)
    assert rec.config["num_workers"] == 5 and rec.batches_per_s == pytest.approx(65.0)
    cap = next(r for r in rec.reasons if r.code == "workers_capped")
    assert cap.max_workers == 5 and cap.state == "killed" and trials[first_kill].config["num_workers"] >= 6


def test_a_resumed_tune_learns_the_same_limit():
    space, strat, trials = simulate_kills(killed_from=6, budget_trials=6)
    again = LadderStrategy(space)
    for t in trials:
        again.tell(t)
    assert again.ask() == strat.ask()  # a function of the trials told, nothing else


@pytest.mark.parametrize("startup_s,most", [(0.1, 32), (2.7, 8)])
def test_the_jump_goes_no_further_than_the_workers_start_in_time(startup_s, most):
    """I/O-bound workers scale past the CPUs, so the ladder jumps to the count
    predicted to reach the ceiling, but spawned workers (an interpreter each,
    seconds to start) would not start within a trial: the jump stops short."""
    space = TorchSpace({"num_workers": 0}, cpu_cap=2, max_primary=32, cuda_used=False)
    strat = LadderStrategy(space)
    for i, (role, phase, n) in enumerate([(Role.BASELINE, Phase.BASELINE, 0), (Role.CEILING, Phase.CEILING, 0),
                                          (Role.SEARCH, Phase.LADDER, 2)]):
        rate, cpu, wait = io_bound({"num_workers": n}, role, ceiling=400.0)
        config = space.with_primary(strat.ladder_base(), n) if role == Role.SEARCH else space.legalize({"num_workers": n})
        strat.tell(make_trial(index=i, role=role, config=config, state=TrialState.OK, phase=phase,
                              batches_per_s=rate, batches_per_s_low=rate, batches_per_s_high=rate,
                              workers_cpu_pct=cpu, data_wait_fraction=wait, system_cpu_pct=20.0, main_cpu_pct=5.0,
                              time_to_first_batch_s=startup_s if n else 0.01))
    prop = strat.ask()
    assert prop is not None and prop.phase == Phase.LADDER
    assert 4 <= prop.config["num_workers"] <= most
    if startup_s < 1:
        assert prop.config["num_workers"] > 8  # a cheap start-up still jumps


def test_a_rung_that_still_reads_low_is_compared_side_by_side_with_the_rung_beneath():
    """The machine got busy after the baseline (33 batches/s on a quiet
    machine): 2 workers read 27, then 28.8. The script's own settings are
    measured again beside them (now 20): 2 workers do gain, and the ladder
    goes on instead of stopping at a rung that only met a busier machine."""
    readings = {0: iter([33.5, 20.0]), 2: iter([27.0, 28.8])}

    def drifting(config, role):
        if role == Role.CEILING:
            return 190.0, 0.0, 0.0
        n = config["num_workers"]
        rate = next(readings[n], 45.0) if n in readings else 45.0
        return rate, 50.0 * n, 0.8, 90.0, 10.0 * n

    space, strat, trials = simulate(drifting, {"num_workers": 0})
    zeros = [t for t in trials if t.config["num_workers"] == 0 and t.role != Role.CEILING]
    assert [t.batches_per_s for t in zeros][:2] == [33.5, 20.0]  # measured again, right after 2's repeat
    assert trials.index(zeros[1]) == 4
    assert pick(trials, space.cost).config["num_workers"] >= 2


def test_a_ceiling_slower_than_real_loading_is_no_ceiling():
    """The busy Trainer job: the replay ran slower (1.3 batches/s) than the script's own loading
    (1.8), at 0 workers, with the loop waiting 50 % of its time. Taken for the ceiling, it stopped
    the ladder at the baseline ("reaches the compute ceiling") and advised 0 workers for a job 16
    workers make 10x faster. Now it is a failed measurement, said, and the ladder climbs by the wait."""
    from feedprof.analyse.ceiling import read_ceiling
    from feedprof.store.reasons import CeilingBelowLoading

    def trainer(config, role):
        if role == Role.CEILING:
            return 1.3, 0.0, 0.0
        n = config["num_workers"]
        rate = min(18.0, 1.8 if n == 0 else 1.8 * n)
        return rate, 5.0 * n, max(0.0, 0.5 * (1 - rate / 18.0))

    space, strat, trials = simulate(trainer, {"num_workers": 0})
    tried = {space.primary_of(t.config) for t in trials if t.role == Role.SEARCH}
    assert max(tried) >= 8
    failed = read_ceiling(trials).failed
    assert failed is not None and failed.ceiling_batches_per_s == 1.3 and failed.loading_batches_per_s >= 14
    assert notes_of(strat, CeilingBelowLoading)
    rec = recommend(trials, space)
    assert rec.config["num_workers"] >= 8 and rec.ceiling_batches_per_s is None


def test_a_ceiling_reached_while_the_loop_still_waits_does_not_stop_the_ladder():
    """The ceiling reads as the baseline's rate, but the loop waits 40 % of its time: the two
    disagree, and the wait wins (a ceiling never decides alone)."""
    def noisy_ceiling(config, role):
        if role == Role.CEILING:
            return 10.0, 0.0, 0.0
        n = config["num_workers"]
        rate = 10.0 if n == 0 else 10.0 * (1 + n)
        return min(rate, 60.0), 5.0 * n, 0.4 if n == 0 else max(0.0, 0.4 * (1 - rate / 60.0))

    space, strat, trials = simulate(noisy_ceiling, {"num_workers": 0})
    assert any(space.primary_of(t.config) >= 2 for t in trials if t.role == Role.SEARCH)


def test_without_a_ceiling_a_loop_that_barely_waits_stops_the_ladder():
    from feedprof.store.reasons import CeilingBelowLoading, LoopBarelyWaits

    def compute_bound(config, role):
        if role == Role.CEILING:
            return 5.0, 0.0, 0.0  # a replay that failed: slower than real loading
        return 10.0, 5.0 * config["num_workers"], 0.02

    space, strat, trials = simulate(compute_bound, {"num_workers": 0})
    assert notes_of(strat, CeilingBelowLoading) and notes_of(strat, LoopBarelyWaits)
    assert not [t for t in trials if t.phase == Phase.LADDER]
