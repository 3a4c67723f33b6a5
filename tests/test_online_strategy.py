"""The online search as a function of the windows measured so far (no processes, no clock)."""
from feedprof.analyse import rules
from feedprof.analyse.diagnose import workers_of
from feedprof.store.online import OnlineFailure, OnlineWindow
from feedprof.tune import search
from feedprof.tune.online_strategy import Limits, RunEvidence, RunHistory, decide
from feedprof.tune.space import TorchSpace

BASE = {"num_workers": 0, "prefetch_factor": None, "pin_memory": False, "persistent_workers": False}
LIMITS = Limits(cpu_cap=2, max_workers=32)


def workers(config):
    return workers_of(config) or 0


def with_workers(base, n):
    return TorchSpace(base, cpu_cap=1, max_primary=1, cuda_used=None).with_primary(base, n)


def pick(h, limits=LIMITS):
    """The online search's pick (tune/search.py) from the run's windows."""
    chosen = search.choice(RunEvidence(h, limits), rules.ONLINE)
    return chosen.config if chosen is not None else None


def fastest(h):
    best = rules.fastest(h.evidence())
    return best.config if best is not None else None


def worker_cap(h, limits, space=None):
    """The most workers the online climb may reach (tune/search.py climb_cap)."""
    return search.climb_cap(RunEvidence(h, limits, space), rules.ONLINE)


def retreat(h, failed, limits=LIMITS):
    return search.retreat(RunEvidence(h, limits), failed)


def predicted_workers(h, limits, space=None):
    return search.predicted_count(RunEvidence(h, limits, space), rules.ONLINE)


def window(config, rate, wait_fraction, t=0.0, workers_cpu_s=None, load_cpu_s=0.0, rank=0, wall_s=1.0):
    return OnlineWindow(rank=rank, config=config, batches=round(rate * wall_s), samples=16 * round(rate * wall_s),
                        wait_s=wait_fraction * wall_s, t_start_s=t, t_end_s=t + wall_s,
                        workers_cpu_s=workers_cpu_s, load_cpu_s=load_cpu_s)


def io_bound_baseline():
    # 20 b/s, 90 % waiting, the loop's thread idle while it waits: I/O, so the step alone runs at 200 b/s
    h = RunHistory(baseline=BASE)
    h.windows += [window(BASE, 20, 0.9, t=0, load_cpu_s=0.01), window(BASE, 20, 0.9, t=1, load_cpu_s=0.01)]
    return h


def test_the_baseline_is_measured_first():
    h = RunHistory(baseline=BASE, windows=[window(BASE, 60, 0.3)])  # a loop that waits less: two windows
    assert decide(h, LIMITS, BASE, 60).config == BASE


def test_an_io_bound_loader_jumps_to_the_predicted_worker_count():
    step = decide(io_bound_baseline(), LIMITS, BASE, 60)
    assert step.why == "climb" and step.config["num_workers"] >= 10  # 200 / 20 b/s, past the 2 CPUs


def test_a_cpu_bound_loader_stays_within_the_cpus():
    h = RunHistory(baseline=BASE)
    h.windows += [window(BASE, 20, 0.9, t=0, load_cpu_s=0.85), window(BASE, 20, 0.9, t=1, load_cpu_s=0.85)]
    assert decide(h, LIMITS, BASE, 60).config["num_workers"] == 2


def test_workers_that_idle_lift_the_cpu_cap():
    h = RunHistory(baseline=BASE)
    two = with_workers(BASE, 2)
    h.windows += [window(two, 40, 0.8, workers_cpu_s=0.1), window(two, 40, 0.8, t=1, workers_cpu_s=0.1)]
    assert worker_cap(h, LIMITS) == 32
    busy = RunHistory(baseline=BASE, windows=[window(two, 40, 0.8, workers_cpu_s=1.9),
                                           window(two, 40, 0.8, t=1, workers_cpu_s=1.9)])
    assert worker_cap(busy, LIMITS) == 2


