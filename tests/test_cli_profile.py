"""`feedprof profile` as a real subprocess on unmodified scripts; its usage errors in-process."""
import json
import os

import pytest

from tests.conftest import feedprof_args, run_feedprof, write_script
from tests.scripts import torch_loop


FAST = ["--window-batches", "40", "--warmup-batches", "2", "--interval", "0.1"]


def profile(tmp_path, script, *extra, via="module"):
    out = tmp_path / "out"
    proc = run_feedprof(feedprof_args(["profile"], script, "--out", str(out), *FAST, *extra), via=via)
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else None
    return proc, run


@pytest.mark.serial
@pytest.mark.parametrize("via", ["module", "console-script"])
def test_input_bound_script(tmp_path, via, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=10, step_ms=1))
    proc, run = profile(tmp_path, script, via=via)
    assert proc.returncode == 0, proc.stderr
    assert run["schema"] == "feedprof.run/1"
    s = run["summary"]
    assert s["input_bound"] == "highly" and s["data_wait_fraction"] > 0.8
    assert s["loader"].startswith("train.py:")  # the training loader, not val
    assert "highly input-bound" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.serial
def test_compute_bound_script(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=0, step_ms=20))
    proc, run = profile(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    assert run["summary"]["input_bound"] == "not"
    assert run["summary"]["data_wait_fraction"] < 0.05
    assert "not input-bound" in proc.stdout


@pytest.mark.serial
def test_half_waiting_script_is_measured_near_the_truth(tmp_path, no_leftovers, torch):
    # 2 samples x 5 ms to load, 10 ms to train: the loop waits half the time
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=5, step_ms=10))
    proc, run = profile(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    assert 0.35 < run["summary"]["data_wait_fraction"] < 0.65


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_with_fork_and_spawn(tmp_path, context, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=2, step_ms=5, workers=2))
    proc, run = profile(tmp_path, script, "--", "--context", context)
    assert proc.returncode == 0, proc.stderr
    assert run["summary"]["num_workers"] == 2
    assert run["summary"]["batches_measured"] >= 30
    assert max(run["samples"]["n_workers"]) >= 2


def test_script_sees_its_own_argv_name_and_path(tmp_path, no_leftovers, torch):
    (tmp_path / "helper_mod.py").write_text("VALUE = 42\n")
    script = write_script(tmp_path, "train.py", """
        import json, os, sys
        import helper_mod  # importable from the script's own directory
        import torch
        from torch.utils.data import DataLoader
        with open(sys.argv[-1], "w") as fh:
            json.dump({"argv": sys.argv, "name": __name__, "path0": sys.path[0], "file": __file__}, fh)
        if __name__ == "__main__":
            for _ in DataLoader(list(range(64)), batch_size=2):
                pass
        """)
    seen = tmp_path / "seen.json"
    proc, run = profile(tmp_path, script, "--", "--flag", "x y", str(seen))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(seen.read_text())
    assert got["argv"] == [script, "--flag", "x y", str(seen)]
    assert got["name"] == "__main__"
    assert os.path.samefile(got["path0"], tmp_path)
    assert run["argv"] == ["--flag", "x y", str(seen)]


