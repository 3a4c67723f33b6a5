"""Ray Train jobs: a TorchTrainer script run as ``feedprof profile|tune [--online] train_ray.py``.

The fast tier reads scripts and records (which scripts are Ray jobs, where --workers reaches the
DataLoader through train_loop_config, what Ray reserves per worker and the ScalingConfig line).
The end-to-end tests start a real local Ray from the script's own ray.init() (Ray 2.60, installed
by ./tests/run --all): the training workers are the ranks, never the driver nor Ray's daemons, and
after every case nothing of Ray is left running (``no_ray_left``)."""
import glob
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from conftest import TEST_MARK, run_feedprof, write_script
from scripts_ray import TRAIN_RAY, TRAIN_RAY_DATA

# ----------------------------------------------------------------- fast tier: reading the script

PLAIN_TORCH = "import torch\nfrom torch.utils.data import DataLoader\nfor b in DataLoader(list(range(8))):\n    pass\n"


@pytest.mark.parametrize("source,expected", [
    (TRAIN_RAY, True),
    ("from ray.train.torch import TorchTrainer\n", True),
    ("from ray import train\n", True),
    ("import ray\ntrainer = ray.train.torch.TorchTrainer(f)\n", True),
    ("import ray.train.torch as rt\n", True),
    ("import ray\nray.data.range(8).take(1)\n", False),  # Ray Data alone: the script trains itself
    (PLAIN_TORCH, False),
    ("def broken(:\n", False),
])
def test_a_ray_train_script_is_told_by_what_it_imports(tmp_path, source, expected):
    from feedprof.trial.ray_train import runs_ray_train

    assert runs_ray_train(write_script(tmp_path, "train.py", source)) is expected


def test_a_ray_train_script_is_a_job_run_by_feedprof_s_own_python(tmp_path, monkeypatch):
    from feedprof.trial.launch import parse_launch, script_launch

    write_script(tmp_path, "train_ray.py", TRAIN_RAY)
    write_script(tmp_path, "plain.py", PLAIN_TORCH)
    monkeypatch.chdir(tmp_path)
    launch = script_launch("train_ray.py", ["--epochs", "3"])
    assert launch.launcher == "ray" and launch.script == str(tmp_path / "train_ray.py")
    assert launch.command == ("python", "train_ray.py", "--epochs", "3")  # as the user would type it
    assert launch.argv() == (sys.executable, "train_ray.py", "--epochs", "3")  # as it runs
    assert script_launch("plain.py", []) is None
    assert parse_launch([sys.executable, "train_ray.py"]).launcher == "ray"
    assert parse_launch([sys.executable, "plain.py"]).launcher == "python"


def test_the_cli_runs_a_ray_train_script_as_a_job(tmp_path, monkeypatch):
    from feedprof.cli import _what_to_run

    write_script(tmp_path, "train_ray.py", TRAIN_RAY)
    monkeypatch.chdir(tmp_path)
    script, args, launch = _what_to_run("train_ray.py", ["--workers", "2"], "profile")
    assert script == str(tmp_path / "train_ray.py") and args == [] and launch.launcher == "ray"
    assert launch.command[1:] == ("train_ray.py", "--workers", "2")


def test_a_ray_job_s_default_budget_is_longer_than_a_script_s(tmp_path, monkeypatch):
    """Every trial of a Ray Train job starts Ray anew: its tune's default budget is 300 s."""
    from feedprof.cli import _what_to_run, tune_budget_s

    write_script(tmp_path, "train_ray.py", TRAIN_RAY)
    write_script(tmp_path, "plain.py", "print(1)\n")
    monkeypatch.chdir(tmp_path)
    assert tune_budget_s(None, _what_to_run("train_ray.py", [], "tune")[2]) == 300
    assert tune_budget_s(None, _what_to_run("plain.py", [], "tune")[2]) == 120
    assert tune_budget_s(150, _what_to_run("train_ray.py", [], "tune")[2]) == 150


LOADER_AT = next(i for i, text in enumerate(TRAIN_RAY.lstrip().splitlines(), 1) if "DataLoader(data" in text)
POSITIONAL = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers")


