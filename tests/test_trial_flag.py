"""FEEDPROF_TRIAL: "1" in every process of a run that feedprof ends early (each
offline tune trial, `feedprof profile`), never in one that runs to its own end
(`profile --full`, `tune --online`); so a script can skip its side effects in
runs cut short. Real runs of a script that notes what each of its processes sees."""
import json
import os

import pytest

from feedprof.trial.options import TRIAL_FLAG_ENV, TrialOptions
from tests.conftest import run_feedprof, write_script

# Every process notes what it sees: the main process once, each loader worker as it starts.
NOTES = '''
import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

RECORD = None


def note(who):
    with open(RECORD, "a") as fh:
        fh.write(f"{who} {os.getpid()} {os.environ.get('FEEDPROF_TRIAL')!r}\\n")


class Samples(Dataset):
    def __len__(self):
        return 200

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.zeros(4)


def main():
    global RECORD
    parser = argparse.ArgumentParser()
    parser.add_argument("--record")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    RECORD = args.record
    note("main")
    train = DataLoader(Samples(), batch_size=2, num_workers=1, worker_init_fn=lambda _: note("worker"))
    for _ in range(args.epochs):
        for batch in train:
            time.sleep(0.001)


if __name__ == "__main__":
    main()
'''

QUICK = ["--window-batches", "30", "--warmup-batches", "2", "--interval", "0.1"]
TUNE_QUICK = ["--window-seconds", "0.5", "--min-window-batches", "20", "--warmup-batches", "2", "--interval", "0.1",
              "--quiet"]


def noted(path):
    """(who, pid, what FEEDPROF_TRIAL was) for every line the script's processes wrote."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [(who, int(pid), eval(value)) for who, pid, value in (line.split(" ", 2) for line in lines)]


def test_the_name_is_the_documented_one():
    assert TRIAL_FLAG_ENV == "FEEDPROF_TRIAL"
    assert TrialOptions().script_env() == {"FEEDPROF_TRIAL": "1"}
    assert TrialOptions(full=True, extra_env={"A": "b"}).script_env() == {"A": "b"}


@pytest.mark.parametrize("command,flag", [
    (["tune", "--budget", "40", "--max-workers", "2", *TUNE_QUICK], "1"),  # trials, forked from the fork server
    (["profile", *QUICK], "1"),  # ended once its window is measured
    (["profile", "--full", *QUICK], None),  # runs to its own end
    (["tune", "--online"], None),  # the real run, to its own end
], ids=["tune", "profile", "profile --full", "tune --online"])
def test_every_process_of_a_run_cut_short_sees_it_and_no_other_does(tmp_path, no_leftovers, torch, command, flag):
    script = write_script(tmp_path, "train.py", NOTES)
    record = tmp_path / "noted.txt"
    assert TRIAL_FLAG_ENV not in os.environ  # what the runs see is feedprof's doing
    proc = run_feedprof([*command, "--out", str(tmp_path / "out"), script, "--record", str(record)], timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = noted(record)
    assert {who for who, _, _ in seen} == {"main", "worker"}, seen
    assert all(value == flag for _, _, value in seen), seen
    if command[0] == "tune" and "--online" not in command:
        results = json.loads((tmp_path / "out" / "results.json").read_text())
        ran = [t for t in results["trials"] if t["state"] != "rejected"]
        mains = [pid for who, pid, _ in seen if who == "main"]
        assert len(ran) >= 2 and len(mains) == len(ran), (ran, seen)  # one main process per trial, each told
