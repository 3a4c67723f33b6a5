"""feedprof attach PID: a job started by hand, read from outside, left running (trial/attach.py).
Unit tests read py-spy's raw lines and hand-built stacks; the end-to-end ones attach to real loops
(tests/scripts_attach.py) and check the wait against the loop's own stopwatch."""
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import run_feedprof, write_script
from scripts_attach import LOOP
from feedprof.record.pyspy import ThreadStacks, find_pyspy, parse_line, read_raw
from feedprof.trial import attached_stacks as st
from feedprof.trial.attach import predicted_workers

TORCH = "/x/site-packages/torch/utils/data/dataloader.py"


def line_of(text):
    """The line of LOOP (as written to train.py) holding ``text``."""
    return next(i for i, line in enumerate(LOOP.lstrip("\n").splitlines(), 1) if text in line)


READ_AT, STUCK_AT = line_of("time.sleep(0.004)"), line_of("never released")
WORKER = "/x/site-packages/torch/utils/data/_utils/worker.py"
FETCH = "/x/site-packages/torch/utils/data/_utils/fetch.py"


def _stacks(pid, tid, parents=(), **stacks):
    t = ThreadStacks(pid=pid, tid=tid, name="MainThread", parents=parents, command="python train.py")
    for frames, counts in stacks.values():
        t.stacks[frames] = list(counts)
    return t


def test_a_raw_line_is_its_processes_thread_frames_and_count():
    line = ('process 10:"python train.py";process 11:"python train.py";thread (11): MainThread;'
            '<module> (/job/train.py:9);_worker_loop (/x/torch/utils/data/_utils/worker.py:300) 42')
    pids, command, tid, name, frames, n = parse_line(line)
    assert pids == (10, 11) and command == "python train.py" and tid == 11 and name == "MainThread" and n == 42
    assert frames == (("<module>", "/job/train.py", 9), ("_worker_loop", "/x/torch/utils/data/_utils/worker.py", 300))
    assert parse_line("py-spy> Wrote raw flamegraph data") is None
    threads = {}
    read_raw(line + "\n", threads, active=False)
    read_raw(line.replace(" 42", " 40") + "\n", threads, active=True)
    t = threads[(11, 11)]
    assert t.parents == (10,) and t.samples == 42 and t.active == 40
    # a thread py-spy has no name for, in a process whose command line holds newlines (python -c)
    read_raw('process 12:"python -c import time\nwhile True:\n    time.sleep(1)";thread (12);<module> (<string>:3) 7\n',
             threads, active=False)
    assert threads[(12, 12)].samples == 7 and threads[(12, 12)].name == "" and "\nwhile True" in threads[(12, 12)].command


def test_the_wait_is_the_training_threads_share_inside_next_with_its_noise():
    user = st.UserFiles(["/job"])
    loop = ("<module>", "/job/train.py", 30)
    waiting = (loop, ("_BaseDataLoaderIter.__next__", TORCH, 700), ("get", "/x/multiprocessing/queues.py", 100))
    stepping = (loop, ("step", "/job/train.py", 12))
    training = _stacks(10, 10, a=(waiting, (90, 0)), b=(stepping, (10, 10)))
    share, noise = st.wait_share(training)
    assert share == pytest.approx(0.9) and noise == pytest.approx((0.9 * 0.1 / 100) ** 0.5)
    assert [(x.site, x.function) for x in st.rest_of(training, user, 0.02)] == [("train.py:12", "step")]
    worker = _stacks(11, 11, parents=(10,), a=((loop, ("_worker_loop", WORKER, 300), ("fetch", FETCH, 50)), (1, 0)),
                     b=((loop, ("_worker_loop", WORKER, 300), ("_MapDatasetFetcher.fetch", FETCH, 52),
                         ("__getitem__", "/job/data.py", 7), ("sleep", "/x/lib/python3.11/time.py", 1)), (80, 8)))
    assert st.workers_of([training, worker], 10) == [worker]
    profile = st.loading_of([worker], training, user, 0.02)
    line = profile.lines[0]
    assert (line.site, line.function) == ("data.py:7", "__getitem__") and line.cpu_s == pytest.approx(0.16)
    assert st.advanced(training, [worker]) is True


