"""Thread pools and cores: reading them (record/pools.py), judging them (analyse/pools.py), the search
trying them (tune/pools_step.py, tune/space_threads.py), the paste (frameworks/thread_paste.py)."""
import dataclasses
import json
import os
import textwrap

from feedprof.analyse.pools import oversubscribes, pools_finding, worker_pool_threads
from feedprof.analyse.recommend import recommend
from feedprof.frameworks.thread_limits import HeldWorker, split, worker_init
from feedprof.frameworks.torch import paste_for
from feedprof.record.pools import POOLS, pool_threads_of, pools_here, read_pools, threads_of
from feedprof.render.words import say
from feedprof.store import LoaderRecord, Phase, Role, Run, RunKind, Summary, TrialState
from feedprof.store.codes import Framework, PoolRole
from feedprof.store.knobs.threads import cores_apart, legal_threads, worker_share
from feedprof.store.knobs.threads import threads_of as threads_set
from feedprof.store.pools import ProcessPools, ThreadPool
from feedprof.store.reasons import PoolsOversubscribe, PoolsTried
from feedprof.tune.space import TorchSpace
from feedprof.tune.space_threads import thread_variants
from feedprof.tune.strategy import LadderStrategy
from tests.records import make_trial

BLAS2 = (ThreadPool(api="blas", library="openblas", threads=2, prefix="libscipy_openblas"),
         ThreadPool(api="openmp", library="openmp", threads=1, prefix="libgomp"))


def _pools(worker_threads, held=0):
    return (ProcessPools(role=PoolRole.TRAINING, processes=1, pools=(ThreadPool("torch", "torch", 2),)),
            ProcessPools(role=PoolRole.WORKER, processes=2, pools=tuple(
                dataclasses.replace(p, threads=min(p.threads, worker_threads)) for p in BLAS2), held=held))


# -- judging ---------------------------------------------------------------------------------------


def test_workers_whose_pools_together_pass_the_cores_oversubscribe():
    assert oversubscribes(2, 2, 2) and oversubscribes(4, 2, 4)
    assert not oversubscribes(2, 1, 2)  # one thread each: what the workers alone need
    assert not oversubscribes(0, 8, 2) and not oversubscribes(2, None, 2)
    assert not oversubscribes(2, 2, 4)  # 4 threads on 4 cores fit
    assert worker_pool_threads(_pools(2)) == 2 and worker_pool_threads(()) is None


def test_a_profile_names_the_workers_pools_and_what_they_ask_of_the_cores():
    summary = Summary(num_workers=2, workers_runq_pct=80.0, workers_threads_runnable=3.4)
    found = pools_finding(_pools(2), summary, cpus=2)
    assert found == PoolsOversubscribe(workers=2, library="openblas", api="blas", pool_threads=2, threads=4, cpus=2,
                                       held=0, workers_runq_pct=80.0, workers_threads_runnable=3.4)
    words = say(found)
    assert "Each of the 2 workers runs an OpenBLAS pool of 2 threads: 4 computing threads on 2 cores" in words
    assert "threadpool_limits(1)" in words and "OPENBLAS_NUM_THREADS=1" in words
    assert pools_finding(_pools(1), summary, cpus=2) is None  # held to one: nothing to say
    assert pools_finding(_pools(2), dataclasses.replace(summary, num_workers=0), cpus=2) is None


# -- reading, in a process of its own ---------------------------------------------------------------