def test_workers_that_idled_at_a_lower_count_do_not_lift_the_cap_once_more_fill_the_cpus():
    """2 workers leave the CPUs idle, so 16 were tried; 16 fill both CPUs: the climb goes no
    further (as the offline ladder stops: rules.may_pass_cpus reads the most workers measured)."""
    h = io_bound_baseline()
    two, sixteen = with_workers(BASE, 2), with_workers(BASE, 16)
    h.windows += [window(two, 40, 0.8, t=2, workers_cpu_s=0.2), window(two, 40, 0.8, t=3, workers_cpu_s=0.2),
                  window(sixteen, 120, 0.4, t=4, workers_cpu_s=1.95),
                  window(sixteen, 120, 0.4, t=5, workers_cpu_s=1.95)]
    assert worker_cap(h, LIMITS) == 2
    assert decide(h, LIMITS, sixteen, 60).why != "climb"


def test_not_input_bound_settles_on_the_scripts_own_settings():
    h = RunHistory(baseline=BASE, windows=[window(BASE, 100, 0.01), window(BASE, 100, 0.02, t=1)])
    step = decide(h, LIMITS, BASE, 60)
    assert step.final and step.config == BASE and step.why == "not_input_bound"


def test_a_kill_caps_the_workers_and_the_next_try_bisects():
    h = io_bound_baseline()
    twenty = with_workers(BASE, 20)
    h.failures.append(OnlineFailure(rank=0, config=twenty, kind="killed", error="", t_s=2))
    step = decide(h, LIMITS, twenty, 60)
    assert step.config["num_workers"] == 10  # between 0 (ran) and 20 (killed)
    assert worker_cap(h, LIMITS) == 19


def test_a_hang_caps_the_workers_only_past_the_most_that_ran_well():
    h = io_bound_baseline()
    sixteen, eight, twenty = with_workers(BASE, 16), with_workers(BASE, 8), with_workers(BASE, 20)
    h.windows += [window(sixteen, 150, 0.1, t=2, workers_cpu_s=0.5), window(sixteen, 150, 0.1, t=3, workers_cpu_s=0.5)]
    h.failures.append(OnlineFailure(rank=0, config=eight, kind="hung", error="", t_s=4))
    assert worker_cap(h, LIMITS) == 32  # 16 ran well: the hang at 8 rules out that config alone
    h.failures.append(OnlineFailure(rank=0, config=twenty, kind="hung", error="", t_s=5))
    assert worker_cap(h, LIMITS) == 19  # past what ran well: as a kill


def test_the_cheapest_within_noise_is_picked_and_confirmed_interleaved():
    h = io_bound_baseline()
    eight, sixteen = with_workers(BASE, 8), with_workers(BASE, 16)
    h.windows += [window(sixteen, 180, 0.05, t=2, workers_cpu_s=0.5), window(sixteen, 182, 0.05, t=3, workers_cpu_s=0.5),
                  window(eight, 178, 0.06, t=4, workers_cpu_s=0.5), window(eight, 179, 0.06, t=5, workers_cpu_s=0.5)]
    assert pick(h) == eight
    steps = []
    for _ in range(6):  # refine below 8 is done once 4 is slower; then the pick and its rival alternate
        step = decide(h, LIMITS, steps[-1].config if steps else eight, 60)
        steps.append(step)
        if step.final:
            break
        rate = {0: 20, 4: 90, 8: 179, 16: 181}.get(step.config["num_workers"], 150)
        h.windows += [window(step.config, rate, 0.1, t=10 + len(steps), workers_cpu_s=0.5)] * 2
    assert steps[-1].final and steps[-1].config == eight


def test_the_slowest_rank_sets_a_configs_rate():
    h = RunHistory(baseline=BASE)
    h.windows += [window(BASE, 20, 0.9, rank=0), window(BASE, 10, 0.95, rank=1),
                  window(BASE, 22, 0.9, t=1, rank=0), window(BASE, 11, 0.95, t=1, rank=1)]
    assert h.rate(BASE) == 10.5


def test_the_explore_budget_spent_settles_on_the_pick_so_far():
    h = io_bound_baseline()
    step = decide(h, LIMITS, BASE, 0)
    assert step.final and step.why == "budget"


def test_a_retreat_goes_to_the_best_config_with_fewer_workers():
    h = io_bound_baseline()
    four, sixteen = with_workers(BASE, 4), with_workers(BASE, 16)
    h.windows += [window(four, 80, 0.5, t=2), window(four, 82, 0.5, t=3),
                  window(sixteen, 190, 0.05, t=4), window(sixteen, 185, 0.05, t=5)]
    assert retreat(h, sixteen) == four
    assert retreat(h, four) == BASE


