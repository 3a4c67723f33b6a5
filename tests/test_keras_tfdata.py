"""Keras 3 (both backends), legacy tf.keras and tf.data, tuned and profiled for
real in subprocesses (a Keras backend is fixed per process)."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import feedprof_args, run_feedprof, write_script
from tests.scripts_keras import (CALLBACK, TF_KERAS_SEQUENCE, TFDATA_BUILT_APART, TFDATA_FIT, TFDATA_FIT_EACH_EPOCH,
                                 TFDATA_FIT_STEP_LOG, TFDATA_LOOP, pydataset)

# Every test here runs Keras in processes of its own; TensorFlow is imported at set-up, never at collection.
pytestmark = pytest.mark.usefixtures("e2e", "tensorflow", "keras")

QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
TUNE_QUICK = ["--window-seconds", "0.8", "--min-window-batches", "20", "--warmup-batches", "3",
              "--interval", "0.1", "--quiet"]


def tune(tmp_path, script, *extra, env=None):
    out = tmp_path / "out"
    proc = run_feedprof(feedprof_args(["tune"], script, "--out", str(out), *TUNE_QUICK, *extra), env={**QUIET_TF, **(env or {})},
                        timeout=400)
    res = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    return proc, res


def profile(tmp_path, script, *extra, env=None):
    out = tmp_path / "out"
    proc = run_feedprof(feedprof_args(["profile"], script, "--out", str(out), "--interval", "0.1", *extra),
                        env={**QUIET_TF, **(env or {})}, timeout=300)
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else None
    return proc, run


@pytest.mark.serial
@pytest.mark.parametrize("backend", ["tensorflow", "torch"])
def test_io_bound_pydataset_gets_more_workers(tmp_path, backend, no_leftovers):
    if backend == "torch":
        pytest.importorskip("torch")
    # 30 ms a batch: one worker supplies a tenth of what the step takes, so the verdict holds even
    # where a loaded machine's ceiling window reads low (at 10 ms, 2 workers read as the ceiling)
    script = write_script(tmp_path, "train.py", pydataset(load_s=0.03))
    proc, res = tune(tmp_path, script, "--budget", "70", "--max-workers", "16", env={"KERAS_BACKEND": backend})
    assert proc.returncode == 0, proc.stderr
    rec = res["recommendation"]
    assert rec["framework"] == "keras"
    assert set(rec["config"]) == {"workers", "use_multiprocessing", "max_queue_size"}
    assert rec["config"]["workers"] > 2 and rec["speedup"] > 2
    assert res["trials"][0]["config"]["workers"] == 1  # the script's own default
    assert "RemoteBatches(" in rec["paste_line"] and "workers=" in rec["paste_line"]
    if backend == "torch":  # batches are pulled in Python: the wait is measured directly
        assert res["trials"][0]["data_wait_fraction"] > 0.5


@pytest.mark.serial
def test_tfdata_pipeline_beats_autotune(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", TFDATA_LOOP)
    proc, res = tune(tmp_path, script, "--budget", "80", "--max-workers", "32")
    assert proc.returncode == 0, proc.stderr
    rec = res["recommendation"]
    assert rec["framework"] == "tf.data"
    assert set(rec["config"]) == {"num_parallel_calls", "prefetch", "deterministic", "private_threadpool_size"}
    auto = [t for t in res["trials"] if t["config"].get("num_parallel_calls") == "AUTOTUNE" and t["state"] == "ok"]
    assert auto, "AUTOTUNE is measured as one candidate"
    assert rec["batches_per_s"] >= max(t["effective_batches_per_s"] or t["batches_per_s"] for t in auto)
    assert all(t["peak_rss_bytes"] for t in auto)  # its memory, to compare
    assert any(r["code"] == "versus_autotune" for r in rec["reasons"])
    assert "against AUTOTUNE" in proc.stdout or "AUTOTUNE (" in proc.stdout
    assert "dataset = tf.data.Dataset.range(2048).map(load, num_parallel_calls=" in rec["paste_line"]
    assert ".batch(16)" in rec["paste_line"]  # the rest of the user's statement is kept


def _line_of(source, text):
    return source.lstrip("\n").splitlines().index(text) + 1


@pytest.mark.serial
def test_tfdata_advice_names_the_pipelines_lines_not_the_fit(tmp_path, no_leftovers):
    """keras-io's shape: built in make_dataset() over several lines, fitted in train(): the advice is the
    pipeline's statement with each map set (the line the paste replaces), and each knob's own lines."""
    script = write_script(tmp_path, "train.py", TFDATA_BUILT_APART)
    source = (tmp_path / "train.py").read_text()
    at = {name: _line_of(source, text) for name, text in [
        ("statement", "    dataset = ("), ("map1", "        dataset.map(encode_single_sample, "
                                                   "num_parallel_calls=tf.data.AUTOTUNE)"),
        ("map2", "        .map(to_pair)"), ("prefetch", "        .prefetch(buffer_size=tf.data.AUTOTUNE)"),
        ("fit", "    model.fit(")]}
    proc, res = tune(tmp_path, script, "--budget", "60")
    assert proc.returncode == 0, proc.stderr
    rec = res["recommendation"]
    assert rec["config"]["num_parallel_calls"] not in (None, "AUTOTUNE"), proc.stdout  # 2 threads: more pay
    assert rec["framework"] == "tf.data" and rec["loader_site"] == f"train.py:{at['fit']}"
    (line,) = rec["paste_line"].splitlines()
    assert line.endswith(f"  # train.py:{at['statement']}") and "dataset = dataset.map(encode_single_sample, " in line
    assert line.count("num_parallel_calls=") == 2 and "map(to_pair, num_parallel_calls=" in line
    assert line.count("prefetch(") == 1
    placed = {r["knob"]: r for r in rec["reasons"] if r["code"] == "set_in_pipeline"}
    assert placed["num_parallel_calls"]["sites"] == [f"train.py:{at['map1']}", f"train.py:{at['map2']}"]
    assert placed["num_parallel_calls"]["loader_site"] == f"train.py:{at['fit']}"
    if rec["config"]["prefetch"] is not None:
        assert placed["prefetch"]["sites"] == [f"train.py:{at['prefetch']}"]
    assert f"set where the pipeline is built, at train.py:{at['map1']} and train.py:{at['map2']}" in proc.stdout
    page = (tmp_path / "out" / "report.html").read_text()
    assert f"in place of the statement at <code>train.py:{at['statement']}</code>" in page


def test_fit_on_a_tfdata_pipeline_is_profiled(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", TFDATA_FIT)
    proc, run = profile(tmp_path, script, "--window-batches", "40")
    assert proc.returncode == 0, proc.stderr
    s = run["summary"]
    assert s["framework"] == "tf.data" and s["batches_measured"] >= 30
    assert s["data_wait_fraction"] is None  # pulled inside the compiled train function
    assert {"code": "wait_not_observable", "framework": "tf.data"} in s["notes"]
    assert "data wait is not observable here" in proc.stdout


def rate_over_window(log_lines, window_s):
    """Steps per second from "time last_step" lines (the step count restarts at 0
    every epoch), over the last ``window_s`` seconds of the log."""
    t_s, last = zip(*((float(t), int(n)) for t, n in (line.split() for line in log_lines)))
    first = min(range(len(t_s)), key=lambda i: abs(t_s[i] - (t_s[-1] - window_s)))
    steps = sum(n - prev if n > prev else n + 1 for prev, n in zip(last[first:], last[first + 1:]))
    return steps / (t_s[-1] - t_s[first])


@pytest.mark.serial
@pytest.mark.parametrize("keras_flavour,steps_per_execution", [("keras", 1), ("keras", 4), ("tf_keras", 1)])
def test_fit_on_a_tfdata_pipeline_counts_each_step_once(tmp_path, keras_flavour, steps_per_execution, no_leftovers):
    pytest.importorskip(keras_flavour)
    # The script logs its own on_train_batch_end times. feedprof ends the window (and the
    # script) from its own callback, which fit runs after the script's: the script's last
    # logged step is the window's last step, so the two can be compared over the same span.
    script = write_script(tmp_path, "train.py", TFDATA_FIT_STEP_LOG)
    log = tmp_path / "steps.log"
    proc, run = profile(tmp_path, script, "--window-batches", "80", "--", str(log), str(steps_per_execution),
                        keras_flavour)
    assert proc.returncode == 0, proc.stderr
    s, w = run["summary"], run["window"]
    assert s["framework"] == "tf.data" and s["batches_measured"] == 80
    lines = log.read_text().splitlines()
    script_rate = rate_over_window(lines, w["t_end_s"] - w["t_start_s"])
    assert s["batches_per_s"] == pytest.approx(script_rate, rel=0.10), (s["batches_per_s"], script_rate)
    assert len(lines) * steps_per_execution > 80  # warm-up and the first batch come before the window
    assert s["batch_size"] == 16  # the last batch may be short: the size is the one the script asked
    loader = next(r for r in run["loaders"] if r["loader_id"] == w["loader_id"])
    assert loader["script_config"]["num_parallel_calls"] == 2  # seen through .repeat()


def test_validation_pipeline_is_not_timed_by_the_next_fit(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", TFDATA_FIT_EACH_EPOCH)
    proc, run = profile(tmp_path, script, "--window-batches", "60")
    assert proc.returncode == 0, proc.stderr
    timed = [(loader["config_sites"], loader["batches"]) for loader in run["loaders"] if loader["batches"]]
    assert len(timed) == 1 and timed[0][0] == ["train.py:19"], timed  # the training pipeline only
    assert run["summary"]["batches_measured"] == 60


@pytest.mark.serial
def test_tf_keras_epoch_end_stall_is_counted(tmp_path, no_leftovers):
    pytest.importorskip("tf_keras")
    script = write_script(tmp_path, "train.py", TF_KERAS_SEQUENCE)
    proc, run = profile(tmp_path, script, "--window-batches", "60", "--window-seconds", "60", "--", "2")
    assert proc.returncode == 0, proc.stderr
    s = run["summary"]
    assert s["framework"] == "tf.keras"
    assert s["epoch_teardown_s"] > 4.0  # tf_keras's enqueuer waits 5 s at every epoch end
    assert s["effective_batches_per_s"] < 0.5 * s["batches_per_s"]
    assert {"code": "tf_keras_epoch_end_stall"} in s["notes"]
    assert "stalls about 5 s" in proc.stdout


def test_keras3_fit_workers_gets_a_hint(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", pydataset().replace(
        "model.fit(RemoteBatches({n}, 16), epochs=args.epochs, verbose=0)".format(n=200),
        "model.fit(RemoteBatches(200, 16), epochs=1, verbose=0, workers=4)"))
    proc, run = profile(tmp_path, script)
    assert proc.returncode == 1
    assert "unexpected keyword argument 'workers'" in proc.stderr
    assert "moved workers, use_multiprocessing and max_queue_size from fit() to the PyDataset" in proc.stderr


def test_pydataset_that_skips_super_init_is_measured_and_called_out(tmp_path, no_leftovers):
    script = write_script(tmp_path, "train.py", pydataset(load_s=0.002).replace(
        "super().__init__(**kwargs)", "pass  # forgot super().__init__(**kwargs)"))
    proc, run = profile(tmp_path, script, "--window-batches", "40")
    assert proc.returncode == 0, proc.stderr
    assert {"code": "no_super_init", "dataset": "RemoteBatches"} in run["summary"]["notes"]
    assert "does not call super().__init__(**kwargs)" in proc.stdout
    assert run["summary"]["batches_measured"] >= 30


@pytest.mark.serial
def test_multiprocessing_trial_that_hangs_is_classified(tmp_path, no_leftovers):
    # Loading is pure-Python work (it holds the GIL), so after the thread ladder the tune
    # tries use_multiprocessing=True, and here its worker processes never answer.
    script = write_script(tmp_path, "train.py", pydataset(load_s=0.01).replace(
        "        time.sleep(0.01)  # one remote read per batch",
        "        import multiprocessing as mp\n"
        "        if mp.current_process().name != 'MainProcess':\n"
        "            time.sleep(3600)  # a pool worker that hangs\n"
        "        end = time.perf_counter() + 0.006\n"
        "        while time.perf_counter() < end:  # decoding in Python: holds the GIL\n"
        "            pass"))
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "90", "--trial-timeout", "10",
                         "--max-workers", "4", *TUNE_QUICK, script], env=QUIET_TF, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "results.json").read_text())
    hung = [t for t in res["trials"] if t["config"].get("use_multiprocessing")]
    assert hung and all(t["state"] == "timeout" for t in hung), [(t["config"], t["state"]) for t in res["trials"]]
    assert res["recommendation"] is not None and not res["recommendation"]["config"]["use_multiprocessing"]


@pytest.mark.serial
@pytest.mark.parametrize("backend,wait_known", [("tensorflow", False), ("torch", True)])
def test_keras_profile_callback(tmp_path, backend, wait_known):
    if backend == "torch":
        pytest.importorskip("torch")
    out = tmp_path / "run.json"
    script = write_script(tmp_path, "train.py", CALLBACK.replace("{out}", str(out)))
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **QUIET_TF, "KERAS_BACKEND": backend, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    wait = proc.stdout.split("WAIT ")[1].split()[0]
    if wait_known:
        assert float(wait) > 0.5  # 10 ms of loading per batch against a tiny step
    else:
        assert wait == "None"
    saved = json.loads(out.read_text())
    assert saved["schema"] == "feedprof.run/1" and saved["summary"]["batches_per_s"] > 0


@pytest.mark.serial
def test_keras_profile_callback_counts_every_step_of_steps_per_execution(tmp_path):
    """With steps_per_execution=4, fit calls the callback once per 4 steps: the
    callback's rate must be steps, against a stopwatch around fit (a count of
    calls would read a quarter of it)."""
    out = tmp_path / "run.json"
    body = CALLBACK.replace("{out}", str(out)).replace('model.compile("sgd", "mse")',
                                                       'model.compile("sgd", "mse", steps_per_execution=4)')
    body = body.replace("model.fit(Slow(), epochs=3, verbose=0, callbacks=[profile])",
                        "t0 = time.perf_counter()\n"
                        "model.fit(Slow(), epochs=3, verbose=0, callbacks=[profile])\n"
                        "print('OUTSIDE', 3 * 40 / (time.perf_counter() - t0))")
    script = write_script(tmp_path, "train.py", body)
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **QUIET_TF, "KERAS_BACKEND": "tensorflow", "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    rate = float(proc.stdout.split("RATE ")[1].split()[0])
    outside = float(proc.stdout.split("OUTSIDE ")[1].split()[0])
    assert 0.6 < rate / outside < 2.5, (rate, outside)  # start-up is outside's only: the callback may read more
