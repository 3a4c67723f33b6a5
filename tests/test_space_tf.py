"""The tf.data search space's judgement of a trial, and the ladder it leads to
(simulated trials: no processes)."""
from feedprof.store import Trial
from feedprof.tune.space_tf import TfDataSpace
from feedprof.tune.strategy import LadderStrategy

BASELINE = {"num_parallel_calls": 2, "prefetch": 1}


def trial(index, role, config, rate, main_cpu_pct, system_cpu_pct=100.0):
    return Trial(index=index, role=role, config=config, state="ok", batches_per_s=rate,
                 batches_per_s_low=rate * 0.98, batches_per_s_high=rate * 1.02,
                 main_cpu_pct=main_cpu_pct, system_cpu_pct=system_cpu_pct)


def test_cpu_bound_is_the_jobs_own_cpu_not_the_machines():
    space = TfDataSpace(BASELINE, cpu_cap=2, max_primary=32, cuda_used=False)
    cfg = space.with_primary(BASELINE, 4)
    # another job fills the machine while the pipeline's threads sleep on reads
    assert space.cpu_bound(trial(1, "search", cfg, 9.4, main_cpu_pct=26.0)) is False
    assert space.cpu_bound(trial(1, "search", cfg, 9.4, main_cpu_pct=195.0)) is True
    assert space.cpu_bound(trial(1, "search", cfg, 9.4, main_cpu_pct=None)) is None


def test_sleep_bound_map_on_a_busy_machine_climbs_past_the_cpu_count():
    # 10 ms of read per element, 16 per batch; the training process uses ~0.07 cores
    # per thread, and another job keeps the machine's CPUs at 100 % throughout.
    space = TfDataSpace(BASELINE, cpu_cap=2, max_primary=32, cuda_used=False)
    strat = LadderStrategy(space)
    trials = []

    def measure(role, config):
        n = space.primary_of(config)
        rate = 1000.0 if role == "ceiling" else 2.6 * n
        t = trial(len(trials), role, space.legalize(config), rate, main_cpu_pct=7.0 * n)
        trials.append(t)
        strat.tell(t)

    measure("baseline", BASELINE)
    while len(trials) < 30:
        prop = strat.ask()
        if prop is None:
            break
        measure(prop.role, prop.config)
    tried = [space.primary_of(t.config) for t in trials if t.role == "search"]
    assert max(tried) >= 16, tried
    assert not any("the CPUs are the limit" in n for n in strat.notes), strat.notes
