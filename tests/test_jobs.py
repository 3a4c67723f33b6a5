"""Multi-process jobs, launched with the user's own command: real torchrun and
mpirun jobs on CPU (gloo), every rank instrumented, the job ended together."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import run_feedprof, run_side_by_side, write_script
from feedprof.trial.jobrunner import free_port
from tests.scripts_jobs import DATA_PARALLEL, MPI_INIT, MULTI_WORKER, START_TWO_WORKERS, ddp, mirrored

QUICK = ["--window-batches", "40", "--warmup-batches", "2", "--interval", "0.1"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}


def profile(tmp_path, launch, *extra, timeout=240):
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), *QUICK, *extra, "--", *launch], timeout=timeout)
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else None
    return proc, run


def test_a_torchrun_job_is_profiled_rank_by_rank(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", ddp())
    proc, run = profile(tmp_path, [*TORCHRUN, script])
    assert proc.returncode == 0, proc.stderr
    ranks = run["ranks"]
    assert [r["rank"]["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["rank"]["world_size"] == 2 and r["rank"]["launcher"] == "torchrun" and r["rank"]["device"] == "cpu"
        assert r["outcome"]["state"] == "ok" and r["summary"]["batches_measured"] >= 30
        assert r["summary"]["data_wait_fraction"] > 0.5  # 8 samples x 3 ms of waiting per batch
    s = run["summary"]
    # the job runs at its slowest rank's pace (over whole epochs where an epoch's own cost is measured)
    pace = min(ranks, key=lambda r: r["summary"]["effective_batches_per_s"] or r["summary"]["batches_per_s"])
    slowest = pace["summary"]["batches_per_s"]
    assert s["batches_per_s"] == pytest.approx(slowest)
    assert s["samples_per_s"] == pytest.approx(slowest * 16)  # both ranks' batches of 8
    assert "rank  local" in proc.stdout and "highly input-bound" in proc.stdout


def test_a_failing_rank_fails_the_job_with_its_own_traceback(tmp_path, no_leftovers, torch):
    fault = 'if dist.get_rank() == 1 and step == 5:\n                raise ValueError("rank one has a bad shard")'
    script = write_script(tmp_path, "train.py", ddp(fault=fault))
    proc, run = profile(tmp_path, [*TORCHRUN, script])
    assert proc.returncode == 1
    assert "rank 1: ValueError: rank one has a bad shard" in proc.stderr
    assert run["outcome"]["cause"]["code"] == "rank_failed" and run["outcome"]["cause"]["rank"] == 1
    assert "ValueError: rank one has a bad shard" in run["outcome"]["traceback"]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI (openmpi-bin) is not installed")
def test_mpirun_ranks_are_found_from_open_mpi_s_environment(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", ddp(init=MPI_INIT))
    mpirun = ["mpirun", "--oversubscribe", "-np", "2"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
    proc, run = profile(tmp_path, [*mpirun, sys.executable, script])
    assert proc.returncode == 0, proc.stderr
    assert [(r["rank"]["rank"], r["rank"]["launcher"]) for r in run["ranks"]] == [(0, "mpi"), (1, "mpi")]


def test_a_shell_script_that_starts_its_own_ranks(tmp_path, no_leftovers, torch):
    """Two MultiWorkerMirroredStrategy workers started by a shell script, each
    with its TF_CONFIG: feedprof finds both ranks from it."""
    pytest.importorskip("tensorflow")
    write_script(tmp_path, "worker.py", MULTI_WORKER)
    start = write_script(tmp_path, "start.sh", START_TWO_WORKERS)
    os.chmod(start, 0o755)
    ports = [str(free_port()), str(free_port())]
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), *QUICK, "--", start, *ports],
                        env={**QUIET_TF, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]},
                        timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    assert [(r["rank"]["rank"], r["rank"]["launcher"]) for r in run["ranks"]] == [(0, "tf_config"), (1, "tf_config")]
    assert all(r["summary"]["framework"] == "tf.data" and r["summary"]["batches_measured"] >= 30 for r in run["ranks"])


def test_the_runs_of_two_nodes_merge_into_one_report(tmp_path, no_leftovers, torch):
    """Two "nodes" on this machine (torchrun --nnodes 2), each profiled on its
    own as on a cluster, then merged by feedprof report."""
    script = write_script(tmp_path, "train.py", ddp())
    port = str(free_port())
    def launch(node):
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port, script]

    procs = run_side_by_side([[sys.executable, "-m", "feedprof", "profile", "--out", str(tmp_path / f"n{node}"),
                               *QUICK, "--", *launch(node)] for node in (0, 1)], tmp_path)
    assert [p.returncode for p in procs] == [0, 0], [p.stderr[-2000:] for p in procs]
    page = tmp_path / "job.html"
    merged = run_feedprof(["report", str(tmp_path / "n0" / "run.json"), str(tmp_path / "n1" / "run.json"),
                           "-o", str(page)])
    assert merged.returncode == 0, merged.stderr
    html = page.read_text()
    assert "<h2>Ranks</h2>" in html and "(node 0)" in html and "(node 1)" in html
    assert "Data wait per rank" in html


def test_a_launch_command_that_cannot_run_is_bad_usage(tmp_path, cli):
    for command in ("profile", "tune"):
        proc = cli([command, "--out", str(tmp_path / "out"), "--", "no-such-launcher", "train.py"])
        assert proc.returncode == 2 and "no such command: no-such-launcher" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


LAUNCHER_OF_SESSIONS = """
import subprocess
import sys
import time

# like torchrun: each rank in a session of its own; these never build a loader
ranks = [subprocess.Popen(["sleep", "300"], start_new_session=True) for _ in range(2)]
with open(sys.argv[1], "w") as fh:
    fh.write(" ".join(str(r.pid) for r in ranks))
