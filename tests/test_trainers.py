"""`feedprof tune` on scripts that let a trainer or torchdata build the loader:
Lightning, transformers' Trainer, StatefulDataLoader, torchdata.nodes (real
installs, real trials, short windows)."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import feedprof_args, run_feedprof, write_script
from tests.scripts_trainers import LIGHTNING, NODES, STATEFUL, TRANSFORMERS

QUICK = ["--window-seconds", "0.6", "--min-window-batches", "20", "--warmup-batches", "2",
         "--interval", "0.1", "--quiet"]


def tune(tmp_path, script, budget, *extra):
    out = tmp_path / "out"
    proc = run_feedprof(feedprof_args(["tune"], script, "--out", str(out), "--budget", str(budget), *QUICK, *extra),
                        timeout=300, cwd=str(tmp_path))
    path = out / "results.json"
    return proc, (json.loads(path.read_text()) if path.exists() else None)


def line_of(text, fragment):
    return next(i for i, line in enumerate(text.lstrip().splitlines(), 1) if fragment in line)


def training_loaders(res):
    """(trial config, the knobs the measured loader ran with, its call chain) of every injected trial."""
    for t in res["trials"]:
        if t["role"] in ("search", "confirm") and t["state"] == "ok":
            run = t["run"]
            rec = next(r for r in run["loaders"] if r["loader_id"] == run["window"]["loader_id"])
            yield t["config"], rec["config"], rec["call_chain"]


@pytest.mark.serial
def test_lightning_keeps_the_knobs_when_it_rebuilds_the_loader(tmp_path, no_leftovers):
    pytest.importorskip("lightning")
    script = write_script(tmp_path, "train.py", LIGHTNING)
    proc, res = tune(tmp_path, script, 50)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = res["recommendation"]
    site = f"train.py:{line_of(LIGHTNING, 'return DataLoader(')}"
    assert rec["framework"] == "torch" and rec["loader_site"] == site  # the script's line, not Lightning's
    assert rec["config"]["num_workers"] >= 4 and rec["speedup"] >= 2
    # DDP rebuilt the loader in Lightning's code: the rebuilt one is measured, with the knobs injected
    measured = list(training_loaders(res))
    assert measured and all(ran["num_workers"] == cfg["num_workers"] and chain[-1] == site
                            for cfg, ran, chain in measured)
    # num_workers=self.num_workers <- DataModule(num_workers=0): set where the DataModule is built
    fit = f"train.py:{line_of(LIGHTNING, 'trainer.fit(')}"
    assert f"datamodule=DataModule(num_workers={rec['config']['num_workers']}))  # {fit}" in rec["paste_line"]
    # Lightning's own warning, and whether the measurements agree with it
    advice = next(r for r in rec["reasons"] if r["code"] == "trainer_advice_checked")
    assert advice["suggested"] == 7 and advice["script_workers"] == 0 and advice["agrees"] is True
    assert "Lightning warned that the training loader has few workers" in proc.stdout


@pytest.mark.serial
def test_transformers_trainer_advice_is_its_training_arguments(tmp_path, no_leftovers):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    script = write_script(tmp_path, "train.py", TRANSFORMERS)
    proc, res = tune(tmp_path, script, 45)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = res["recommendation"]
    assert rec["config"]["num_workers"] >= 2 and rec["speedup"] >= 2
    # accelerate's DataLoaderShard rebuilt the loader from its attributes: the knobs reached it
    assert all(ran["num_workers"] == cfg["num_workers"] for cfg, ran, _ in training_loaders(res))
    args_line = f"train.py:{line_of(TRANSFORMERS, 'training_args = TrainingArguments(')}"
    first = rec["paste_line"].splitlines()[0]
    assert first.startswith("training_args = TrainingArguments(output_dir='trainer-out'")
    assert f"dataloader_num_workers={rec['config']['num_workers']}" in first and first.endswith(f"# {args_line}")
    assert "DataLoader(" not in rec["paste_line"]


@pytest.mark.serial
def test_stateful_dataloader_worker_flag_is_the_advice(tmp_path, no_leftovers):
    pytest.importorskip("torchdata")
    script = write_script(tmp_path, "train.py", STATEFUL)
    proc, res = tune(tmp_path, script, 40, "--max-workers", "16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = res["recommendation"]
    n = rec["config"]["num_workers"]
    assert rec["framework"] == "torch" and n >= 4
    assert f"run with `--workers {n}`" in proc.stdout
    assert rec["paste_line"].splitlines()[-1] == f"python train.py --workers {n}"
    assert any(r["code"] == "set_by_flag" and r["flag"] == "--workers" for r in rec["reasons"])
    # re-measured by the script itself, without feedprof: the advice is at least twice as fast
    rates = {}
    for workers, steps in ((0, 40), (n, 200)):
        out = subprocess.run([sys.executable, script, "--workers", str(workers), "--steps", str(steps)],
                             capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                             env={**os.environ, "PYTHONWARNINGS": "ignore"})
        rates[workers] = float(out.stdout.split("RATE")[-1])
    assert rates[n] >= 2 * rates[0], rates


@pytest.mark.serial
def test_torchdata_nodes_threads_against_processes(tmp_path, no_leftovers):
    pytest.importorskip("torchdata")
    script = write_script(tmp_path, "train.py", NODES)
    # room for the method's trial on a loaded machine: the search ends on its own before this
    proc, res = tune(tmp_path, script, 90, "--max-workers", "16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = res["recommendation"]
    assert res["framework"] == "torchdata.nodes" and rec["speedup"] >= 2
    assert set(rec["config"]) == {"num_workers", "method", "prefetch_factor"}
    versus = next(r for r in rec["reasons"] if r["code"] == "threads_versus_processes")
    assert versus["workers"] == rec["config"]["num_workers"] and versus["process_rss_bytes"] > versus["thread_rss_bytes"]
    if versus["threads_do_as_well"]:  # sleep-bound: threads should, and then they are the pick (cheaper)
        assert rec["config"]["method"] == "thread" and "threads do at least as well as processes" in proc.stdout
    mapper = f"train.py:{line_of(NODES, 'tn.ParallelMapper(')}"
    assert rec["paste_line"].startswith(f"node = tn.ParallelMapper(node, map_fn=fetch, num_workers={rec['config']['num_workers']}")
    assert rec["paste_line"].splitlines()[0].endswith(f"# {mapper}")


def test_a_torchdata_pipeline_iterated_without_a_loader_is_profiled(tmp_path, no_leftovers):
    pytest.importorskip("torchdata")
    text = NODES.replace("loader = tn.Loader(node)\n", "").replace(
        "    for batch in loader:", "    node.reset()\n    for batch in node:")
    script = write_script(tmp_path, "train.py", text)
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), "--window-batches", "30", script], timeout=120,
                        cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    rec = next(r for r in run["loaders"] if r["loader_id"] == run["window"]["loader_id"])
    assert rec["framework"] == "torchdata.nodes" and rec["site"] == f"train.py:{line_of(text, 'for batch in node')}"
    assert rec["config"] == {"num_workers": 1, "method": "process", "prefetch_factor": 2} and rec["batch_size"] == 4
    assert rec["config_sites"] == [f"train.py:{line_of(text, 'tn.ParallelMapper(')}",
                                   f"train.py:{line_of(text, 'tn.Prefetcher(')}"]


@pytest.mark.parametrize("trainer", ["lightning", pytest.param("transformers", marks=pytest.mark.serial)])
# (the Trainer's pick, 2 workers or more, is a rate's verdict: side by side it read 0 once)
def test_trainers_are_tuned_online_unmodified(tmp_path, no_leftovers, trainer):
    """tune --online on a Lightning script (DDP rebuilds the loader) and a Trainer script
    (accelerate wraps it): the loader the trainer builds switches while it trains, the job
    ends with its own status, and the advice is the script's own line."""
    pytest.importorskip("lightning" if trainer == "lightning" else "transformers")
    body = (LIGHTNING.replace("max_epochs=5", "max_epochs=2") if trainer == "lightning"
            else TRANSFORMERS.replace("num_train_epochs=2", "num_train_epochs=1"))
    script = write_script(tmp_path, "train.py", body)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--online", "--out", str(out), "--quiet", script], timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert len({s["config"]["num_workers"] for s in res["online"]["switches"]}) >= 2
    rec = res["recommendation"]
    assert rec["config"]["num_workers"] >= 2
    assert "train.py:" in rec["paste_line"] and "site-packages" not in rec["paste_line"]
