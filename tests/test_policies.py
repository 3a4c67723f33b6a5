"""The one search (tune/search.py) in its two modes over one set of evidence: offline (the ladder,
asked and told over trials) and online (decide over windows of the run) measure
the same noise-free loader and end on configs equally fast, within the pick tolerance
(analyse/rules.py: where their Mode fields do not apply, they decide by the same rules)."""
import pytest

from feedprof.analyse import rules
from feedprof.analyse.recommend import recommend
from feedprof.store import Role
from feedprof.store.online import OnlineWindow
from feedprof.tune.online_strategy import Limits, RunHistory, decide
from tests.test_online_strategy import workers
from tests.test_strategy import simulate

BASE = {"num_workers": 0, "prefetch_factor": None, "pin_memory": False, "persistent_workers": False}
CPUS, MAX_WORKERS, CEILING = 2, 32, 300.0
# name -> (batches/s one worker supplies, share of the step lost per worker past the CPUs)
LOADERS = {"plateau": (20.0, 0.0), "peaked": (16.0, 0.010), "steep": (30.0, 0.020), "slow_io": (6.0, 0.0)}


def true_rate(n, supply, per_worker):
    """An I/O-bound loader (each worker a twentieth of a core) feeding a step of CEILING batches/s;
    workers past the CPUs take a share of the step's CPU each."""
    if n == 0:
        return supply * 0.9  # the loop loads each batch itself
    return min(n * supply, CEILING) * max(0.05, 1 - per_worker * max(0, n - CPUS))


def offline_pick(supply, per_worker):
    def model(config, role):
        if role == Role.CEILING:
            return CEILING, 0.0, 0.0
        n = workers(config)
        rate = true_rate(n, supply, per_worker)
        return rate, 5.0 * n, max(0.0, 1 - rate / CEILING)

    space, _, trials = simulate(model, BASE, cpu_cap=CPUS, max_workers=MAX_WORKERS)
    return workers(recommend(trials, space).config)


def online_pick(supply, per_worker, run_s=400.0):
    h, limits, current, t = RunHistory(baseline=dict(BASE)), Limits(cpu_cap=CPUS, max_workers=MAX_WORKERS), dict(BASE), 0.0
    while t < run_s:
        rate = true_rate(workers(current), supply, per_worker)
        h.windows.append(OnlineWindow(rank=0, config=dict(current), batches=round(rate), samples=32 * round(rate),
                                      wait_s=max(0.0, 1 - rate / CEILING), t_start_s=t, t_end_s=t + 1.0,
                                      workers_cpu_s=0.05 * workers(current), load_cpu_s=0.02))
        t += 1.0
        step = decide(h, limits, current, run_s - t)
        current = step.config
        if step.final:
            return workers(current)
    pytest.fail(f"the online search had not settled after {run_s} s of windows")


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_both_searches_end_on_configs_equally_fast(loader):
    supply, per_worker = LOADERS[loader]
    offline, online = offline_pick(supply, per_worker), online_pick(supply, per_worker)
    rates = {n: true_rate(n, supply, per_worker) for n in range(MAX_WORKERS + 1)}
    best = max(rates.values())
    tol = rules.OFFLINE.pick_tolerance
    print(loader, "offline", offline, "online", online, "best", max(rates, key=rates.get))
    assert rates[offline] >= (1 - tol) * best and rates[online] >= (1 - tol) * best
    assert abs(rates[offline] - rates[online]) <= tol * best
