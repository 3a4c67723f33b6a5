import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

FEEDPROF_BIN = os.path.join(os.path.dirname(sys.executable), "feedprof")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_script(directory, name, body):
    path = os.path.join(str(directory), name)
    with open(path, "w") as fh:
        fh.write(textwrap.dedent(body).lstrip())
    return path


# ------------------------------------------------ the two tiers
# ./tests/run runs the fast tier (-m "not e2e"), ./tests/run --all everything. A test
# is end-to-end by what it does, not by a hand-written mark: it requests the e2e
# fixture, itself or through a fixture that starts processes (no_leftovers, a
# module's tune), and notebooks run by nbmake are e2e too.


# ./tests/run --all runs every test side by side (pytest-xdist) but those marked serial, whose verdict
# is a timing (a rate, a wait, a CPU share, the workers a tune picks past the CPUs): they run after,
# alone. The tests of a file that shares something only one test may use at a time run in one worker,
# one after another: the session's Slurm clusters and their queue, Ray (its processes are found by
# what they are), the independent harness (its children are found by their environment).
EXCLUSIVE = {"test_slurm.py": "slurm", "test_slurm_nodes.py": "slurm", "test_ray.py": "ray",
             "test_independent_harness.py": "harness"}


def pytest_collection_modifyitems(items):
    for item in items:
        if "e2e" in getattr(item, "fixturenames", ()) or item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(optionalhook=True)  # (a hook of pytest-xdist's: absent where it is, -p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """tests/run's --dist loadgroup: each test on its own, but an EXCLUSIVE file's tests together, on
    one worker. (pytest-xdist's own groups name a test by a suffix of its node id, which pytest 9's
    node ids no longer take: grouped by file here, from the node id alone.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return EXCLUSIVE.get(os.path.basename(nodeid.split("::", 1)[0]), nodeid)

    return ByFile(config, log)




def _local_cluster(tmp_path_factory, nodes):
    """A real local Slurm of ``nodes`` nodes for the session (tests/local_slurm.py), stopped afterwards.
    Where it cannot run the tests that need it skip, unless FEEDPROF_REQUIRE_SLURM=1 (.ci/run)."""
    from local_slurm import LocalSlurm, TwoNodeSlurm, missing

    why = missing(nodes=nodes)
    if why:
        if os.environ.get("FEEDPROF_REQUIRE_SLURM") == "1":
            pytest.fail(f"FEEDPROF_REQUIRE_SLURM=1, but a local Slurm of {nodes} node(s) cannot run here: {why}")
        pytest.skip(f"no local Slurm of {nodes} node(s): {why}")
    cluster = (TwoNodeSlurm if nodes == 2 else LocalSlurm)(str(tmp_path_factory.mktemp(f"slurm{nodes}")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory):
    """A real one-node Slurm on localhost."""
    yield from _local_cluster(tmp_path_factory, 1)


@pytest.fixture(scope="session")
def local_slurm_nodes(tmp_path_factory):
    """A real two-node Slurm on this machine: nodes n1 and n2, each slurmd in UTS, PID and mount
    namespaces of its own (tests/local_slurm.py TwoNodeSlurm), as separate machines are."""
    yield from _local_cluster(tmp_path_factory, 2)


def _in_cluster(cluster, monkeypatch):
    """The cluster's SLURM_CONF in this test's environment (so every srun, squeue and feedprof the
    test starts uses it); afterwards nothing of the test may be left in its queue."""
    monkeypatch.setenv("SLURM_CONF", cluster.conf)
    assert cluster.wait_empty() == [], "an earlier test left jobs in the queue"
    yield cluster
    assert cluster.wait_empty() == []


@pytest.fixture
def slurm(local_slurm, monkeypatch, no_leftovers):
    """The local one-node Slurm, for this test."""
    yield from _in_cluster(local_slurm, monkeypatch)


@pytest.fixture
def slurm_nodes(local_slurm_nodes, monkeypatch, no_leftovers):
    """The local two-node Slurm, for this test."""
    yield from _in_cluster(local_slurm_nodes, monkeypatch)


@pytest.fixture(scope="session")
def e2e():
    """Marks the test that requests it end-to-end (see pytest_collection_modifyitems)."""


def _module_or_skip(name):
    """A session fixture giving module ``name``, or skipping the tests that need it
    where it is not installed. Imported when a test first needs it, not at
    collection: the fast tier never pays for TensorFlow it does not use."""
    return pytest.fixture(scope="session", name=name)(lambda: pytest.importorskip(name))


torch = _module_or_skip("torch")
tensorflow = _module_or_skip("tensorflow")
keras = _module_or_skip("keras")
tf_keras = _module_or_skip("tf_keras")
IPython = _module_or_skip("IPython")
jsonschema = _module_or_skip("jsonschema")
tensorboard = _module_or_skip("tensorboard")


@pytest.fixture(scope="session")
def ray():
    """Ray (./tests/run --all installs the "ray" extra): the Ray tests skip without it, unless
    FEEDPROF_REQUIRE_RAY=1 (.ci/run). Not imported: feedprof itself never imports it."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        if os.environ.get("FEEDPROF_REQUIRE_RAY") == "1":
            pytest.fail("FEEDPROF_REQUIRE_RAY=1, but Ray is not installed (pip install -e '.[ray]')")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")


@pytest.fixture(scope="session")
def DataLoader(torch):  # noqa: N802 (named as the class it gives, so test bodies read as usual)
    return torch.utils.data.DataLoader


@pytest.fixture
def cli(capsys, monkeypatch):
    """``feedprof ARGS`` in this process: feedprof.cli.main(argv), its output from
    capsys, as the CompletedProcess run_feedprof gives. For argument handling,
    which needs no process of its own."""
    from feedprof.cli import main

    def run(args, cwd=None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own exits (--help)
            code = exc.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)

    return run


def feedprof_args(command, script, *words):
    """``COMMAND [options] SCRIPT [its args]`` from feedprof's options and the script's arguments
    written in one list, ``--`` between them (as a helper's ``*extra`` has them): feedprof's
    options go before the script, everything after it is the script's."""
    words = list(words)
    cut = words.index("--") if "--" in words else len(words)
    return [*command, *words[:cut], script, *words[cut + 1:]]


def run_feedprof(args, via="module", timeout=240, cwd=None, env=None):
    """The real CLI in a subprocess: ``python -m feedprof`` or the ``feedprof`` script.
    A test that calls it requests ``e2e`` (or ``no_leftovers``)."""
    cmd = [sys.executable, "-m", "feedprof"] if via == "module" else [FEEDPROF_BIN]
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=full_env)


def run_side_by_side(cmds, cwd, timeout=240, env=None):
    """Commands started together that meet each other (two torchrun "nodes"): each one's
    output goes to a file, so none blocks on a pipe nobody reads while the test waits on
    another. A hang kills them all and fails with what each said: a rendezvous that never
    meets is told apart from a feedprof that never ends."""
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    logs = [(Path(cwd) / f"side{k}.out", Path(cwd) / f"side{k}.err") for k in range(len(cmds))]
    procs = []
    try:
        for cmd, (out, err) in zip(cmds, logs):
            with open(out, "w") as out_fh, open(err, "w") as err_fh:
                procs.append(subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=out_fh, stderr=err_fh))
        deadline = time.monotonic() + timeout
        codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    except BaseException as exc:
        ended = [p.poll() for p in procs]
        for p in procs:
            p.kill()
            p.wait()
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
        said = "\n".join(f"--- command {k} ({'still running' if code is None else f'exit {code}'}) said:\n"
                         f"{err.read_text()[-2000:]}" for k, ((_, err), code) in enumerate(zip(logs, ended)))
        pytest.fail(f"side-by-side commands ran past {timeout} s\n{said}")
    return [subprocess.CompletedProcess(cmd, code, out.read_text(), err.read_text())
            for cmd, code, (out, err) in zip(cmds, codes, logs)]


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
            if "FEEDPROF_TRIAL_DIR" in env or "feedprof.trial.zygote" in cmdline:
                found.append((p.pid, cmdline))
        except psutil.Error:
            continue
    return found


@pytest.fixture
def no_leftovers(monkeypatch, request, e2e):
    mark = f"{os.getpid()}:{request.node.nodeid}"
    monkeypatch.setenv(TEST_MARK, mark)
    yield
    deadline = time.monotonic() + 5
    while leftover_trial_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftover_trial_processes(mark) == []


# ------------------------------------------------ every feedprof JSON validates

_EXEMPT_DIRS = []  # tmp_paths of tests marked writes_invalid_json
_VALIDATED = {}  # path -> mtime when it was found valid (the session's sweep skips it)
_SESSION_START_S = time.time()


def feedprof_json_files(root, newer_than_s=0.0):
    """(path, data) of every JSON file under root that names a feedprof schema."""
    for dirpath, _, names in os.walk(str(root)):
        for name in names:
            path = os.path.join(dirpath, name)
            if not name.endswith(".json") or any(path.startswith(d + os.sep) for d in _EXEMPT_DIRS):
                continue
            try:
                mtime = os.path.getmtime(path)
                if mtime < newer_than_s or _VALIDATED.get(path) == mtime:
                    continue
                with open(path, encoding="utf-8") as fh:
                    data = json.load(fh)
            except (OSError, ValueError):  # gone, or not JSON at all (a test's deliberate junk)
                continue
            if isinstance(data, dict) and str(data.get("schema", "")).startswith("feedprof."):
                yield path, data
                _VALIDATED[path] = mtime


def invalid_feedprof_json(root, newer_than_s=0.0):
    """What is wrong with each feedprof JSON file under root, against the shipped schemas."""
    from jsonschema import ValidationError

    from feedprof.store.schema import UnknownSchema, validate

    problems = []
    for path, data in feedprof_json_files(root, newer_than_s):
        try:
            validate(data)
        except ValidationError as exc:
            problems.append(f"{path}: not a valid {data['schema']} file at {exc.json_path}: {exc.message}")
        except UnknownSchema as exc:
            problems.append(f"{path}: {exc}")
    return problems


@pytest.fixture(autouse=True)
def written_json_is_valid(request):
    """After each test: every run.json / results.json / trial result.json (any file
    naming a feedprof schema) under its tmp_path fits the shipped JSON Schema.
    A test that writes invalid files on purpose is marked writes_invalid_json."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is None:
        return
    if request.node.get_closest_marker("writes_invalid_json"):
        _EXEMPT_DIRS.append(str(tmp))
        return
    problems = invalid_feedprof_json(tmp)
    assert not problems, "\n".join(problems)


@pytest.fixture(autouse=True, scope="session")
def session_json_is_valid(tmp_path_factory):
    """At the end: the same for module fixtures' directories (tmp_path_factory)
    and the notebooks' outputs written during this session."""
    yield
    problems = invalid_feedprof_json(tmp_path_factory.getbasetemp())
    problems += invalid_feedprof_json(os.path.join(REPO, "notebooks"), newer_than_s=_SESSION_START_S)
    assert not problems, "\n".join(problems)