def _origin(path):
    from feedprof.frameworks.origin import Tracer

    line = next(i for i, text in enumerate(open(path), 1) if "DataLoader(data" in text)
    return Tracer().origin([(path, line)], ("DataLoader",), "num_workers", POSITIONAL)


def test_workers_from_train_loop_config_are_the_script_s_flag(tmp_path):
    from feedprof.frameworks.origin import FromFlag

    found = _origin(write_script(tmp_path, "train_ray.py", TRAIN_RAY))
    assert isinstance(found, FromFlag) and found.flag == "--workers" and found.default == "0"


def test_workers_read_with_get_and_a_literal_in_the_config_dict(tmp_path):
    from feedprof.frameworks.origin import AtKey

    body = TRAIN_RAY.replace('num_workers=config["workers"]', 'num_workers=config.get("workers", 0)')
    body = body.replace('{"workers": args.workers,', '{"workers": 0,')
    found = _origin(write_script(tmp_path, "train_ray.py", body))
    assert isinstance(found, AtKey) and found.key == "workers"
    assert "{\"workers\": 0," in open(found.path).read().splitlines()[found.line - 1]


def test_a_config_the_trainer_call_does_not_show_is_not_followed(tmp_path):
    from feedprof.frameworks.origin import NotFound

    body = TRAIN_RAY.replace("train_loop_config={", "train_loop_config=load_config() or {")
    found = _origin(write_script(tmp_path, "train_ray.py", body))
    assert isinstance(found, NotFound) and found.expression == "config['workers']"


def _rank(rank, reserved, main_pct, workers_pct, local=2):
    from feedprof.store import RankInfo, Run, Summary

    return Run(kind="rank", rank=RankInfo(rank=rank, local_rank=rank, world_size=2, local_world_size=local,
                                          launcher="ray", cpus=reserved),
               summary=Summary(main_cpu_pct=main_pct, workers_cpu_pct=workers_pct))


def test_a_reservation_that_holds_one_too_small_and_one_that_capped_the_search():
    from feedprof.analyse.ray_cpus import reservation

    io_bound = reservation([_rank(0, 1, 20.0, 30.0), _rank(1, 1, 25.0, 10.0)], 8, machine_cpus=16, capped=False)
    assert io_bound.reserved_cpus == 1 and io_bound.used_cores == pytest.approx(0.5)
    assert io_bound.reserve_cpus is None and io_bound.workers_per_rank == 8 and io_bound.local_ranks == 2
    busy = reservation([_rank(0, 1, 90.0, 170.0), _rank(1, 1, 80.0, 150.0)], 3, machine_cpus=16, capped=False)
    assert busy.used_cores == pytest.approx(2.6) and busy.reserve_cpus == 3 and not busy.capped
    capped = reservation([_rank(0, 2, 90.0, 100.0), _rank(1, 2, 90.0, 100.0)], 1, machine_cpus=16, capped=True)
    assert capped.capped and capped.reserve_cpus == 8  # the machine's CPUs over its 2 training workers
    assert reservation([_rank(0, 2, 90.0, 100.0)], 1, machine_cpus=2, capped=True, ).reserve_cpus is None


def test_a_job_that_is_not_ray_s_has_no_reservation():
    from feedprof.analyse.ray_cpus import reservation
    from feedprof.store import RankInfo, Run

    torchrun = Run(kind="rank", rank=RankInfo(rank=0, launcher="torchrun", cpus=4))
    assert reservation([torchrun], 4, machine_cpus=16, capped=True) is None


@pytest.mark.parametrize("scaling,expected", [
    ("ScalingConfig(num_workers=2, use_gpu=False)",
     "ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={'CPU': 3})"),
    ("ScalingConfig(num_workers=2, resources_per_worker={'GPU': 1, 'CPU': 1})",
     "ScalingConfig(num_workers=2, resources_per_worker={'GPU': 1, 'CPU': 3})"),
    ("ScalingConfig(num_workers=2, resources_per_worker=RESOURCES)", ""),  # not readable: words only
])
def test_the_scaling_config_line_reserves_more_cpus_per_worker(tmp_path, scaling, expected):
    from feedprof.frameworks.paste import reservation_paste

    body = TRAIN_RAY.replace("ScalingConfig(num_workers=2, use_gpu=False)", scaling)
    path = write_script(tmp_path, "train_ray.py", body)
    line, site = reservation_paste(path, 3)
    at = next(i for i, text in enumerate(open(path), 1) if "ScalingConfig(num_workers" in text)
    assert site == f"train_ray.py:{at}"
    assert (expected in line and line.startswith("trainer = TorchTrainer(") and line.endswith(f"# {site}")) \
        if expected else line == ""


