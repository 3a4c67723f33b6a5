"""`feedprof gpus`: devices, the processes on them (NVML's per-process API,
faked: no GPU here) joined with real processes, and what looks abandoned."""
import os
import re
import subprocess
import sys
import time

import psutil
import pytest

from feedprof.record.gpu import open_gpu
from feedprof.record.gpu_procs import adopted, describe_process, gpus_view, orphan_code, settled
from feedprof.render.gpus import format_gpus
from feedprof.store.procs import ORPHAN_ADOPTED, ORPHAN_JOB_GONE, ORPHAN_KERNEL_UNOWNED
from tests.conftest import REPO, run_feedprof
from tests.fakes import fake_pynvml

GIB = 2**30
# A worker that only serves its job, named as torch names its DataLoader workers (PR_SET_NAME)
WORKER = "import ctypes, time; ctypes.CDLL(None).prctl(15, b'pt_data_worker', 0, 0, 0); time.sleep(60)"
SPAWN_GRANDCHILD = ("import subprocess, sys, time\n"
                    f"p = subprocess.Popen([sys.executable, '-c', {WORKER!r}])\n"
                    "print(p.pid, flush=True)\n"
                    "time.sleep(60)\n")


def named(pid, name="pt_data_worker"):
    """Wait until the worker has named itself (it does so once its Python starts)."""
    deadline = time.monotonic() + 20
    while psutil.Process(pid).name() != name and time.monotonic() < deadline:
        time.sleep(0.02)
    return pid


