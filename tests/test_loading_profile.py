"""Where the loading code spends its time, end to end: feedprof profile of a loader whose stages are
known by construction (a storage wait, a CPU decode), at 0 workers and at 2, as a user runs it."""
import json

import pytest

from conftest import run_feedprof, write_script
from feedprof.record.loadprof import merge_profiles, read_profiles

STAGED = '''
import argparse, time
import torch
from torch.utils.data import DataLoader, Dataset

def spin(seconds):
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        sum(i * i for i in range(100))

def read_record(i):
    time.sleep(0.006)  # storage: waiting
    return i

def decode_record(raw):
    spin(0.002)  # CPU work
    return torch.full((8,), float(raw))

class Staged(Dataset):
    def __len__(self):
        return 100000
    def __getitem__(self, i):
        return decode_record(read_record(i))

p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=0)
args = p.parse_args()
for x in DataLoader(Staged(), batch_size=4, num_workers=args.workers):
    time.sleep(0.002)
'''


@pytest.mark.serial
@pytest.mark.parametrize("workers", [0, 2])
def test_each_stage_is_named_with_its_share_and_the_storage_wait_is_waiting(tmp_path, no_leftovers, workers):
    script = write_script(tmp_path, "staged.py", STAGED)
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), "--window-seconds", "4", script, "--workers", str(workers)],
                        timeout=180, env={"FEEDPROF_LOADPROF_INTERVAL_S": "0.02"})  # (enough samples in 4 s)
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    (profile,) = [p for p in run["loading"] if p["dataset"] == "Staged"]
    assert profile["in_main"] == (workers == 0) and profile["processes"] == max(1, workers)
    fn = {f["function"].split(":")[-1]: f for f in profile["functions"]}
    read, decode = fn["read_record"], fn["decode_record"]
    assert read["wall_s"] > decode["wall_s"]  # 6 ms against 2 ms a sample
    assert read["cpu_s"] + read["runq_s"] < 0.35 * read["wall_s"]  # waiting, not computing
    assert decode["cpu_s"] + decode["runq_s"] > 0.5 * decode["wall_s"]
    assert "function" in proc.stdout and "read_record" in proc.stdout and "batch time" in proc.stdout
    report = (out / "report.html").read_text()
    assert "Where the loading code spends its time" in report and "Where a batch's time goes" in report


CRASHED_BEFORE = '''
import os, sys, time
sys.path.insert(0, sys.argv[1])
from feedprof.frameworks import torch_fetch
from feedprof.record import loadprof
import torch
from torch.utils.data import DataLoader, Dataset

def squares(n):
    for i in range(n):
        yield i * i

class Busy(Dataset):  # generators, comprehensions and exceptions: frames come and go fast
    def __len__(self):
        return 10 ** 6
    def __getitem__(self, i):
        try:
            if i % 11 == 0:
                raise KeyError(i)
        except KeyError:
            pass
        return torch.tensor([sum(squares(50)) + sum([j for j in range(20)])])

loadprof.PROFILER.interval_s = 0.001  # 20 times the default rate
loadprof.PROFILER.configure(sys.argv[2], os.path.dirname(os.path.abspath(__file__)), os.getpid())
torch_fetch.install()
t0 = time.perf_counter()
while time.perf_counter() - t0 < float(sys.argv[3]):
    for n, _ in enumerate(DataLoader(Busy(), batch_size=8, num_workers=2)):
        if n > 3000 or time.perf_counter() - t0 > float(sys.argv[3]):
            break
print("done")
'''


@pytest.mark.serial
def test_sampling_the_workers_never_crashes_them(tmp_path, e2e):
    """Sampling at 1 kHz, for 20 s, a loader whose frames come and go fast. Reading the workers'
    frames from another thread (sys._current_frames) crashed one with SIGSEGV in every such run of
    40 s under Python 3.11; the loading thread reads its own, at a signal."""
    import os
    import subprocess
    import sys

    script = write_script(tmp_path, "busy.py", CRASHED_BEFORE)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, script, root, str(tmp_path), "20"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-3000:]
    (profile,) = [p for p in merge_profiles(read_profiles(str(tmp_path))) if p.dataset == "Busy"]
    assert profile.processes >= 2 and not profile.in_main and profile.sampled_s > 1
    assert any(line.function == "Busy.__getitem__" or "squares" in line.function for line in profile.lines)
