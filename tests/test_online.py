"""feedprof tune --online, end to end: real scripts, real workers, real signals.

The run under feedprof must see what the run as written sees: the same samples
in the same order every epoch, the same final weights, the same draw from
torch's global RNG afterwards. Timing targets live in benchmarks/online_vs_offline.py."""
import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_feedprof, write_script
from online_runs import as_written as _as_written, both, online as _online, saw
from scripts_online import DDP, IN_LOOP, SEEDED

pytest.importorskip("torch")


@pytest.mark.seeded_online
@pytest.mark.parametrize("variant", [[], ["--generator"], ["--workers", "2", "--persistent"]],
                         ids=["global_rng", "loader_generator", "persistent_workers"])
def test_the_run_sees_what_it_would_see_without_feedprof(tmp_path, no_leftovers, variant):
    script = write_script(tmp_path, "train.py", SEEDED)
    (plain, want), (proc, got, results) = both(tmp_path, script, *variant)
    assert plain.returncode == 0, plain.stderr
    assert proc.returncode == 0, proc.stderr
    # the same samples, in the same order, every epoch; the same batches, weights and next random numbers
    assert saw(got) == saw(want)
    online = results["online"]
    explored = {s["config"]["num_workers"] for s in online["switches"]}
    assert len(explored) >= 2, online["switches"]  # it did switch, mid-run
    checks = online["order_checks"]  # and checked it: every epoch, batch by batch
    assert [c["epoch"] for c in checks] == [1, 2, 3] and all(c["same"] and not c["rng_moved"] for c in checks)
    assert "the same samples in the same order as the run as written in epoch(s) 1–3" in proc.stderr
    assert not online["randomness"] and "randomness" not in proc.stderr
    assert results["schema"].startswith("feedprof.tune/")