def test_a_kept_config_that_breaks_is_left_and_the_words_say_it_failed(tmp_path):
    """A worker of the settled config killed: the run goes back to the best config with fewer
    workers, and the progress line says the config failed (not that its memory passed a budget,
    which is the other way a config is left)."""
    from feedprof.render.online import decision_line
    from feedprof.tune.online import Decider, OnlineOptions

    h = io_bound_baseline()
    four, sixteen = with_workers(BASE, 4), with_workers(BASE, 16)
    h.windows += [window(four, 80, 0.5, t=2), window(four, 82, 0.5, t=3),
                  window(sixteen, 190, 0.05, t=4), window(sixteen, 185, 0.05, t=5)]
    said = []
    decider = Decider(trial_dir=str(tmp_path), limits=LIMITS, opts=OnlineOptions(), history=h, current=sixteen,
                      final=True, on_decision=lambda step, t_s, fw: said.append(decision_line(step.config, step.why,
                                                                                               step.final, t_s, fw)))
    decider._on_event(0, {"event": "online_failure", "config": sixteen, "kind": "killed", "t_s": 6.0, "signals": [9]})
    decider.poll()
    assert decider.current == four and len(said) == 1
    assert "failed" in said[0] and "memory" not in said[0], said


def test_a_config_that_failed_while_exploring_is_no_retreat_from_the_one_kept_later(tmp_path):
    """16 workers killed while the search explores; it settles on 4, which never failed: the run
    keeps 4 (no retreat, no line saying the kept config failed)."""
    from feedprof.tune.online import Decider, OnlineOptions

    h = io_bound_baseline()
    four, sixteen = with_workers(BASE, 4), with_workers(BASE, 16)
    h.windows += [window(four, 80, 0.5, t=2), window(four, 82, 0.5, t=3), window(sixteen, 190, 0.05, t=4)]
    steps = []
    decider = Decider(trial_dir=str(tmp_path), limits=LIMITS, opts=OnlineOptions(), history=h, current=sixteen,
                      on_decision=lambda step, t_s, fw: steps.append(step))
    decider._on_event(0, {"event": "online_failure", "config": sixteen, "kind": "killed", "t_s": 5.0, "signals": [9]})
    decider.current, decider.final = four, True  # (the search settled on 4 meanwhile)
    decider.poll()
    assert steps == [] and decider.current == four


def test_one_window_of_a_loop_that_mostly_waits_is_enough_to_climb():
    h = RunHistory(baseline=BASE, windows=[window(BASE, 20, 0.9, load_cpu_s=0.01)])
    assert decide(h, LIMITS, BASE, 60).why == "climb"
    barely = RunHistory(baseline=BASE, windows=[window(BASE, 90, 0.2, load_cpu_s=0.01)])
    assert decide(barely, LIMITS, BASE, 60).config == BASE


def test_the_refinement_never_tries_a_count_that_cannot_supply_enough():
    """The bisection starts from the fewest workers that could supply what the best delivers: 5
    (half of 10) could supply ~110 b/s at most and is not tried; 8 could (~178) and is."""
    h = io_bound_baseline()  # 20 b/s waiting 0.9 s of every second: one worker supplies ~22 b/s
    ten, eight = with_workers(BASE, 10), with_workers(BASE, 8)
    h.windows += [window(ten, 150, 0.1, t=2, workers_cpu_s=0.5), window(ten, 148, 0.1, t=3, workers_cpu_s=0.5)]
    limits = Limits(cpu_cap=2, max_workers=10)
    step = decide(h, limits, ten, 60)
    assert step.why == "refine" and step.config == eight
    h.windows += [window(eight, 120, 0.3, t=4, workers_cpu_s=0.4), window(eight, 121, 0.3, t=5, workers_cpu_s=0.4)]
    step = decide(h, limits, eight, 60)
    assert step.final and step.config == ten  # 8 read clearly slower: 9 would save too little to try


