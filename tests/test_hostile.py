"""Hostile but ordinary scripts, against the real CLI (issue 24): other
worker start methods, paths in other alphabets and with spaces, output that
is not UTF-8, a low open-file limit. Each ends with the right exit code, no
feedprof traceback, and nothing left running."""
import json
import os
import subprocess
import sys

from tests.conftest import run_feedprof, write_script
from tests.scripts import torch_loop

TUNE_QUICK = ["--window-seconds", "0.6", "--min-window-batches", "20", "--warmup-batches", "2",
              "--interval", "0.1"]


def no_feedprof_traceback(stderr):
    return "feedprof/" not in stderr and "feedprof\\" not in stderr


def test_spawn_workers_are_tuned_measured_and_kept_in_the_advice(tmp_path, no_leftovers, torch):
    """A script's start method is illegal without workers: feedprof drops it for
    the ceiling and the num_workers=0 rung instead of losing them, measures the
    spawned workers, and keeps the start method in the paste line."""
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=10, step_ms=1, workers=1, n=160, epochs=2))
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "45", "--max-workers", "2", *TUNE_QUICK,
                         script, "--context", "spawn"])
    assert proc.returncode == 0, proc.stderr
    assert no_feedprof_traceback(proc.stderr)
    trials = json.loads((out / "results.json").read_text())["trials"]
    assert "can only be used with multi-process loading" not in proc.stdout + proc.stderr
    by_role = {t["role"]: t for t in trials}
    assert by_role["ceiling"]["state"] == "ok"
    zero = [t for t in trials if t["config"]["num_workers"] == 0]
    assert zero and all(t["state"] == "ok" for t in zero)
    two = [t for t in trials if t["config"]["num_workers"] == 2 and t["state"] == "ok"]
    assert two and two[0]["workers_cpu_pct"] and two[0]["peak_pss_bytes"]
    assert "--context spawn" in proc.stdout  # the advice runs the script as it was run


FORKSERVER = """
import multiprocessing
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 160

    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.zeros(4)


if __name__ == "__main__":
    multiprocessing.set_start_method("forkserver")  # Python 3.14's default on Linux
    for epoch in range(2):
        for x in DataLoader(Slow(), batch_size=2, num_workers=1):
            time.sleep(0.001)
"""


def test_forkserver_workers_are_measured(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", FORKSERVER)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "40", "--max-workers", "2", *TUNE_QUICK, script])
    assert proc.returncode == 0, proc.stderr
    assert no_feedprof_traceback(proc.stderr)
    trials = json.loads((out / "results.json").read_text())["trials"]
    two = [t for t in trials if t["config"]["num_workers"] == 2 and t["state"] == "ok"]
    assert two, [(t["config_text"], t["state"]) for t in trials]
    peaks = two[0]["run"]["samples"]["peaks"]
    assert peaks["n_workers"] == 2 and peaks["worker_pss_bytes"] and two[0]["workers_cpu_pct"]


HOSTILE_OUTPUT = '''
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

BAD_NAME = b"/data/\\xff\\xfeimg.jpg".decode("utf-8", "surrogateescape")


class Samples(Dataset):
    def __len__(self):
        return 120

    def __getitem__(self, i):
        time.sleep(0.01)
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers >= 3:
            os.write(2, b"worker cannot read \\xff\\xfe\\x80\\n")
            raise OSError("cannot read " + BAD_NAME)  # lone surrogates in the message
        return torch.zeros(4)


if __name__ == "__main__":
    os.write(1, b"bytes \\xff\\xfe\\x80 on stdout\\n")
    os.write(2, b"bytes \\xc3\\x28 on stderr\\n")
    print("a path:", BAD_NAME, file=sys.stderr)
    for epoch in range(2):
        for x in DataLoader(Samples(), batch_size=2, num_workers=0):
            time.sleep(0.001)
'''


def feedprof_bytes(args, cwd, env=None):
    """run_feedprof, the script's own bytes passed through as they are: decoded here with replacements."""
    proc = subprocess.run([sys.executable, "-m", "feedprof", *args], capture_output=True, timeout=240, cwd=cwd,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})})
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode("utf-8", "replace"),
                                       proc.stderr.decode("utf-8", "replace"))


