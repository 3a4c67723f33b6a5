"""A script that will not be stopped: its own SIGINT and SIGTERM handlers ignore
both (in its workers too), and it swallows every exception its loop raises,
feedprof's end-of-trial included. Its trials still end on time (feedprof ends
a trial with SIGKILL to its whole process group, never a signal it could
catch), and Ctrl-C or SIGTERM to feedprof still ends the tune promptly: exit
130, the trials measured kept, nothing left running. So does SIGHUP (a closed
terminal or SSH session; not under nohup, which ignores it)."""
import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import write_script

STUBBORN = '''
import signal, time
import torch
from torch.utils.data import DataLoader, Dataset


def ignore(signum, frame):
    print("ignored", signal.Signals(signum).name, flush=True)


def stubborn(worker_id):
    signal.signal(signal.SIGINT, ignore)
    signal.signal(signal.SIGTERM, ignore)


class Samples(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.zeros(4)


stubborn(None)
for epoch in range(1000):
    try:
        for batch in DataLoader(Samples(), batch_size=2, num_workers=2, worker_init_fn=stubborn):
            time.sleep(0.002)
    except BaseException as exc:  # feedprof's end of the trial included
        print("swallowed", type(exc).__name__, flush=True)
'''
TUNE = ["--budget", "120", "--window-seconds", "0.6", "--min-window-batches", "10", "--warmup-batches", "2",
        "--interval", "0.1", "--max-workers", "4", "--trial-timeout", "60"]


def _default_sigint():
    for signum in (signal.SIGINT, signal.SIGHUP):  # as from a terminal, not a background job's SIG_IGN
        signal.signal(signum, signal.SIG_DFL)


def _trials(path):
    try:
        return json.loads(path.read_text())["trials"]
    except (FileNotFoundError, ValueError, KeyError):
        return []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])  # SIGHUP: a closed terminal
def test_a_script_that_ignores_signals_still_ends(tmp_path, signum, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", STUBBORN)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "feedprof", "tune", "--out", str(out), *TUNE, script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    deadline = time.monotonic() + 240
    while len(_trials(out / "results.json")) < 3 or not list((out / "trials").glob("03-*/output.log")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "fewer than 3 trials in 240 s"
        time.sleep(0.1)
    time.sleep(0.5)  # the fourth trial is running
    proc.send_signal(signum)
    sent_s = time.monotonic()
    stdout, stderr = proc.communicate(timeout=120)
    took_s = time.monotonic() - sent_s
    assert proc.returncode == 130, stderr
    assert took_s < 30, f"feedprof took {took_s:.0f} s to stop"  # the reap and the report, not a trial's end
    assert "Traceback" not in stderr and "interrupted" in stderr
    res = json.loads((out / "results.json").read_text())
    assert res["stop_reason"]["code"] == "tune_interrupted"
    done = res["trials"][:3]
    # each ended by feedprof once measured, though it swallowed the end and ignored the signals: not a timeout
    assert [t["state"] for t in done] == ["ok", "ok", "ok"], [t.get("cause") for t in done]
    assert "swallowed" in (out / "trials" / "00-baseline" / "output.log").read_text()
