"""Thread pools and cores: does `feedprof tune` hold the pools a loader's workers oversubscribe the
cores with, does its online tuning do so inside the run, and does a thread or core setting help a
CPU-heavy step beside CPU-heavy workers? Every rate here is the independent harness's
(benchmarks/independent.py: no feedprof code, the config and the thread settings forced where the
script builds its loader, as a user's paste would), every time a wall clock's from outside.

    python benchmarks/thread_pools.py [numpy_pools cpu_step_workers] [--tunes 2] [--reps 2] [--epochs 12]

numpy_pools (benchmarks/workloads/numpy_pools.py: three 160x160 products a sample in numpy, 2 workers
as written, a GPU-shaped 2 ms step):
    grid    the harness over {2, 4 workers} x {pools as written, each worker's held to one thread}
    tunes   `feedprof tune` --tunes times: its pick (loader settings and thread knobs) measured by the
            harness beside the grid, interleaved: quality = pick / the grid's best (target >= 0.9)
    online  the whole run as written against `feedprof tune --online` of it, wall clocks from
            outside (target <= 0.5x), and whether every epoch's order check held
cpu_step_workers (an MLP step on torch's default threads beside 2 workers decoding on the CPU):
    tunes   which thread or core knobs the tune tried (its trials), its pick
    grid    the harness over the script's own (2 workers), no workers, its pick, and the script's own
            with each thread knob the tune could set (main_threads; main_cores with its own pool and the
            workers' held to the cores each has): what each measures
    remedy  each remedy the recommendation predicted a rate for, against the harness's rate with
            that remedy applied where a knob applies it (the goal: within 25 %)

Results: benchmarks/results/threads-cpu-2core.json (after every workload, with its date, machine
and command).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import independent  # noqa: E402  (the harness that shares no code with feedprof)

WINDOW_S = 4.0
REMEDY_KNOBS = {"own_cores": "main_cores", "main_threads": "main_threads", "hold_pools": "worker_threads"}


def script_of(name: str) -> str:
    return os.path.join(HERE, "workloads", f"{name}.py")


def tune(script: str, args: List[str], online: bool = False, budget: float = 120.0) -> Dict[str, Any]:
    """`feedprof tune` from outside: its wall time and its results.json."""
    out = tempfile.mkdtemp(prefix="fp-threads-")
    words = ["tune", "--online"] if online else ["tune", "--budget", str(budget)]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "feedprof", *words, "--out", out, "--quiet", script, *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=3600)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"feedprof {words} {script}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    with open(os.path.join(out, "results.json"), encoding="utf-8") as fh:
        return {"wall_s": wall, "results": json.load(fh)}


def pick_of(results: Dict[str, Any]) -> Dict[str, Any]:
    """The recommended loader settings with the thread knobs beside them, as the harness forces them."""
    rec = results.get("recommendation") or {}
    return {**(rec.get("config") or {}), **(rec.get("threads") or {})}


def rates(script: str, configs: Dict[str, Any], reps: int, args: List[str]) -> Dict[str, Optional[float]]:
    """Each config's median rate over ``reps`` interleaved harness windows."""
    got = independent.measure_interleaved(script, configs, reps, framework="torch", args=args, window_s=WINDOW_S)
    return {label: s["rate_per_s"].get("median") for label, s in got["summary"].items()}


