"""The online explorer's picks on simulated windows: how often it settles within 5 % of the best
worker count when each window reads the true rate with noise and the machine drifts.

    python benchmarks/online_policy_sim.py [--seeds 300] [--noise 0.07] [--drift 0.03] [--run-s 60]

No processes, no clock: tune/online_strategy.decide (the search, tune/search.py, in its online
Mode) is asked after every window, as the real
run's decider asks it, and told windows drawn from a model of an I/O-bound loader on a small
machine (each worker supplies a fixed rate up to the compute ceiling; every worker past the CPUs
costs the step a little CPU, so the best count is a middle one). A window reads the true rate x
(1 + noise) x (1 + drift), the drift a slow random walk shared by every config (another job
starting and stopping), so a config measured early and one measured late differ by more than
their own noise: what interleaved confirmation is for.

Prints, per workload: the picks' quality (true rate of the pick / the best's), its share >= 0.95,
and the run's loss to exploring (batches short of the best config's over the run).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from feedprof.analyse.diagnose import workers_of  # noqa: E402
from feedprof.store.online import OnlineWindow  # noqa: E402
from feedprof.tune.online_strategy import Limits, RunHistory, decide  # noqa: E402

BASE = {"num_workers": 0, "prefetch_factor": None, "pin_memory": False, "persistent_workers": False}
WINDOW_S = 1.0  # the real run's windows are 0.5 s of batches, about 1 s with the pool's start
SWITCH_S = 0.5  # a switch's pool filling (charged as time at no rate)

# name -> (batches/s one worker supplies, compute ceiling, share of the step lost per worker past the CPUs)
WORKLOADS: Dict[str, Tuple[float, float, float]] = {
    "io_flat_top": (20.0, 300.0, 0.004),  # a wide plateau: many counts within 5 %
    "io_peaked": (16.0, 300.0, 0.010),  # the ddp_io shape: past ~16 workers each costs 1 %
    "io_steep": (30.0, 300.0, 0.020),
}
CPUS = 2


def workers(config: Dict[str, int]) -> int:
    return workers_of(config) or 0


def true_rate(n: int, supply: float, ceiling: float, per_worker: float) -> float:
    if n == 0:
        return supply * 0.9  # the loop loads itself
    return min(n * supply, ceiling) * max(0.05, 1 - per_worker * max(0, n - CPUS))


def simulate(seed: int, model: Tuple[float, float, float], noise: float, drift: float, run_s: float,
             explore_s: float) -> Tuple[int, float]:
    """(the worker count the run ended on, the batches it trained)."""
    rng = random.Random(seed)
    supply, ceiling, per_worker = model
    h, limits = RunHistory(baseline=dict(BASE)), Limits(cpu_cap=CPUS, max_workers=32)
    current, t, walk, batches, final = dict(BASE), 0.0, 0.0, 0.0, False
    while t < run_s:
        walk = 0.8 * walk + rng.gauss(0, drift)  # (AR(1): a few windows' memory)
        r = true_rate(workers(current), supply, ceiling, per_worker)
        read = max(1.0, r * (1 + rng.gauss(0, noise)) * (1 + walk))
        wait = max(0.0, 1 - read / ceiling) * WINDOW_S
        h.windows.append(OnlineWindow(rank=0, config=dict(current), batches=round(read * WINDOW_S),
                                      samples=32 * round(read * WINDOW_S), wait_s=wait, t_start_s=t,
                                      t_end_s=t + WINDOW_S, workers_cpu_s=0.05 * workers(current) * WINDOW_S,
                                      load_cpu_s=0.02))
        batches += r * WINDOW_S
        t += WINDOW_S
        if final:
            continue
        step = decide(h, limits, current, explore_s - t)
        final = step.final
        if step.config != current:
            current, t = step.config, t + SWITCH_S
    return workers(current), batches


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--noise", type=float, default=0.07, help="one window's relative sd (measured: 6-7 %%)")
    ap.add_argument("--drift", type=float, default=0.03, help="the drift walk's step sd")
    ap.add_argument("--run-s", type=float, default=60.0)
    ap.add_argument("--explore-s", type=float, default=60.0)
    ap.add_argument("--out", default=None, help="write the summary as JSON here")
    a = ap.parse_args(argv)
    summary = {}
    for name, model in WORKLOADS.items():
        rates = {n: true_rate(n, *model) for n in range(0, 33)}
        best = max(rates.values())
        picks, quality, lost = [], [], []
        for seed in range(a.seeds):
            n, trained = simulate(seed, model, a.noise, a.drift, a.run_s, a.explore_s)
            picks.append(n)
            quality.append(rates[n] / best)
            lost.append(1 - trained / (best * a.run_s))
        summary[name] = {"best_workers": max(rates, key=rates.get), "quality_mean": statistics.mean(quality),
                         "quality_ge_095": sum(q >= 0.95 for q in quality) / len(quality),
                         "quality_min": min(quality), "picks_median": statistics.median(picks),
                         "lost_to_exploring_mean": statistics.mean(lost)}
        s = summary[name]
        print(f"{name}: best {s['best_workers']} workers; picks median {s['picks_median']}; quality mean "
              f"{s['quality_mean']:.3f}, >= 0.95 in {100 * s['quality_ge_095']:.0f} %, min {s['quality_min']:.2f}; "
              f"run lost to exploring {100 * s['lost_to_exploring_mean']:.1f} %")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as fh:
            json.dump({"args": vars(a), "workloads": summary}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