@pytest.fixture
def orphan():
    """A real orphan: a job (its own process group) starts a worker and is killed.
    Yields (orphan pid, dead job pid); the orphan is killed afterwards."""
    job = subprocess.Popen([sys.executable, "-c", SPAWN_GRANDCHILD], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    pid = named(int(job.stdout.readline()))
    job.kill()
    job.wait()
    job.stdout.close()
    try:
        yield pid, job.pid
    finally:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture
def live():
    """A live process with a live parent (this test), whose own group leader may
    be gone: the suite's, when it was started from a shell that has exited (the
    test process itself could even have been adopted, so it is not the subject)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p.pid
    p.kill()
    p.wait()


# A job (its own session and group) under a subreaper that is not init; its leader is
# killed: its child is adopted by the subreaper, the grandchild still has its parent.
TREE = """
import ctypes, subprocess, sys, time
role, me = sys.argv[1], [sys.executable, sys.argv[0]]
if role == "reaper":  # orphans below come to it, as to a container's init
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    leader = subprocess.Popen(me + ["leader"], start_new_session=True, stdout=subprocess.PIPE, text=True)
    print(leader.pid, leader.stdout.readline().strip(), flush=True)
    leader.kill()
    leader.wait()
    print("leader gone", flush=True)
elif role == "leader":
    child = subprocess.Popen(me + ["child"], stdout=subprocess.PIPE, text=True)
    print(child.pid, child.stdout.readline().strip(), flush=True)
else:  # the job's worker, with a worker of its own
    ctypes.CDLL(None).prctl(15, b"pt_data_worker", 0, 0, 0)
    print(subprocess.Popen([sys.executable, "-c", WORKER]).pid, flush=True)
time.sleep(60)
"""


def test_a_job_whose_leader_exited_flags_only_the_process_that_lost_its_parent(tmp_path):
    script = tmp_path / "tree.py"
    script.write_text(f"WORKER = {WORKER!r}\n" + TREE)
    reaper = subprocess.Popen([sys.executable, str(script), "reaper"], stdout=subprocess.PIPE, text=True)
    try:
        leader, child, grandchild = map(int, reaper.stdout.readline().split())
        assert reaper.stdout.readline().strip() == "leader gone"
        named(child), named(grandchild)
        c, g = describe_process(child), describe_process(grandchild)
        assert c.ppid == reaper.pid and c.pgid == leader and c.group_leader_alive is False
        assert c.orphan == ORPHAN_JOB_GONE  # its parent now is the subreaper, outside the job's session
        assert g.ppid == child and g.pgid == leader and g.group_leader_alive is False
        assert g.orphan == ""  # its parent goes on: so does the job
    finally:
        for p in psutil.Process(reaper.pid).children(recursive=True) + [psutil.Process(reaper.pid)]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        reaper.wait()
        reaper.stdout.close()


def test_an_orphan_is_named_with_its_dead_parent(orphan):
    pid, job = orphan
    p = describe_process(pid)
    assert p.visible and "time.sleep(60)" in p.command
    assert p.orphan == ORPHAN_ADOPTED and p.parent_alive is False
    assert p.pgid == job and p.group_leader_alive is False
    assert p.user == psutil.Process().username()


def test_a_live_process_is_not_flagged(live):
    p = describe_process(live)
    assert p.orphan == "" and p.parent_alive is True and p.ppid == os.getpid()


def test_a_pid_from_another_namespace_is_not_visible():
    pid = 4_000_000  # above Linux's pid_max limit: never a process here
    assert describe_process(pid).visible is False


@pytest.mark.parametrize("pid,ppid,pgid,sid,parent,expected", [
    (50, 1, 40, 40, "init", True),  # its job's leader (40) is gone, init adopted it
    (50, 1, 1, 1, "python", False),  # a container whose entrypoint (PID 1) started it
    (50, 1, 50, 50, "systemd", False),  # a service: a session of its own
    (50, 7, 40, 40, "systemd", True),  # a user session's subreaper adopted it
    (50, 30, 30, 30, "python", False),  # an ordinary child
])
def test_adoption_rules(pid, ppid, pgid, sid, parent, expected):
    assert adopted(pid, ppid, pgid, sid, parent) is expected


def test_job_gone_and_unowned_kernel(tmp_path):
    assert orphan_code("python train.py", 50, False, 40, False) == ORPHAN_JOB_GONE
    assert orphan_code("python train.py", 50, False, 40, False, parent_in_session=True) == ""
    assert orphan_code("python train.py", 50, False, 50, None) == ""
    cmd = f"python -m ipykernel_launcher -f {tmp_path}/kernel-1.json"
    assert orphan_code(cmd, 50, False, 50, None) == ORPHAN_KERNEL_UNOWNED
    (tmp_path / "kernel-1.json").write_text("{}")
    assert orphan_code(cmd, 50, False, 50, None) == ""


def test_view_of_fake_gpus_joined_with_real_processes(orphan, live):
    pid, job = orphan
    me = live
    nv = fake_pynvml(["GPU-a", "GPU-b"], names=["A100", "H100"],
                     compute={0: [(me, 3 * GIB), (pid, 5 * GIB)], 1: [(me, None)]}, graphics={1: [(me, GIB)]})
    gpu = open_gpu(nvml=nv, visible_devices="1,0")
    view = gpus_view(gpu)
    assert view.driver_version == "555.42.06"
    assert [(g.cuda_index, g.name) for g in view.gpus] == [(0, "H100"), (1, "A100")]
    h100, a100 = view.gpus
    assert [(p.process.pid, p.gpu_mem_bytes, p.kind) for p in h100.processes] == [(me, GIB, "C+G")]
    assert {p.process.pid: p.process.orphan for p in a100.processes} == {me: "", pid: ORPHAN_ADOPTED}
    text = format_gpus(view)
    assert f"PID {pid} holds 5.0 GiB on cuda:1" in text
    assert f"process group {job}, has ended (PID {job} is gone)" in text
    assert f"end it with: kill {pid}" in text
    assert f"kill {me}" not in text and "1 process on a GPU looks abandoned" in text


def test_nvml_that_will_not_list_processes():
    nv = fake_pynvml(["GPU-a"])

    def refuse(h):
        raise nv.NVMLError(3)  # NVML_ERROR_NOT_SUPPORTED

    nv.nvmlDeviceGetComputeRunningProcesses = nv.nvmlDeviceGetGraphicsRunningProcesses = refuse
    view = gpus_view(open_gpu(nvml=nv, visible_devices=None))
    assert view.gpus[0].processes is None
    assert "NVML would not list the processes" in format_gpus(view)


def test_long_command_lines_fit_the_terminal(orphan):
    pid, _ = orphan
    view = gpus_view(open_gpu(nvml=fake_pynvml(["GPU-a"], compute={0: [(pid, GIB)]}), visible_devices=None))
    table = format_gpus(view, width=80).split("\n\n")[1]
    assert all(len(line) <= 80 for line in table.splitlines())


def test_a_terminal_shows_the_program_by_name_and_a_pipe_the_whole_command():
    """A virtual environment's long path would fill a terminal's row and say nothing:
    the program's name and its arguments there; ``feedprof gpus | cat`` keeps it whole."""
    from feedprof.store.procs import GpuProcess, GpuState, GpusView, ProcessInfo

    command = "/home/someone/projects/vision/.venv-py311-cuda12/bin/python3.11 train.py --workers 8 --epochs 90"
    proc = ProcessInfo(pid=4242, command=command, user="someone", ppid=1, parent_command="bash")
    view = GpusView(gpus=(GpuState(cuda_index=0, nvml_index=0, uuid="GPU-a", name="A100",
                                   processes=(GpuProcess(proc, GIB),)),))
    row = next(line for line in format_gpus(view, width=100).splitlines() if "4242" in line)
    assert row.endswith("python3.11 train.py --workers 8 --epochs 90") and ".venv" not in row
    piped = next(line for line in format_gpus(view).splitlines() if "4242" in line)
    assert piped.endswith(command)


def test_a_command_line_cannot_write_to_the_terminal():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "\x1b[2J\x1b]0;owned\x07"])
    try:
        view = gpus_view(open_gpu(nvml=fake_pynvml(["GPU-a"], compute={0: [(p.pid, GIB)]}), visible_devices=None))
        assert "\x1b" in view.gpus[0].processes[0].process.command  # recorded as it is
        text = format_gpus(view, width=200)
        assert "\x1b" not in text and "\x07" not in text and "?[2J" in text
    finally:
        p.kill()
        p.wait()


