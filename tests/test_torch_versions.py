"""The seeded online tests that lean on torch's DataLoader internals (the ones whose loop is
switched while it trains: the run as written, two live iterators, a probe batch, persistent
workers, and the fall-back when the hand-back accounting breaks), on every torch online mode
was tested against besides the pinned one (feedprof/frameworks/torch_support.py TESTED), each in
the virtual environment tests/torch_venvs makes (./tests/run --all makes them in the background,
and this test waits for them). Online switching leans on private members of torch's DataLoader
iterator, so each version gets these checks; the rest of the seeded tests (random draws watched,
the search's advice) run on the pinned torch.

The versions run side by side (each suite mostly waits on its scripts' sleeps): the whole suite
stays inside CI's time. Where an environment could not be made (no registry), the test skips,
unless FEEDPROF_REQUIRE_TORCH_VERSIONS=1 (.ci/run): then it fails, with tests/torch_venvs' words."""
import os
import signal
import subprocess
import time

import psutil
import pytest

from conftest import REPO
from feedprof.frameworks.torch_support import TESTED

PINNED = next(line.split("==")[1].strip() for line in open(os.path.join(REPO, "tests", "constraints.txt"))
              if line.startswith("torch=="))
REQUIRED = os.environ.get("FEEDPROF_REQUIRE_TORCH_VERSIONS") == "1"
PREFIX = os.environ.get("FEEDPROF_TORCH_VENVS", os.path.join(REPO, ".venv-torch-"))  # set by tests/run (a cache)
OTHERS = [v for v in TESTED if v != PINNED]
ON_INTERNALS = [
    "tests/test_online.py::test_the_run_sees_what_it_would_see_without_feedprof",
    "tests/test_online_shapes.py::test_an_io_bound_loop_of_any_shape_sees_what_it_would_and_gets_workers",
    "tests/test_online_shapes.py::test_persistent_workers_keep_the_dataset_they_started_with",
    "tests/test_online_shapes.py::test_a_torch_that_changed_falls_back_to_the_scripts_settings",
]
MAKING = PREFIX + "making"  # tests/run makes them in the background: its .pid and .log
MAKING_WAIT_S = 1800
OFF = os.environ.get("FEEDPROF_TORCH_VERSIONS") == "0"


def _made():
    """Wait until tests/torch_venvs, started in the background by tests/run, has finished."""
    try:
        with open(MAKING + ".pid") as fh:
            pid = int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + MAKING_WAIT_S
    while pid and psutil.pid_exists(pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(2)


def _wanted_stamp():
    """What tests/torch_venvs writes into an environment it finished (its and feedprof's dependencies' hash)."""
    return subprocess.run([os.path.join(REPO, "tests", "torch_venvs"), "--stamp"], capture_output=True, text=True,
                          cwd=REPO).stdout.strip()


def _python(version):
    python = f"{PREFIX}{version}/bin/python"
    try:
        with open(f"{PREFIX}{version}/.feedprof-test-deps") as fh:
            ready = fh.read().strip() == _wanted_stamp()
    except OSError:
        ready = False
    if not ready:
        why = f"no up-to-date environment with torch {version} at {PREFIX}{version} (tests/torch_venvs makes it)"
        if os.path.exists(MAKING + ".log"):
            with open(MAKING + ".log") as fh:
                why += ":\n" + fh.read()[-1500:]
        if REQUIRED:
            pytest.fail(f"FEEDPROF_REQUIRE_TORCH_VERSIONS=1, but {why}")
        pytest.skip(why)
    found = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    assert found.stdout.split("+")[0].strip() == version, found.stderr
    return python


@pytest.mark.skipif(not OTHERS, reason="online mode is tested on the pinned torch alone")
@pytest.mark.skipif(OFF, reason="FEEDPROF_TORCH_VERSIONS=0")
def test_the_seeded_online_tests_on_torch_internals_pass_on_every_tested_torch(tmp_path, e2e):
    _made()
    pythons = {v: _python(v) for v in OTHERS}
    runs = {}
    for version, python in pythons.items():
        log = open(tmp_path / f"torch-{version}.log", "w+")
        runs[version] = (log, subprocess.Popen(
            [python, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider", "-m", "seeded_online",
             "--basetemp", str(tmp_path / f"runs-{version}"), *ON_INTERNALS],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}))
    failed = {}
    for version, (log, proc) in runs.items():
        try:
            proc.wait(timeout=1800)
        finally:  # (a suite that ran out of time leaves none of its runs behind)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.seek(0)
        tail = log.read()[-3000:]
        if proc.returncode != 0 or " passed" not in tail or "skipped" in tail:
            failed[version] = tail
    assert not failed, "\n\n".join(f"torch {v}:\n{tail}" for v, tail in failed.items())


def test_a_machine_without_room_for_a_torch_is_told_not_filled(tmp_path, e2e):
    """tests/torch_venvs on a 64 MB filesystem: each version is said not to fit and nothing is
    installed (a CUDA build filling the disk fails every test that writes a file)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(small)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        made = subprocess.run([os.path.join(REPO, "tests", "torch_venvs"), str(small / ".venv-torch-")],
                              capture_output=True, text=True, timeout=60, env={**os.environ, "TMPDIR": str(small)})
        assert made.returncode == 0, made.stderr
        for version in OTHERS:
            assert f"torch=={version} not installed, too little disk: 0 GB free in {small}" in made.stderr
        assert sorted(os.listdir(small)) == [".venv-torch-making.lock"]
    finally:
        subprocess.run(["umount", str(small)])
