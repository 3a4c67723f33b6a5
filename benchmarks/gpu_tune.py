"""On a machine with an NVIDIA GPU: tune a script that moves batches to CUDA,
and record what pin_memory did and the GPU's utilisation before and after.

    python benchmarks/gpu_tune.py                       # tunes benchmarks/workloads/gpu_jpeg.py
    python benchmarks/gpu_tune.py --script my_train.py -- --epochs 3

Writes benchmarks/results/gpu-tune-<gpu>.json: the recommendation, every
trial's config, throughput and GPU utilisation, and the pin_memory pair
(the best config with and without it) when the tune tried it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", default=os.path.join(HERE, "workloads", "gpu_jpeg.py"))
    ap.add_argument("--budget", type=float, default=180)
    ap.add_argument("args", nargs="*")
    a = ap.parse_args()
    import feedprof
    from feedprof.store.codec import to_dict

    out = os.path.join(HERE, "results", "gpu-tune-run")
    res = feedprof.tune(a.script, argv=a.args, out_dir=out, budget_s=a.budget)
    if not res.host.gpus:
        print(f"no GPU was sampled ({res.host.gpu_status})", file=sys.stderr)
        return 2
    rec = res.recommendation
    trials = [{"index": t.index, "role": t.role, "config": t.config, "state": t.state,
               "batches_per_s": t.batches_per_s, "gpu_util_pct": list(t.gpu_util_pct),
               "data_wait_fraction": t.data_wait_fraction} for t in res.trials]
    pinned = [t for t in res.trials if t.config.get("pin_memory")]
    pair = None
    if pinned:
        p = pinned[0]
        twin = next((t for t in res.trials if t.config == {**p.config, "pin_memory": False}), None)
        pair = {"with": p.batches_per_s, "without": twin.batches_per_s if twin else None,
                "gpu_util_with": list(p.gpu_util_pct), "gpu_util_without": list(twin.gpu_util_pct) if twin else None}
    base = res.trials[0]
    best = next((t for t in res.trials if rec and t.index == rec.trial_index), None)
    result = {"device": res.host.gpus[0].name, "script": a.script, "cuda_used": base.run.cuda_used if base.run else None,
              "recommendation": {"config": rec.config, "speedup": rec.speedup, "verdict": to_dict(rec.verdict)}
              if rec else None,
              "gpu_util_pct_baseline": list(base.gpu_util_pct), "gpu_util_pct_recommended":
              list(best.gpu_util_pct) if best else None, "pin_memory": pair, "trials": trials}
    slug = re.sub(r"[^A-Za-z0-9]+", "-", result["device"]).strip("-").lower()
    path = os.path.join(HERE, "results", f"gpu-tune-{slug}.json")
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1, default=to_dict)
    print(json.dumps({k: result[k] for k in ("device", "recommendation", "gpu_util_pct_baseline",
                                             "gpu_util_pct_recommended", "pin_memory")}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