def test_the_refinement_finds_fewer_workers_that_are_faster():
    """Past the CPUs every worker also costs the step CPU: the climb's 24 workers read 234 b/s
    where 19 read 249 (benchmarks/online_policy_sim.py's io_peaked). The bisection starts from
    the fewest that could supply the best's rate (15, at ~15 b/s a worker), tries 19, and the
    run keeps 19."""
    h = RunHistory(baseline=BASE, windows=[window(BASE, 14.4, 0.95, load_cpu_s=0.01)])
    rates = {24: 234, 32: 210, 19: 249, 17: 231}
    for t, n in enumerate((24, 32)):
        h.windows += [window(with_workers(BASE, n), rates[n], 0.2, t=2 * t + k, workers_cpu_s=0.05 * n)
                      for k in (1, 2)]
    current, tried = with_workers(BASE, 32), []
    for _ in range(8):
        step = decide(h, LIMITS, current, 60)
        if step.final:
            break
        current = step.config
        tried.append(workers(current))
        h.windows += [window(current, rates[workers(current)], 0.2, t=20 + len(tried) + k,
                             workers_cpu_s=0.05 * workers(current)) for k in (0, 1)]
    assert tried == [19, 17] and step.final and workers(step.config) == 19


def test_the_online_pick_is_the_offline_pick_on_the_same_evidence():
    """Tight windows (no noise to widen the tolerance): the online policy picks what the offline
    rule picks from the same rates (analyse/rules.py), and the tolerances are one."""
    from feedprof import defaults
    from feedprof.store import ConfigEvidence

    rates = {0: 20.0, 2: 40.0, 8: 150.0, 12: 155.0, 16: 157.0}
    h = RunHistory(baseline=BASE)
    for t, (n, rate) in enumerate(rates.items()):
        config = with_workers(BASE, n)
        h.windows += [window(config, rate, 0.5, t=2 * t, workers_cpu_s=0.2 * n),
                      window(config, rate, 0.5, t=2 * t + 1, workers_cpu_s=0.2 * n)]
    evidence = [ConfigEvidence(config=with_workers(BASE, n), rate=r, rates=(r,), measurements=1)
                for n, r in rates.items()]
    offline = workers(rules.pick(evidence, workers, defaults.TOLERANCE).config)
    assert defaults.TOLERANCE == rules.OFFLINE.pick_tolerance == rules.ONLINE.pick_tolerance
    assert pick(h)["num_workers"] == offline == 12


def test_a_rung_that_gains_under_gain_ends_the_climb_and_the_search_refines_below():
    """Measured in a DDP run (benchmarks/workloads/ddp_io.py, 2 ranks on 2 cores): 15 workers
    read 187 b/s, 30 read 194, both waiting ~35 % (the main processes' CPU, not the workers).
    The climb went on to 32 and settled there; 30 gained 4 %, under GAIN: the climb is flat."""
    h = RunHistory(baseline=BASE, windows=[window(BASE, 36, 0.92, load_cpu_s=0.01)])  # one worker: ~39 b/s
    fifteen, thirty = with_workers(BASE, 15), with_workers(BASE, 30)
    h.windows += [window(fifteen, 186, 0.35, t=2, workers_cpu_s=0.15), window(fifteen, 188, 0.35, t=3, workers_cpu_s=0.15),
                  window(thirty, 193, 0.35, t=4, workers_cpu_s=0.3), window(thirty, 195, 0.35, t=5, workers_cpu_s=0.3)]
    step = decide(h, LIMITS, thirty, 60)
    assert step.why == "refine" and step.config["num_workers"] == 9  # not a climb to 32: between 5 (the fewest
    # that could supply 15's rate, at ~39 b/s a worker) and 15
    gaining = io_bound_baseline()
    gaining.windows += [window(fifteen, 150, 0.35, t=2, workers_cpu_s=0.15), window(fifteen, 150, 0.35, t=3, workers_cpu_s=0.15),
                        window(thirty, 170, 0.3, t=4, workers_cpu_s=0.3), window(thirty, 171, 0.3, t=5, workers_cpu_s=0.3)]
    assert decide(gaining, LIMITS, thirty, 60).why == "climb"  # 13 % more: on up


