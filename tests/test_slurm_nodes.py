"""feedprof on a real two-node Slurm (tests/local_slurm.py TwoNodeSlurm: nodes n1 and n2 on this
machine, each slurmd in namespaces of its own, so that a task on n2 sees its own hostname and
only its node's processes), everything run inside ``sbatch -N 2 -n 2`` as a user of a two-node
allocation would: the batch script, and the feedprof it starts, run on n1; the second rank runs
on n2, out of that feedprof's sight.

The job is the I/O-bound DDP script of test_slurm.py (SLURM_DDP, written with 0 workers): the
right advice is several workers. Every test ends with nothing of its own left in the queue
(``slurm_nodes``) and no process of its own on either node (``no_leftovers``: this machine sees
both nodes' processes)."""
import glob
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import run_feedprof, write_script
from local_slurm import run_batch
from scripts_jobs import SLURM_DDP

pytest.importorskip("torch")

PYTHON = sys.executable
FEEDPROF = f"{PYTHON} -m feedprof"
FIRST_NODE = 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'


def _free_port():
    from feedprof.trial.jobrunner import free_port

    return free_port()


def _sbatch(tmp_path, lines, timeout=420):
    """``sbatch --wait -N 2 -n 2`` of a batch script made of ``lines``; what it printed."""
    job = tmp_path / "job.sh"
    job.write_text("\n".join(["#!/bin/bash", f"cd {tmp_path}", FIRST_NODE, *lines]) + "\n")
    proc = run_batch(["-N", "2", "-n", "2", "-o", "batch.log", str(job)], cwd=tmp_path, timeout=timeout,
                     env={**os.environ, "PYTHONWARNINGS": "ignore"})
    log = (tmp_path / "batch.log").read_text() if (tmp_path / "batch.log").exists() else ""
    assert proc.returncode == 0, proc.stderr + log[-4000:]
    return log


def _exit_of(log, name):
    line = next((ln for ln in log.splitlines() if ln.startswith(f"{name}-exit=")), None)
    assert line is not None, log[-4000:]
    return int(line.split("=", 1)[1])


def _reports(prefix):
    return {r: json.loads(open(f"{prefix}.{r}").read()) for r in (0, 1)}


def _as_written(want, got):
    for rank in (0, 1):
        assert got[rank]["epochs"] == want[rank]["epochs"], rank
        assert got[rank]["weights"] == want[rank]["weights"], rank


def _measured_where_it_runs(ranks):
    """Each rank of the job recorded with its own host, CPU and memory; the rank on n2 sampled
    by itself (the feedprof on n1 cannot see its processes), the rank on n1 by feedprof."""
    by_rank = {r["rank"]["rank"]: r for r in ranks}
    assert sorted(by_rank) == [0, 1]
    for rank, node in ((0, "n1"), (1, "n2")):
        r = by_rank[rank]
        assert r["rank"]["node"] == node and r["host"]["hostname"] == node, (rank, r["rank"], r["host"]["hostname"])
        assert r["rank"]["self_sampled"] == (node == "n2")
        assert r["summary"]["main_cpu_pct"] is not None and r["summary"]["main_cpu_pct"] > 0, r["summary"]
        assert r["samples"]["peaks"]["tree_rss_bytes"] > 100 * 2 ** 20  # a Python process with torch
        assert r["samples"]["peaks"]["tree_pss_bytes"] is not None


def _picks_workers(rec):
    assert rec["config"]["num_workers"] >= 4, rec
    line = next(ln for ln in rec["paste_line"].splitlines() if ln.startswith("srun -n 2"))
    assert "--workers" in line and "ddp.py" in line, rec["paste_line"]