def test_spaces_other_alphabets_and_bytes_that_are_not_utf8(tmp_path, no_leftovers, torch):
    where = tmp_path / "my data é日本"
    where.mkdir()
    script = write_script(where, "train ñ.py", HOSTILE_OUTPUT)
    out = where / "out ü"
    env = {"PYTHONIOENCODING": "ascii"}  # a terminal that shows none of it
    proc = feedprof_bytes(["profile", "--out", str(out / "p"), "--window-batches", "30",
                         "--warmup-batches", "2", "--interval", "0.1", script], cwd=str(where), env=env)
    assert proc.returncode == 0, proc.stderr
    assert no_feedprof_traceback(proc.stderr) and "train ?.py:" in proc.stdout
    proc = feedprof_bytes(["tune", "--out", str(out / "t"), "--budget", "40", "--max-workers", "4",
                         *TUNE_QUICK, script], cwd=str(where))
    assert proc.returncode == 0, proc.stderr
    assert no_feedprof_traceback(proc.stderr)
    result = json.loads((out / "t" / "results.json").read_text(encoding="utf-8"))
    failed = [t for t in result["trials"] if t["state"] == "failed"]
    assert failed and failed[0]["cause"]["error"].startswith("OSError: cannot read /data/")
    assert "\n" not in failed[0]["cause"]["error"]  # the worker's own last line; its traceback kept apart
    assert result["recommendation"] and "train ñ.py:" in proc.stdout  # the paste line's site
    assert "DataLoader(Samples(), batch_size=2, num_workers=2" in proc.stdout, proc.stdout
    report = run_feedprof(["report", str(out / "t" / "results.json"), "-o", str(out / "r é.html")])
    assert report.returncode == 0 and (out / "r é.html").exists()


def test_copy_on_read_is_projected_to_the_epoch_and_the_recommended_workers(tmp_path, no_leftovers, torch):
    from tests.test_cli_hazards import GROWS

    script = write_script(tmp_path, "train.py", GROWS)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "40", "--max-workers", "2",
                         "--window-seconds", "2", "--min-window-batches", "20", "--interval", "0.1", script])
    assert proc.returncode == 0, proc.stderr
    assert no_feedprof_traceback(proc.stderr)
    rec = json.loads((out / "results.json").read_text())["recommendation"]
    projected = [n for n in rec["reasons"] if n["code"] == "memory_growth_projected"]
    assert projected, rec["reasons"]
    assert projected[0]["workers"] == rec["config"]["num_workers"] >= 1
    assert projected[0]["worker_epoch_end_bytes"] > projected[0]["worker_now_bytes"]
    assert "copy-on-read" in proc.stdout and "by the end of an epoch" in proc.stdout
    assert "NumPy arrays" in proc.stdout


LOW_FD_LIMIT = '''
import resource
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Parts(Dataset):
    def __len__(self):
        return 2000

    def __getitem__(self, i):
        # the first batch is slow, so the other workers' batches queue up in the main process
        # (the loader hands batches out in order): every batch waiting there holds 8 descriptors
        time.sleep(0.1 if i < 8 else 0.004)
        return [torch.zeros(2) for _ in range(8)]  # a batch of 8 tensors: 8 descriptors


if __name__ == "__main__":
    # while the first batch loads, the other workers' prefetched batches wait in the main process:
    # 10 of them (80 descriptors) with 6 workers, 2 (16) with 2 workers, whatever the machine's
    # load (the first batch takes 0.8 s, the others 32 ms)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    for epoch in range(2):
        for batch in DataLoader(Parts(), batch_size=8, num_workers=6):
            time.sleep(0.001)
'''


def test_a_low_open_file_limit_is_named_and_a_config_that_works_recommended(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", LOW_FD_LIMIT)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "40", *TUNE_QUICK, script])
    assert proc.returncode == 0, proc.stderr
    assert no_feedprof_traceback(proc.stderr)
    result = json.loads((out / "results.json").read_text())
    baseline = next(t for t in result["trials"] if t["role"] == "baseline")
    assert baseline["state"] == "failed" and baseline["cause"]["code"] == "too_many_open_files"
    assert baseline["cause"]["limit_fds"] == 64
    rec = result["recommendation"]
    assert rec and 0 < rec["config"]["num_workers"] < 6
    said = proc.stdout + proc.stderr
    assert "too many open files with 6 workers" in said
    assert "ulimit -n" in said and "set_sharing_strategy('file_system')" in said
