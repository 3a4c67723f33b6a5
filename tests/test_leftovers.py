"""What a run leaves behind: processes that escaped the trial's process group,
and GPU memory its processes still hold (NVML faked: no GPU here)."""
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import psutil
import pytest

from feedprof.record.gpu import open_gpu
from feedprof.record.leftovers import FORK_SERVER_ENV, TRIAL_ENV, find_leftovers, process_clock_s, stray_processes
from feedprof.render.leftovers import format_leftovers, short_command
from feedprof.store.procs import Leftovers, ProcessInfo
from tests.conftest import run_feedprof, write_script
from tests.fakes import fake_pynvml
from tests.scripts import torch_loop

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
GIB = 2**30

# Prepended to a training script: a helper that daemonizes (fork, setsid, fork,
# stdio to /dev/null) so that it is never a child of the script, then sleeps;
# its PID goes to a file.
ESCAPE = '''
import os as _os, sys as _sys, time as _time
_PIDS = _os.environ["ESCAPED_PIDS"]
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        with open(_PIDS, "a") as _fh:
            _fh.write(f"{_os.getpid()}\\n")
        _null = _os.open(_os.devnull, _os.O_RDWR)
        for _fd in (0, 1, 2):  # as a daemon does: nothing ties it to the trial's log or our pipes
            _os.dup2(_null, _fd)
        _time.sleep(120)
    _os._exit(0)
_os.wait()
'''


@pytest.fixture
def started():
    procs = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def kill_listed(path):
    pids = [int(x) for x in path.read_text().split()] if path.exists() else []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def test_a_clean_run_leaves_nothing(tmp_path, started):
    started.append(subprocess.Popen(SLEEP))  # ours, but not the trial's
    lo = find_leftovers(str(tmp_path), root_pid=4_000_000, gpu=open_gpu(nvml=fake_pynvml(["GPU-a"])))
    assert not lo and lo.gpu_checked


@pytest.mark.parametrize("how", ["group", "environment", "log file"])
def test_escaped_processes_are_found(tmp_path, started, how):
    trial_dir = tmp_path / "trial"
    trial_dir.mkdir()
    # the trial child: leads its own group, in our session (trial/group.py), the trial's directory in
    # its environment as the runner gives it; for "group" it starts a child that leaves its group
    root = subprocess.Popen([sys.executable, "-c", IN_OWN_GROUP if how == "group" else "import time; time.sleep(60)"],
                            process_group=0, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, TRIAL_ENV: str(trial_dir)} if how == "group" else None)
    started.append(root)
    if how == "group":
        p = psutil.Process(int(root.stdout.readline()))
        assert os.getsid(p.pid) == os.getsid(0) and os.getpgid(p.pid) == p.pid != root.pid
    elif how == "environment":
        p = subprocess.Popen(SLEEP, env={**os.environ, TRIAL_ENV: str(trial_dir)}, start_new_session=True)
        started.append(p)
    else:
        with open(trial_dir / "output.log", "wb") as log:
            p = subprocess.Popen(SLEEP, stdout=log, stderr=log, start_new_session=True)
        started.append(p)
    try:
        root.kill()  # the runner's kill_group: the trial child's group is gone, the stray is not ...
        root.wait()  # ... and the child reaped, as the runner has it before it looks (a SIGKILLed process
        # not yet dead is still alive to the scan: on a busy machine the scan can come first)
        found = stray_processes(str(trial_dir))
        assert set(found) == {p.pid}
        lo = find_leftovers(str(trial_dir), root.pid, settle_s=0.1)
        assert [q.pid for q in lo.processes] == [p.pid] and "time.sleep(60)" in lo.processes[0].command
        # the program by its name: where the virtual environment lies is no part of the line
        assert f"PID {p.pid} is still running: {os.path.basename(sys.executable)} -c 'import time; time.sleep(60)'" \
            in format_leftovers(lo)
    finally:
        p.kill()


@pytest.mark.parametrize("command,shown", [
    # a virtual environment in a long path: the program's name, and every argument after it
    (shlex.join(["/home/someone/" + "deep/" * 30 + ".venv/bin/python", "train.py", "--epochs", "3"]),
     "python train.py --epochs 3"),
    (shlex.join(["/opt/my tools/python3", "-c", "import time; time.sleep(60)"]),
     "python3 -c 'import time; time.sleep(60)'"),
    ("[pt_data_worker]", "[pt_data_worker]"),  # no command line: its name, as psutil gives it
    ("python 'unbalanced", "python 'unbalanced"),  # not shlex's: shown as it is
    (shlex.join(["python", "x" * 100]), "python " + "x" * 52 + "…"),  # cut at the width, the name kept
])
def test_a_leftover_shows_its_program_by_name_and_its_arguments(command, shown):
    assert short_command(command) == shown
    lo = Leftovers(processes=(ProcessInfo(pid=123, command=command),))
    assert f"PID 123 is still running: {shown} (end it with: kill 123)" in format_leftovers(lo)