def test_the_reservation_and_a_joined_cluster_in_words():
    from feedprof.render.words import say
    from feedprof.store.reasons import RayClusterJoined, RayCpusReserved

    holds = say(RayCpusReserved(reserved_cpus=1, used_cores=0.31, workers_per_rank=8, local_ranks=2, world_size=2,
                                machine_cpus=2))
    assert "2 × 8 = 16 loader workers" in holds and "the reservation holds" in holds
    capped = say(RayCpusReserved(reserved_cpus=1, used_cores=1.1, workers_per_rank=1, local_ranks=2, world_size=2,
                                 machine_cpus=16, reserve_cpus=8, capped=True, site="train_ray.py:64"))
    assert "more loader workers need more CPUs reserved per Ray worker" in capped
    assert "reserve 8 each (ScalingConfig at train_ray.py:64" in capped
    joined = say(RayClusterJoined(address="auto"))
    assert "joined a Ray cluster that was already running (auto)" in joined and "feedprof.profile()" in joined
    assert "no data loader" not in joined


def test_the_hosted_loop_keeps_the_training_function_s_signature():
    """Ray passes train_loop_config only to a function that takes one argument: it reads the
    wrapper's parameters, which must be the script's function's."""
    from feedprof.trial.ray_train import HostedLoop

    def with_config(config):
        return config["x"]

    def without():
        return 7

    assert list(inspect.signature(HostedLoop(with_config, "/nowhere/spec.json")).parameters) == ["config"]
    assert list(inspect.signature(HostedLoop(without, "/nowhere/spec.json")).parameters) == []
    assert HostedLoop(with_config, "/nowhere/spec.json")({"x": 3}) == 3  # no job spec here: just the function
    assert HostedLoop(without, "/nowhere/spec.json").__name__ == "without"


def test_a_worker_not_below_the_driver_is_no_rank_and_says_so(tmp_path):
    """A cluster's worker (Ray joined one without the driver's ray.init seeing it) is not measured:
    the job is said to be out of reach. Here the "driver" is a process that is no ancestor of this one."""
    from feedprof.trial.ray_train import DRIVER_FILE, host_worker

    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    other = subprocess.Popen(["sleep", "30"])
    try:
        assert host_worker(str(spec), other.pid) is None
    finally:
        other.kill()
        other.wait()
    assert json.loads((tmp_path / DRIVER_FILE).read_text()) == {"joined": "auto"}


def test_what_the_driver_said_is_a_finding_of_the_job(tmp_path):
    from feedprof.store.reasons import RayClusterJoined
    from feedprof.trial.ray_train import DRIVER_FILE, driver_notes

    assert driver_notes(str(tmp_path)) == ()
    (tmp_path / DRIVER_FILE).write_text(json.dumps({"joined": "127.0.0.1:6379"}))
    assert driver_notes(str(tmp_path)) == (RayClusterJoined(address="127.0.0.1:6379"),)


def test_ray_data_prefetch_is_a_space_of_its_own_set_where_the_script_sets_it(tmp_path):
    """iter_torch_batches' prefetch_batches: a thread of the training worker, no processes; the paste
    follows it through train_loop_config to the script's flag; batch_size is reported, never changed."""
    from types import SimpleNamespace

    from feedprof.tune.spaces import make_space

    path = write_script(tmp_path, "train_data.py", TRAIN_RAY_DATA)
    at = next(i for i, text in enumerate(open(path), 1) if "iter_torch_batches(" in text)
    space = make_space("ray.data", {"prefetch_batches": 1, "batch_size": 16}, cpu_cap=1, max_primary=32,
                       cuda_used=False)
    assert space.rungs(32) == [0, 2, 4, 8, 16] and space.workers({"prefetch_batches": 8}) == 0
    assert space.describe({"prefetch_batches": 4}) == "prefetch_batches=4, batch_size=16"
    paste = space.paste({"prefetch_batches": 4}, SimpleNamespace(call_chain=(f"train_data.py:{at}",)), path,
                        ["--epochs", "3"])
    assert paste.line == f"python {path} --epochs 3 --prefetch 4", paste