def test_a_loop_stuck_on_a_workers_lock_is_said_with_where_each_waits():
    user = st.UserFiles(["/job"])
    loop = ("<module>", "/job/train.py", 30)
    training = _stacks(10, 10, a=((loop, ("_BaseDataLoaderIter.__next__", TORCH, 700)), (500, 0)))
    stuck = _stacks(11, 11, parents=(10,), a=((loop, ("_worker_loop", WORKER, 300), ("_MapDatasetFetcher.fetch", FETCH, 5),
                                               ("Samples.__getitem__", "/job/train.py", 37)), (500, 0)))
    idle = _stacks(12, 12, parents=(10,), a=((loop, ("_worker_loop", WORKER, 290)), (500, 0)))
    assert st.advanced(training, [stuck, idle]) is False
    waits = st.waits_of(training, [stuck, idle], user)
    assert [(w.role, w.site, w.active, w.worker_id) for w in waits] == [
        ("training", "train.py:30", False, None), ("worker", "train.py:37", False, 0), ("worker", "train.py:30", False, 1)]


def test_the_advice_is_the_count_the_wait_predicts():
    assert predicted_workers(0, 0.9) >= 10 and predicted_workers(2, 0.9) > predicted_workers(0, 0.9)
    assert predicted_workers(0, 0.1) >= 2


# ------------------------------------------------------------------ end to end

pytestmark_pyspy = pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed")


def _start(tmp_path, *args, seconds=90, lines=3):
    script = write_script(tmp_path, "train.py", LOOP)
    clock = tmp_path / "clock.jsonl"
    proc = subprocess.Popen([sys.executable, script, "--clock", str(clock), "--seconds", str(seconds), *args],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (clock.exists() and clock.read_text().count("\n") >= lines) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.2)
    return proc, clock


def _clock_at(clock, t):
    """The loop's stopwatch at wall time ``t``: its last line before it."""
    lines = [json.loads(x) for x in clock.read_text().splitlines()]
    return max((x for x in lines if x["t"] <= t), key=lambda x: x["t"])


def _stop(proc):
    proc.kill()
    proc.wait()


@pytestmark_pyspy
def test_an_io_bound_loop_s_wait_agrees_with_its_own_stopwatch(tmp_path, e2e):
    proc, clock = _start(tmp_path)
    try:
        t0 = time.time()
        out = run_feedprof(["attach", "--duration", "8", "--out", str(tmp_path / "out"), str(proc.pid)], timeout=120)
        t1 = time.time()
        assert out.returncode == 0, out.stderr
        assert proc.poll() is None  # the job goes on
        a, b = _clock_at(clock, t0), _clock_at(clock, t1)
        own = (b["wait_s"] - a["wait_s"]) / (b["wall_s"] - a["wall_s"])
        run = json.loads((tmp_path / "out" / "run.json").read_text())
        assert run["kind"] == "attached" and run["attached"]["sampler"].startswith("py-spy")
        wait = run["summary"]["data_wait_fraction"]
        assert abs(wait - own) <= 0.10, (wait, own)
        line = run["loading"][0]["lines"][0]
        assert line["site"] == f"train.py:{READ_AT}" and line["function"] == "read_from_storage"
        assert line["cpu_s"] < 0.5 * line["wall_s"]  # it waits
        advice = next(n for n in run["summary"]["notes"] if n["code"] == "attach_advice")
        assert advice["predicted_workers"] >= 4
        said = " ".join(out.stdout.split())  # (the advice's command, wrapped)
        assert f"cd {tmp_path} && feedprof tune --online {tmp_path / 'train.py'} --clock" in said, out.stdout
        assert "(sampled, not timed)" in out.stdout
        assert (tmp_path / "out" / "report.html").exists()
    finally:
        _stop(proc)


@pytestmark_pyspy
def test_workers_that_decode_are_named_and_said_to_compute(tmp_path, e2e):
    proc, _ = _start(tmp_path, "--workers", "2", "--mode", "decode")
    try:
        out = run_feedprof(["attach", "--duration", "5", "--out", str(tmp_path / "out"), str(proc.pid)], timeout=120)
        assert out.returncode == 0, out.stderr
        run = json.loads((tmp_path / "out" / "run.json").read_text())
        assert run["loaders"][0]["config"]["num_workers"] == 2
        line = run["loading"][0]["lines"][0]
        assert line["function"] == "decode" and line["cpu_s"] > 0.5 * line["wall_s"], run["loading"][0]["lines"][:3]
        assert "decode): computing" in out.stdout
    finally:
        _stop(proc)