for r in ranks:
    r.wait()
"""


def test_ranks_in_sessions_of_their_own_end_with_the_job(tmp_path, monkeypatch, no_leftovers):
    """torchrun starts each rank with start_new_session: the group's kill misses
    them, and a rank that has not reported in yet is not known by its pid. The
    job is interrupted as soon as its ranks exist (before the runner's periodic
    listing of descendants could have seen them)."""
    import psutil

    from feedprof.record.host import machine_info
    from feedprof.trial import watch
    from feedprof.trial.jobrunner import run_job
    from feedprof.trial.launch import parse_launch
    from feedprof.trial.runner import TrialInterrupted, TrialOptions

    monkeypatch.setattr(watch, "KNOWN_REFRESH_S", 1e9)
    launcher = write_script(tmp_path, "launcher.py", LAUNCHER_OF_SESSIONS)
    pids_file = tmp_path / "pids"
    start = write_script(tmp_path, "start.sh", f'exec "{sys.executable}" "{launcher}" "{pids_file}"\n')

    def interrupt_once_ranks_exist():
        if pids_file.exists() and pids_file.read_text().strip():
            raise KeyboardInterrupt

    with pytest.raises(TrialInterrupted) as stopped:
        run_job(parse_launch(["sh", start]), str(tmp_path / "trial"), machine_info(), TrialOptions(gpu=False),
                on_poll=interrupt_once_ranks_exist)
    pids = [int(p) for p in pids_file.read_text().split()]
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert stopped.value.run.leftovers.processes == ()


@pytest.mark.serial
def test_a_torchrun_job_is_tuned_per_rank(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", ddp(load_s=0.004))
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "45", "--max-workers", "8", "--window-seconds", "0.8",
                         "--min-window-batches", "20", "--warmup-batches", "2", "--interval", "0.1", "--quiet",
                         "--", *TORCHRUN, script], timeout=400)
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "results.json").read_text())
    rec = res["recommendation"]
    assert res["launch"][-1] == script and rec["config"]["num_workers"] >= 2 and rec["speedup"] > 1.5
    assert all(len(t["run"]["ranks"]) == 2 for t in res["trials"] if t["state"] == "ok")
    assert any(r["code"] == "applies_to_every_rank" for r in rec["reasons"])
    assert "builds its own loader with this line" in proc.stdout
    assert rec["paste_line"].startswith("loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=")


# ------------------------------------------- one process, several devices

TUNE_QUICK = ["--window-seconds", "0.8", "--min-window-batches", "20", "--warmup-batches", "2", "--interval", "0.1",
              "--quiet"]


@pytest.mark.serial
def test_a_data_parallel_script_is_tuned_as_an_ordinary_script(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", DATA_PARALLEL)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "50", "--max-workers", "16", *TUNE_QUICK, script])
    assert proc.returncode == 0, proc.stderr
    rec = json.loads((out / "results.json").read_text())["recommendation"]
    assert rec["config"]["num_workers"] >= 2 and rec["speedup"] > 2


@pytest.mark.serial
def test_fit_under_a_mirrored_strategy_is_tuned_as_an_ordinary_script(tmp_path, no_leftovers, torch):
    pytest.importorskip("tensorflow")
    script = write_script(tmp_path, "train.py", mirrored())
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "70", "--max-workers", "16", *TUNE_QUICK, script],
                        env=QUIET_TF, timeout=400)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads((out / "results.json").read_text())["recommendation"]
    assert rec["framework"] == "tf.data" and rec["speedup"] > 2


def test_a_custom_loop_over_a_distributed_dataset_is_measured(tmp_path, no_leftovers, torch):
    pytest.importorskip("tensorflow")
    script = write_script(tmp_path, "train.py", mirrored(custom_loop=True))
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), *QUICK, script], env=QUIET_TF, timeout=300)
    assert proc.returncode == 0, proc.stderr
    s = json.loads((out / "run.json").read_text())["summary"]
    assert s["framework"] == "tf.data" and s["batches_measured"] >= 30
    assert s["data_wait_fraction"] > 0.5  # iterated in Python: the wait is measured (16 x 4 ms per batch)


PEER_ENDS = '''
import sys, time
from torch.utils.data import DataLoader
loader = DataLoader(range(100_000), batch_size=1)
for step, x in enumerate(loader):
    time.sleep(0.002)
    if step == int(sys.argv[1]):  # what a collective raises when another rank has ended first
        raise RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer")
'''


@pytest.mark.parametrize("raise_at, code, state", [(400, 0, "ok"), (5, 1, "failed")], ids=["after", "before"])
def test_a_rank_that_raises_after_its_window_keeps_it(tmp_path, raise_at, code, state):
    """One feedprof per task: each ends its own rank once every rank has its window, so a rank can
    see its peer gone mid-collective. After its window that error is no failure of the run's;
    before it, it is."""
    from feedprof.trial.protocol import Mode, TrialSpec

    script = write_script(tmp_path, "rank.py", PEER_ENDS)
    spec = TrialSpec(script=str(script), argv=[str(raise_at)], result_path=str(tmp_path / "result.json"),
                     events_path=str(tmp_path / "events.jsonl"), origin_s=0.0, window_batches=40,
                     window_seconds=0.05, min_window_batches=10, warmup_batches=2, mode=Mode.OBSERVE)
    (tmp_path / "spec.json").write_text(spec.to_json())
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    proc = subprocess.run([sys.executable, "-m", "feedprof.trial.child", str(tmp_path / "spec.json")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr[-2000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["outcome"]["state"] == state
    assert ("raised after its window was measured" in proc.stderr) == (code == 0)