# ----------------------------------------------------------------- end to end, on a local Ray

QUICK = ["--window-batches", "60", "--warmup-batches", "3", "--interval", "0.2"]
RAY_NAMES = ("raylet", "gcs_server", "ray::", "default_worker.py", "setup_worker.py")


def ray_processes(mark, since_s):
    """Ray's processes started under this test's mark (its daemons and workers inherit it). A
    process that renamed itself (``ray::RayTrainWorker``: setproctitle writes over the memory
    /proc shows as its environment) counts where it started after the test did."""
    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline", "status", "create_time"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            words = " ".join([p.info["name"] or ""] + (p.info["cmdline"] or []))
            env = p.environ()
            ours = env.get(TEST_MARK) == mark or ("PATH" not in env and p.info["create_time"] >= since_s)
            if any(n in words for n in RAY_NAMES) and ours:
                found.append((p.pid, words[:120]))
        except psutil.Error:
            continue
    return found


@pytest.fixture
def no_ray_left(ray, no_leftovers):
    """After the test (a trial, a timeout, a signal), nothing of Ray it started is running."""
    mark, since_s = os.environ[TEST_MARK], time.time() - 1
    yield since_s
    deadline = time.monotonic() + 30  # (Ray's own teardown takes seconds more beside other tests)
    while ray_processes(mark, since_s) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_processes(mark, since_s) == []


def _script(tmp_path, **replace):
    body = TRAIN_RAY
    for old, new in replace.items():
        body = body.replace(old, new)
    return write_script(tmp_path, "train_ray.py", body)


def _reports(prefix):
    return {r: json.loads(open(f"{prefix}.{r}").read()) for r in (0, 1)}


def test_profile_measures_both_training_workers_and_their_wait(tmp_path, no_ray_left):
    _script(tmp_path)
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), *QUICK, "train_ray.py", "--", "--epochs", "40"],
                        timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    ranks = run["ranks"]
    assert [(r["rank"]["rank"], r["rank"]["launcher"], r["rank"]["world_size"]) for r in ranks] == \
        [(0, "ray", 2), (1, "ray", 2)]
    for r in ranks:
        assert r["rank"]["local_world_size"] == 2 and r["rank"]["cpus"] == 1  # Ray reserved 1 CPU per worker
        assert r["loaders"][0]["site"] == f"train_ray.py:{LOADER_AT}" and r["summary"]["data_wait_fraction"] >= 0.5
        assert r["summary"]["main_cpu_pct"] is not None
    assert len({r["rank"]["pid"] for r in ranks}) == 2  # two Ray worker processes, neither the driver
    assert "rank  local" in proc.stdout and "highly input-bound" in proc.stdout
    assert "no data loader" not in proc.stderr


@pytest.mark.serial
def test_tune_picks_workers_and_names_the_flag_that_feeds_train_loop_config(tmp_path, no_ray_left):
    _script(tmp_path)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--budget", "150", "--max-workers", "8", "--out", str(out), "train_ray.py", "--",
                         "--epochs", "40"], timeout=600, cwd=tmp_path)  # (its default: test_a_ray_job_s_default_budget)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    rec = result["recommendation"]
    assert rec["config"]["num_workers"] >= 4, rec
    assert "python train_ray.py --epochs 40 --workers" in rec["paste_line"], rec["paste_line"]
    assert result["launch"] == ["python", "train_ray.py", "--epochs", "40"]
    reserved = [r for r in rec["reasons"] if r["code"] == "ray_cpus_reserved"]
    assert reserved and reserved[0]["reserved_cpus"] == 1 and reserved[0]["reserve_cpus"] is None  # I/O-bound
    assert "--workers" in proc.stdout and "Ray reserves 1 CPU(s) for each" in proc.stdout