def test_a_loader_rebuilt_every_epoch_is_one_training_loader(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", """
        import time, torch
        from torch.utils.data import DataLoader
        val = DataLoader(list(range(8)), batch_size=4)
        for epoch in range(6):
            for batch in DataLoader(list(range(40)), batch_size=2):  # a new loader every epoch
                time.sleep(0.003)
            for batch in val:
                pass
        """)
    proc, run = profile(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    train = next(r for r in run["loaders"] if r["loader_id"] == run["window"]["loader_id"])
    assert train["instances"] >= 2 and train["site"].startswith("train.py:5")
    assert run["summary"]["batches_measured"] >= 30  # counted across the rebuilt loaders


@pytest.mark.serial
def test_time_between_epochs_counts_against_throughput(tmp_path, no_leftovers, torch):
    # Short epochs (20 batches, ~0.1 s of steps) and 0.3 s of validation after
    # each: the steps run at ~200 b/s, the loop at ~50. The figure configs are
    # ranked by must be the loop's, as the script's own stopwatch times it.
    script = write_script(tmp_path, "train.py", """
        import json, sys, time
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self):
                return 40
            def __getitem__(self, i):
                time.sleep(0.0025)
                return torch.zeros(4)

        train = DataLoader(Slow(), batch_size=2)
        starts, batches = [], []
        for epoch in range(12):
            starts.append(time.perf_counter())
            batches.append(sum(1 for _ in train))
            time.sleep(0.3)  # validation, a checkpoint: outside the training loader
        whole = range(1, len(starts) - 1)  # as feedprof: the first epoch is start-up
        rate = sum(batches[k] for k in whole) / (starts[-1] - starts[1])
        json.dump({"batches_per_s": rate}, open(sys.argv[1], "w"))
        """)
    own = tmp_path / "own.json"
    proc, run = profile(tmp_path, script, "--full", "--", str(own))
    assert proc.returncode == 0, proc.stderr
    s, truth = run["summary"], json.loads(own.read_text())["batches_per_s"]
    assert s["batches_per_s"] > 2.5 * truth  # the steps alone look ~4x faster
    assert s["effective_batches_per_s"] == pytest.approx(truth, rel=0.15)


def test_script_that_raises_mid_training(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", """
        import torch
        from torch.utils.data import DataLoader
        for i, batch in enumerate(DataLoader(list(range(100)), batch_size=2)):
            if i == 10:
                raise ValueError("loss is nan")
        """)
    proc, run = profile(tmp_path, script)
    assert proc.returncode == 1
    assert "ValueError: loss is nan" in proc.stderr
    assert 'File "' + script in proc.stderr  # the script's own traceback...
    assert "feedprof/" not in proc.stderr.split("Traceback")[1]  # ...without feedprof's frames
    assert run["outcome"]["state"] == "failed"


def test_full_run_to_completion(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=0, step_ms=1, epochs=2, n=40))
    proc, run = profile(tmp_path, script, "--full")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("done") == 2  # both epochs ran
    assert run["window"]["end"] == "full_run"


@pytest.mark.parametrize("args,message", [
    (["profile", "missing.py"], "no such script: missing.py"),
    (["profile", "."], "is a directory"),
    (["profile", "--bogus", "x.py"], "unrecognized arguments: --bogus"),
    (["profile", "--window-batches", "abc", "x.py"], "expected a whole number"),
    (["profile", "--interval", "-1", "x.py"], "expected a positive number"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_usage_is_one_line_and_exit_2(tmp_path, args, message, cli):
    (tmp_path / "x.py").write_text("print('hi')\n")
    proc = cli(args, cwd=str(tmp_path))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("via", ["module", "console-script"])
def test_bad_usage_from_the_real_entry_points(tmp_path, via, e2e):
    """The usage tests above run in-process; the exit status and the one line
    without a traceback also hold for `feedprof` and `python -m feedprof`."""
    proc = run_feedprof(["profile", "missing.py"], via=via, cwd=str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip() == "feedprof: no such script: missing.py"


def test_a_second_run_into_a_directory_in_use_is_bad_usage(tmp_path, no_leftovers, torch):
    """Two runs writing one --out would clear each other's trial directories:
    the second is refused (exit 2, one line naming the first's PID); the first
    runs on untouched."""
    import subprocess
    import sys
    import time

    script = write_script(tmp_path, "train.py", torch_loop(load_ms=10, step_ms=1))
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, "-m", "feedprof", "profile", "--out", str(out), *FAST, script],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lock = out / ".feedprof.lock"
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    second = run_feedprof(["tune", "--out", str(out), "--budget", "10", script])
    assert second.returncode == 2, second.stderr
    assert f"in use by another feedprof run (PID {first.pid})" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    assert first.wait(timeout=240) == 0, first.stderr
    assert json.loads((out / "run.json").read_text())["outcome"]["state"] == "ok"
    again = run_feedprof(["profile", "--out", str(out), *FAST, script])  # free once the first has ended
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("end,status", [("sys.exit(3)", 3), ("os.kill(os.getpid(), signal.SIGTERM)", 128 + 15)])
def test_profile_exits_with_the_scripts_own_status(tmp_path, end, status, no_leftovers, torch):
    """As `time` does: `feedprof profile train.py && next-step` behaves like `train.py && next-step`;
    the figures of the training before the exit are kept, and said so."""
    script = write_script(tmp_path, "train.py", f"""
        import os, signal, sys, time
        import torch
        from torch.utils.data import DataLoader
        for batch in DataLoader(list(range(60)), batch_size=2):  # ends before the window of 40 batches
            time.sleep(0.01)
        print("trained", flush=True)
        {end}
        """)
    proc, run = profile(tmp_path, script)
    assert proc.returncode == status, proc.stderr
    assert "trained" in proc.stdout and "verdict" in proc.stdout and "wrote " in proc.stderr
    assert f"feedprof exits with its status, {status}" in proc.stderr
    assert run["outcome"]["exit_code"] in (3, -15)
    if status == 3:  # killed by a signal, the script wrote no figures of its own: the samples only
        assert run["summary"]["batches_measured"] >= 20
