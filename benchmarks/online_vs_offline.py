"""Online tuning against the alternatives, in whole-run wall time (timed from outside).

    python benchmarks/online_vs_offline.py [io_pretrain io_epochs_val ...] [--scale 1.0] [--budget 60]
        [--grid 2,4,8,16,32] [--out benchmarks/results/online-vs-offline-cpu-2core.json] [--append]

For each workload (benchmarks/workloads/NAME.py, written with num_workers=0):

    (a) written   the script as written, run to its end
    (b) best      every grid config forced from the start by the independent harness
                  (benchmarks/independent.py, no feedprof code), each run to its end: the fastest
    (c) offline   `feedprof tune` (its whole wall time) + a run to the end with its pick forced
    (d) online    `feedprof tune --online`: the job runs once, to its end, tuned as it trains
    quality       the online pick against (b)'s best, re-measured by the harness interleaved
                  over long windows (rate ratio, 1.0 = as fast)

A workload with a launcher (ddp_io: torchrun, 2 ranks) is run, tuned and re-measured as that
multi-process job; its configs are per rank.

Targets (issue 21): (d) <= 1.15 x (b) where the run at the best config lasts >= 60 s; (d) < (c);
the online pick >= 0.95 x the best. Every figure is a wall time from outside or the harness's
rate: nothing here re-measures with feedprof's own code. The JSON is written after every
workload, so an interrupted run keeps its rows.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import independent  # noqa: E402  (the harness that shares no code with feedprof)

WORKLOADS = {  # name -> (script args at scale 1, what it stands for)
    "io_pretrain": (["--samples", "40000"], "one long epoch (pretraining), 4 ms storage wait per sample"),
    "io_epochs_val": (["--epochs", "4", "--samples", "6400"], "4 epochs with a validation pass after each"),
    "ddp_io": (["--epochs", "10"], "DDP, 2 ranks under torchrun, 3 ms storage wait per sample"),
}
LAUNCH = {"ddp_io": [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]}  # torchrun, this Python


def scaled(args: List[str], scale: float) -> List[str]:
    """The workload's length times ``scale``: its samples, or its epochs where it names no samples."""
    out = list(args)
    knob = "--samples" if "--samples" in out else "--epochs"
    i = out.index(knob) + 1
    out[i] = str(max(320, int(int(out[i]) * scale)) if knob == "--samples" else max(1, round(int(out[i]) * scale)))
    return out


def run_forced(script: str, config: Optional[Dict[str, Any]], args: List[str], launch: List[str]) -> float:
    """The whole run with ``config`` forced at construction (None: as written); its wall time."""
    if launch:  # every rank forced, the job run to its end (independent.measure_job)
        raw = independent.measure_job(launch, script, "torch", config, args=args, timeout_s=3600)
        if raw["state"] not in ("ok", "ended early") or raw["returncode"] != 0:
            raise RuntimeError(f"{script} {config}: {raw['state']}\n{raw['stderr_tail']}")
        return raw["wall_s"]
    spec = {"framework": "torch", "config": config, "stop": False, "window_s": 1e9, "windows": 0}
    raw = independent.run_child(script, spec, args, timeout_s=3600)
    if raw["returncode"] != 0:
        raise RuntimeError(f"{script} {config}: exit {raw['returncode']}\n{raw['stderr_tail']}")
    return raw["wall_s"]


def job(script: str, args: List[str], launch: List[str]) -> List[str]:
    """feedprof's arguments for the job: the script and its own, or its launcher's command line."""
    return ["--", *launch, script, *args] if launch else [script, "--", *args]


def feedprof(args: List[str]) -> Dict[str, Any]:
    """A feedprof command timed from outside; its results.json."""
    out = tempfile.mkdtemp(prefix="fp-bench-")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "feedprof", *args[:1], "--out", out, "--quiet", *args[1:]],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=3600)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"feedprof {args}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    with open(os.path.join(out, "results.json"), encoding="utf-8") as fh:
        return {"wall_s": wall, "results": json.load(fh)}


def picked(results: Dict[str, Any]) -> Dict[str, Any]:
    rec = results.get("recommendation") or {}
    return dict(rec.get("config") or {})


