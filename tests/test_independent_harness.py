"""benchmarks/independent.py: the harness feedprof's figures are checked against.
It must share no code with feedprof, force what it is told at construction, and
time sleep-bound scripts at their known rates."""
import ast
import glob
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from conftest import REPO, write_script

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import independent  # noqa: E402

HARNESS_FILES = [os.path.join(REPO, "benchmarks", "independent.py")] + sorted(
    glob.glob(os.path.join(REPO, "benchmarks", "independent_boot", "*.py")))
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0", "PYTHONWARNINGS": "ignore"}

TORCH_SCRIPT = """
import time
import torch
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __len__(self):
        return 200

    def __getitem__(self, i):
        return torch.zeros(3), i


def main():
    train = DataLoader(Items(), batch_size=4, num_workers=0)
    val = DataLoader(Items(), batch_size=50, num_workers=0)
    print("train", train.num_workers, train.persistent_workers, "val", val.num_workers, flush=True)
    for epoch in range(1000):
        for x, y in train:
            time.sleep(0.010)
        for x, y in val:
            pass


if __name__ == "__main__":
    main()
"""
TRAIN_LINE = 15  # the train DataLoader(...) line above


@pytest.fixture(autouse=True)
def quiet_env(monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


def imported_modules(path):
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"):
            found |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return found


def test_the_harness_imports_nothing_from_feedprof():
    assert len(HARNESS_FILES) >= 6
    for path in HARNESS_FILES:
        mods = imported_modules(path)
        assert mods, path  # the parser saw its imports
        assert not [m for m in mods if m.split(".")[0] == "feedprof"], path


def harness_children():
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and independent.SPEC_ENV in p.environ():
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def test_forced_config_wins_at_its_site_only_and_nothing_outlives_the_run(tmp_path, e2e):
    script = write_script(tmp_path, "train.py", TORCH_SCRIPT)
    cfg = {"num_workers": 2, "persistent_workers": True}
    r = independent.measure(script, "torch", cfg, site=f"train.py:{TRAIN_LINE}", window_s=2.0)
    assert r["state"] == "ok", r["stderr_tail"]
    assert "train 2 True val 0" in r["stdout_tail"]  # the script asked for 0 workers
    train, val = r["loaders"]
    assert train["forced"] and not val["forced"]
    assert r["leader"] == train["key"]  # the loader that delivers most batches is the training one
    window = r["windows"][0]
    assert window["warmup_steps"] == 30  # max(30, 2 x 2 workers x prefetch 2)
    # ~0.6 s epochs, shorter than the window: it spans whole epochs (50 batches each)
    assert window["whole_epochs"] and window["steps"] == 50 * window["epochs_started"] > 0
    deadline = time.monotonic() + 5
    while harness_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert harness_children() == []


def test_zero_workers_is_legalised_and_a_site_that_matches_nothing_is_reported(tmp_path, e2e):
    script = write_script(tmp_path, "train.py", TORCH_SCRIPT)
    r = independent.measure(script, "torch", {"num_workers": 0, "prefetch_factor": 4, "persistent_workers": True},
                            window_s=0.5)
    assert r["state"] == "ok", r["stderr_tail"]
    assert all(ld["forced"] and ld["config"]["prefetch_factor"] is None for ld in r["loaders"])
    r = independent.measure(script, "torch", {"num_workers": 2}, site="train.py:999", window_s=0.5)
    assert r["state"] == "not forced"


@pytest.mark.serial
def test_cli_times_a_sleep_bound_loop_at_its_known_rate(tmp_path, e2e):
    """10 ms of sleep per step, loading nearly free: at most 100 steps/s, and well
    above 60 even on a busy machine."""
    script = write_script(tmp_path, "train.py", TORCH_SCRIPT)
    out = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "independent.py"), script,
                          "--framework", "torch", "--config", "{\"num_workers\": 0}", "--config", "null",
                          "--reps", "1", "--window-s", "1.5"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("rep 1/1  {\"num_workers\": 0}  ok") and lines[1].startswith("rep 1/1  null  ok")
    summary = json.loads(out.stdout[out.stdout.index("\n{") + 1:])
    for label in ("{\"num_workers\": 0}", "null"):
        rate = summary[label]["rate_per_s"]["median"]
        assert 60 <= rate <= 110, (label, rate)
        assert summary[label]["samples_per_s"]["median"] == pytest.approx(4 * rate)