def test_a_process_reads_its_own_pools_and_its_threads(tmp_path, monkeypatch):
    here = pools_here()
    assert all(p.threads >= 1 for p in here)
    monkeypatch.setattr(POOLS, "directory", str(tmp_path))
    monkeypatch.setattr(POOLS, "main_pid", os.getpid())
    monkeypatch.setattr(POOLS, "_written_pid", 0)
    POOLS.loading_started()
    POOLS.loading_started()  # (once a process)
    data = json.loads((tmp_path / f"pools-{os.getpid()}.json").read_text())
    assert data["role"] == "training" and len(data["pools"]) == len(here)
    (tmp_path / "pools-1.json").write_text(json.dumps({"pid": 1, "role": "worker", "held": 1,
                                                       "pools": [["blas", "openblas", 1, "lib"]]}))
    (tmp_path / "pools-2.json").write_text("{not json")  # (written as it was killed)
    got = read_pools(str(tmp_path))
    assert [(p.role, p.processes) for p in got] == [(PoolRole.TRAINING, 1), (PoolRole.WORKER, 1)]
    assert got[1].held == 1 and got[1].pools[0].threads == 1
    assert pool_threads_of([1], str(tmp_path)) == 1 and pool_threads_of([999], str(tmp_path)) is None
    state = threads_of(os.getpid())
    assert state is not None and state.runnable >= 1 and threads_of(2 ** 22 + 12345) is None


# -- applying ------------------------------------------------------------------------------------


def test_the_thread_knobs_never_reach_the_loaders_keywords():
    own, threads = split({"num_workers": 2, "worker_threads": 1, "main_threads": 0})
    assert own == {"num_workers": 2} and threads == {"worker_threads": 1}
    seen = []
    wrapped = worker_init(seen.append, {"worker_threads": 1})
    assert isinstance(wrapped, HeldWorker) and wrapped.inner == seen.append and wrapped.threads == 1
    assert worker_init(seen.append, {}) == seen.append  # nothing to hold: the script's own
    again = worker_init(wrapped, {"worker_threads": 1})
    assert again.inner == seen.append  # a rebuilt loader's is not wrapped twice


def test_a_space_makes_the_thread_knobs_legal_for_each_worker_count():
    sp = TorchSpace({"num_workers": 2}, cpu_cap=4, max_primary=16, cuda_used=False)
    held = sp.hold_pools(sp.baseline)
    assert held["worker_threads"] == 2  # 4 cores ÷ 2 workers
    assert sp.with_primary(held, 8)["worker_threads"] == 1 and "worker_threads" not in sp.with_primary(held, 0)
    assert sp.key(held) != sp.key(sp.baseline) and sp.key(sp.with_primary(held, 0)) == sp.key(
        sp.with_primary(sp.baseline, 0))
    assert sp.cost(held) > sp.cost(sp.baseline)  # as fast: the one with nothing more to paste
    assert sp.hold_pools(sp.with_primary(sp.baseline, 0)) is None
    assert legal_threads({"main_cores": 1}, 2, 4) == {"main_cores": 1, "main_threads": 1}  # (no pool wider than its cores)
    assert legal_threads({"main_cores": 2}, 2, 2) == {} and legal_threads({"main_threads": 1}, 0, 2) == {
        "main_threads": 1}
    assert worker_share(2, 4) == 1 and cores_apart((0, 1, 2), 1) == ((0,), (1, 2)) and cores_apart((0,), 1) == ((), ())


# -- the search ------------------------------------------------------------------------------------


def blas_model(config, role):
    """numpy BLAS in every worker (as measured on the 2-core VM): the pools spin against each other
    unless each worker's is held to one thread. (batches/s, workers' CPU %, wait, pools)"""
    if role == Role.CEILING:
        return 400.0, 0.0, 0.0, 1
    n, held = config["num_workers"], bool(config.get("worker_threads"))
    if n == 0:
        return 46.8, 0.0, 0.85, 2
    rate = {1: 40.0, 2: 94.6, 3: 80.0}.get(n, 65.0) if held else {1: 35.0, 2: 10.2}.get(n, 5.3)
    return rate, 95.0 * min(n, 2), 0.7, 1 if held else 2


