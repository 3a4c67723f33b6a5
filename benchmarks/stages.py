"""Beyond the knobs, checked against timers that share no code with feedprof, on a workload whose
stages cost what they are built to cost (benchmarks/workloads/stages_known.py: a 3 ms storage wait,
a 2 ms CPU decode, a 1 ms CPU augmentation a sample, each timed by the workload itself).

1. Where the loading code spends its time: feedprof profile at 0 and 2 workers; each stage's share
   of the loading time and whether it computes, against the workload's own stage timers.
2. The step's slowdown beside the workers: a CPU-heavy step (--step-cpu-ms 20) on this machine,
   tuned; the pick's slowdown as feedprof measures it (its step beside the workers over its step
   alone) against the workload's own step timer (the pick's config and 0 workers, each run alone,
   forced by the independent harness).
3. Remedies: each remedy of that tune that the workload can apply (own_cores: --own-cores 1;
   cheaper_line on decode or augment: that stage made free), timed beside the pick by the harness;
   the predicted gain against the measured one.
4. What the profiler costs: feedprof profile of the 0-worker loader with the profiler on and off
   (FEEDPROF_LOADPROF_INTERVAL_S=0), timed by the harness; the sampler's own CPU.

    python benchmarks/stages.py [--rounds 2] [--budget 90] [--out benchmarks/results/stages-cpu-2core.json]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "workloads", "stages_known.py")
STAGES = {"read": "read_record", "decode": "decode_record", "augment": "augment_sample"}
REMEDY_FLAGS = {("own_cores", ""): ["--own-cores", "1"], ("cheaper_line", "decode_record"): ["--decode-ms", "0"],
                ("cheaper_line", "augment_sample"): ["--augment-ms", "0"]}
sys.path.insert(0, HERE)
import independent  # noqa: E402


def timers(directory: str) -> Dict[str, List[float]]:
    """The workload's own stage timers, every process summed: stage -> [wall_s, cpu_s, calls]."""
    out: Dict[str, List[float]] = {}
    for path in glob.glob(os.path.join(directory, "stages-*.json")):
        with open(path, encoding="utf-8") as fh:
            for stage, cell in json.load(fh).items():
                total = out.setdefault(stage, [0.0, 0.0, 0])
                for i in range(3):
                    total[i] += cell[i]
    return out


