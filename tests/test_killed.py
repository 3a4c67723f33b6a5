"""feedprof itself killed (kill -9, the OOM killer, a closed SSH session): it
cannot clean up, so what it started must end by itself (trial/lifeline.py):
the trial, its loader workers, the fork server and a launcher with its ranks,
within seconds. The script's loading hangs before the kill, so nothing would
end on its own."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import leftover_trial_processes, write_script

# Loads a batch in 20 ms; hangs (workers and main process alike) once HANG exists.
HANGING = '''
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

HANG = {hang!r}


class Samples(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(0.02)
        while os.path.exists(HANG):
            time.sleep(0.1)
        return torch.zeros(4)


for epoch in range(1000):
    for x in DataLoader(Samples(), batch_size=2, num_workers=2):
        time.sleep(0.002)
'''
TUNE = ["--budget", "120", "--window-seconds", "1", "--min-window-batches", "10", "--warmup-batches", "2",
        "--interval", "0.1", "--quiet", "--max-workers", "4"]


def _cmd(p):
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _busy(p):
    """A process with loader workers under it."""
    try:
        return len(p.children()) >= 2
    except psutil.Error:
        return False


def _moment_reached(feedprof, moment):
    below = feedprof.children(recursive=True)
    servers = [p for p in below if "feedprof.trial.zygote" in _cmd(p) and p.ppid() == feedprof.pid]
    forks = [p for s in servers for p in s.children()]
    if moment == "baseline":
        return any("feedprof.trial.child" in _cmd(p) and _busy(p) for p in below)
    if moment == "forked trial":
        return any(_busy(p) for p in forks)
    if moment == "fork server idle":
        return bool(servers) and not forks
    if moment == "torchrun job":
        ranks = [p for p in below if "slow.py" in _cmd(p) and "torch.distributed.run" not in _cmd(p)]
        return sum(1 for p in ranks if _busy(p)) >= 2
    raise AssertionError(moment)


@pytest.mark.parametrize("moment", ["baseline", "forked trial", "fork server idle", "torchrun job"])
def test_nothing_outlives_feedprof_killed(tmp_path, moment, no_leftovers, torch):
    hang = str(tmp_path / "hang")
    script = write_script(tmp_path, "slow.py", HANGING.format(hang=hang))
    what = [script] if moment != "torchrun job" else \
        ["--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", script]
    proc = subprocess.Popen([sys.executable, "-m", "feedprof", "tune", "--out", str(tmp_path / "out"), *TUNE,
                             *what], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        feedprof = psutil.Process(proc.pid)
        deadline = time.monotonic() + 180
        while not _moment_reached(feedprof, moment):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, f"never reached: {moment}"
            time.sleep(0.02)
        if moment != "fork server idle":
            open(hang, "w").close()  # from here on the trial would run for ever
            time.sleep(0.5)
        assert leftover_trial_processes(os.environ["FEEDPROF_TEST_ID"]), "nothing was running to be left"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    deadline = time.monotonic() + 15
    while leftover_trial_processes(os.environ["FEEDPROF_TEST_ID"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = leftover_trial_processes(os.environ["FEEDPROF_TEST_ID"])
    for pid, _ in left:  # not to leave them hanging for the rest of the suite
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert left == []