def test_a_count_the_best_leads_narrowly_is_no_floor_for_the_refinement():
    """Measured in a DDP run (ddp_io.py, 2 ranks on 2 cores): the climb read 22 workers at
    252/263 b/s, then 32 at 269/287 (8 % more, each window ±6-7 %), and settled on 32; the
    independent harness found 8 workers faster than 22. A lead under rules.ONLINE.refine_floor_lead is no proof that
    fewer workers are slower: the search bisects below 22 too, from the last count clearly slower."""
    h = RunHistory(baseline=BASE, windows=[window(BASE, 37, 0.94, load_cpu_s=0.01)])  # one worker: ~39 b/s
    twenty_two, thirty_two = with_workers(BASE, 22), with_workers(BASE, 32)
    h.windows += [window(twenty_two, 252, 0.4, t=2, workers_cpu_s=0.2),
                  window(twenty_two, 263, 0.4, t=3, workers_cpu_s=0.2),
                  window(thirty_two, 269, 0.35, t=4, workers_cpu_s=0.3),
                  window(thirty_two, 287, 0.35, t=5, workers_cpu_s=0.3)]
    step = decide(h, LIMITS, thirty_two, 60)
    assert step.why == "refine" and step.config["num_workers"] == 19  # between 7 (the fewest that could
    # supply 32's rate) and 32, not from 22
    clearly = RunHistory(baseline=BASE, windows=list(h.windows[:1]))  # 22 at 231: 17 % under 32, a floor
    clearly.windows += [window(twenty_two, 230, 0.4, t=2, workers_cpu_s=0.2),
                        window(twenty_two, 232, 0.4, t=3, workers_cpu_s=0.2), *h.windows[3:]]
    step = decide(clearly, LIMITS, thirty_two, 60)
    assert step.why == "refine" and step.config["num_workers"] == 28  # from 25 (22's ~10.5 b/s a worker
    # supplies 32's rate from 25 on) to 32: 28 saves an eighth of 32's workers


def test_on_noiseless_windows_the_explorer_ends_within_3_percent_of_the_best_count():
    """benchmarks/online_policy_sim.py's models of an I/O-bound loader on 2 CPUs (each worker past
    them costs the step CPU): with windows that read the true rate, the run ends on the best count
    or one more (within the pick's tolerance), never on the climb's overshoot."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import online_policy_sim as sim

    for name, model in sim.WORKLOADS.items():
        rates = {n: sim.true_rate(n, *model) for n in range(33)}
        n, _ = sim.simulate(0, model, noise=0.0, drift=0.0, run_s=60.0, explore_s=60.0)
        assert rates[n] >= 0.97 * max(rates.values()), (name, n, max(rates, key=rates.get))


def test_a_keras_loop_that_loads_itself_and_waits_on_io_is_predicted_past_the_cpus():
    """Keras's workers=1 loads in the loop's own thread: its windows' CPU while it waited says I/O,
    so the count predicted for the held run's caveat goes past the 2 CPUs (torch's rule, which
    reads workers=1 as a worker with no CPU measured, stopped it at 2)."""
    from feedprof.tune.space_tf import KerasSpace

    base = {"workers": 1, "use_multiprocessing": False, "max_queue_size": 10}
    space = KerasSpace(base, cpu_cap=2, max_primary=32, cuda_used=None)
    h = RunHistory(baseline=base)
    h.windows += [window(base, 20, 0.9, t=0, load_cpu_s=0.01), window(base, 20, 0.9, t=1, load_cpu_s=0.01)]
    assert predicted_workers(h, LIMITS, space) > LIMITS.cpu_cap


def test_a_probe_epoch_before_each_epoch_does_not_cap_the_climb_at_two_workers():
    """next(iter(loader)) ahead of each epoch's loop is an epoch of one batch to the loader: the
    epochs' mean, not the last one, is what a start of the workers is spread over (the last alone
    read 1 batch an epoch, capped the climb at 2 workers and sent a run 2x faster there back to 0)."""
    h = io_bound_baseline()
    h.restarts_per_epoch = True
    for _ in range(3):
        h.epoch_ended(64)
        h.epoch_ended(1)  # the probe's epoch, the latest
    assert h.batches_per_epoch == 32
    assert worker_cap(h, LIMITS) >= 32 // 4
    assert workers(decide(h, LIMITS, BASE, 60).config) >= 4