KERAS_SCRIPT = """
import os
import time
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras
import numpy as np


class Batches(keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def __len__(self):
        return 100

    def __getitem__(self, i):
        time.sleep(0.020)
        x = np.zeros((8, 4), "float32")
        return x, x[:, :1]


model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
model.fit(Batches(workers=1), epochs=100, verbose=0)
"""


@pytest.mark.serial
def test_keras_pydataset_fit_forced_workers_timed_by_callback_and_from_outside(tmp_path, e2e):
    """20 ms per batch: one worker cannot pass 50 steps/s; eight threads must. Four
    steps per execution: one callback per four steps, each counted."""
    script = write_script(tmp_path, "fit.py", KERAS_SCRIPT)
    r = independent.time_fit(script, "keras", {"workers": 8}, steps=600, site="fit.py:23", window_s=1.0,
                             warmup_steps=100)
    assert r["state"] == "ok", r["stderr_tail"]
    (ds,) = r["loaders"]
    assert ds["forced"] and ds["config"]["workers"] == 8 and ds["epochs_started"] >= 3
    assert r["rate_per_s"] > 70, r["window_rates_per_s"]
    assert r["fit"]["steps"] == 600  # fit was stopped there
    assert r["fit"]["wall_s"] >= 600 * 0.020 / 8  # no faster than 8 workers sleeping 20 ms a batch
    assert 0.5 < r["fit_rate_per_s"] / r["rate_per_s"] < 1.5  # whole call (start-up included) vs window


TFDATA_SCRIPT = """
import time
import numpy as np
import tensorflow as tf


def read(i):
    time.sleep(0.008)
    return np.float32(i)


def main():
    ds = tf.data.Dataset.range(100000)
    ds = ds.map(lambda i: tf.ensure_shape(tf.numpy_function(read, [i], tf.float32), ()), num_parallel_calls=1)
    ds = ds.batch(8).prefetch(1)
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    if {fit}:
        model.fit(ds.map(lambda x: (tf.reshape(x, (-1, 1)), x)), epochs=10, verbose=0)
    for x in ds:
        pass


if __name__ == "__main__":
    main()
"""


@pytest.mark.serial
def test_tfdata_map_forced_with_a_private_pool_in_fit_and_timed_in_a_loop(tmp_path, e2e):
    """8 ms per element, 8 per batch: at most ~16 batches/s with one call at a time;
    8 parallel calls on an 8-thread private pool go several times faster."""
    fit = write_script(tmp_path, "fit.py", TFDATA_SCRIPT.format(fit=True))
    forced = {"num_parallel_calls": 8, "private_threadpool_size": 8, "prefetch": 4}
    r = independent.measure(fit, "tf.data", forced, site="fit.py:13", window_s=1.5)
    assert r["state"] == "ok", r["stderr_tail"]
    (ds,) = r["loaders"]
    assert ds["kind"] == "tf.data/fit" and ds["forced"]
    assert ds["config"] == {"num_parallel_calls": 8, "deterministic": None, "prefetch": 4,
                            "private_threadpool_size": 8}
    assert r["rate_per_s"] > 30, r["window_rates_per_s"]

    loop = write_script(tmp_path, "loop.py", TFDATA_SCRIPT.format(fit=False))
    r = independent.measure(loop, "tf.data", None, window_s=1.5, warmup_steps=10)
    assert r["state"] == "ok", r["stderr_tail"]
    assert r["loaders"][0]["kind"] == "tf.data/loop" and r["batch_size"] == 8
    assert 5 <= r["rate_per_s"] <= 17, r["window_rates_per_s"]