def tune(model, baseline, cpu_cap=2, budget=30, main_runq_pct=None):
    space = TorchSpace(baseline, cpu_cap=cpu_cap, max_primary=16, cuda_used=True)
    strat, trials = LadderStrategy(space), []

    def measure(role, phase, config):
        config = space.legalize(config)
        rate, cpu, wait, pool = model(config, role)
        run = Run(kind=RunKind.TRIAL, pools=_pools(pool) if config["num_workers"] else ())
        t = make_trial(index=len(trials), role=role, config=config, state=TrialState.OK, phase=phase, run=run,
                       batches_per_s=rate, batches_per_s_low=rate * 0.98, batches_per_s_high=rate * 1.02,
                       workers_cpu_pct=cpu, data_wait_fraction=wait, system_cpu_pct=90.0, main_cpu_pct=20.0,
                       num_workers=config["num_workers"],
                       main_runq_pct=main_runq_pct(config) if main_runq_pct is not None else None)
        trials.append(t)
        strat.tell(t)

    measure(Role.BASELINE, Phase.BASELINE, baseline)
    while len(trials) < budget:
        prop = strat.ask()
        if prop is None:
            break
        measure(prop.role, prop.phase, prop.config)
    return space, strat, trials


def sleeping_model(config, role):
    """Workers that wait on storage, numpy imported in each (an OpenBLAS pool of 2 that never runs):
    10 batches/s a worker, the workers' CPU 1.5 % each."""
    if role == Role.CEILING:
        return 400.0, 0.0, 0.0, 1
    n = config["num_workers"]
    return min(400.0, 10.0 + 30.0 * n), 1.5 * n, max(0.0, 1 - (10.0 + 30.0 * n) / 400.0), 2


def test_pools_in_workers_that_wait_on_storage_cost_no_trial_and_no_finding():
    """Pools as large as the machine in every worker, but the workers barely use a CPU: nothing to
    hold (a persistent-workers loop tuned online has one switch to spend; it goes to the workers)."""
    _, _, trials = tune(sleeping_model, {"num_workers": 2})
    assert not any(t.config.get("worker_threads") for t in trials), [t.config for t in trials]
    summary = Summary(num_workers=2, workers_cpu_pct=3.0)
    assert pools_finding(_pools(2), summary, 2) is None
    busy = Summary(num_workers=2, workers_cpu_pct=190.0)
    assert pools_finding(_pools(2), busy, 2) is not None
    # a machine busy beside the job: the workers got 0.6 cores, but 3.4 of their threads were ready to run
    crowded = Summary(num_workers=2, workers_cpu_pct=60.0, workers_threads_runnable=3.4)
    assert pools_finding(_pools(2), crowded, 2) is not None


def test_the_search_holds_pools_that_oversubscribe_and_climbs_with_them_held():
    space, strat, trials = tune(blas_model, {"num_workers": 2})
    rec = recommend(trials, space)
    assert rec.config["num_workers"] >= 2 and rec.config.get("worker_threads") == 1, rec.config
    assert blas_model(space.legalize(rec.config), Role.SEARCH)[0] >= 0.9 * 94.6
    tried = [n for n in strat.notes if isinstance(n, PoolsTried)]
    assert tried and tried[0].kept and tried[0].own_batches_per_s == 10.2
    held = [t for t in trials if t.config.get("worker_threads")]
    assert held[0].phase == Phase.LADDER and held[0].config["num_workers"] == 2


def test_a_script_written_without_workers_finds_its_pools_on_the_first_rung():
    space, strat, trials = tune(blas_model, {"num_workers": 0})
    rec = recommend(trials, space)
    assert rec.config.get("worker_threads") == 1 and rec.config["num_workers"] >= 2


def test_a_script_without_wide_pools_costs_no_extra_trial():
    def no_pools(config, role):
        rate, cpu, wait, _ = blas_model({**config, "worker_threads": 1}, role)
        return rate, cpu, wait, 1

    _, _, trials = tune(no_pools, {"num_workers": 0})
    assert not any(t.config.get("worker_threads") for t in trials)


def test_held_pools_that_gain_nothing_are_not_kept():
    def same(config, role):
        rate, cpu, wait, pool = blas_model({**config, "worker_threads": 1}, role)
        return rate, cpu, wait, 1 if config.get("worker_threads") else 2

    space, strat, trials = tune(same, {"num_workers": 2})
    tried = [n for n in strat.notes if isinstance(n, PoolsTried)]
    assert tried and not tried[0].kept
    held = [t for t in trials if t.config.get("worker_threads") and t.role == Role.SEARCH]
    assert len(held) == 1  # tried once, not at every rung (a confirming window of a rival aside)
    assert not recommend(trials, space).config.get("worker_threads")