@pytest.mark.serial
def test_an_io_bound_script_is_recommended_several_workers(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", SEEDED)
    proc, got, results = _online(tmp_path, script, tmp_path / "online.json", "--epochs", "4")
    assert proc.returncode == 0, proc.stderr
    rec = results["recommendation"]
    assert rec["config"]["num_workers"] >= 4, rec
    assert rec["speedup"] > 2
    assert "num_workers" in proc.stdout  # the recommendation and its paste line, on stdout
    assert (tmp_path / "out" / "report.html").exists()


def test_workers_killed_while_exploring_lose_and_repeat_nothing(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", SEEDED)
    (plain, want), (proc, got, results) = both(tmp_path, script, "--kill-above", "4", "--epochs", "4")
    assert proc.returncode == 0, proc.stderr
    assert got["epochs"] == want["epochs"] and got["weights"] == want["weights"]
    failures = results["online"]["failures"]
    assert failures and all(f["config"]["num_workers"] > 4 and f["kind"] == "killed" for f in failures)
    assert results["recommendation"]["config"]["num_workers"] <= 4


def test_the_datasets_own_error_is_the_scripts(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", SEEDED)
    (plain, _), (proc, _, results) = both(tmp_path, script, "--fail-at", "37")
    assert plain.returncode == 1 and proc.returncode == 1
    assert "ValueError: corrupt record 37" in plain.stderr
    assert "ValueError: corrupt record 37" in proc.stderr
    traceback = proc.stderr.split("Traceback")[-1].split("ValueError: corrupt record 37")[0]
    assert "feedprof" not in traceback  # the script's own traceback, without feedprof's frames
    assert results is not None and results["online"]["windows"]  # what was measured is kept


def test_feedprof_exits_with_the_jobs_own_status(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", SEEDED)
    proc, got, results = _online(tmp_path, script, tmp_path / "online.json", "--exit", "3", "--epochs", "1")
    assert proc.returncode == 3, proc.stderr
    assert got is not None and results["online"]["exit_code"] == 3


def test_ctrl_c_keeps_what_was_measured(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", SEEDED)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "feedprof", "tune", "--online", "--out", str(out), script,
                             "--report", str(tmp_path / "r.json"), "--epochs", "50"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    events = out / "run" / "events.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (events.exists() and "online_window" in events.read_text()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    results = json.loads((out / "results.json").read_text())
    assert results["online"]["windows"] and not results["complete"]
    assert (out / "report.html").exists()


def test_a_torchrun_job_is_tuned_on_every_rank(tmp_path, no_leftovers):
    script = write_script(tmp_path, "ddp.py", DDP)
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    plain = subprocess.run([*launch, script, "--report", str(tmp_path / "plain")], capture_output=True, text=True,
                           timeout=180)
    assert plain.returncode == 0, plain.stderr
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--online", "--out", str(out), "--", *launch, script,
                         "--report", str(tmp_path / "online")], timeout=240)
    assert proc.returncode == 0, proc.stderr
    for rank in (0, 1):
        want = json.loads((tmp_path / f"plain.{rank}").read_text())
        got = json.loads((tmp_path / f"online.{rank}").read_text())
        assert got["epochs"] == want["epochs"] and got["weights"] == want["weights"]
    results = json.loads((out / "results.json").read_text())
    ranks = {w["rank"] for w in results["online"]["windows"]}
    assert ranks == {0, 1}
    assert {s["rank"] for s in results["online"]["switches"] if s["config"]["num_workers"]} == {0, 1}


@pytest.mark.parametrize("variant", [["--bad-record", "37"], ["--batch-sampler"], ["--rebuild"],
                                     ["--workers", "2", "--fetch-ms", "0", "--augment"]],
                         ids=["loop_skips_a_bad_record", "eager_batch_sampler", "loader_rebuilt_each_epoch",
                              "workers_augment_not_input_bound"])
@pytest.mark.seeded_online
def test_shapes_of_real_loops_see_what_they_would_see(tmp_path, no_leftovers, variant):
    """A loop that catches the dataset's error and goes on, a batch sampler that draws its order
    in __iter__, a DataLoader built anew every epoch, and workers that draw random augmentation
    (their seeds are the script's own while its settings are kept)."""
    script = write_script(tmp_path, "train.py", SEEDED)
    (plain, want), (proc, got, results) = both(tmp_path, script, *variant)
    assert plain.returncode == 0, plain.stderr
    assert proc.returncode == 0, proc.stderr
    explored = any(s["config"]["num_workers"] != 2 for s in results["online"]["switches"])
    if "--augment" in variant and explored:
        # a loaded machine made the loop wait, so feedprof explored: the workers' augmentation
        # follows the worker count, and that is said; the samples, their order and the
        # script's own random stream are still the run as written's
        assert "randomness moved" in proc.stderr
        assert (got["epochs"], got["next_rand"]) == (want["epochs"], want["next_rand"])
    else:
        assert saw(got) == saw(want)
        assert "randomness" not in proc.stderr  # nothing random moved: not a word of it
    if "--rebuild" in variant:  # tuning goes on in the loaders built after the first
        assert max(w["epoch"] for w in results["online"]["windows"]) >= 1 or \
            len({s["config"]["num_workers"] for s in results["online"]["switches"]}) >= 2


@pytest.mark.serial
def test_a_loader_built_anew_every_short_epoch_is_still_tuned(tmp_path, no_leftovers):
    """Epochs shorter than a window, each with a new DataLoader at the same line: the window
    goes on across the rebuilt loaders, so configs are measured and compared, and the advice
    names the script's line."""
    script = write_script(tmp_path, "train.py", SEEDED)
    args = ("--rebuild", "--epochs", "24", "--samples", "320", "--batch-size", "8")
    plain, want = _as_written(script, tmp_path / "plain.json", *args)  # (before: a serial test runs alone)
    assert plain.returncode == 0, plain.stderr
    proc, got, results = _online(tmp_path, script, tmp_path / "online.json", *args)
    assert proc.returncode == 0, proc.stderr
    assert (got["epochs"], got["weights"], got["next_rand"]) == (want["epochs"], want["weights"], want["next_rand"])
    measured = {w["config"]["num_workers"] for w in results["online"]["windows"]}
    assert len(measured) >= 2 and max(measured) >= 4, results["online"]["windows"]
    rec = results["recommendation"]
    assert rec["config"]["num_workers"] >= 4 and not rec["config"]["persistent_workers"], rec["config"]
    line = next(i for i, text in enumerate(SEEDED.lstrip().splitlines(), 1)
                if "return DataLoader(DS, batch_size" in text)
    assert rec["loader_site"].endswith(f"train.py:{line}")
    assert rec["paste_line"].splitlines()[-1].endswith(f"--workers {rec['config']['num_workers']}")  # its own flag


def test_profile_tune_true_tunes_the_users_own_loop(tmp_path, no_leftovers):
    """feedprof.profile(tune=True) and prof.watch(loader): the same switching inside the user's
    process, the same order, and a tune's result and report."""
    script = write_script(tmp_path, "loop.py", IN_LOOP)
    runs = {}
    for mode in ("plain", "tune"):
        report = tmp_path / f"{mode}.json"
        proc = subprocess.run([sys.executable, script, str(report), mode], capture_output=True, text=True,
                              timeout=180)
        assert proc.returncode == 0, proc.stderr
        runs[mode] = json.loads(report.read_text())
    assert runs["tune"]["epochs"] == runs["plain"]["epochs"]
    assert runs["tune"]["next_rand"] == runs["plain"]["next_rand"]
    assert runs["tune"]["switches"] >= 2 and runs["tune"]["workers"] >= 2
    assert (tmp_path / "tune.json.html").exists()