def feedprof(args: List[str], env: Optional[Dict[str, str]] = None) -> None:
    subprocess.run([sys.executable, "-m", "feedprof", *args], check=True, env={**os.environ, **(env or {})},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def profile_shares(workers: int) -> Dict[str, Any]:
    """1. Each stage's share of the loading time and its CPU, by feedprof and by the workload's timers."""
    work = tempfile.mkdtemp(prefix="stages-")
    feedprof(["profile", "--out", os.path.join(work, "out"), "--window-seconds", "10", SCRIPT, "--workers",
              str(workers)], env={"STAGES_TIMERS_DIR": work})
    with open(os.path.join(work, "out", "run.json"), encoding="utf-8") as fh:
        run = json.load(fh)
    (p,) = [x for x in run["loading"] if x["dataset"] == "Staged"]
    fn = {f["function"].split(":")[-1]: f for f in p["functions"]}
    t = timers(work)
    load = sum(t[s][0] for s in STAGES)
    rows = {}
    for stage, name in STAGES.items():
        f = fn.get(name, {"wall_s": 0.0, "cpu_s": 0.0, "runq_s": 0.0})
        rows[stage] = {"timer_share": t[stage][0] / load, "timer_cpu": t[stage][1] / t[stage][0],
                       "feedprof_share": f["wall_s"] / p["sampled_s"],
                       "feedprof_computes": (f["cpu_s"] + f["runq_s"]) / f["wall_s"] if f["wall_s"] else None}
        rows[stage]["points_off"] = 100 * (rows[stage]["feedprof_share"] - rows[stage]["timer_share"])
    print(f"1. workers={workers}: " + "; ".join(
        f"{s} {100 * r['feedprof_share']:.0f} % (timers {100 * r['timer_share']:.0f} %, {r['points_off']:+.1f} pts), "
        f"computing {100 * (r['feedprof_computes'] or 0):.0f} % (timers {100 * r['timer_cpu']:.0f} %)"
        for s, r in rows.items()) + f"; sampler {p['sampler_cpu_s']:.2f} s CPU over {p['wall_s']:.1f} s loading",
          flush=True)
    return {"workers": workers, "stages": rows, "sampler_cpu_s": p["sampler_cpu_s"], "loading_s": p["wall_s"]}


def mean_step_s(config: Dict[str, Any], args: List[str]) -> Optional[float]:
    """The workload's own step timer, its mean over a run with config forced by the harness."""
    work = tempfile.mkdtemp(prefix="stages-step-")
    os.environ["STAGES_TIMERS_DIR"] = work
    try:
        r = independent.measure(SCRIPT, "torch", config, args=args, window_s=8.0, windows=1)
    finally:
        del os.environ["STAGES_TIMERS_DIR"]
    step = timers(work).get("step")
    return step[0] / step[2] if step and step[2] and r["state"] == "ok" else None


def tune(budget: float) -> Dict[str, Any]:
    work = tempfile.mkdtemp(prefix="stages-tune-")
    out = os.path.join(work, "out")
    feedprof(["tune", "--budget", str(budget), "--out", out, SCRIPT, "--step-cpu-ms", "20"])
    with open(os.path.join(out, "results.json"), encoding="utf-8") as fh:
        return json.load(fh)["recommendation"]


def slowdown(rec: Dict[str, Any]) -> Dict[str, Any]:
    """2. The pick's step beside its workers over the step alone: feedprof's against the workload's."""
    pick = next(t for t in rec["batch_time"] if t["role"] == "pick")
    parts = {p["name"]: p["s"] for p in pick["parts"]}
    alone = parts.get("step_alone")
    beside = alone + sum(v for k, v in parts.items() if k.startswith("slowdown")) if alone else None
    args = ["--step-cpu-ms", "20"]
    timer_beside, timer_alone = mean_step_s(rec["config"], args), mean_step_s({"num_workers": 0}, args)
    out = {"pick": rec["config"], "feedprof_slowdown": beside / alone - 1 if alone else None,
           "timer_slowdown": timer_beside / timer_alone - 1 if timer_beside and timer_alone else None,
           "feedprof_parts_ms": {k: 1000 * v for k, v in parts.items()}}
    if out["feedprof_slowdown"] is not None and out["timer_slowdown"] is not None:
        out["points_off"] = 100 * (out["feedprof_slowdown"] - out["timer_slowdown"])
    print(f"2. step slowdown beside {rec['config']}: feedprof {_pct(out['feedprof_slowdown'])}, the workload's "
          f"step timer {_pct(out['timer_slowdown'])}", flush=True)
    return out


def remedies(rec: Dict[str, Any], rounds: int) -> List[Dict[str, Any]]:
    """3. Each applicable remedy timed beside the pick: the predicted gain against the measured one."""
    out = []
    for r in [x for x in rec["reasons"] if x.get("code") == "remedy"]:
        flags = REMEDY_FLAGS.get((r["kind"], (r.get("function") or "").split(".")[-1] if r["kind"] != "own_cores" else ""))
        if flags is None or not r.get("predicted_batches_per_s"):
            continue
        base = ["--step-cpu-ms", "20"]
        pick = [independent.measure(SCRIPT, "torch", rec["config"], args=base, window_s=8.0)["rate_per_s"]
                for _ in range(rounds)]
        fixed = [independent.measure(SCRIPT, "torch", rec["config"], args=base + flags, window_s=8.0)["rate_per_s"]
                 for _ in range(rounds)]
        measured = statistics.median([x for x in fixed if x]) / statistics.median([x for x in pick if x])
        predicted = r["predicted_batches_per_s"] / r["from_batches_per_s"]
        row = {"kind": r["kind"], "function": r.get("function"), "flags": flags, "predicted_gain": predicted,
               "measured_gain": measured, "error": predicted / measured - 1, "pick_rates": pick, "remedy_rates": fixed}
        print(f"3. {r['kind']} {r.get('function') or ''}: predicted x{predicted:.2f}, measured x{measured:.2f} "
              f"({100 * row['error']:+.0f} %)", flush=True)
        out.append(row)
    return out


def overhead(rounds: int) -> Dict[str, Any]:
    """4. feedprof profile with the loading profiler on and off, timed by the harness (0 workers)."""
    from overhead_cli import profiled

    rates: Dict[str, List[float]] = {"on": [], "off": []}
    for _ in range(rounds):
        for mode in ("on", "off"):
            os.environ["FEEDPROF_LOADPROF_INTERVAL_S"] = "0.02" if mode == "on" else "0"
            w = profiled(SCRIPT)["windows"]
            wall = sum(x["wall_s"] for x in w)
            if wall:
                rates[mode].append(sum(x["steps"] for x in w) / wall)
    del os.environ["FEEDPROF_LOADPROF_INTERVAL_S"]
    on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
    print(f"4. the loading profiler on / off: {on:.1f} / {off:.1f} steps/s = x{on / off:.3f}", flush=True)
    return {"rates": rates, "retained": on / off}


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:+.0f} %"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget", type=float, default=90)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "stages-cpu-2core.json"))
    a = ap.parse_args()
    result: Dict[str, Any] = {"command": " ".join([os.path.basename(sys.executable), *sys.argv])}
    result["profile"] = [profile_shares(w) for w in (0, 2)]
    rec = tune(a.budget)
    result["tune"] = {"config": rec["config"], "batches_per_s": rec["batches_per_s"]}
    result["slowdown"] = slowdown(rec)
    result["remedies"] = remedies(rec, a.rounds)
    result["overhead"] = overhead(a.rounds)
    with open(a.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
