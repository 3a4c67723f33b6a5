"""`feedprof tune` end to end on tiny sleep-bound scripts (real trials, short windows)."""
import json
import time

import pytest

from tests.conftest import feedprof_args, run_feedprof, write_script
from tests.scripts import torch_loop

QUICK = ["--window-seconds", "0.6", "--min-window-batches", "20", "--warmup-batches", "2",
         "--interval", "0.1", "--quiet"]


def tune(tmp_path, script, *extra, timeout=300):
    out = tmp_path / "out"
    proc = run_feedprof(feedprof_args(["tune"], script, "--out", str(out), *QUICK, *extra), timeout=timeout)
    path = out / "results.json"
    return proc, (json.loads(path.read_text()) if path.exists() else None)


@pytest.mark.serial
def test_io_bound_script_gets_more_workers_than_cpus(tmp_path, no_leftovers, torch):
    # 4 samples x 5 ms of waiting per batch, 2 ms of training: input-bound, and sleep scales with workers
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=5, step_ms=2, n=400, batch_size=4, epochs=50))
    proc, res = tune(tmp_path, script, "--budget", "90", "--max-workers", "16")
    assert proc.returncode == 0, proc.stderr
    assert res["schema"] == "feedprof.tune/1"
    rec = res["recommendation"]
    assert rec["framework"] == "torch"
    assert set(rec["config"]) == {"num_workers", "pin_memory", "prefetch_factor", "persistent_workers"}
    assert rec["config"]["num_workers"] > 2  # past the 2 usable CPUs: the workers wait, they do not compute
    assert rec["speedup"] > 2.0
    assert rec["input_bound"] == "highly"
    roles = [t["role"] for t in res["trials"]]
    assert roles[:2] == ["baseline", "ceiling"]
    base = res["trials"][0]
    assert base["config"]["num_workers"] == 0 and base["state"] == "ok"
    for t in res["trials"]:
        assert {"config", "state", "batches_per_s", "data_wait_fraction", "main_cpu_pct", "workers_cpu_pct",
                "gpu_util_pct", "peak_rss_bytes"} <= set(t)
    # num_workers=args.workers: the script's own --workers flag is the advice
    n = rec["config"]["num_workers"]
    assert f"run with `--workers {n}`" in proc.stdout and rec["paste_line"].endswith(f"train.py --workers {n}")
    if len(rec["paste_line"].splitlines()) > 1:  # other knobs are set in the script's own statement
        assert rec["paste_line"].startswith("train = DataLoader(Samples(") and "num_workers=args.workers" in rec["paste_line"]
    assert "Recommendation" in proc.stdout and "Paste this" in proc.stdout
    # shuffle=True from torch's global RNG: persistent workers change a seeded run's order, and the advice says so
    changes = [r for r in rec["reasons"] if r["code"] == "order_changes"]
    assert bool(changes) == bool(rec["config"]["persistent_workers"]), rec["config"]
    if changes:
        assert changes[0]["shuffle_rng"] == "global" and "order of samples changes" in proc.stdout


@pytest.mark.serial
def test_compute_bound_script_with_too_many_workers(tmp_path, no_leftovers, torch):
    # a 100 ms step: the workers' hand-over is about 2 % of it, far from the 5 % that would call it input-bound
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=0, step_ms=100, workers=4, n=400, epochs=50))
    proc, res = tune(tmp_path, script, "--budget", "60")
    assert proc.returncode == 0, proc.stderr
    rec = res["recommendation"]
    assert rec["input_bound"] == "not"
    assert rec["config"]["num_workers"] < 4  # fewer workers: they cost memory for nothing
    assert rec["verdict"]["code"] == "verdict" and rec["verdict"]["kind"] == "fewer_workers"
    # (their hand-over may measure a few per cent of the step: "slow the job down" past 5 %)
    assert "Not the loader: the 4 workers add nothing; num_workers=" in proc.stdout \
        or "Too many workers: the 4 workers slow the job down; num_workers=" in proc.stdout
    # near the ceiling at once: no ladder to climb (then the rival rounds and the pick's figure windows)
    assert [t["phase"] for t in res["trials"] if t["role"] == "search"] == ["ladder"]
    assert len(res["trials"]) <= 6


@pytest.mark.serial
def test_budget_cuts_the_search_short_and_says_so(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=5, step_ms=2, n=400, batch_size=4, epochs=50))
    started_s = time.monotonic()
    proc, res = tune(tmp_path, script, "--budget", "12")
    wall_s = time.monotonic() - started_s
    assert proc.returncode == 0, proc.stderr
    # the budget is the user's wall-clock promise, timed from outside: no trial is started
    # that cannot finish in it (the script's own settings are always measured, whatever they take)
    assert wall_s <= max(12.0, res["trials"][0]["duration_s"] + 4.0) + 1.0
    assert res["complete"] is False
    assert res["stop_reason"]["code"] == "budget_cut_short" and res["stop_reason"]["budget_s"] == 12
    assert res["recommendation"] is not None  # it still recommends from what it measured
    # on a loaded machine the budget may end before any setting is tried: that is said instead
    # (once, with the budget that would let it try), never "the script's own are the best"
    if res["recommendation"]["verdict"]["kind"] == "nothing_tried":
        assert "no loader setting was tried" in proc.stdout and "already the best" not in proc.stdout
    else:
        assert "budget cut the search short" in proc.stdout
    assert "budget" in proc.stdout


def test_tune_bad_usage(tmp_path, cli):
    (tmp_path / "x.py").write_text("print(1)\n")
    for args, message in [(["--budget", "-1"], "expected a positive number"),
                          (["--max-workers", "abc"], "expected a whole number"),
                          (["--loader", "nocolon"], "--loader expects FILE:LINE")]:
        proc = cli(["tune", *args, str(tmp_path / "x.py")])
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_tune_of_a_script_that_fails_exits_1_with_its_traceback(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", """
        import torch
        from torch.utils.data import DataLoader
        for i, b in enumerate(DataLoader(list(range(50)))):
            if i == 3:
                raise RuntimeError("CUDA out of memory (pretend)")
        """)
    proc, res = tune(tmp_path, script, "--budget", "30")
    assert proc.returncode == 1
    assert "RuntimeError: CUDA out of memory (pretend)" in proc.stderr
    assert res["trials"][0]["state"] == "failed" and res["recommendation"] is None