@pytest.mark.serial
def test_online_gives_each_rank_its_samples_and_weights_as_written_in_less_time(tmp_path, no_ray_left):
    _script(tmp_path)
    args = ["--epochs", "8", "--fetch-ms", "6"]
    plain = subprocess.run([sys.executable, "train_ray.py", *args, "--report", str(tmp_path / "plain")],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-3000:]
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--online", "--out", str(out), "train_ray.py", "--", *args,
                         "--report", str(tmp_path / "tuned")], timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    as_written, tuned = _reports(tmp_path / "plain"), _reports(tmp_path / "tuned")
    for rank in (0, 1):  # the same batches, epoch by epoch, and the same weights, on every rank
        assert tuned[rank]["epochs"] == as_written[rank]["epochs"] and tuned[rank]["weights"] == \
            as_written[rank]["weights"]
    result = json.loads((out / "results.json").read_text())
    assert {s["rank"] for s in result["online"]["switches"]} == {0, 1}  # every rank applied the decisions
    rec = result["recommendation"]
    assert rec["config"]["num_workers"] >= 4 and "--workers" in rec["paste_line"]
    assert [r["reserved_cpus"] for r in rec["reasons"] if r["code"] == "ray_cpus_reserved"] == [1]
    # the training loops' own time (Ray's start, the same either way, is the machine's)
    assert max(t["loop_s"] for t in tuned.values()) <= 0.6 * max(t["loop_s"] for t in as_written.values())


def _wait_for(predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


@pytest.mark.parametrize("command,signum", [(["profile", "--full"], signal.SIGINT),
                                            (["tune", "--online"], signal.SIGTERM)])
def test_a_signal_ends_every_ray_process_and_keeps_what_was_measured(tmp_path, no_ray_left, command, signum):
    _script(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "feedprof", *command, "--out", str(out), "train_ray.py", "--",
                             "--epochs", "400"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    events = str(out / "*" / "events-1.jsonl")
    _wait_for(lambda: any("first_batch" in open(p).read() for p in glob.glob(events)), 400)
    time.sleep(2)  # training
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    record = json.loads((out / ("results.json" if "tune" in command else "run.json")).read_text())
    ranks = (record.get("run") or record)["ranks"]
    assert sorted(r["rank"]["rank"] for r in ranks) == [0, 1]
    assert all(r["summary"]["batches_measured"] > 0 for r in ranks)  # each rank wrote what it measured


def test_a_script_that_joins_a_running_cluster_is_said_to_be_out_of_reach(tmp_path, no_ray_left):
    from feedprof.trial.jobrunner import free_port

    _script(tmp_path)
    port = free_port()
    temp = tempfile.mkdtemp(prefix="fp-ray-")  # short: Ray's socket paths must fit 107 bytes
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}  # (the driver has no token of that cluster's)
    started = subprocess.run([ray_cli, "start", "--head", "--port", str(port), "--num-cpus", "4",
                              "--temp-dir", temp, "--include-dashboard", "false", "--disable-usage-stats"],
                             capture_output=True, text=True, timeout=180, env=env, start_new_session=True)
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        proc = run_feedprof(["profile", "--out", str(tmp_path / "out"), "train_ray.py", "--", "--epochs", "1",
                             "--address", f"127.0.0.1:{port}"], timeout=300, cwd=tmp_path, env=env)
    finally:  # that cluster's processes only (`ray stop` would end every Ray on the machine)
        for pid, _ in ray_processes(os.environ[TEST_MARK], no_ray_left):
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"joined a Ray cluster that was already running (127.0.0.1:{port})" in proc.stderr
    assert "feedprof.profile()" in proc.stderr and "no data loader was iterated" not in proc.stderr


def test_profile_times_ray_data_s_iter_torch_batches_in_both_workers(tmp_path, no_ray_left):
    write_script(tmp_path, "train_data.py", TRAIN_RAY_DATA)
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), *QUICK, "train_data.py", "--", "--epochs", "20"],
                        timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = json.loads((out / "run.json").read_text())["ranks"]
    assert [r["rank"]["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        loader = r["loaders"][0]
        assert loader["framework"] == "ray.data" and loader["config"] == {"prefetch_batches": 1, "batch_size": 16}
        assert r["summary"]["batches_measured"] > 0 and r["summary"]["data_wait_fraction"] is not None
