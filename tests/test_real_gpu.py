"""The real-GPU twins of the suite's fakes: what feedprof does with a CUDA job on a
real NVIDIA GPU. Elsewhere the GPU is faked (tests/fakes.py fake_pynvml, the
tests/fake_nvml module, training steps that sleep); here nothing is. Every test
skips where there is no GPU (the development machine, CI) and runs on a lent one:

    python -m pytest tests/test_real_gpu.py tests/test_gpu.py -m gpu

Fake -> twin: the fake NVML's readings (test_faults, test_figures) -> a profile of a
CUDA job; test_gpus' fake process table -> a real orphan holding CUDA memory; the
CPU-only seeded online runs (test_online) -> the same script with its model on CUDA
and batches moved there; the tune's pin_memory rule (test_space) -> a tune that
tries it because the script moved batches to CUDA."""
import json
import re
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from conftest import run_feedprof, write_script
from online_runs import as_written, online, saw
from scripts_online import SEEDED

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda(torch):
    if not shutil.which("nvidia-smi") or not torch.cuda.is_available():
        pytest.skip("no NVIDIA GPU on this machine")


def test_profile_of_a_cuda_job_reads_the_real_gpu_and_times_the_wait(tmp_path, cuda, no_leftovers):
    script = write_script(tmp_path, "train.py", SEEDED)
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), "--interval", "0.1", script,
                         "--report", str(tmp_path / "r.json"), "--cuda", "--fetch-ms", "5", "--epochs", "2"],
                        timeout=240)
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["cuda_used"] is True
    gpu = run["host"]["gpus"][0]
    assert gpu["name"] != "Fake GPU (tests)" and gpu["uuid"].startswith("GPU-")
    util = [v for v in run["samples"]["gpus"][0]["util_pct"] if v is not None]
    assert len(util) >= 5 and all(0 <= v <= 100 for v in util)
    assert run["summary"]["data_wait_fraction"] > 0.7  # 5 ms a sample, a step of microseconds: it waits


def test_online_on_a_cuda_job_keeps_the_samples_their_order_and_the_weights(tmp_path, cuda, no_leftovers):
    script = write_script(tmp_path, "train.py", SEEDED)
    args = ("--cuda", "--epochs", "4", "--fetch-ms", "4")
    plain, want = as_written(script, tmp_path / "plain.json", *args)
    assert plain.returncode == 0, plain.stderr
    proc, got, results = online(tmp_path, script, tmp_path / "online.json", *args)
    assert proc.returncode == 0, proc.stderr
    assert saw(got) == saw(want)
    checks = results["online"]["order_checks"]
    assert checks and all(c["same"] for c in checks)
    assert results["recommendation"]["config"]["num_workers"] >= 2


# A job whose loader worker (named as torch names its workers) holds 1 GiB of CUDA memory.
CUDA_WORKER = ("import ctypes, time, torch; ctypes.CDLL(None).prctl(15, b'pt_data_worker', 0, 0, 0); "
               "x = torch.ones(256, 1024, 1024, device='cuda'); print('ready', flush=True); time.sleep(120)")
CUDA_HOLDER = ("import subprocess, sys, time\n"
               f"p = subprocess.Popen([sys.executable, '-c', {CUDA_WORKER!r}], stdout=subprocess.PIPE, text=True)\n"
               "print(p.pid, p.stdout.readline().strip(), flush=True)\n"
               "time.sleep(120)\n")


def test_gpus_names_a_real_orphan_that_holds_cuda_memory(cuda, e2e):
    """A job (its own session) starts a loader worker that allocates 1 GiB on the GPU; the job
    is killed. `feedprof gpus` must find the worker through NVML and say its parent is gone.
    (A program of its own adopted by init is not flagged: it may be a job started that way.)"""
    job = subprocess.Popen([sys.executable, "-c", CUDA_HOLDER], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    pid = 0
    try:
        pid_text, ready = job.stdout.readline().split()
        pid = int(pid_text)
        assert ready == "ready"
        job.kill()
        job.wait()
        deadline = time.monotonic() + 30
        while True:
            proc = run_feedprof(["gpus"], timeout=60)
            if re.search(rf"^!\s+{pid}\s", proc.stdout, re.M) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert proc.returncode == 0, proc.stderr
        assert re.search(rf"^!\s+{pid}\s", proc.stdout, re.M), proc.stdout
        assert f"PID {pid} holds" in proc.stdout and "its parent is gone" in proc.stdout
        assert psutil.pid_exists(pid)  # named, never ended by feedprof
    finally:
        job.kill()
        job.wait()
        job.stdout.close()
        if pid:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass


def test_a_tune_of_a_job_that_moves_batches_to_cuda_tries_pin_memory(tmp_path, cuda, no_leftovers):
    script = write_script(tmp_path, "train.py", SEEDED)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "90", script,
                         "--report", str(tmp_path / "r.json"), "--cuda", "--epochs", "40", "--fetch-ms", "2"],
                        timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["trials"][0]["run"]["cuda_used"] is True
    assert any(t["config"].get("pin_memory") for t in results["trials"]), [t["config"] for t in results["trials"]]
    assert "pin_memory has no effect" not in proc.stdout + proc.stderr


def test_a_profile_of_a_cuda_job_says_where_its_batch_time_and_loading_time_go(tmp_path, cuda, no_leftovers):
    """Beyond the knobs on a real GPU: the run's batch time split into its parts (the step alone, at
    0 workers), and the loading code's time by the dataset's own function (it waits: a sleep)."""
    script = write_script(tmp_path, "train.py", SEEDED)
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), script,
                         "--report", str(tmp_path / "r.json"), "--cuda", "--fetch-ms", "5", "--epochs", "2"],
                        timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "batch time" in proc.stdout and "loading" in proc.stdout
    run = json.loads((out / "run.json").read_text())
    profile = run["loading"][0]
    assert profile["in_main"] and profile["calls"] > 0
    top = profile["functions"][0]
    assert top["cpu_s"] < 0.5 * top["wall_s"]  # the dataset's fetch sleeps: waiting, not computing
