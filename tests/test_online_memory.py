"""An online run's memory budget (--max-memory) is held to what the job's own processes take:
a config whose workers take too much is left, and memory another program takes meanwhile is
no failure of the config in force. Real runs; the loading sleeps, so the verdicts do not
depend on the machine's speed."""
import json
import subprocess
import sys
import time

import pytest

from tests.conftest import run_feedprof, write_script

MIB = 1 << 20

IO_BOUND = """
import argparse, os, time
import torch
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=40)
p.add_argument("--worker-mib", type=int, default=0)  # what each worker holds of its own
args = p.parse_args()


class Storage(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.zeros(8)


held = []


def hold(worker_id):
    held.append(bytearray(os.urandom(1 << 20)) * args.worker_mib)  # every page written: the worker's own


loader = DataLoader(Storage(), batch_size=8, num_workers=0, worker_init_fn=hold if args.worker_mib else None)
for epoch in range(args.epochs):
    for x in loader:
        time.sleep(0.002)
"""

HOG = """
import os, sys, time
held = bytearray(os.urandom(1 << 20)) * int(sys.argv[1])
print("holding", flush=True)
time.sleep(600)
"""


def _results(out):
    return json.loads((out / "results.json").read_text())


@pytest.mark.serial
def test_workers_that_take_more_than_the_budget_are_left_for_fewer(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", IO_BOUND)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--online", "--max-memory", "900M", "--out", str(out), script,
                         "--worker-mib", "80"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    online = _results(out)["online"]
    memory = [f for f in online["failures"] if f["kind"] == "memory"]
    assert memory, online["failures"]
    assert memory[0]["taken_bytes"] > memory[0]["budget_bytes"] == 900 * MIB
    rec = _results(out)["recommendation"]
    assert 0 < rec["config"]["num_workers"] < memory[0]["config"]["num_workers"], rec["config"]
    assert "the job's memory passed the budget" in proc.stderr


@pytest.mark.serial
def test_memory_another_program_takes_meanwhile_is_no_failure_of_the_config(tmp_path, no_leftovers, torch):
    """Once the run has switched to workers, another program takes more than the whole budget;
    the job's own processes stay well within it: the search goes on, nothing is left for memory."""
    script = write_script(tmp_path, "train.py", IO_BOUND)
    out = tmp_path / "out"
    said = tmp_path / "said.txt"  # (a file: a pipe nobody reads while the test waits could block it)
    tune = subprocess.Popen([sys.executable, "-m", "feedprof", "tune", "--online", "--max-memory", "1500M",
                             "--out", str(out), script], stdout=subprocess.DEVNULL, stderr=open(said, "w"), text=True)
    hog = None
    try:
        deadline = time.monotonic() + 120
        decision = out / "run" / "decision.json"
        while time.monotonic() < deadline and tune.poll() is None:
            if decision.exists() and json.loads(decision.read_text() or "{}").get("config", {}).get("num_workers"):
                break
            time.sleep(0.2)
        hog = subprocess.Popen([sys.executable, "-c", HOG, "2048"], stdout=subprocess.PIPE, text=True)
        assert hog.stdout.readline().strip() == "holding"
        assert tune.poll() is None  # the run goes on beside the memory taken
        tune.wait(timeout=300)
        err = said.read_text()
    finally:
        for p in (hog, tune):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert tune.returncode == 0, err
    online = _results(out)["online"]
    assert [f for f in online["failures"] if f["kind"] == "memory"] == []
    assert _results(out)["recommendation"]["config"]["num_workers"] > 0
    assert "memory passed the budget" not in err


def test_the_job_is_read_now_and_then_while_the_machine_has_memory_free(tmp_path, monkeypatch):
    """Another program may free memory while the job grows: the machine's free memory then shows
    no loss, yet the job passes its budget. The job is read once per config in force and every
    JOB_MEMORY_IDLE_EVERY_S after (not every poll): a job over the budget is left for fewer workers."""
    import psutil

    from feedprof.record import tree_memory
    from feedprof.store.online import OnlineSwitch
    from feedprof.tune import online
    from feedprof.tune.online_memory import JOB_MEMORY_IDLE_EVERY_S, JobMemory
    from tests.fakes import FakeClock
    from tests.test_online_strategy import LIMITS, io_bound_baseline, window, with_workers

    class Free:  # the machine has lost nothing since the start
        available = 8 << 30

    readings, held = [], {"bytes": 50 * MIB}
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Free())
    monkeypatch.setattr(tree_memory, "tree_bytes", lambda roots: readings.append(roots) or held["bytes"])
    h = io_bound_baseline()
    four, eight = with_workers(h.baseline, 4), with_workers(h.baseline, 8)
    h.windows += [window(four, 80, 0.5, t=2), window(four, 82, 0.5, t=3)]
    clock, steps = FakeClock(), []
    decider = online.Decider(trial_dir=str(tmp_path), limits=LIMITS, opts=online.OnlineOptions(), clock=clock,
                             history=h, current=eight, final=True,
                             memory=JobMemory(budget_bytes=100 * MIB, available0_bytes=Free.available),
                             on_decision=lambda step, t_s, fw: steps.append(step))
    decider.local_pids = {0: 1}
    decider.switches.append(OnlineSwitch(rank=0, t_s=4.0, config=eight, why="settled"))
    for _ in range(10):  # 10 polls, a second apart, under the budget: one reading
        decider.poll()
        clock.t += 1.0
    assert len(readings) == 1 and steps == []
    held["bytes"] = 300 * MIB  # the job grew; the machine still shows nothing lost
    for _ in range(int(JOB_MEMORY_IDLE_EVERY_S) + 1):
        decider.poll()
        clock.t += 1.0
    assert len(readings) == 2
    assert [(s.config, s.why) for s in steps] == [(four, "retreat_memory")]
    (failure,) = decider.history.failures
    assert failure.kind == "memory" and failure.taken_bytes == 300 * MIB