def test_forks_of_the_fork_server_started_during_the_trial(tmp_path, started):
    def server_fork(mark):  # a fork's /proc environ is the fork server's exec-time one
        return subprocess.Popen(SLEEP, env={**os.environ, FORK_SERVER_ENV: mark})

    server = server_fork("ours")
    before = server_fork("ours")  # an earlier trial's: started before this one was launched
    started += [server, before]
    time.sleep(0.3)
    since = process_clock_s()
    during, elsewhere = server_fork("ours"), server_fork("another tune's")
    started += [during, elsewhere]
    found = stray_processes(str(tmp_path), since_s=since, fork_server_pid=server.pid)
    assert set(found) == {during.pid}


IN_OWN_GROUP = ("import subprocess, sys, time\n"
                "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], process_group=0)\n"
                "print(p.pid, flush=True)\n"
                "time.sleep(60)\n")


def test_gpu_memory_still_held_by_the_runs_processes(tmp_path, started):
    stray = subprocess.Popen(SLEEP, env={**os.environ, TRIAL_ENV: str(tmp_path)}, start_new_session=True)
    other = subprocess.Popen(SLEEP)
    started += [stray, other]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    known = [psutil.Process(other.pid)]  # a PID the run had (seen while it ran) that is alive elsewhere
    nv = fake_pynvml(["GPU-a", "GPU-b"], compute={0: [(stray.pid, 3 * GIB), (4_000_001, GIB)],
                                                  1: [(dead.pid, 2 * GIB), (other.pid, None)]})
    lo = find_leftovers(str(tmp_path), root_pid=dead.pid, known=known, gpu=open_gpu(nvml=nv, visible_devices=None),
                        settle_s=0.1, release_s=0.3)
    assert {q.pid for q in lo.processes} == {stray.pid, other.pid}
    held = {(h.pid, h.cuda_index, h.used_bytes) for h in lo.gpu_memory}
    assert held == {(stray.pid, 0, 3 * GIB), (dead.pid, 1, 2 * GIB), (other.pid, 1, None)}
    text = format_leftovers(lo)
    assert f"PID {stray.pid} is still running, holding 3.0 GiB on cuda:0" in text
    assert f"PID {dead.pid} has ended but the GPU still holds 2.0 GiB on cuda:1" in text


def test_memory_the_driver_frees_a_moment_later_is_not_reported(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    nv = fake_pynvml(["GPU-a"], compute={0: [(dead.pid, GIB)]})
    gpu = open_gpu(nvml=nv, visible_devices=None)
    calls = {"n": 0}
    listed = nv.nvmlDeviceGetComputeRunningProcesses

    def freed_after_two_looks(h):
        calls["n"] += 1
        return listed(h) if calls["n"] <= 2 else []

    nv.nvmlDeviceGetComputeRunningProcesses = freed_after_two_looks
    lo = find_leftovers(str(tmp_path), root_pid=dead.pid, gpu=gpu, release_s=5.0)
    assert not lo and calls["n"] == 3


def test_profile_says_what_its_script_left_behind(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", ESCAPE + torch_loop(load_ms=1, step_ms=1, n=200, epochs=10))
    pids = tmp_path / "escaped.txt"
    out = tmp_path / "out"
    try:
        proc = run_feedprof(["profile", "--out", str(out), "--window-batches", "30", "--warmup-batches",
                             "2", "--interval", "0.1", script], env={"ESCAPED_PIDS": str(pids)})
        escaped = [int(x) for x in pids.read_text().split()]
        assert proc.returncode == 0, proc.stderr
        assert len(escaped) == 1 and psutil.pid_exists(escaped[0])  # reported, not killed
        assert f"left behind  PID {escaped[0]}, a fork of the script, is still running" in proc.stdout
        assert f"(end it with: kill {escaped[0]})" in proc.stdout
        run = json.loads((out / "run.json").read_text())
        assert [p["pid"] for p in run["leftovers"]["processes"]] == escaped
        assert run["leftovers"]["processes"][0]["orphan"] == "adopted"
        page = (out / "report.html").read_text()
        assert "Left behind after the run ended" in page and f"kill {escaped[0]}" in page
    finally:
        kill_listed(pids)


@pytest.mark.serial
def test_tune_names_what_each_forked_trial_left_behind(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", ESCAPE + torch_loop(load_ms=2, step_ms=1, n=400, epochs=50))
    pids = tmp_path / "escaped.txt"
    out = tmp_path / "out"
    try:
        # Room for a trial after the baseline on a loaded machine (15 s left only the baseline where it
        # took 3.6 s and the fork server 3 s more): the baseline and the ceiling are enough here.
        proc = run_feedprof(["tune", "--out", str(out), "--budget", "25", "--max-workers", "2",
                             "--window-seconds", "0.6", "--min-window-batches", "20", "--warmup-batches", "2",
                             "--interval", "0.1", "--quiet", script], env={"ESCAPED_PIDS": str(pids)})
        assert proc.returncode == 0, proc.stderr
        escaped = sorted(int(x) for x in pids.read_text().split())
        res = json.loads((out / "results.json").read_text())
        ran = [t for t in res["trials"] if t["run"] is not None]
        assert len(ran) >= 2 and len(escaped) == len(ran)  # one helper per trial; all but the baseline forked
        found = sorted(p["pid"] for t in ran for p in t["run"]["leftovers"]["processes"])
        assert found == escaped  # forked from the fork server too
        assert "Left behind after the trials ended" in proc.stdout
        assert all(f"kill {pid}" in proc.stdout for pid in escaped)
    finally:
        kill_listed(pids)
        time.sleep(0.2)
