"""On a machine with an NVIDIA GPU: the JPEG/ResNet-18 job (benchmarks/workloads/gpu_jpeg.py,
num_workers=0 as written) run to its end three ways, each timed from outside:

    as written       the script alone
    online, held     `feedprof tune --online`: its augmentation draws from Python's `random` in
                     the main process, so feedprof keeps the script's settings and says why
    online, allowed  the same with --allow-rng-change: the draws move into workers, the loader
                     is tuned while the job trains

    python benchmarks/gpu_online.py [--epochs 6]

Writes benchmarks/results/gpu-online-<gpu>.json (wall times, each run's pick and what it said).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "workloads", "gpu_jpeg.py")


def timed(cmd: list) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return {"wall_s": round(time.monotonic() - t0, 2), "exit": proc.returncode, "stderr_tail": proc.stderr[-1500:]}


def online(job_args: list, out: str, *flags: str) -> dict:
    row = timed([sys.executable, "-m", "feedprof", "tune", "--online", *flags, "--out", out, JOB, *job_args])
    path = os.path.join(out, "results.json")
    if os.path.exists(path):
        with open(path) as fh:
            res = json.load(fh)
        rec = res.get("recommendation") or {}
        row.update(pick=rec.get("config"), speedup=rec.get("speedup"),
                   switches=len(res["online"]["switches"]), holds=res["online"].get("holds"))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=6)
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("torch sees no CUDA device", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="feedprof-gpu-online-")
    job_args = ["--epochs", str(a.epochs), "--data", os.path.join(work, "jpegs")]
    subprocess.run([sys.executable, JOB, "--epochs", "0", "--data", job_args[-1]], check=True)  # the files, untimed
    result = {"device": torch.cuda.get_device_name(0), "cores": os.cpu_count(), "epochs": a.epochs,
              "as_written": timed([sys.executable, JOB, *job_args]),
              "online_held": online(job_args, os.path.join(work, "held")),
              "online_allowed": online(job_args, os.path.join(work, "allowed"), "--allow-rng-change")}
    slug = re.sub(r"[^A-Za-z0-9]+", "-", result["device"]).strip("-").lower()
    path = os.path.join(HERE, "results", f"gpu-online-{slug}.json")
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)
    for k in ("as_written", "online_held", "online_allowed"):
        r = result[k]
        print(f"{k:15s} {r['wall_s']:7.1f} s  exit {r['exit']}  pick {r.get('pick')}  holds {r.get('holds')}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