@pytest.mark.serial
def test_an_online_tune_across_two_nodes_keeps_what_each_rank_sees(tmp_path, slurm_nodes):
    script = write_script(tmp_path, "ddp.py", SLURM_DDP)
    port = _free_port()
    log = _sbatch(tmp_path, [
        f"DDP_PORT={port} srun -n 2 {PYTHON} {script} --report plain",
        "echo plain-exit=$?",
        f"MASTER_PORT={port} {FEEDPROF} tune --online --out out -- srun -n 2 {PYTHON} {script} --report online",
        "echo feedprof-exit=$?"])
    assert _exit_of(log, "plain") == 0 and _exit_of(log, "feedprof") == 0, log[-4000:]
    _as_written(_reports(tmp_path / "plain"), _reports(tmp_path / "online"))
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    _picks_workers(results["recommendation"])
    _measured_where_it_runs(results["run"]["ranks"])


@pytest.mark.serial
def test_an_offline_tune_across_two_nodes_waits_for_the_rank_it_cannot_see(tmp_path, slurm_nodes):
    """Each trial ends once both ranks have their windows, the one on n2 included: no trial fails
    for a rank still loading there, and the pick is the I/O-bound job's several workers."""
    script = write_script(tmp_path, "ddp.py", SLURM_DDP)
    log = _sbatch(tmp_path, [
        f"{FEEDPROF} tune --budget 60 --max-workers 8 --window-seconds 0.8 --min-window-batches 20 "
        f"--warmup-batches 2 --out out -- srun -n 2 {PYTHON} {script} --epochs 40",
        "echo feedprof-exit=$?"])
    assert _exit_of(log, "feedprof") == 0, log[-4000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    states = [t["state"] for t in results["trials"]]
    assert all(s == "ok" for s in states), [(t["config"], t["state"], t.get("cause")) for t in results["trials"]]
    _picks_workers(results["recommendation"])
    for trial in results["trials"]:
        _measured_where_it_runs(trial["run"]["ranks"])
    page = (tmp_path / "out" / "report.html").read_text()
    assert "measured itself on its own node" in page


def test_one_feedprof_per_task_across_two_nodes_writes_a_run_per_node(tmp_path, slurm_nodes):
    script = write_script(tmp_path, "ddp.py", SLURM_DDP)
    port = _free_port()
    log = _sbatch(tmp_path, [
        f"DDP_PORT={port} srun -n 2 {PYTHON} {script} --report plain",
        "echo plain-exit=$?",
        f"DDP_PORT={port} srun -n 2 {FEEDPROF} tune --online {script} -- --report online",
        "echo feedprof-exit=$?"])
    assert _exit_of(log, "plain") == 0 and _exit_of(log, "feedprof") == 0, log[-4000:]
    _as_written(_reports(tmp_path / "plain"), _reports(tmp_path / "online"))
    _merged_per_node(tmp_path)


def test_one_feedprof_per_node_around_torchrun_writes_a_run_per_node(tmp_path, slurm_nodes):
    script = write_script(tmp_path, "ddp.py", SLURM_DDP)
    torchrun = (f"{PYTHON} -m torch.distributed.run --nnodes 2 --node-rank $SLURM_NODEID --nproc-per-node 1 "
                f"--master-addr $MASTER_ADDR --master-port {_free_port()}")
    log = _sbatch(tmp_path, [
        f"srun -N 2 --ntasks-per-node 1 bash -c '{torchrun} {script} --report plain'",
        "echo plain-exit=$?",
        f"srun -N 2 --ntasks-per-node 1 bash -c '{FEEDPROF} tune --online -- {torchrun} {script} --report online'",
        "echo feedprof-exit=$?"])
    assert _exit_of(log, "plain") == 0 and _exit_of(log, "feedprof") == 0, log[-4000:]
    _as_written(_reports(tmp_path / "plain"), _reports(tmp_path / "online"))
    _merged_per_node(tmp_path)


def test_a_rank_that_fails_on_the_other_node_fails_the_run_with_its_own_traceback(tmp_path, slurm_nodes):
    """Rank 1, on n2, cannot read its data; rank 0, on n1, waits for it in a collective: the run
    fails with rank 1's traceback, not rank 0's, and nothing of it is left on either node."""
    failing = SLURM_DDP.replace("for epoch in range(args.epochs):",
                                "if rank == 1:\n    raise OSError('the storage is not mounted on ' + os.uname().nodename)\n"
                                "for epoch in range(args.epochs):", 1)
    script = write_script(tmp_path, "ddp.py", failing)
    log = _sbatch(tmp_path, [f"{FEEDPROF} profile --out out -- srun -n 2 {PYTHON} {script}",
                             "echo feedprof-exit=$?"])
    assert _exit_of(log, "feedprof") != 0, log[-4000:]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    outcome = run["outcome"]
    assert outcome["state"] == "failed" and outcome["cause"]["code"] == "rank_failed", outcome
    assert outcome["cause"]["rank"] == 1 and "not mounted on n2" in outcome["traceback"], outcome
    assert _processes_of(script) == []


def _merged_per_node(tmp_path):
    """A run per node (each task's own directory), each naming its own host, merged into one page."""
    runs = sorted(glob.glob(str(tmp_path / "feedprof-out" / "*-rank*" / "results.json")))
    assert [os.path.basename(os.path.dirname(p)) for p in runs] == ["n1-rank0", "n2-rank1"], runs
    for path, node in zip(runs, ("n1", "n2")):
        results = json.loads(open(path).read())
        assert results["host"]["hostname"] == node
        ranks = results["run"]["ranks"] or [results["run"]]  # a task's own script, or torchrun's ranks
        assert [r["rank"]["node"] for r in ranks] == [node]
    merged = run_feedprof(["report", "feedprof-out"], cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    page = (tmp_path / "feedprof-out" / "report.html").read_text()
    assert "2 nodes of one job" in page and "n1" in page and "n2" in page


def test_sigterm_to_a_tune_across_two_nodes_leaves_no_rank_on_either(tmp_path, slurm_nodes):
    """SIGTERM mid-trial (both ranks training, the one on n2 too): exit 130, and at once no
    process of the job on either node and no step of it in the queue (only the batch script's,
    which waits for the test's word)."""
    script = write_script(tmp_path, "ddp.py", SLURM_DDP)
    job = tmp_path / "job.sh"
    job.write_text("\n".join([
        "#!/bin/bash", f"cd {tmp_path}", FIRST_NODE,
        f"{FEEDPROF} tune --budget 300 --out out -- srun -n 2 {PYTHON} {script} --epochs 400 &",
        "fp=$!",
        "for i in $(seq 1 1200); do grep -qs first_batch out/trials/03-*/events-1.jsonl && break; sleep 0.2; done",
        "sleep 1", "kill -TERM $fp", "wait $fp", "echo $? > feedprof.exit",
        "while [ ! -e release ]; do sleep 0.2; done"]) + "\n")
    sbatch = subprocess.Popen(["sbatch", "--wait", "-N", "2", "-n", "2", "-o", "batch.log", str(job)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        _wait_for(lambda: (tmp_path / "feedprof.exit").exists(), 300)
        left_s = _gone_within(lambda: _processes_of(script), 2.0)
        steps = [s for s in _steps() if not s.endswith(".batch")]
        assert (tmp_path / "feedprof.exit").read_text().strip() == "130", (tmp_path / "batch.log").read_text()
        assert left_s is None, f"processes of the job still running: {_processes_of(script)}"
        assert steps == [], steps
        assert (tmp_path / "out" / "results.json").exists()
    finally:
        (tmp_path / "release").touch()
        sbatch.communicate(timeout=60)


def _processes_of(script):
    out = subprocess.run(["pgrep", "-f", str(script)], capture_output=True, text=True)
    return out.stdout.split()


def _steps():
    out = subprocess.run(["squeue", "-h", "-s", "-O", "StepId:32"], capture_output=True, text=True, timeout=30)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def _gone_within(alive, timeout_s):
    """None once ``alive()`` is empty within ``timeout_s``; else how long it was waited for."""
    deadline = time.monotonic() + timeout_s
    while alive():
        if time.monotonic() > deadline:
            return timeout_s
        time.sleep(0.1)
    return None


def _wait_for(condition, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s} s")