def workload_row(name: str, scale: float, budget: float, grid: List[int],
                 reuse: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    script = os.path.join(HERE, "workloads", f"{name}.py")
    args = scaled(WORKLOADS[name][0], scale)
    launch = LAUNCH.get(name, [])
    if reuse is not None and reuse.get("args") == args:  # the runs without feedprof's online code: kept
        row = {k: reuse.get(k) for k in ("workload", "args", "launch", "written_s", "grid_s", "best", "best_s",
                                         "offline_tune_s",
                                     "offline_pick", "offline_pick_run_s", "offline_total_s")}
        print(f"{name}: as written, grid and offline tune reused from the last run", flush=True)
        return _remeasured(name, script, args, row, launch, scale)
    row = _without_online(name, script, args, budget, grid, launch)
    return _with_online(name, script, args, row, launch, scale)


def _remeasured(name: str, script: str, args: List[str], row: Dict[str, Any],
                launch: List[str], scale: float) -> Dict[str, Any]:
    """With the earlier grid reused, its best config and the offline pick are run again around the
    online run (before and after it), so that (d) is compared with figures of the same hour."""
    best_now = run_forced(script, row["best"], args, launch)
    row = _with_online(name, script, args, row, launch, scale)
    row["best_s_now"], row["offline_pick_run_s_now"] = best_now, run_forced(script, row["offline_pick"], args, launch)
    print(f"{name}: re-measured: best {best_now:.1f} s, offline pick {row['offline_pick_run_s_now']:.1f} s", flush=True)
    row["online_vs_best"] = row["online_s"] / best_now
    row["online_vs_offline_pick_run"] = row["online_s"] / row["offline_pick_run_s_now"]
    return row


def _without_online(name: str, script: str, args: List[str], budget: float, grid: List[int],
                    launch: List[str]) -> Dict[str, Any]:
    row: Dict[str, Any] = {"workload": name, "args": args, "launch": launch}
    row["written_s"] = run_forced(script, None, args, launch)
    print(f"{name}: as written {row['written_s']:.1f} s", flush=True)
    row["grid_s"] = {}
    for n in grid:
        row["grid_s"][str(n)] = run_forced(script, {"num_workers": n}, args, launch)
        print(f"{name}: num_workers={n} from the start {row['grid_s'][str(n)]:.1f} s", flush=True)
    best_n = min(row["grid_s"], key=lambda k: row["grid_s"][k])
    row["best"], row["best_s"] = {"num_workers": int(best_n)}, row["grid_s"][best_n]
    offline = feedprof(["tune", "--budget", str(budget), *job(script, args, launch)])
    row["offline_tune_s"], row["offline_pick"] = offline["wall_s"], picked(offline["results"])
    row["offline_pick_run_s"] = run_forced(script, row["offline_pick"], args, launch)
    row["offline_total_s"] = row["offline_tune_s"] + row["offline_pick_run_s"]
    print(f"{name}: offline tune {row['offline_tune_s']:.1f} s -> {row['offline_pick']}, "
          f"then {row['offline_pick_run_s']:.1f} s", flush=True)
    return row


def _with_online(name: str, script: str, args: List[str], row: Dict[str, Any],
                 launch: List[str], scale: float) -> Dict[str, Any]:
    online = feedprof(["tune", "--online", *job(script, args, launch)])
    row["online_s"], row["online_pick"] = online["wall_s"], picked(online["results"])
    rec = online["results"].get("recommendation") or {}
    row["online_figure_batches_per_s"] = rec.get("batches_per_s")
    print(f"{name}: online {row['online_s']:.1f} s -> {row['online_pick']}", flush=True)
    # a job runs to its end for each measurement: at scale 1 (a rate needs no long run)
    check_args = scaled(WORKLOADS[name][0], min(scale, 1.0)) if launch else args
    check = independent.measure_interleaved(script, {"best": row["best"], "online": row["online_pick"]}, reps=2,
                                            framework="torch", args=check_args, window_s=6.0, launch=launch)
    rates = {label: s["rate_per_s"]["median"] for label, s in check["summary"].items()}
    row["harness_batches_per_s"], row["harness_args"] = rates, check_args
    row["quality"] = rates["online"] / rates["best"] if rates.get("best") else None
    row["online_vs_best"] = row["online_s"] / row["best_s"]
    row["online_vs_written"] = row["online_s"] / row["written_s"]
    row["online_vs_offline"] = row["online_s"] / row["offline_total_s"]
    row["load_avg_1m"] = os.getloadavg()[0]
    return row


def table(rows: List[Dict[str, Any]]) -> str:
    head = ("| workload | (a) as written | (b) best from the start | (c) offline tune + run | (d) online | "
            "(d)/(b) | (d)/(a) | online pick | quality (harness) |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        quality = f"{r['quality']:.2f}" if r.get("quality") else "n/a"
        best_s = r.get("best_s_now") or r["best_s"]  # (re-measured around the online run, where it was)
        lines.append(f"| {r['workload']} | {r['written_s']:.1f} s | {best_s:.1f} s "
                     f"(num_workers={r['best']['num_workers']}) | {r['offline_total_s']:.1f} s "
                     f"({r['offline_tune_s']:.0f} + {r['offline_pick_run_s']:.0f}) | {r['online_s']:.1f} s | "
                     f"{r['online_vs_best']:.2f} | {r['online_vs_written']:.2f} | "
                     f"num_workers={r['online_pick'].get('num_workers')} | {quality} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--scale", type=float, default=1.0, help="samples (or epochs) x this (0.25: a quick look)")
    ap.add_argument("--budget", type=float, default=60.0, help="the offline tune's budget, seconds")
    ap.add_argument("--grid", default="2,4,8,16,32")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "online-vs-offline-cpu-2core.json"))
    ap.add_argument("--reuse", default=None, metavar="JSON",
                    help="keep the as-written, grid and offline runs of this earlier result; re-run online, and "
                         "its best config and offline pick around it (best_s_now, offline_pick_run_s_now)")
    ap.add_argument("--append", action="store_true",
                    help="add this run's rows to those already in --out (each row keeps its command and time)")
    a = ap.parse_args(argv)
    earlier = {}
    if a.reuse:
        with open(a.reuse, encoding="utf-8") as fh:
            earlier = {r["workload"]: r for r in json.load(fh)["rows"]}
    unknown = [w for w in a.workloads if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s) {unknown}; known: {sorted(WORKLOADS)}")
    kept: List[Dict[str, Any]] = []
    if a.append and os.path.exists(a.out):
        with open(a.out, encoding="utf-8") as fh:
            kept = json.load(fh).get("rows", [])
    command = "python benchmarks/online_vs_offline.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows: List[Dict[str, Any]] = []
    for name in a.workloads:
        row = workload_row(name, a.scale, a.budget, [int(n) for n in a.grid.split(",")], earlier.get(name))
        row.update(scale=a.scale, command=command, finished=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
        rows.append(row)
        with open(a.out, "w", encoding="utf-8") as fh:  # (after every workload: an interrupted run keeps its rows)
            json.dump({"rows": kept + rows}, fh, indent=1)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