def test_cli_names_the_orphan_and_its_dead_parent(orphan, live, e2e):
    pid, job = orphan
    env = {"PYTHONPATH": os.pathsep.join([os.path.join(REPO, "tests", "fake_nvml"), os.environ.get("PYTHONPATH", "")]),
           "FEEDPROF_FAKE_NVML_PROCESSES": f"{live}:{GIB},{pid}:{6 * GIB}"}
    proc = run_feedprof(["gpus"], env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Fake GPU (tests)" in out and "driver 555.42.06" in out
    assert re.search(rf"^!\s+{pid}\s", out, re.M) and re.search(rf"^\s+{live}\s", out, re.M)
    assert f"PID {pid} holds 6.0 GiB on cuda:0: its parent is gone" in out
    assert f"process group {job}, has ended" in out and f"end it with: kill {pid}" in out
    assert psutil.pid_exists(pid)  # named, never ended by feedprof


def test_cli_without_a_gpu_is_one_line(tmp_path, e2e):
    env = {"CUDA_VISIBLE_DEVICES": ""}  # hides every GPU, whatever this machine has
    proc = run_feedprof(["gpus"], env=env, timeout=60)
    assert proc.returncode == 0
    assert len(proc.stdout.strip().splitlines()) == 1 and proc.stdout.startswith("feedprof gpus: ")


# ------------------------------------------------ how users launch jobs that outlive their shell
# Each shape starts a training job (its own program) from a shell that then exits, as a closed
# terminal or SSH session does: the job is adopted and its group's leader is gone, yet it trains.

JOB = "import time; time.sleep(60)"
WRAPPER = '#!/bin/sh\n"$PY" -c "$JOB" >/dev/null 2>&1 &\necho $! > "$PIDFILE"\n'
SHAPES = {
    "nohup": 'nohup "$PY" -c "$JOB" >/dev/null 2>&1 & echo $! > "$PIDFILE"',
    "wrapper script": 'sh "$WRAPPER"',
    "backgrounded subshell": '("$PY" -c "$JOB" >/dev/null 2>&1 & echo $! > "$PIDFILE")',
}


def _launch_from_a_shell_that_exits(tmp_path, line):
    pidfile = tmp_path / "pid"
    (tmp_path / "wrapper.sh").write_text(WRAPPER)
    env = {**os.environ, "PY": sys.executable, "JOB": JOB, "PIDFILE": str(pidfile),
           "WRAPPER": str(tmp_path / "wrapper.sh")}
    shell = subprocess.Popen(["bash", "-c", line], env=env, start_new_session=True)  # a terminal's session
    shell.wait()
    return int(pidfile.read_text())


@pytest.mark.parametrize("shape", ["nohup", "wrapper script", "backgrounded subshell"])
def test_a_job_that_outlived_the_shell_that_started_it_is_not_left_behind(tmp_path, shape):
    pid = _launch_from_a_shell_that_exits(tmp_path, SHAPES[shape])
    try:
        p = describe_process(pid)
        assert p.visible and p.state != "zombie"
        assert p.group_leader_alive in (False, None)  # the shell that led its group is gone...
        assert p.orphan == ""  # ...but nothing says the job ended
        view = gpus_view(open_gpu(nvml=fake_pynvml(["GPU-a"], compute={0: [(pid, GIB)]}), visible_devices=None))
        assert "looks abandoned" not in format_gpus(view) and f"kill {pid}" not in format_gpus(view)
    finally:
        psutil.Process(pid).kill()


LAUNCHER = ("import os, subprocess, sys\n"
            "rank = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
            "                        env={**os.environ, 'TORCHELASTIC_RUN_ID': 'job1', 'LOCAL_RANK': '0'})\n"
            "print(rank.pid, flush=True)\n"
            "import time; time.sleep(60)\n")


def test_a_rank_is_left_behind_only_once_its_launcher_is_gone():
    """torchrun's ranks are its children: while it lives they are a job; once it is gone they train for nobody."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    rank = int(launcher.stdout.readline())
    try:
        assert describe_process(rank).orphan == ""
        launcher.kill()
        launcher.wait()
        assert describe_process(rank).orphan in (ORPHAN_ADOPTED, ORPHAN_JOB_GONE)
    finally:
        launcher.kill()
        launcher.wait()
        launcher.stdout.close()
        psutil.Process(rank).kill()


def test_a_process_read_in_the_middle_of_exec_is_read_again(monkeypatch):
    """A process in the middle of exec shows an empty command line and environment
    (its parent already saw exec succeed); on a busy machine that lasts long enough to
    be read. Here the first reads of both are empty, as they were then: the rank is
    still classified by what it is, once the reads settle."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    rank = int(launcher.stdout.readline())
    reads = {"cmdline": 0, "environ": 0}
    real = {name: getattr(psutil.Process, name) for name in reads}

    def in_exec(name, empty):
        def read(self):
            reads[name] += 1
            return empty if reads[name] <= 3 and self.pid == rank else real[name](self)
        return read

    try:
        launcher.kill()
        launcher.wait()
        monkeypatch.setattr(psutil.Process, "cmdline", in_exec("cmdline", []))
        monkeypatch.setattr(psutil.Process, "environ", in_exec("environ", {}))
        p = describe_process(rank)
        assert "time.sleep(60)" in p.command and p.orphan in (ORPHAN_ADOPTED, ORPHAN_JOB_GONE)
        assert reads == {"cmdline": 4, "environ": 4}
    finally:
        launcher.stdout.close()
        psutil.Process(rank).kill()


def test_an_empty_read_is_believed_at_once_where_no_exec_can_be_under_way():
    reads = []
    read = lambda: reads.append(1) or []  # noqa: E731
    assert settled(read, may_be_in_exec=False, deadline=time.monotonic() + 60) == [] and len(reads) == 1
    values = iter([[], [], ["python", "train.py"]])
    assert settled(lambda: next(values), may_be_in_exec=True, deadline=time.monotonic() + 60) == ["python", "train.py"]
    reads.clear()
    assert settled(read, may_be_in_exec=True, deadline=time.monotonic() - 1) == [] and len(reads) == 1  # time is up
