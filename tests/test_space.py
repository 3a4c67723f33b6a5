"""The search spaces: legal configs, costs, secondary knobs and what is judged."""
from feedprof.store.reasons import EpochEndStall, PinMemoryNoEffect, VersusAutotune
from feedprof.store import Phase, Role, TrialState
from feedprof.tune.space import TorchSpace
from feedprof.tune.spaces import make_space
from feedprof.tune.space_tf import KerasSpace, TfDataSpace, TfKerasSpace
from feedprof.tune.strategy import LadderStrategy
from tests.records import make_trial


def ok(config, rate, **fields):
    return make_trial(index=0, role=Role.SEARCH, config=config, state=TrialState.OK, batches_per_s=rate, **fields)


def test_make_space_by_framework():
    for fw, cls in (("torch", TorchSpace), ("keras", KerasSpace), ("tf.keras", TfKerasSpace),
                    ("tf.data", TfDataSpace)):
        assert type(make_space(fw, {}, 2, 32, False)) is cls
    try:
        make_space("jax", {}, 2, 32, False)
    except ValueError as exc:
        assert "cannot tune 'jax'" in str(exc)
    else:
        raise AssertionError("an unknown framework must be refused")


def test_torch_describe_leaves_out_defaults_and_notes_pin_memory():
    sp = TorchSpace({"num_workers": 0}, 2, 32, cuda_used=False)
    assert sp.describe({"num_workers": 4, "prefetch_factor": 2}) == "num_workers=4"
    assert sp.describe({"num_workers": 4, "prefetch_factor": 4, "persistent_workers": True}) == \
        "num_workers=4, prefetch_factor=4, persistent_workers=True"
    assert sp.notes() == [PinMemoryNoEffect()]
    assert TorchSpace({}, 2, 32, cuda_used=True).notes() == []


def test_keras_rungs_start_at_one_worker_and_threads_fill_cpus_only_as_a_job():
    sp = KerasSpace({"workers": 1}, 2, 16, None)
    assert sp.rungs(16)[0] == 1 and 0 not in sp.rungs(16)
    threads = {"workers": 4, "use_multiprocessing": False, "max_queue_size": 10}
    # the machine is saturated by others; the job itself uses 0.6 cores: not the CPUs' limit
    assert sp.cpu_bound(ok(threads, 50.0, system_cpu_pct=100.0, main_cpu_pct=60.0)) is False
    assert sp.cpu_bound(ok(threads, 50.0, system_cpu_pct=100.0, main_cpu_pct=195.0)) is True
    assert sp.cpu_bound(ok({**threads, "workers": 1}, 50.0, main_cpu_pct=195.0)) is None


def test_keras_secondary_tries_processes_when_loading_holds_the_gil():
    sp = KerasSpace({"workers": 1}, 2, 16, None)
    best = ok({"workers": 4, "use_multiprocessing": False, "max_queue_size": 10}, 50.0, main_cpu_pct=99.0,
              data_wait_fraction=0.5)
    configs = [c for c, _ in sp.secondary(best, 0.03, [])]
    assert {"workers": 4, "use_multiprocessing": True, "max_queue_size": 10} in configs
    assert {"workers": 4, "use_multiprocessing": False, "max_queue_size": 20} in configs
    assert TfKerasSpace({}, 2, 16, None).notes() == [EpochEndStall()]


def test_tfdata_primary_private_pool_past_the_cores_and_autotune():
    sp = TfDataSpace({"num_parallel_calls": 2, "prefetch": 1}, 2, 32, None)
    assert sp.primary_of({"num_parallel_calls": "AUTOTUNE"}) == 2
    assert sp.with_primary(sp.baseline, 2)["private_threadpool_size"] is None
    assert sp.with_primary(sp.baseline, 16)["private_threadpool_size"] == 16  # lifts the default pool's cap
    assert sp.workers({"num_parallel_calls": 16}) == 0  # threads: no worker processes to budget
    assert sp.cost({"num_parallel_calls": 4, "prefetch": "AUTOTUNE"}) < sp.cost({"num_parallel_calls": 8})
    configs = [c for c, _ in sp.secondary(ok(sp.with_primary(sp.baseline, 16), 10.0), 0.03, [])]
    assert configs[0]["num_parallel_calls"] == "AUTOTUNE"


