"""feedprof attach against the loop's own stopwatch, and what attaching costs the loop.

    python benchmarks/attach_cost.py [--reps 3] [--window 20] [--modes io,decode] [--rates 50]

For each mode of benchmarks/workloads/attach_loop.py (io: 0 workers waiting on storage; decode: 2
workers decoding on the CPU), --reps times: the loop is started by hand (as a user starts a job),
left to run --window seconds, read by `feedprof attach --duration WINDOW` for the next window, then
left --window seconds more. From the loop's own stopwatch (its clock file: no feedprof code):
    wait     the loop's share of time inside next() over the attached window, against the share
             feedprof read from its samples (the goal: within 10 points)
    rate     the loop's batches/s while attached, against the mean of before and after (the goal:
             >= 0.9): over the whole command (feedprof's start, its report), and over the samplers'
             own window (from 1 s after the command says it reads to 1 s before its window ends)
Each rate of --rates (stack samples a second, feedprof attach --rate) in turn, in every repetition.
Results: benchmarks/results/attach-cpu-2core.json (its date, machine and command in it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = os.path.join(HERE, "workloads", "attach_loop.py")
ARGS = {"io": ["--workers", "0", "--mode", "io"], "decode": ["--workers", "2", "--mode", "decode"]}


def clock_at(path: str, t: float) -> Dict[str, float]:
    """The loop's stopwatch at wall time ``t``: its last line before it."""
    with open(path, encoding="utf-8") as fh:
        lines = [json.loads(x) for x in fh if x.strip()]
    return max((x for x in lines if x["t"] <= t), key=lambda x: x["t"])


def between(path: str, t0: float, t1: float) -> Dict[str, float]:
    a, b = clock_at(path, t0), clock_at(path, t1)
    wall = b["wall_s"] - a["wall_s"]
    return {"rate": (b["batches"] - a["batches"]) / wall, "wait": (b["wait_s"] - a["wait_s"]) / wall, "wall_s": wall}


def one(mode: str, window_s: float, rate_hz: int) -> Dict[str, Any]:
    work = tempfile.mkdtemp(prefix="fp-attach-")
    clock = os.path.join(work, "clock.jsonl")
    loop = subprocess.Popen([sys.executable, LOOP, "--clock", clock, "--seconds", str(4 * window_s + 60), *ARGS[mode]],
                            cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(10)  # (started, warm)
        t0 = time.time()
        time.sleep(window_s)
        t1 = time.time()
        cmd = subprocess.Popen([sys.executable, "-m", "feedprof", "attach", "--duration", str(window_s), "--rate",
                                str(rate_hz), "--out", os.path.join(work, "out"), str(loop.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = cmd.stderr.readline()  # "feedprof: reading process ...": the samplers start now
        reading = time.time()
        stdout, stderr = cmd.communicate(timeout=600)
        out = subprocess.CompletedProcess(cmd.args, cmd.returncode, stdout, first + stderr)
        t2 = time.time()
        time.sleep(window_s)
        t3 = time.time()
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        with open(os.path.join(work, "out", "run.json"), encoding="utf-8") as fh:
            run = json.load(fh)
        before, during, after = between(clock, t0, t1), between(clock, t1, t2), between(clock, t2, t3)
        sampling = between(clock, reading + 1, reading + window_s - 1)
        read = run["summary"]["data_wait_fraction"]
        alone = statistics.mean([before["rate"], after["rate"]])
        return {"mode": mode, "rate_hz": rate_hz, "before": before, "during": during, "after": after,
                "sampling": sampling, "rate_retained": during["rate"] / alone,
                "rate_retained_sampling": sampling["rate"] / alone,
                "feedprof_wait": read, "feedprof_wait_noise": run["attached"]["wait_noise"],
                "stopwatch_wait": during["wait"], "wait_points": 100 * (read - during["wait"]),
                "samples": run["attached"]["samples"], "top_line": (run["loading"] or [{}])[0].get("lines", [{}])[0]}
    finally:
        loop.kill()
        loop.wait()


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--modes", default="io,decode")
    ap.add_argument("--rates", default="50", help="feedprof attach --rate values, each in every repetition")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "attach-cpu-2core.json"))
    a = ap.parse_args(argv)
    rows = []
    for rep in range(a.reps):
        for mode in a.modes.split(","):
            for rate_hz in (int(x) for x in a.rates.split(",")):
                row = one(mode, a.window, rate_hz)
                rows.append(row)
                print(f"{mode} at {rate_hz} Hz, rep {rep + 1}: wait {row['feedprof_wait']:.3f} (stopwatch "
                      f"{row['stopwatch_wait']:.3f}, {row['wait_points']:+.1f} points); rate kept "
                      f"{row['rate_retained']:.3f}, while sampled {row['rate_retained_sampling']:.3f}", flush=True)
    result = {"command": "python benchmarks/attach_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": platform.node(),
              "cpus": len(os.sched_getaffinity(0)), "rows": rows}
    with open(a.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
