import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

FEEDPROF_BIN = os.path.join(os.path.dirname(sys.executable), "feedprof")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_script(directory, name, body):
    path = os.path.join(str(directory), name)
    with open(path, "w") as fh:
        fh.write(textwrap.dedent(body).lstrip())
    return path


def run_feedprof(args, via="module", timeout=240, cwd=None, env=None):
    """The real CLI in a subprocess: ``python -m feedprof`` or the ``feedprof`` script."""
    cmd = [sys.executable, "-m", "feedprof"] if via == "module" else [FEEDPROF_BIN]
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=full_env)


TEST_MARK = "FEEDPROF_TEST_ID"  # inherited by everything a test starts: its leftovers, not another run's


def leftover_trial_processes(mark=None):
    """Trial children or their loader workers still alive (every one of them
    inherits FEEDPROF_TRIAL_DIR, whether forked or spawned), or a fork server;
    with ``mark``, only those started under that test's mark."""
    found = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
                continue
            env = p.environ()
            if mark is not None and env.get(TEST_MARK) != mark:
                continue
            cmdline = " ".join(p.cmdline())
            if "FEEDPROF_TRIAL_DIR" in env or "feedprof.tune.zygote" in cmdline:
                found.append((p.pid, cmdline))
        except psutil.Error:
            continue
    return found


@pytest.fixture
def no_leftovers(monkeypatch, request):
    mark = f"{os.getpid()}:{request.node.nodeid}"
    monkeypatch.setenv(TEST_MARK, mark)
    yield
    deadline = time.monotonic() + 5
    while leftover_trial_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftover_trial_processes(mark) == []
