"""feedprof on a cluster job, checked from outside: a DDP job under ``srun -n 2`` on a real
one-node Slurm (started here with tests/local_slurm.py unless SLURM_CONF names a running
one), and the same job as two torchrun "nodes" on 127.0.0.1.

    python benchmarks/cluster.py [--epochs 12] [--budget 120] [--reps 2] [--out JSON]

For the srun job:
  (a) the job as written (--workers 0), timed from outside;
  (b) feedprof tune -- srun -n 2 ... (offline): its wall time and pick;
  (c) feedprof tune --online -- srun -n 2 ...: the job run once, timed from outside;
  (d) the picks re-measured by benchmarks/independent.py (no feedprof code) under srun with the
      config forced in every rank, interleaved with the script's own settings;
  (e) the per-rank straggler view of the online run; what squeue lists afterwards (nothing).
For the two torchrun nodes: each node's feedprof tune --online, side by side; each node's
pick and figure, the merged report, and the job's wall time against the job as written.
Writes a JSON record and prints the Markdown tables the README's benchmarks page shows.
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
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import independent  # noqa: E402  (the harness: no feedprof code)
from local_slurm import LocalSlurm, missing  # noqa: E402

WORKLOAD = os.path.join(HERE, "workloads", "ddp_slurm.py")
FEEDPROF = [sys.executable, "-m", "feedprof"]


def timed(cmd: List[str], cwd: str, env: Optional[Dict[str, str]] = None, timeout_s: float = 900.0) -> Dict[str, Any]:
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})})
    return {"rc": done.returncode, "wall_s": round(time.monotonic() - t0, 2), "stderr_tail": done.stderr[-2000:],
            "stdout_tail": done.stdout[-2000:]}


def squeue() -> List[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i %T %j"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def pick_of(results_path: str) -> Dict[str, Any]:
    with open(results_path, encoding="utf-8") as fh:
        res = json.load(fh)
    rec = res.get("recommendation") or {}
    spread = [r for r in rec.get("reasons", []) if r.get("code") == "rank_spread"]
    return {"config": rec.get("config"), "batches_per_s": rec.get("batches_per_s"), "speedup": rec.get("speedup"),
            "paste_line": rec.get("paste_line"), "rank_spread": spread[0] if spread else None}


def srun_job(work: str, epochs: int, budget: float, reps: int) -> Dict[str, Any]:
    srun = ["srun", "-n", "2"]
    args = ["--epochs", str(epochs)]
    written = timed([*srun, sys.executable, WORKLOAD, *args], work)
    offline = timed([*FEEDPROF, "tune", "--budget", str(budget), "--out", "offline", "--", *srun, sys.executable,
                     WORKLOAD, *args], work)
    online = timed([*FEEDPROF, "tune", "--online", "--out", "online", "--", *srun, sys.executable, WORKLOAD, *args],
                   work)
    picks = {"offline": pick_of(os.path.join(work, "offline", "results.json")),
             "online": pick_of(os.path.join(work, "online", "results.json"))}
    contenders = {"as written": {"num_workers": 0}, "offline pick": picks["offline"]["config"],
                  "online pick": picks["online"]["config"]}
    harness: Dict[str, List[Optional[float]]] = {name: [] for name in contenders}
    for rep in range(reps):  # interleaved: drift on a shared machine hits each alike
        for name, config in contenders.items():
            res = independent.measure_job([*srun, sys.executable], WORKLOAD, "torch", config, args=args, window_s=5.0,
                                          cwd=work)
            harness[name].append(res["rate_per_s"])
    return {"as_written": written, "offline": offline, "online": online, "picks": picks, "harness": harness,
            "squeue_after": squeue()}


def torchrun_nodes(work: str, epochs: int) -> Dict[str, Any]:
    from feedprof.trial.jobrunner import free_port

    def launch(k: int, port: int) -> List[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(k),
                "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port)]

    def both(make, name: str) -> float:
        t0 = time.monotonic()
        logs = [open(os.path.join(work, f"{name}-node{k}.log"), "wb") for k in (0, 1)]
        procs = [subprocess.Popen(make(k), cwd=work, stdout=logs[k], stderr=subprocess.STDOUT,
                                  env={**os.environ, "PYTHONWARNINGS": "ignore"}) for k in (0, 1)]
        codes = [p.wait(timeout=900) for p in procs]
        for log in logs:
            log.close()
        if codes != [0, 0]:
            tails = [open(os.path.join(work, f"{name}-node{k}.log"), errors="replace").read()[-3000:] for k in (0, 1)]
            raise RuntimeError(f"two-node run ({name}) ended {codes}:\n" + "\n---\n".join(tails))
        return round(time.monotonic() - t0, 2)

    args = ["--epochs", str(epochs)]
    port = free_port()
    written_s = both(lambda k: [*launch(k, port), WORKLOAD, *args], "as-written")
    port = free_port()
    online_s = both(lambda k: [*FEEDPROF, "tune", "--online", "--out", f"node{k}", "--", *launch(k, port), WORKLOAD,
                               *args], "online")
    merged = timed([*FEEDPROF, "report", "node0/results.json", "node1/results.json", "-o", "nodes.html"], work)
    return {"as_written_s": written_s, "online_s": online_s, "merged_report_rc": merged["rc"],
            "picks": {f"node{k}": pick_of(os.path.join(work, f"node{k}", "results.json")) for k in (0, 1)}}


def _median(xs: List[Optional[float]]) -> Optional[float]:
    vals = sorted(x for x in xs if x)
    return vals[len(vals) // 2] if vals else None


def tables(rec: Dict[str, Any]) -> str:
    s = rec["srun"]
    h = {k: _median(v) for k, v in s["harness"].items()}
    base = h.get("as written")
    lines = ["| srun -n 2 | wall time | pick | feedprof b/s | harness b/s | harness vs as written |",
             "|---|---|---|---|---|---|",
             f"| as written (num_workers=0) | {s['as_written']['wall_s']} s | | | {base or 'n/a'} | 1.00× |"]
    for mode, name in (("offline", "offline pick"), ("online", "online pick")):
        p = s["picks"][mode]
        lines.append(f"| feedprof tune{' --online' if mode == 'online' else ''} | {s[mode]['wall_s']} s | "
                     f"num_workers={(p['config'] or {}).get('num_workers')} | {p['batches_per_s'] and round(p['batches_per_s'], 1)} | "
                     f"{h.get(name) and round(h[name], 1)} | "
                     f"{h.get(name) and base and f'{h[name] / base:.2f}×'} |")
    lines.append(f"\nsqueue afterwards: {s['squeue_after'] or 'empty'}")
    n = rec.get("nodes")
    if n:
        lines += ["", "| two torchrun nodes | job wall time | node0 pick | node1 pick |", "|---|---|---|---|",
                  f"| as written | {n['as_written_s']} s | | |",
                  f"| each node under feedprof tune --online | {n['online_s']} s | "
                  f"num_workers={(n['picks']['node0']['config'] or {}).get('num_workers')} | "
                  f"num_workers={(n['picks']['node1']['config'] or {}).get('num_workers')} |"]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--no-nodes", action="store_true", help="leave out the two torchrun nodes")
    ap.add_argument("--no-srun", action="store_true", help="leave out the srun job (keep the record's from --out)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cluster-cpu-2core.json"))
    args = ap.parse_args(argv)
    cluster = None
    if not os.environ.get("SLURM_CONF"):
        why = missing()
        if why:
            print(f"benchmarks/cluster.py: {why}", file=sys.stderr)
            return 1
        cluster = LocalSlurm(tempfile.mkdtemp(prefix="feedprof-slurm-"))
        os.environ.update(cluster.start())
    work = tempfile.mkdtemp(prefix="feedprof-cluster-")
    try:
        rec: Dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "epochs": args.epochs, "budget_s": args.budget,
                               "cpus": os.cpu_count(), "load_avg_1m_start": os.getloadavg()[0]}
        if args.no_srun:
            with open(args.out, encoding="utf-8") as fh:
                rec["srun"] = json.load(fh)["srun"]
        else:
            rec["srun"] = srun_job(work, args.epochs, args.budget, args.reps)
            _write(args.out, rec)  # kept, whatever the nodes part does
        if not args.no_nodes:
            rec["nodes"] = torchrun_nodes(work, args.epochs)
        rec["load_avg_1m_end"] = os.getloadavg()[0]
    finally:
        if cluster is not None:
            cluster.stop()
    _write(args.out, rec)
    print(tables(rec))
    return 0


def _write(path: str, rec: Dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(rec, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
