"""On a machine with an NVIDIA GPU: what feedprof's sampler reads, next to nvidia-smi.

A CUDA workload runs idle / busy / idle (about 4 s each) while feedprof's
Sampler (NVML, 5 Hz) and `nvidia-smi --query-gpu=... -lms 200` both record
the device. The script writes both series on one time axis, the mean of each
metric per phase from both sources, and whether the sampler's CUDA ordinals
match torch's (by UUID), to benchmarks/results/gpu-sampler-<gpu>.json.

    python benchmarks/gpu_check.py                 # needs torch with CUDA and nvidia-smi
    CUDA_VISIBLE_DEVICES=1,0 python benchmarks/gpu_check.py   # on a 2-GPU machine: reordered
"""
from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SMI_FIELDS = "timestamp,uuid,utilization.gpu,memory.used,clocks.sm,power.draw"


def busy(seconds: float, stop: threading.Event) -> None:
    import torch

    a = torch.randn(8192, 8192, device="cuda")
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stop.is_set():
        a = torch.tanh(a @ a)
        torch.cuda.synchronize()


def main() -> int:
    if not shutil.which("nvidia-smi"):
        print("no nvidia-smi on this machine: nothing to compare", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("torch sees no CUDA device", file=sys.stderr)
        return 2
    torch.zeros(1, device="cuda")  # initialise CUDA, so torch's own UUIDs are known
    from feedprof.record.gpu import open_gpu, torch_cuda_uuids
    from feedprof.record.sampler import Sampler

    torch_uuids = torch_cuda_uuids() or []
    by_env = open_gpu()  # mapping from CUDA_VISIBLE_DEVICES alone
    env_uuids = [d.uuid for d in by_env.devices]
    by_env.close()
    gpu = open_gpu(cuda_uuids=torch_uuids)
    name = gpu.devices[0].name if gpu.devices else "unknown"
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits", "-lms", "200"],
                           stdout=subprocess.PIPE, text=True)
    wall0, mono0 = time.time(), time.monotonic()
    sampler = Sampler(interval_s=0.2, gpu=gpu, origin_s=mono0).start()
    phases = []
    stop = threading.Event()
    for label, seconds in (("idle", 4.0), ("busy", 4.0), ("idle after", 4.0)):
        t0 = time.monotonic() - mono0
        if label == "busy":
            busy(seconds, stop)
        else:
            time.sleep(seconds)
        phases.append((label, t0, time.monotonic() - mono0))
    samples = sampler.stop()
    smi.terminate()
    out, _ = smi.communicate(timeout=10)

    smi_rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6:
            continue
        try:
            ts = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
            frac = float("0." + parts[0].split(".")[1]) if "." in parts[0] else 0.0
        except (ValueError, IndexError):
            continue
        num = lambda v: float(re.sub(r"[^0-9.]", "", v)) if re.search(r"[0-9]", v) else None  # noqa: E731
        smi_rows.append({"t_s": ts + frac - wall0, "uuid": parts[1], "util_pct": num(parts[2]),
                         "mem_used_mib": num(parts[3]), "sm_clock_mhz": num(parts[4]), "power_w": num(parts[5])})

    def phase_means(label: str, t0: float, t1: float) -> dict:
        row = {"phase": label}
        for d, series in enumerate(samples.gpus):
            pick = lambda col: [v for t, v in zip(samples.t_s, col) if v is not None and t0 <= t <= t1]  # noqa: E731
            uuid = series.uuid
            smi_pick = lambda key: [r[key] for r in smi_rows  # noqa: E731
                                    if r["uuid"] == uuid and t0 <= r["t_s"] <= t1 and r[key] is not None]
            mean = lambda xs: statistics.mean(xs) if xs else None  # noqa: E731
            row[f"cuda:{d}"] = {
                "feedprof_util_pct": mean(pick(series.util_pct)), "smi_util_pct": mean(smi_pick("util_pct")),
                "feedprof_mem_used_mib": mean([v / 2**20 for v in pick(series.mem_used_bytes)]),
                "smi_mem_used_mib": mean(smi_pick("mem_used_mib")),
                "feedprof_sm_clock_mhz": mean(pick(series.sm_clock_mhz)), "smi_sm_clock_mhz": mean(smi_pick("sm_clock_mhz")),
                "feedprof_power_w": mean(pick(series.power_w)), "smi_power_w": mean(smi_pick("power_w")),
            }
        return row

    result = {
        "device": name, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch_uuids": torch_uuids, "sampler_uuids": [d.uuid for d in gpu.devices], "env_mapping_uuids": env_uuids,
        "mapping_matches_torch": [u if u.startswith("GPU-") else f"GPU-{u}" for u in torch_uuids] == env_uuids,
        "phases": [phase_means(*p) for p in phases],
        "feedprof_series": {"t_s": samples.t_s, "gpus": [{"uuid": g.uuid, "util_pct": g.util_pct,
                                                           "mem_used_bytes": g.mem_used_bytes} for g in samples.gpus]},
        "smi_series": smi_rows,
    }
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()
    path = os.path.join(HERE, "results", f"gpu-sampler-{slug}.json")
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)
    for row in result["phases"]:
        print(json.dumps(row))
    print(f"CUDA ordinals match torch's: {result['mapping_matches_torch']}; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