# -- the paste --------------------------------------------------------------------------------------


SCRIPT = """\
import torch
from torch.utils.data import DataLoader

def seed_worker(worker_id):
    pass

def main():
    loader = DataLoader(list(range(64)), batch_size=4, num_workers=2, worker_init_fn=seed_worker)
    for x in loader:
        pass
"""


def test_the_paste_holds_the_pools_in_a_worker_init_fn_that_runs_the_scripts_own(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    loader = LoaderRecord(loader_id=0, framework=Framework.TORCH, site="train.py:8", call_chain=("train.py:8",),
                          config={"num_workers": 2, "pin_memory": False, "prefetch_factor": 2,
                                  "persistent_workers": False})
    found = paste_for({"num_workers": 2, "worker_threads": 1}, loader, str(script), cuda_used=True)
    lines = found.line.splitlines()
    assert lines[0].startswith("from threadpoolctl import threadpool_limits")
    assert "def hold_worker_pools(worker_id):" in lines and "    threadpool_limits(1)" in found.line
    assert "    (seed_worker)(worker_id)" in found.line
    call = next(l for l in lines if "DataLoader(" in l)
    assert "worker_init_fn=hold_worker_pools" in call and "seed_worker" not in call and call.endswith("# train.py:8")
    assert "OMP_NUM_THREADS" not in found.line  # (its own worker_init_fn: the variables alone would not do)
    plain = paste_for({"num_workers": 2, "worker_threads": 1}, dataclasses.replace(loader), str(script),
                      cuda_used=False)
    assert "OMP_NUM_THREADS" not in plain.line


def test_a_recommendation_keeps_the_loaders_keywords_apart_from_the_thread_knobs():
    space, _, trials = tune(blas_model, {"num_workers": 2})
    rec = recommend(trials, space)
    from feedprof.store.knobs.threads import threads_apart
    apart = threads_apart(rec.config)
    assert "worker_threads" not in apart["config"] and apart["threads"] == {"worker_threads": 1}


def cpu_step_model(config, role):
    """A CPU step on torch's 2 threads beside 2 decoding workers: alone (0 workers) 90 batches/s; with
    the workers as written the step waits for the cores (67); holding its intra-op pool to the core the
    workers leave lets both run (95); cores of its own starve the workers (60)."""
    if role == Role.CEILING:
        return 120.0, 0.0, 0.0, 1
    n = config["num_workers"]
    if n == 0:
        return 90.0, 0.0, 0.3, 1
    rate = 60.0 if config.get("main_cores") else 95.0 if config.get("main_threads") else 67.0 - 2 * (n - 2)
    return rate, 150.0, 0.2, 1


def test_a_cpu_step_beside_cpu_workers_gets_its_threads_and_cores_tried():
    """The pick would load in the loop (0 workers): the script's own 2 workers are tried with the
    training process's threads held and with cores of its own, since their step waited for a CPU."""
    space, strat, trials = tune(cpu_step_model, {"num_workers": 2}, main_runq_pct=lambda c: 40.0 if c["num_workers"] else 0.0)
    tried = {k for t in trials for k in ("main_threads", "main_cores") if t.config.get(k)}
    assert "main_threads" in tried, [t.config for t in trials]
    baseline = trials[0]
    variants = thread_variants(space.legalize(baseline.config), baseline, 2)
    assert [sorted(threads_set(v).items()) for v in variants] == [[("main_threads", 1)],
                                                                 [("main_cores", 1), ("worker_threads", 1)]]
    rec = recommend(trials, space)
    assert rec.config.get("main_threads") == 1 and rec.config["num_workers"] >= 2, rec.config


def test_a_step_that_never_waited_for_a_cpu_gets_no_thread_trial():
    _, _, trials = tune(cpu_step_model, {"num_workers": 2}, main_runq_pct=lambda c: 2.0)
    assert not any(t.config.get(k) for t in trials for k in ("main_threads", "main_cores"))
