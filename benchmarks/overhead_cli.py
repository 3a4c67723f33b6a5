"""``feedprof profile train.py`` against ``python train.py`` alone (benchmarks/overhead.py --cli).

Both runs are timed by the independent harness (benchmarks/independent.py), which shares no
code with feedprof: the same warm-up (WARMUP_STEPS), then windows of WINDOW_S at the training
loader's iterator. Alone, the harness stops the script after WINDOWS windows; under feedprof the
harness observes only and feedprof ends the script when its own window is measured (its defaults,
as a user runs it), so the comparison takes the windows both runs have (at least one). Each round
runs the two in random order; the figure is the median over rounds of profiled / alone, beside
feedprof's own figure for the profiled run (its run.json) against the harness's.
"""
from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

import independent

HERE = os.path.dirname(os.path.abspath(__file__))
WARMUP_STEPS = 30
WINDOW_S = 4.0
WINDOWS = 3
WORKLOADS = ("hf_trainer_threads", "plain_threads")


def _rate(windows: List[Dict[str, Any]], n: int) -> Optional[float]:
    """Steps over wall time of the first n windows."""
    wins = windows[:n]
    wall_s = sum(w["wall_s"] for w in wins)
    return sum(w["steps"] for w in wins) / wall_s if wall_s > 0 else None


def alone(script: str) -> List[Dict[str, Any]]:
    r = independent.measure(script, "torch", None, window_s=WINDOW_S, windows=WINDOWS, warmup_steps=WARMUP_STEPS)
    return r["windows"]


def profiled(script: str) -> Dict[str, Any]:
    """The harness's windows of the training process under feedprof profile, and feedprof's figure."""
    out = tempfile.mkdtemp(prefix="overhead-cli-")
    cmd = [sys.executable, "-m", "feedprof", "profile", "--out", out, script]
    raw = independent.observe_command(cmd, framework="torch", window_s=WINDOW_S, warmup_steps=WARMUP_STEPS,
                                      timeout_s=300.0)
    procs = raw["processes"]
    windows = max((p["windows"] for p in procs), key=len, default=[])
    return {"windows": windows, "feedprof_batches_per_s": _feedprof_rate(out), "returncode": raw["returncode"]}


def _feedprof_rate(out: str) -> Optional[float]:
    """feedprof's own figure for the run: the summary's batches/s in run.json."""
    try:
        with open(os.path.join(out, "run.json"), encoding="utf-8") as fh:
            run = json.load(fh)
    except (OSError, ValueError):
        return None
    return (run.get("summary") or {}).get("batches_per_s")


def one_round(script: str, rng: random.Random) -> Dict[str, Any]:
    order = ["alone", "profiled"]
    rng.shuffle(order)
    got: Dict[str, Any] = {}
    for kind in order:
        got[kind] = alone(script) if kind == "alone" else profiled(script)
    mine = got["profiled"]
    n = min(len(got["alone"]), len(mine["windows"]))
    a, p = _rate(got["alone"], n), _rate(mine["windows"], n)
    return {"order": order, "windows_compared": n, "alone_per_s": a, "profiled_per_s": p,
            "ratio": p / a if a and p else None, "feedprof_per_s": mine["feedprof_batches_per_s"],
            "feedprof_vs_harness": (mine["feedprof_batches_per_s"] / p
                                    if mine["feedprof_batches_per_s"] and p else None)}


def measure_workload(name: str, rounds: int, busy_cores: float) -> Dict[str, Any]:
    script = os.path.join(HERE, "workloads", f"{name}.py")
    rng = random.Random(0)
    done = []
    for k in range(rounds):
        r = one_round(script, rng)
        done.append(r)
        print(f"  {name} round {k + 1}/{rounds}: alone {_f(r['alone_per_s'])} b/s, under feedprof profile "
              f"{_f(r['profiled_per_s'])} b/s (x{_f(r['ratio'], 3)}; {r['windows_compared']} windows of "
              f"{WINDOW_S:g} s), feedprof's own figure {_f(r['feedprof_per_s'])} b/s", flush=True)
    ratios = [r["ratio"] for r in done if r["ratio"]]
    figure = [r["feedprof_vs_harness"] for r in done if r["feedprof_vs_harness"]]
    return {"loop": f"cli {name}", "busy_cores": busy_cores, "rounds": done,
            "retained_median": statistics.median(ratios) if ratios else None,
            "retained_min": min(ratios, default=None), "retained_max": max(ratios, default=None),
            "feedprof_vs_harness_median": statistics.median(figure) if figure else None}


def _f(v: Optional[float], digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def cli_rows(workloads: List[str], rounds: int, busy_cores: float) -> List[Dict[str, Any]]:
    from busy import BusyLoad

    rows = []
    with BusyLoad(busy_cores) as load:
        for name in workloads:
            row = measure_workload(name, rounds, busy_cores)
            row["busy_cores_measured"] = load.measured()
            rows.append(row)
            print(f"{row['loop']:<28} busy {busy_cores:g}: retained {_f(row['retained_median'], 3)} "
                  f"(rounds {_f(row['retained_min'], 3)}-{_f(row['retained_max'], 3)}), feedprof's figure / "
                  f"harness {_f(row['feedprof_vs_harness_median'], 3)}", flush=True)
    return rows


if __name__ == "__main__":  # pragma: no cover - use overhead.py --cli
    subprocess.run([sys.executable, os.path.join(HERE, "overhead.py"), "--cli", *sys.argv[1:]], check=False)
