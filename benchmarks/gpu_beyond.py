"""On a machine with an NVIDIA GPU: beyond the knobs on the JPEG/ResNet-18 job. Tune it, say where
the pick's batch time goes (part by part, against its step alone) and where its loading code spends
its time, then apply the remedy feedprof ranks first and time it beside the pick, both with the
independent harness (benchmarks/independent.py: the config forced at construction, no feedprof).

    python benchmarks/gpu_beyond.py [--budget 120] [--reps 2] [--window-s 6]

Remedies it can apply to benchmarks/workloads/gpu_jpeg.py: own_cores (--own-cores K: K cores kept
for the training process), device_line, cheaper_line, cache_line (--gpu-decode: the decode and
augmentation moved to the GPU, so the loader's CPU lines cost nothing). A remedy a trial already
measured (pin_memory, more_prefetch) is reported with that measurement.
Writes benchmarks/results/gpu-beyond-<gpu>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "workloads", "gpu_jpeg.py")


def remedy_args(kind: str, pick_cores: Optional[float]) -> Optional[List[str]]:
    """The workload's flags that apply a remedy (None: not applicable here)."""
    if kind == "own_cores":
        return ["--own-cores", str(max(1, round(pick_cores or 1.0)))]
    if kind in ("device_line", "cheaper_line", "cache_line"):
        return ["--gpu-decode"]
    if kind == "smaller_copy":
        return ["--uint8"]
    return None


def beyond_of(rec: Any) -> Dict[str, Any]:
    from feedprof.analyse.loading import costs
    from feedprof.store.codec import to_dict
    from feedprof.store.reasons import GapExplained, Remedy

    loading = rec.loading
    return {"batch_time": [to_dict(t) for t in rec.batch_time],
            "gap": next((to_dict(r) for r in rec.reasons if isinstance(r, GapExplained)), None),
            "remedies": [to_dict(r) for r in rec.reasons if isinstance(r, Remedy)],
            "loading_functions": [to_dict(c) for c in costs(loading, lines=False)] if loading else [],
            "loading_lines": [to_dict(c) for c in costs(loading)] if loading else []}


def time_remedy(config: Dict[str, Any], base: List[str], remedy: List[str], reps: int,
                window_s: float) -> Dict[str, Any]:
    """The pick and the pick with the remedy applied, interleaved, timed by the independent harness."""
    sys.path.insert(0, HERE)
    import independent

    runs: Dict[str, List[float]] = {"pick": [], "remedy": []}
    states: Dict[str, List[str]] = {"pick": [], "remedy": []}
    for rep in range(reps):
        order = ["pick", "remedy"] if rep % 2 == 0 else ["remedy", "pick"]
        for label in order:
            r = independent.measure(SCRIPT, "torch", config, args=base + (remedy if label == "remedy" else []),
                                    window_s=window_s,
                                    windows=2, timeout_s=240)
            states[label].append(r["state"])
            if r["rate_per_s"]:
                runs[label].append(r["rate_per_s"])
            print(f"  rep {rep + 1} {label}: {r['state']} {r['rate_per_s']} steps/s "
                  f"{r['stderr_tail'][-300:] if r['state'] != 'ok' else ''}", flush=True)
    med = {k: statistics.median(v) if v else None for k, v in runs.items()}
    return {"rates": runs, "states": states, "median": med}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=120)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--window-s", type=float, default=6.0)
    ap.add_argument("--epochs", default="300")
    ap.add_argument("--script-args", default="", help="more of the workload's flags (a smoke test: --batch-size 4)")
    a = ap.parse_args()
    a.extra = a.script_args.split()
    import feedprof
    from feedprof.store.codec import to_dict

    res = feedprof.tune(SCRIPT, argv=["--epochs", a.epochs, *a.extra], out_dir=os.path.join(HERE, "results", "gpu-beyond-run"),
                        budget_s=a.budget)
    rec = res.recommendation
    if rec is None:
        print("no recommendation", file=sys.stderr)
        return 2
    out: Dict[str, Any] = {"device": res.host.gpus[0].name if res.host.gpus else "no GPU",
                           "cpus": res.host.cpus_usable,
                           "pick": rec.config, "speedup": rec.speedup, "fraction_of_ceiling": rec.fraction_of_ceiling,
                           "pick_batches_per_s": rec.batches_per_s, "gpu_util_pct": {
                               t.role: list(t.gpu_util_pct) for t in res.trials if t.index in (0, rec.trial_index)},
                           **beyond_of(rec)}
    print(json.dumps({k: out[k] for k in ("device", "pick", "speedup", "gap", "remedies")}, indent=1, default=str))
    first = out["remedies"][0] if out["remedies"] else None
    if first is not None:
        picked = next((t for t in res.trials if t.index == rec.trial_index), None)
        cores = (picked.run.summary.main_cpu_pct / 100) if picked and picked.run and picked.run.summary \
            and picked.run.summary.main_cpu_pct else None
        args = remedy_args(first["kind"], cores)
        out["first_remedy"] = {"kind": first["kind"], "args": args,
                               "predicted_batches_per_s": first.get("predicted_batches_per_s"),
                               "measured_by_tune": first.get("measured_batches_per_s")}
        if args is not None:
            out["first_remedy"]["timed"] = time_remedy(dict(rec.config), ["--epochs", a.epochs, *a.extra], args,
                                                       a.reps, a.window_s)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", out["device"]).strip("-").lower()
    path = os.path.join(HERE, "results", f"gpu-beyond-{slug}.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1, default=to_dict)
    print(json.dumps(out.get("first_remedy"), indent=1, default=str))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
