"""feedprof tune --online beyond torch's map-style DataLoader, end to end on seeded scripts run
plain and under feedprof: a Keras 3 PyDataset switched inside fit (threads, processes, the torch
backend), a torch IterableDataset observed without --allow-resharding and switched between
epochs with it, and a tf.data pipeline whose AUTOTUNE choices are read from the running pipeline.
Loading sleeps, so the verdicts do not depend on the machine's load; no timing is asserted."""
import json
import sys

import pytest

from tests.conftest import run_feedprof, write_script
from tests.online_runs import AsWritten
from tests.scripts_online_frameworks import ITERABLE_SEEDED, KERAS_SEEDED, TFDATA_AUTOTUNE

QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0", "PYTHONWARNINGS": "ignore"}


def as_written(tmp_path, script, *args, env=None):
    """The run as written, started now: call the result to have what it saw (it runs beside the
    run under feedprof; once a session per script and arguments: online_runs.AsWritten)."""
    plain = AsWritten(script, tmp_path / "plain.json", *args, env={**QUIET_TF, **(env or {})})

    def result():
        proc, report = plain.result()
        assert proc.returncode == 0, proc.stderr
        return report

    return result


def online(tmp_path, script, *args, flags=(), env=None):
    out, report = tmp_path / "out", tmp_path / "online.json"
    argv = ["tune", "--online", *flags, "--out", str(out), script, "--report", str(report), *args]
    proc = run_feedprof(argv, env={**QUIET_TF, **(env or {})}, timeout=400)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(report.read_text()) if report.exists() else None
    return proc, seen, json.loads((out / "results.json").read_text()), (out / "report.html").read_text()


KERAS_CASES = {"threads": ([], {}), "processes": (["--processes"], {}), "torch_backend": ([], {"KERAS_BACKEND": "torch"})}


@pytest.mark.parametrize("case", list(KERAS_CASES))
def test_a_keras_pydataset_is_switched_inside_fit(tmp_path, case, tensorflow, keras, no_leftovers):
    """workers=1 as written, loading waits on storage: the run under feedprof switches its workers
    mid-epoch and trains on the same batches, in the same order, to the same weights."""
    extra, env = KERAS_CASES[case]
    if env.get("KERAS_BACKEND") == "torch":
        pytest.importorskip("torch")
    script = write_script(tmp_path, "train.py", KERAS_SEEDED)
    args = ("--tap", "--epochs", "4", "--batches", "40", "--load-ms", "60", *extra)
    plain = as_written(tmp_path, script, *args, env=env)
    proc, got, results, report = online(tmp_path, script, *args, env=env)
    want = plain()
    assert got == want  # per epoch: the batches in order and the weights; the final weights; the random streams
    assert [len(e["batches"]) for e in got["epochs"]] == [40] * 4
    online_record = results["online"]
    served = {(s["config"]["workers"], s["config"]["use_multiprocessing"]) for s in online_record["switches"]}
    assert len(served) >= 2 and all(mp == ("--processes" in extra) for _, mp in served), served
    assert online_record["switch_at"] == "mid_epoch"
    rec = results["recommendation"]
    assert rec["framework"] == "keras" and rec["config"]["workers"] > 1, rec
    construction = next(i for i, line in enumerate(KERAS_SEEDED.lstrip().splitlines(), 1) if "data = Storage(" in line)
    assert rec["loader_site"].endswith(f"train.py:{construction}")
    assert "Storage(args.batches" in rec["paste_line"] and f"workers={rec['config']['workers']}" in rec["paste_line"]
    assert "workers=" in proc.stdout and "at batch boundaries" in proc.stderr


def test_an_iterable_dataset_is_observed_without_resharding_allowed(tmp_path, torch, no_leftovers):
    script = write_script(tmp_path, "train.py", ITERABLE_SEEDED)
    plain = as_written(tmp_path, script, "--epochs", "3")
    proc, got, results, report = online(tmp_path, script, "--epochs", "3")
    want = plain()
    assert got == want  # observed: the run is the script's own
    assert not results["online"]["switches"] and results["recommendation"] is None
    assert {"loader_id": 0, "mode": "none", "why_not": "iterable_dataset"} in results["online"]["loaders"]
    for said in (proc.stderr, report):  # why, and what switching would change
        assert "--allow-resharding" in said and "shards by a fixed key" in said


