"""feedprof under a real Slurm (a one-node cluster on localhost: tests/local_slurm.py) and
across two torchrun "nodes" on 127.0.0.1: the launch shapes cluster users write.

Every test ends with nothing of its own left in the queue (the ``slurm`` fixture) and no rank
running (``no_leftovers``). The job is an I/O-bound DDP script written with 0 workers: the
right advice is several workers, given as the script's --workers flag in the launch command."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_feedprof, run_side_by_side, write_script
from local_slurm import run_batch
from scripts_jobs import SLURM_DDP

pytest.importorskip("torch")

FEEDPROF = [sys.executable, "-m", "feedprof"]
ENV = {"PYTHONWARNINGS": "ignore"}


def _script(tmp_path):
    return write_script(tmp_path, "ddp.py", SLURM_DDP)


def _port_env():
    """A rendezvous port of the test's own for jobs the test starts itself (srun's tasks share it)."""
    from feedprof.trial.jobrunner import free_port

    return {"DDP_PORT": str(free_port())}


QUICK_WINDOWS = ["--window-seconds", "0.8", "--min-window-batches", "20", "--warmup-batches", "2"]


def _run(cmd, tmp_path, timeout=240, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                          env={**os.environ, **ENV, **(env or {})})


def _reports(prefix, ranks=(0, 1)):
    return {r: json.loads(open(f"{prefix}.{r}").read()) for r in ranks}


def _as_written(tmp_path, launch, script, *args):
    """The job run as written, without feedprof: what each rank saw."""
    proc = _run([*launch, sys.executable, script, "--report", str(tmp_path / "plain"), *args], tmp_path,
                env=_port_env()) if launch[0] == "srun" else \
        _run([*launch, script, "--report", str(tmp_path / "plain"), *args], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _reports(tmp_path / "plain")


def _rank_processes_of(tmp_path):
    out = subprocess.run(["pgrep", "-f", str(tmp_path / "ddp.py")], capture_output=True, text=True)
    return out.stdout.split()


def _advice_keeps_the_launch(rec, launch_word):
    paste = rec["paste_line"]
    assert rec["config"]["num_workers"] >= 4, rec
    line = next(line for line in paste.splitlines() if line.startswith(launch_word))  # the launch, kept
    assert "--workers" in line and "ddp.py" in line, paste


@pytest.mark.serial
def test_an_srun_job_is_tuned_and_every_trial_s_step_is_ended(tmp_path, slurm):
    script = _script(tmp_path)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--budget", "45", "--max-workers", "8", *QUICK_WINDOWS, "--out", str(out), "--",
                         "srun", "-n", "2", sys.executable, script, "--epochs", "40"], timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    _advice_keeps_the_launch(results["recommendation"], "srun -n 2")
    searched = [t for t in results["trials"] if t["role"] == "search"]
    assert sum(t["state"] == "ok" for t in searched) >= 3, [t["state"] for t in searched]
    # a trial whose step had been left running would hold the node: the next would wait in the queue
    queued = [n for t in results["trials"] if t.get("run") for n in t["run"]["notes"]
              if n["code"] == "queued_for_resources"]
    assert queued == []
    baseline = results["trials"][0]["run"]
    assert sorted(r["rank"]["rank"] for r in baseline["ranks"]) == [0, 1]
    assert all(r["rank"]["local_world_size"] == 2 and r["rank"]["job"] for r in baseline["ranks"])


def test_an_srun_job_is_profiled_from_its_ranks_and_its_step_ended(tmp_path, slurm):
    script = _script(tmp_path)
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), "--", "srun", "-n", "2", sys.executable, script,
                         "--epochs", "40"], timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert len(run["ranks"]) == 2
    assert run["summary"]["data_wait_fraction"] > 0.5  # the ranks' wait, not srun's
    # the job's memory is its ranks' (two Python processes with torch), not srun's own ~10 MiB
    assert run["samples"]["peaks"]["tree_rss_bytes"] > 200 * 2 ** 20
    assert not run["leftovers"]["processes"] and not run["leftovers"]["slurm"]
    assert _rank_processes_of(tmp_path) == []


@pytest.mark.serial
def test_an_srun_job_tuned_online_sees_what_the_run_as_written_sees(tmp_path, slurm):
    script = _script(tmp_path)
    want = _as_written(tmp_path, ["srun", "-n", "2"], script)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--online", "--out", str(out), "--", "srun", "-n", "2", sys.executable, script,
                         "--report", str(tmp_path / "online")], timeout=240, cwd=tmp_path, env=_port_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = _reports(tmp_path / "online")
    for rank in (0, 1):
        assert got[rank]["epochs"] == want[rank]["epochs"] and got[rank]["weights"] == want[rank]["weights"]
    results = json.loads((out / "results.json").read_text())
    _advice_keeps_the_launch(results["recommendation"], "srun -n 2")
    assert [r["rank"]["local_world_size"] for r in results["run"]["ranks"]] == [2, 2]
    assert results["run"]["samples"]["peaks"]["tree_rss_bytes"] > 200 * 2 ** 20


@pytest.mark.serial
def test_one_feedprof_per_node_starting_torchrun_is_no_rank_itself(tmp_path, slurm):
    """srun -n 1 feedprof tune --online -- torchrun ...: torchrun inherits SLURM_PROCID but is
    the launcher; its ranks are torchrun's."""
    script = _script(tmp_path)
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    want = _as_written(tmp_path, launch, script)
    proc = _run(["srun", "-n", "1", *FEEDPROF, "tune", "--online", "--out", "out", "--", *launch, script,
                 "--report", str(tmp_path / "online")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = _reports(tmp_path / "online")
    assert all(got[r]["epochs"] == want[r]["epochs"] and got[r]["weights"] == want[r]["weights"] for r in (0, 1))
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {r["rank"]["rank"] for r in results["run"]["ranks"]} == {0, 1}
    assert results["recommendation"]["loader_site"].startswith("ddp.py:")
    _advice_keeps_the_launch(results["recommendation"], sys.executable)


def test_one_feedprof_per_task_each_writes_its_own_run_and_they_merge(tmp_path, slurm):
    script = _script(tmp_path)
    proc = _run(["srun", "-n", "2", *FEEDPROF, "profile", script, "--", "--epochs", "40"], tmp_path,
                env=_port_env(), timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(glob.glob(str(tmp_path / "feedprof-out" / "*-rank*" / "run.json")))
    assert len(runs) == 2, os.listdir(tmp_path / "feedprof-out")
    ranks = [json.loads(open(p).read())["rank"] for p in runs]
    assert sorted(r["rank"] for r in ranks) == [0, 1] and all(r["job"] and r["node"] for r in ranks)
    merged = run_feedprof(["report", "feedprof-out"], cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    page = (tmp_path / "feedprof-out" / "report.html").read_text()
    assert "Ranks" in page and "rank 1" in page


def test_an_offline_tune_as_one_task_of_several_is_refused_with_what_to_run(tmp_path, slurm):
    script = _script(tmp_path)
    proc = _run(["srun", "-n", "2", *FEEDPROF, "tune", script], tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "feedprof tune -- srun" in proc.stderr and "Traceback" not in proc.stderr


def test_two_torchrun_nodes_each_tuned_online_merge_into_one_report(tmp_path, no_leftovers):
    script = _script(tmp_path)
    from feedprof.trial.jobrunner import free_port

    def launch(node, port):
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port)]

    # as written: the same two ranks of one world, under one agent (what each rank sees is
    # its rank's; a rendezvous between two agents is the tuned run's to meet)
    plain = _run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                  str(free_port()), script, "--report", str(tmp_path / "plain")], tmp_path, timeout=180)
    assert plain.returncode == 0, plain.stderr[-3000:]
    want = _reports(tmp_path / "plain")
    port = free_port()
    tuned = run_side_by_side([[*FEEDPROF, "tune", "--online", "--out", f"node{k}", "--", *launch(k, port), script,
                               "--report", str(tmp_path / "online")] for k in (0, 1)], tmp_path, env=ENV)
    assert [p.returncode for p in tuned] == [0, 0], [p.stderr[-2000:] for p in tuned]
    got = _reports(tmp_path / "online")
    assert all(got[r]["epochs"] == want[r]["epochs"] and got[r]["weights"] == want[r]["weights"] for r in (0, 1))
    merged = run_feedprof(["report", "node0/results.json", "node1/results.json", "-o", "job.html"], cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    page = (tmp_path / "job.html").read_text()
    assert "2 nodes of one job" in page and "node0" in page and "node1" in page
    assert "Where they differ" in page


@pytest.mark.parametrize("command", [["profile", "--full"], ["tune", "--online"]])
def test_sigterm_to_feedprof_ends_the_step_and_keeps_what_was_measured(tmp_path, slurm, command):
    script = _script(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen([*FEEDPROF, *command, "--out", str(out), "--", "srun", "-n", "2", sys.executable,
                             script, "--epochs", "200"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV})
    _wait_for(lambda: glob.glob(str(out / "*" / "events-1.jsonl")), 120)
    time.sleep(3)  # training
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert _rank_processes_of(tmp_path) == []
    assert (out / ("results.json" if "tune" in command else "run.json")).exists()


def test_feedprof_killed_leaves_no_rank_and_no_job(tmp_path, slurm):
    script = _script(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen([*FEEDPROF, "profile", "--full", "--out", str(out), "--", "srun", "-n", "2",
                             sys.executable, script, "--epochs", "200"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, **ENV})
    _wait_for(lambda: glob.glob(str(out / "*" / "events-1.jsonl")), 120)
    proc.kill()
    proc.wait(timeout=30)
    _wait_for(lambda: not _rank_processes_of(tmp_path), 30)  # srun's own cancel, on feedprof's death


def test_a_step_waiting_for_resources_is_said_and_not_held_against_it(tmp_path, slurm):
    """The node's CPUs are taken by another job for a while: the step waits in the queue; that
    wait is no time of the trial's (its loader timeout is shorter than the wait)."""
    script = _script(tmp_path)
    blocker = subprocess.Popen(["srun", "-n", "2", "sleep", "12"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: any("RUNNING" in line for line in slurm.queue()), 30)
        out = tmp_path / "out"
        proc = run_feedprof(["profile", "--loader-timeout", "30", "--out", str(out), "--", "srun", "-n", "2",
                             sys.executable, script, "--epochs", "40"], timeout=240, cwd=tmp_path, env=_port_env())
    finally:
        blocker.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    queued = [n for n in run["notes"] if n["code"] == "queued_for_resources"]
    assert queued and queued[0]["waited_s"] > 5, run["notes"]
    assert "waited" in proc.stdout + proc.stderr


def test_inside_an_sbatch_allocation_only_the_step_is_ended(tmp_path, slurm):
    """feedprof in a batch script: srun makes a step of the allocation; feedprof ends that step
    only, and the batch job goes on to its own end (the echo after it runs)."""
    script = _script(tmp_path)
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/bash\n#SBATCH -n 2\n"
                   f"{' '.join(FEEDPROF)} profile --out out -- srun -n 2 {sys.executable} {script} --epochs 40\n"
                   "echo feedprof-exit=$?\n")
    proc = run_batch(["-o", "batch.log", str(job)], cwd=tmp_path, timeout=240, env={**os.environ, **ENV})
    assert proc.returncode == 0, proc.stderr + (tmp_path / "batch.log").read_text()[-3000:]
    log = (tmp_path / "batch.log").read_text()
    assert "feedprof-exit=0" in log, log[-3000:]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert len(run["ranks"]) == 2 and run["summary"]["data_wait_fraction"] > 0.5


def _wait_for(condition, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s} s")
