"""When a trial of a multi-process job ends, on hand-written event files and a fake clock: once
every rank that reports to it has its window, wherever it runs; a rank still loading on another
node is waited for, not taken for dead."""
import json
import socket

import pytest

from fakes import FakeClock
from feedprof.trial.jobrunner import _JobWatch
from feedprof.trial.options import TrialOptions

ELSEWHERE = (f"{socket.gethostname()}-n1", f"{socket.gethostname()}-n2")  # nodes this machine is not


class Launcher:
    """srun, running on: it exits only when its tasks have (never, here)."""

    pid = 2 ** 22 + 11  # no such process: nothing of it to list or sample

    def poll(self):
        return None


def _say(trial_dir, rank, *events):
    with open(trial_dir / f"events-{rank}.jsonl", "a", encoding="utf-8") as fh:
        for ev in events:
            fh.write(json.dumps(ev) + "\n")


def _started(rank, launcher):
    return {"event": "started", "t_s": 0.1, "pid": 100 + rank, "rank": rank, "world_size": 2, "local_world_size": 1,
            "node": ELSEWHERE[rank], "launcher": launcher, "step_tasks": 2 if launcher == "slurm" else None,
            "self_sampled": True}


@pytest.mark.parametrize("launcher,waits", [("slurm", True), ("torchrun", False)])
def test_a_trial_waits_for_the_rank_still_loading_on_another_node(tmp_path, launcher, waits):
    clock = FakeClock()
    rank_launcher = "slurm" if launcher == "slurm" else "torchrun"
    _say(tmp_path, 0, _started(0, rank_launcher), {"event": "first_batch", "t_s": 2.0},
         {"event": "window_done", "t_s": 4.0})
    _say(tmp_path, 1, _started(1, rank_launcher))  # still importing, far away
    polls = []

    def on_poll():
        polls.append(clock.now_s())
        if len(polls) == 100:  # 5 s later (on the fake clock), rank 1 has its window too
            _say(tmp_path, 1, {"event": "first_batch", "t_s": 6.0}, {"event": "window_done", "t_s": 9.0})

    watch = _JobWatch(Launcher(), clock.now_s(), TrialOptions(timeout_s=60.0, gpu=False), str(tmp_path), on_poll,
                      clock, launcher=launcher)
    watch.wait()
    assert watch.timed_out is None and watch.window_done_at is not None
    assert watch.expected == (2 if waits else 1)
    assert (len(polls) >= 100) == waits  # srun's step: both ranks; torchrun's node: its own rank
    assert watch.rank_samplers == {}  # neither rank is this machine's to sample by its PID