def test_an_iterable_dataset_switches_between_epochs_with_resharding_allowed(tmp_path, torch, no_leftovers):
    """Its worker count decides what each worker yields: switched only where an epoch starts,
    every epoch has the script's samples (the dataset shards by a fixed key), in the order of the
    worker count in force; the advice says so."""
    script = write_script(tmp_path, "train.py", ITERABLE_SEEDED)
    plain = as_written(tmp_path, script)
    proc, got, results, report = online(tmp_path, script, flags=["--allow-resharding"])
    want = plain()
    assert [e["samples"] for e in got["epochs"]] == [e["samples"] for e in want["epochs"]]
    assert [e["n"] for e in got["epochs"]] == [e["n"] for e in want["epochs"]]
    assert got["next_rand"] == want["next_rand"]  # the script's random stream was not drawn from
    assert got["epochs"][0] == want["epochs"][0]  # its own settings first, for a whole epoch
    online_record = results["online"]
    assert online_record["switch_at"] == "epoch"
    assert len({s["config"]["num_workers"] for s in online_record["switches"]}) >= 2, online_record["switches"]
    changed = [e["order"] != want["epochs"][0]["order"] for e in got["epochs"]]
    assert any(changed)  # later epochs ran with another worker count ...
    assert changed == sorted(changed)  # ... from an epoch's start on, never back to a mixed epoch
    rec = results["recommendation"]
    assert rec["config"]["num_workers"] > 0
    assert any(r["code"] == "samples_follow_workers" and r["switched"] for r in rec["reasons"])
    assert "between epochs" in proc.stderr and "shards by a fixed key" in proc.stdout
    # no order is claimed for it (its samples follow the worker count), and no check fails or holds it
    assert online_record["order_checks"] == [] and online_record["holds"] == []
    assert "failed its check" not in proc.stderr + proc.stdout


def test_an_iterable_dataset_whose_pool_is_killed_mid_epoch_has_that_epoch_again_and_says_so(
        tmp_path, torch, no_leftovers):
    """Workers of 4 or more are killed halfway through an epoch (as the OOM killer ends them). An
    IterableDataset's iterator cannot go on where dead workers were: the epoch starts again with the
    script's own settings, so the loop has its first batches twice. The run goes on to its end,
    and what it had again is recorded and said, never "fetched again" as a map-style loader's."""
    script = write_script(tmp_path, "train.py", ITERABLE_SEEDED)
    plain = as_written(tmp_path, script, "--killed-from", "4")
    proc, got, results, report = online(tmp_path, script, "--killed-from", "4", flags=["--allow-resharding"])
    want = plain()
    failures = results["online"]["failures"]
    assert failures and all(f["kind"] == "killed" and f["replayed_batches"] for f in failures), failures
    extra = {f["epoch"]: f["replayed_batches"] * 16 for f in failures}  # (batches of 16)
    assert [e["n"] for e in got["epochs"]] == [e["n"] + extra.get(k, 0) for k, e in enumerate(want["epochs"], 1)], \
        (failures, results["online"]["switches"])
    assert [e["samples"] for k, e in enumerate(got["epochs"], 1) if k not in extra] == \
        [e["samples"] for k, e in enumerate(want["epochs"], 1) if k not in extra]
    for said in (proc.stderr, report):
        assert f"epoch {failures[0]['epoch']} started again from its first sample" in said, (failures, said[-3000:])
        assert "fetched again" not in said


def test_an_iterable_dataset_in_a_job_of_several_ranks_is_not_switched(tmp_path, torch, no_leftovers):
    """Two ranks under torchrun: a pool that failed mid-epoch would start one rank's epoch again
    and the ranks' steps would no longer pair up, so even with --allow-resharding the loader
    keeps the script's own settings, and the summary says why."""
    script = write_script(tmp_path, "train.py", ITERABLE_SEEDED)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--online", "--allow-resharding", "--out", str(out), "--", sys.executable, "-m",
                         "torch.distributed.run", "--nproc-per-node", "2", script, "--report",
                         str(tmp_path / "online.json"), "--epochs", "3"], env=QUIET_TF, timeout=400)
    assert proc.returncode == 0, proc.stderr
    online_record = json.loads((out / "results.json").read_text())["online"]
    assert {h["why"] for h in online_record["holds"]} == {"iterable_ranks"}
    assert {s["config"]["num_workers"] for s in online_record["switches"]} <= {0}
    assert "IterableDataset in a job of several ranks" in proc.stderr


def test_a_tfdata_pipelines_report_names_autotunes_choices(tmp_path, tensorflow, no_leftovers):
    script = write_script(tmp_path, "train.py", TFDATA_AUTOTUNE)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--online", "--out", str(out), script], env=QUIET_TF, timeout=400)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    pipeline = max(results["run"]["loaders"], key=lambda rec: rec["batches"])
    assert pipeline["framework"] == "tf.data" and pipeline["autotune"]
    knobs = pipeline["autotune"][-1]["knobs"]
    assert any(k["knob"] == "parallelism" and k["autotuned"] and k["value"] >= 1 for k in knobs), knobs
    assert any(k["op"] == "Prefetch" and k["knob"] == "buffer_size" for k in knobs), knobs
    assert not results["online"]["switches"]  # AUTOTUNE tunes in the run; feedprof does not switch it
    report = (out / "report.html").read_text()
    for said in (proc.stderr, report):
        assert "AUTOTUNE in the tf.data pipeline at train.py:" in said and "parallel calls" in said
        assert "private thread pool" in said  # what AUTOTUNE leaves alone is tuned offline