@pytestmark_pyspy
def test_a_worker_stuck_on_a_lock_is_found_and_the_job_left_running(tmp_path, e2e):
    proc, _ = _start(tmp_path, "--workers", "2", "--mode", "stuck", lines=1)
    try:
        time.sleep(2)  # (the worker given index 40 is stuck by now; the loop waits on it)
        out = run_feedprof(["attach", "--duration", "4", "--out", str(tmp_path / "out"), str(proc.pid)], timeout=120)
        assert out.returncode == 0, out.stderr
        run = json.loads((tmp_path / "out" / "run.json").read_text())
        assert run["attached"]["advanced"] is False
        stuck = [w for w in run["attached"]["waits"] if w["role"] == "worker" and w["site"] == f"train.py:{STUCK_AT}"]
        assert stuck and stuck[0]["function"] == "Samples.__getitem__" and not stuck[0]["active"], run["attached"]
        assert "did not get a batch in the whole window" in out.stdout and f"train.py:{STUCK_AT}" in out.stdout
        assert proc.poll() is None and all(c.status() != psutil.STATUS_ZOMBIE
                                           for c in psutil.Process(proc.pid).children())
    finally:
        _stop(proc)


@pytestmark_pyspy
def test_a_torchrun_launcher_s_ranks_are_each_read(tmp_path, e2e):
    script = write_script(tmp_path, "train.py", LOOP)
    launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", script,
                                 "--clock", str(tmp_path / "clock.jsonl"), "--seconds", "60"], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not ((tmp_path / "clock.jsonl").exists() and (tmp_path / "clock.jsonl").read_text().count("\n") >= 4) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        out = run_feedprof(["attach", "--duration", "4", "--out", str(tmp_path / "out"), str(launcher.pid)],
                           timeout=120)
        assert out.returncode == 0, out.stderr
        run = json.loads((tmp_path / "out" / "run.json").read_text())
        assert sorted(r["rank"]["rank"] for r in run["ranks"]) == [0, 1]
        assert all(r["summary"]["data_wait_fraction"] > 0.5 for r in run["ranks"])
        assert launcher.poll() is None
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


@pytest.mark.parametrize("what", ["not_python", "no_such_pid", "not_a_number"])
def test_a_pid_that_cannot_be_read_is_one_line_and_exit_2(tmp_path, cli, what, e2e):
    other = subprocess.Popen(["sleep", "30"]) if what == "not_python" else None
    try:
        pid = {"not_python": str(other.pid) if other else "", "no_such_pid": str(2 ** 22 + 17),
               "not_a_number": "train.py"}[what]
        got = cli(["attach", "--duration", "1", "--out", str(tmp_path / "out"), pid])
        assert got.returncode == 2 and got.stderr.count("\n") == 1 and "Traceback" not in got.stderr, got.stderr
        assert not (tmp_path / "out").exists()  # nothing written for a job that was not read
        assert {"not_python": "is not a Python process", "no_such_pid": "there is no process",
                "not_a_number": "expected a process id"}[what] in got.stderr
    finally:
        if other is not None:
            other.kill()
            other.wait()


@pytestmark_pyspy
def test_a_python_process_that_iterates_no_loader_is_said_to_have_no_wait(tmp_path, e2e):
    """A Python process outside any DataLoader (start-up, evaluation, another framework): no wait is
    claimed, and the words say why."""
    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True:\n    time.sleep(0.05)"])
    try:
        time.sleep(1)
        out = run_feedprof(["attach", "--duration", "3", "--out", str(tmp_path / "out"), str(proc.pid)], timeout=120)
        assert out.returncode == 0, out.stderr
        run = json.loads((tmp_path / "out" / "run.json").read_text())
        assert run["summary"]["data_wait_fraction"] is None
        assert [n["code"] for n in run["summary"]["notes"]] == ["no_loader_seen"]
        assert "no wait for data to read" in out.stdout and proc.poll() is None
    finally:
        _stop(proc)


@pytest.mark.parametrize("rate,said", [("0", "expected a number >= 1"), ("5000", "give 1 to 1000"),
                                       ("fast", "expected a whole number")])
def test_a_sampling_rate_out_of_range_is_refused_in_one_line(tmp_path, cli, rate, said):
    got = cli(["attach", "--rate", rate, "--out", str(tmp_path / "out"), str(os.getpid())])
    assert got.returncode == 2 and said in got.stderr and "Traceback" not in got.stderr, got.stderr
    assert not (tmp_path / "out").exists()
