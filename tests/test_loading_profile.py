"""Where the loading code spends its time, end to end: feedprof profile of a loader whose stages are
known by construction (a storage wait, a CPU decode), at 0 workers and at 2, as a user runs it."""
import json

import pytest

from conftest import run_feedprof, write_script

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


@pytest.mark.parametrize("workers", [0, 2])
def test_each_stage_is_named_with_its_share_and_the_storage_wait_is_waiting(tmp_path, no_leftovers, workers):
    script = write_script(tmp_path, "staged.py", STAGED)
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), "--window-seconds", "4", script, "--workers", str(workers)],
                        timeout=180)
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
