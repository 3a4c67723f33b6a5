"""On a machine with an NVIDIA GPU: time remedies beside a pick, with the independent harness only
(no tune: for a short lease, after benchmarks/gpu_beyond.py has named the pick and the remedies).

    python benchmarks/gpu_remedies.py --config '{"num_workers": 8, "persistent_workers": true}' \\
        --remedy pin '{"pin_memory": true}' - --remedy uint8 '{}' uint8 [--reps 1] [--window-s 5]

Each remedy is (name, config overrides as JSON, the workload's flags without their dashes, comma-separated;
"-" for none). The pick and every remedy are
measured interleaved on benchmarks/workloads/gpu_jpeg.py; writes benchmarks/results/gpu-remedies-<gpu>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "workloads", "gpu_jpeg.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--remedy", nargs=3, action="append", default=[], metavar=("NAME", "OVERRIDES", "FLAGS"))
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--window-s", type=float, default=5.0)
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    import independent

    pick = json.loads(a.config)
    runs = {"pick": (pick, [])}
    for name, overrides, flags in a.remedy:
        runs[name] = ({**pick, **json.loads(overrides)}, [f"--{f}" for f in flags.split(",") if f and f != "-"])
    rates = {name: [] for name in runs}
    for rep in range(a.reps):
        names = list(runs)[rep % len(runs):] + list(runs)[:rep % len(runs)]
        for name in names:
            config, flags = runs[name]
            r = independent.measure(SCRIPT, "torch", config, args=["--epochs", "300", *flags], window_s=a.window_s,
                                    windows=2, timeout_s=150)
            print(f"rep {rep + 1} {name}: {r['state']} {r['rate_per_s']} steps/s {r['stderr_tail'][-200:] if r['state'] != 'ok' else ''}",
                  flush=True)
            if r["rate_per_s"]:
                rates[name].append(r["rate_per_s"])
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip().splitlines()[0]
    out = {"device": gpu, "pick": pick, "remedies": {n: {"config": runs[n][0], "flags": runs[n][1]} for n in runs},
           "rates": rates, "median": {n: statistics.median(v) if v else None for n, v in rates.items()},
           "command": " ".join(sys.argv)}
    slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower()
    path = os.path.join(HERE, "results", f"gpu-remedies-{slug}.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print(json.dumps(out["median"]), f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
