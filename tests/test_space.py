"""The search spaces: legal configs, costs, secondary knobs and what is judged."""
from feedprof.reasons import EpochEndStall, PinMemoryNoEffect, VersusAutotune
from feedprof.store import Role, Trial, TrialState
from feedprof.tune.space import TorchSpace, make_space
from feedprof.tune.space_tf import KerasSpace, TfDataSpace, TfKerasSpace


def ok(config, rate, **fields):
    return Trial(index=0, role=Role.SEARCH, config=config, state=TrialState.OK, batches_per_s=rate, **fields)


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
