"""What more workers break, end to end: real scripts, real workers, real
signals, the real CLI. Each script is sleep-bound, so that what it measures
is unambiguous on a busy 2-core machine; each tune is short."""
import json
import resource
import subprocess
import sys

import pytest

from tests.conftest import feedprof_args, run_feedprof, write_script

pytestmark = pytest.mark.usefixtures("torch")  # every script here is a torch one

QUICK = ["--window-seconds", "0.6", "--min-window-batches", "20", "--warmup-batches", "2", "--interval", "0.1",
         "--quiet"]


def tune(tmp_path, script, *extra, preexec_fn=None):
    out = tmp_path / "out"
    args = feedprof_args(["tune"], script, "--out", str(out), *QUICK, *extra)
    if preexec_fn is None:
        proc = run_feedprof(args, timeout=300)
    else:
        proc = subprocess.run([sys.executable, "-m", "feedprof", *args], capture_output=True, text=True,
                              timeout=300, preexec_fn=preexec_fn)
    path = out / "results.json"
    return proc, (json.loads(path.read_text()) if path.exists() else None)


def workers(trial):
    return trial["config"].get("num_workers") or 0


def nothing_tried_past_a_kill(trials):
    """After a config with N workers was killed, no later trial had N or more; a
    config that failed or was rejected was not tried again."""
    for i, bad in enumerate(trials):
        later = trials[i + 1:]
        if bad["state"] == "killed" and workers(bad):
            assert all(workers(t) < workers(bad) for t in later), (bad, later)
        if bad["state"] in ("killed", "failed", "rejected"):
            assert all(t["config"] != bad["config"] for t in later), (bad, later)


# ------------------------------------------------ duplicated records

STREAM = '''
import itertools, time, torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        ids = range(self.n)
        info = get_worker_info() if {shard} else None  # the duplicating one never asks
        if info is not None:
            ids = itertools.islice(ids, info.id, None, info.num_workers)
        for i in ids:
            time.sleep(0.005)  # reading a record
            yield torch.tensor([float(i), 2.0 * i])


if __name__ == "__main__":
    for epoch in range(100):
        for batch in DataLoader(Stream(400), batch_size=4):
            time.sleep(0.002)
'''