def whole_run_s(script: str, args: List[str]) -> float:
    """The script as written, to its end, by a wall clock from outside."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, script, *args], check=True, stdout=subprocess.DEVNULL, timeout=3600)
    return time.monotonic() - t0


def numpy_pools(tunes: int, reps: int, epochs: int) -> Dict[str, Any]:
    script, args = script_of("numpy_pools"), ["--epochs", "100"]
    grid = {f"{n} workers{', held' if held else ''}": {"num_workers": n, **({"worker_threads": 1} if held else {})}
            for n in (2, 4) for held in (False, True)}
    picks = []
    for k in range(tunes):
        t = tune(script, args)
        picks.append({"config": pick_of(t["results"]), "tune_s": t["wall_s"],
                      "feedprof_batches_per_s": (t["results"].get("recommendation") or {}).get("batches_per_s")})
        print(f"numpy_pools tune {k + 1}: {picks[-1]['config']} in {t['wall_s']:.0f} s", flush=True)
    measured = rates(script, {**grid, **{f"pick {k + 1}": p["config"] for k, p in enumerate(picks)}}, reps, args)
    best = max((v for label, v in measured.items() if label in grid and v), default=None)
    for k, p in enumerate(picks):
        p["harness_batches_per_s"] = measured.get(f"pick {k + 1}")
        p["quality"] = p["harness_batches_per_s"] / best if best and p["harness_batches_per_s"] else None
    run_args = ["--epochs", str(epochs)]
    written_s = whole_run_s(script, run_args)
    online = tune(script, run_args, online=True)
    checks = online["results"]["online"]["order_checks"]
    return {"workload": "numpy_pools", "grid": measured, "best": best, "picks": picks,
            "online": {"epochs": epochs, "written_s": written_s, "online_s": online["wall_s"],
                       "ratio": online["wall_s"] / written_s, "pick": pick_of(online["results"]),
                       "same_order": bool(checks) and all(c["same"] for c in checks), "epochs_checked": len(checks)}}


def cpu_step_workers(tunes: int, reps: int) -> Dict[str, Any]:
    script, args = script_of("cpu_step_workers"), ["--epochs", "100"]
    rows = []
    for k in range(tunes):
        t = tune(script, args)
        res, pick = t["results"], pick_of(t["results"])
        tried = [{"config": tr["config"], "batches_per_s": tr.get("batches_per_s"), "phase": tr["phase"]}
                 for tr in res["trials"] if any(tr["config"].get(x) for x in ("main_threads", "main_cores"))]
        own = {"num_workers": 2}  # (the script's own settings, with each thread knob the tune could set)
        configs = {"as written": None, "pick": pick, "0 workers": {"num_workers": 0},
                   "own, main_threads=1": {**own, "main_threads": 1},
                   "own, main_cores=1": {**own, "main_cores": 1, "main_threads": 1, "worker_threads": 1}}
        measured = rates(script, configs, reps, args)
        rows.append({"config": pick, "tune_s": t["wall_s"], "thread_trials": tried, "harness": measured,
                     "remedies": remedies(res, measured)})
        print(f"cpu_step_workers tune {k + 1}: {pick}, thread trials {len(tried)}; harness {measured}", flush=True)
    return {"workload": "cpu_step_workers", "tunes": rows}


def remedies(results: Dict[str, Any], measured: Dict[str, Optional[float]]) -> List[Any]:
    """Each remedy with a rate a knob applies (predicted, or a trial's), against the harness's rate of
    the script's own settings with that knob."""
    out = []
    for r in (results.get("recommendation") or {}).get("reasons", ()):
        knob = REMEDY_KNOBS.get(r.get("kind", "")) if r.get("code") == "remedy" else None
        label = f"own, {knob}=1" if knob else None
        if label in measured and (r.get("predicted_batches_per_s") or r.get("measured_batches_per_s")):
            said = r.get("predicted_batches_per_s") or r.get("measured_batches_per_s")
            out.append({"kind": r["kind"], "said_batches_per_s": said, "predicted": r.get("predicted_batches_per_s")
                        is not None, "harness_batches_per_s": measured[label],
                        "ratio": said / measured[label] if measured[label] else None})
    return out


def kept_rows(path: str, running: List[str]) -> List[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            return [r for r in json.load(fh)["rows"] if r.get("workload") not in running]
    except (OSError, ValueError, KeyError):
        return []


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", default=["numpy_pools", "cpu_step_workers"])
    ap.add_argument("--tunes", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=12, help="numpy_pools' whole runs (as written, and online)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "threads-cpu-2core.json"))
    a = ap.parse_args(argv)
    command = "python benchmarks/thread_pools.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = kept_rows(a.out, a.workloads)  # (a workload not run this time keeps its last row)
    for name in a.workloads:
        row = numpy_pools(a.tunes, a.reps, a.epochs) if name == "numpy_pools" else cpu_step_workers(a.tunes, a.reps)
        row.update(command=command, finished=time.strftime("%Y-%m-%d %H:%M:%S %Z"), machine=platform.node(),
                   cpus=len(os.sched_getaffinity(0)))
        rows.append(row)
        with open(a.out, "w", encoding="utf-8") as fh:
            json.dump({"rows": rows}, fh, indent=1)
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