def test_tfdata_secondary_knobs_of_an_autotune_best():
    """AUTOTUNE, measured as a secondary candidate, can be the best so far: its own secondary
    knobs are asked for next (a keras-io example crashed here: 'AUTOTUNE' > 1)."""
    sp = TfDataSpace({"num_parallel_calls": None, "prefetch": 10}, 2, 32, None)
    auto = ok(sp.legalize({"num_parallel_calls": "AUTOTUNE", "prefetch": "AUTOTUNE"}), 120.0)
    configs = [c for c, _ in sp.secondary(auto, 0.03, [])]
    assert {**sp.legalize(auto.config), "deterministic": False} in configs  # AUTOTUNE maps in parallel


def test_tfdata_never_recommends_below_autotune():
    sp = TfDataSpace({"num_parallel_calls": 2}, 2, 32, None)
    static = ok(sp.legalize({"num_parallel_calls": 4}), 100.0, peak_rss_bytes=5)
    auto = ok(sp.legalize({"num_parallel_calls": "AUTOTUNE", "prefetch": "AUTOTUNE"}), 120.0, peak_rss_bytes=7)
    config, judged = sp.finalize(static, 0.03, [static, auto])
    assert config["num_parallel_calls"] == "AUTOTUNE"
    assert judged == [VersusAutotune(static_batches_per_s=100.0, autotune_batches_per_s=120.0, static_rss_bytes=5,
                                     autotune_rss_bytes=7, switched=True)]
    faster = ok(sp.legalize({"num_parallel_calls": 16, "private_threadpool_size": 16}), 400.0)
    config, judged = sp.finalize(faster, 0.03, [faster, auto])
    assert config["num_parallel_calls"] == 16 and judged[0].switched is False


TF_BASELINE = {"num_parallel_calls": 2, "prefetch": 1}


def tf_trial(index, role, config, rate, main_cpu_pct, system_cpu_pct=100.0, phase=Phase.SEARCH):
    return make_trial(index=index, role=role, config=config, state=TrialState.OK, batches_per_s=rate, phase=phase,
                 batches_per_s_low=rate * 0.98, batches_per_s_high=rate * 1.02,
                 main_cpu_pct=main_cpu_pct, system_cpu_pct=system_cpu_pct)


def test_cpu_bound_is_the_jobs_own_cpu_not_the_machines():
    space = TfDataSpace(TF_BASELINE, cpu_cap=2, max_primary=32, cuda_used=False)
    cfg = space.with_primary(TF_BASELINE, 4)
    # another job fills the machine while the pipeline's threads sleep on reads
    assert space.cpu_bound(tf_trial(1, "search", cfg, 9.4, main_cpu_pct=26.0)) is False
    assert space.cpu_bound(tf_trial(1, "search", cfg, 9.4, main_cpu_pct=195.0)) is True
    assert space.cpu_bound(tf_trial(1, "search", cfg, 9.4, main_cpu_pct=None)) is None


def test_sleep_bound_map_on_a_busy_machine_climbs_past_the_cpu_count():
    # 10 ms of read per element, 16 per batch; the training process uses ~0.07 cores
    # per thread, and another job keeps the machine's CPUs at 100 % throughout.
    space = TfDataSpace(TF_BASELINE, cpu_cap=2, max_primary=32, cuda_used=False)
    strat = LadderStrategy(space)
    trials = []

    def measure(role, config, phase):
        n = space.primary_of(config)
        rate = 1000.0 if role == "ceiling" else 2.6 * n
        t = tf_trial(len(trials), role, space.legalize(config), rate, main_cpu_pct=7.0 * n, phase=phase)
        trials.append(t)
        strat.tell(t)

    measure(Role.BASELINE, TF_BASELINE, Phase.BASELINE)
    while len(trials) < 30:
        prop = strat.ask()
        if prop is None:
            break
        measure(prop.role, prop.config, prop.phase)
    assert prop is None  # the search ended by itself
    tried = [space.primary_of(t.config) for t in trials if t.role == "search"]
    assert max(tried) >= 16, tried
    assert not any(n.code == "cpus_saturated" for n in strat.notes), strat.notes