def test_an_iterable_dataset_that_ignores_the_worker_is_never_a_speedup(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", STREAM.format(shard=False))
    proc, res = tune(tmp_path, script, "--budget", "40", "--max-workers", "8")
    assert proc.returncode == 0, proc.stderr
    rec = res["recommendation"]
    assert workers(rec) <= 1 and rec["verdict"]["kind"] == "duplicates"
    dup = next(r for r in rec["reasons"] if r["code"] == "workers_capped")["because"]
    assert dup["code"] == "duplicated_per_worker" and dup["dataset"] == "Stream"
    assert dup["distinct_batches"] <= dup["batches_checked"] // 2 and dup["worker_info_asked"] is False
    assert max(workers(t) for t in res["trials"]) == 2  # seen at the first rung with workers: no more tried
    assert "repeats every record once per worker" in proc.stdout and "× faster" not in proc.stdout
    assert "info.id, None, info.num_workers" in proc.stdout  # the fix, in words
    assert "repeats data" in (tmp_path / "out" / "report.html").read_text()


@pytest.mark.serial
def test_an_iterable_dataset_sharded_by_worker_tunes_normally(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", STREAM.format(shard=True))
    proc, res = tune(tmp_path, script, "--budget", "40", "--max-workers", "8")
    assert proc.returncode == 0, proc.stderr
    rec = res["recommendation"]
    assert workers(rec) >= 2 and rec["verdict"]["kind"] == "faster"  # sleep-bound: workers scale
    assert not [r for r in rec["reasons"] if r["code"] in ("workers_capped", "worker_info_never_asked")]


# ------------------------------------------------ workers killed by the kernel

KILLED_PAST_3 = '''
import os, signal, time, torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Frames(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        info = get_worker_info()
        if info is not None and info.num_workers >= 4 and i % 5 == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does, past what the RAM holds
        time.sleep(0.005)
        return torch.zeros(4)


if __name__ == "__main__":
    for epoch in range(100):
        for batch in DataLoader(Frames(), batch_size=4, shuffle=True, num_workers=6):
            time.sleep(0.002)
'''


def test_the_scripts_own_workers_killed_the_tune_learns_the_limit(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", KILLED_PAST_3)
    proc, res = tune(tmp_path, script, "--budget", "60", "--max-workers", "8", "--trial-timeout", "45")
    assert proc.returncode == 0, proc.stderr
    trials = res["trials"]
    base = trials[0]
    assert base["state"] == "killed" and base["cause"]["code"] == "oom_killed"
    assert base["cause"]["signal"] == "SIGKILL" and base["cause"]["ram_bytes"] > 0
    nothing_tried_past_a_kill(trials)
    rec = res["recommendation"]
    assert 1 <= workers(rec) <= 3 and rec["verdict"]["kind"] == "survives"  # the best that survived
    assert "were killed" in proc.stdout and "out-of-memory killer" in proc.stdout
    assert "no config with 4 or more workers" in proc.stdout  # the limit it learned: killed at 4
    assert any(workers(t) == 3 and t["state"] == "ok" for t in trials)  # found by bisecting below the kill


# ------------------------------------------------ open files

def test_configs_past_the_open_file_limit_are_rejected_or_named(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", KILLED_PAST_3.replace("info.num_workers >= 4", "False")
                          .replace("num_workers=6", "num_workers=0"))

    def few_files():  # the limit every trial inherits; ~5 descriptors per worker in the main process
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    proc, res = tune(tmp_path, script, "--budget", "50", "--max-workers", "16", preexec_fn=few_files)
    assert proc.returncode == 0, proc.stderr
    trials = res["trials"]
    hit = [t for t in trials if t["cause"] and t["cause"]["code"] in ("over_fd_limit", "too_many_open_files")]
    assert hit, [(t["config"], t["state"]) for t in trials]
    for t in hit:
        cause = t["cause"]
        assert cause.get("limit_fds") == 48 and (cause.get("need_fds") or cause.get("main_fds"))
    nothing_tried_past_a_kill(trials)
    rec = res["recommendation"]  # below the worker counts that hit the limit (a deeper prefetch may hit it sooner)
    assert workers(rec) < max(workers(t) for t in hit) and rec["config"] not in [t["config"] for t in hit]
    assert workers(rec) < min((workers(t) for t in hit if t["phase"] == "ladder"), default=99)
    assert "open files" in proc.stdout and "48" in proc.stdout


# ------------------------------------------------ memory that grows

GROWS = '''
import random, time, torch
from torch.utils.data import DataLoader, Dataset


class Lookup(Dataset):
    """Records as Python objects: a worker reading one writes its reference count."""

    def __init__(self, n):
        self.rows = [[float(i), float(-i)] for i in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        time.sleep(0.002)
        rnd = random.Random(i)
        return torch.tensor([sum(self.rows[rnd.randrange(len(self.rows))][0] for _ in range(20))])


if __name__ == "__main__":
    data = Lookup(1_000_000)  # ~120 MB of small lists, shared with the workers until they touch them
    for epoch in range(5):
        for batch in DataLoader(data, batch_size=8, shuffle=True, num_workers=2):
            time.sleep(0.002)
'''


@pytest.mark.serial
def test_workers_that_copy_their_dataset_are_seen_growing(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", GROWS)
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), "--window-seconds", "3", "--window-batches", "5000",
                         "--interval", "0.1", script])
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    grows = [n for n in run["summary"]["notes"] if n["code"] == "memory_grows"]
    assert grows, run["samples"]["worker_uss_bytes"]
    assert grows[0]["growth_bytes_per_s"] > 2**20 and grows[0]["uss_end_bytes"] > grows[0]["uss_start_bytes"]
    assert "copy-on-read" in proc.stdout and "NumPy arrays" in proc.stdout


# ------------------------------------------------ CUDA in a forked worker

CUDA_IN_WORKER = '''
import time, torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class OnGpu(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        if get_worker_info() is not None:  # what torch.cuda says to a forked worker
            raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
                               "multiprocessing, you must use the 'spawn' start method")
        time.sleep(0.004)
        return torch.zeros(4)


if __name__ == "__main__":
    for epoch in range(100):
        for batch in DataLoader(OnGpu(), batch_size=4, num_workers={workers}):
            time.sleep(0.002)
'''


def test_cuda_in_a_forked_worker_of_the_scripts_own_loader(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", CUDA_IN_WORKER.format(workers=2))
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), "--window-batches", "40", "--interval", "0.1", script])
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "Cannot re-initialize CUDA in forked subprocess" in last and 'multiprocessing_context="spawn"' in last
    assert json.loads((out / "run.json").read_text())["outcome"]["cause"]["code"] == "cuda_in_forked_worker"


def test_cuda_in_forked_workers_that_feedprof_adds(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", CUDA_IN_WORKER.format(workers=0))
    proc, res = tune(tmp_path, script, "--budget", "40", "--max-workers", "4")
    assert proc.returncode == 0, proc.stderr
    failed = [t for t in res["trials"] if workers(t)]
    assert failed and all(t["state"] == "failed" and t["cause"]["code"] == "cuda_in_forked_worker" for t in failed)
    assert workers(res["recommendation"]) == 0
    assert 'multiprocessing_context="spawn"' in proc.stdout
