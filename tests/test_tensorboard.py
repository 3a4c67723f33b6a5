"""TensorBoard export, read back with TensorBoard's own event reader and checked
against the stored record it was written from."""
import datetime
import os
import statistics
import subprocess
import sys
import tracemalloc

import pytest

import feedprof
from feedprof.render import tensorboard as tb
from feedprof.store import (GpuSeries, LoaderRecord, Run, Samples, StepLog, Trial, Window, load)
from tests.conftest import run_feedprof, write_script
from tests.scripts import torch_loop
from tests.scripts_keras import CALLBACK

pytestmark = pytest.mark.usefixtures("tensorboard")

QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}


def read(logdir):
    """Every scalar (tag -> [(step, wall_time, value)]) and text of one TensorBoard run directory."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {t: [(e.step, e.wall_time, e.value) for e in acc.Scalars(t)] for t in tags["scalars"]}
    texts = {t: acc.Tensors(t)[-1].tensor_proto.string_val[0].decode() for t in tags["tensors"]}
    return scalars, texts


def values(points):
    return [v for _, _, v in points]


# ------------------------------------------------------------------ profile


@pytest.mark.serial
def test_profile_cli_writes_the_run_as_tensorboard_scalars(tmp_path, no_leftovers, torch):
    # 100 batches per epoch: the 2 warm-up and 40 measured steps all fall in epoch 0
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=5, step_ms=1))
    logdir = tmp_path / "tb"
    proc = run_feedprof(["profile", "--out", str(tmp_path / "out"), "--tensorboard", str(logdir),
                         "--window-batches", "40", "--warmup-batches", "2", "--interval", "0.1", script])
    assert proc.returncode == 0, proc.stderr
    assert "tensorboard --logdir" in proc.stderr
    run = load(str(tmp_path / "out" / "run.json"))
    scalars, texts = read(logdir)
    rec = run.loader(run.window.loader_id)
    t0 = tb.start_epoch_s(run.started_at, run.duration_s)

    wait = scalars["step/data_wait_ms"]
    assert [s for s, _, _ in wait] == list(range(4, 44))  # batch 1 is start-up, 2-3 warm-up: 4..43 measured
    assert values(wait) == pytest.approx([1000 * w for w in rec.steps.wait_s], rel=1e-5)
    assert values(scalars["step/step_time_ms"]) == pytest.approx([1000 * w for w in rec.steps.wall_s], rel=1e-5)
    assert [w for _, w, _ in wait] == pytest.approx([t0 + t for t in rec.steps.t_end_s], abs=1e-3)
    assert min(values(wait)) > 5  # 2 samples x 5 ms of loading per batch

    rates = values(scalars["throughput/batches_per_s"])
    assert len(rates) == run.summary.n_chunks == 5
    assert statistics.median(rates) == pytest.approx(run.summary.batches_per_s, rel=1e-5)
    assert values(scalars["throughput/samples_per_s"]) == pytest.approx([2 * r for r in rates], rel=1e-5)

    s = run.samples
    assert values(scalars["cpu/system_pct"]) == pytest.approx([v for v in s.system_cpu_pct if v is not None], rel=1e-5)
    pss = [v / 2**20 for v in s.tree_pss_bytes if v is not None]
    assert 0 < len(pss) < len(s.t_s)  # PSS is read at a slower rate: the gaps are skipped, not zeros
    assert values(scalars["memory/tree_pss_mib"]) == pytest.approx(pss, rel=1e-5)
    assert max(values(scalars["memory/tree_rss_mib"])) == pytest.approx(s.peaks.tree_rss_bytes / 2**20, rel=1e-5)
    for tag in ("cpu/main_cores", "cpu/workers_cores", "memory/shm_used_mib", "workers/count"):
        assert len(scalars[tag]) == len(s.t_s)
    assert not any(tag.startswith("gpu") for tag in scalars)  # no GPU on this machine
    assert "highly input-bound" in texts["summary"]


def test_gpu_series_per_device_with_gaps(tmp_path):
    run = Run(started_at="2026-11-22T10:00:00+00:00", samples=Samples(
        t_s=(0.0, 0.2, 0.4),
        gpus=(GpuSeries(cuda_index=0, uuid="GPU-a", util_pct=(None, 50.0, 70.0), mem_used_bytes=(2**30, None, 2**31),
                        power_w=(250.5, 260.0, None)),
              GpuSeries(cuda_index=None, uuid="GPU-hidden", util_pct=(1.0, 2.0, 3.0)))))
    feedprof.to_tensorboard(run, str(tmp_path / "tb"))
    scalars, _ = read(tmp_path / "tb")
    t0 = datetime.datetime(2026, 11, 22, 10, tzinfo=datetime.timezone.utc).timestamp()
    assert scalars["gpu0/util_pct"] == [(200, pytest.approx(t0 + 0.2), 50.0), (400, pytest.approx(t0 + 0.4), 70.0)]
    assert values(scalars["gpu0/mem_used_mib"]) == [1024.0, 2048.0]
    assert values(scalars["gpu0/power_w"]) == [250.5, 260.0]
    assert values(scalars["gpu-GPU-hidden/util_pct"]) == [1.0, 2.0, 3.0]  # NVML sees it, CUDA does not
    assert "gpu0/sm_clock_mhz" not in scalars  # nothing measured: no empty chart


def test_profile_context_manager_and_null_profile(tmp_path, torch):
    loader = torch.utils.data.DataLoader(list(range(60)), batch_size=2)
    with feedprof.profile(interval_s=0.05, warmup_batches=2) as prof:
        batches = prof.watch(loader)
        for epoch in range(2):
            for batch in batches:
                pass
    assert prof.to_tensorboard(str(tmp_path / "tb")) == str(tmp_path / "tb")
    scalars, _ = read(tmp_path / "tb")
    steps = [s for s, _, _ in scalars["step/step_time_ms"]]
    # epoch 0: batch 1 start-up, 2-3 warm-up, 4-30 measured; epoch 1: batch 31 start-up, 32-60 measured
    assert steps == list(range(4, 31)) + list(range(32, 61))
    assert feedprof.profile(enabled=False).to_tensorboard(str(tmp_path / "off")) is None
    assert not (tmp_path / "off").exists()


def test_keras_callback_to_tensorboard(tmp_path, e2e):
    pytest.importorskip("keras")
    pytest.importorskip("torch")
    body = CALLBACK.replace("{out}", str(tmp_path / "run.json")) + f"profile.to_tensorboard({str(tmp_path / 'tb')!r})\n"
    script = write_script(tmp_path, "train.py", body)
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **QUIET_TF, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    run = load(str(tmp_path / "run.json"))
    scalars, texts = read(tmp_path / "tb")
    steps = run.loaders[0].steps
    assert len(scalars["step/data_wait_ms"]) == len(steps.wait_s) > 50  # 3 epochs of 40 batches
    assert min(values(scalars["step/data_wait_ms"])) > 5  # 10 ms of loading per batch
    assert "keras" in texts["summary"]


def test_a_long_run_is_written_in_bounded_memory(tmp_path):
    n_steps, n_rows = 512, 2048
    run = Run(loaders=(LoaderRecord(loader_id=0, framework="torch", batch_size=8, steps=StepLog(
                  t_end_s=tuple(0.01 * i for i in range(n_steps)), n_steps=(1,) * n_steps,
                  wait_s=(0.002,) * n_steps, wall_s=(0.01,) * n_steps)),),
              window=Window(loader_id=0),
              samples=Samples(t_s=tuple(0.2 * i for i in range(n_rows)), system_cpu_pct=(50.0,) * n_rows,
                              main_cpu_pct=(90.0,) * n_rows, main_rss_bytes=(2**30,) * n_rows))
    tracemalloc.start()
    try:
        path = tb.write_run(run, str(tmp_path / "tb"))
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    events = 2 * n_steps + 3 * n_rows
    assert os.path.getsize(path) > 40 * events  # every point was written...
    assert peak_bytes < 2**19  # ...without holding them all at once (a list of the 7k points takes ~1 MiB)


# --------------------------------------------------------------------- tune


def test_tune_cli_writes_one_tensorboard_run_per_trial(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=5, step_ms=2, n=400, batch_size=4, epochs=50))
    logdir = tmp_path / "tb"
    proc = run_feedprof(["tune", "--out", str(tmp_path / "out"), "--tensorboard", str(logdir),
                         "--budget", "20", "--window-seconds", "0.5", "--min-window-batches", "20",
                         "--warmup-batches", "2", "--interval", "0.1", "--quiet", script])
    assert proc.returncode == 0, proc.stderr
    result = load(str(tmp_path / "out" / "results.json"))
    measured = [t for t in result.trials if t.run is not None]
    assert len(measured) >= 2  # baseline, ceiling and (unless the machine is very busy) search steps
    assert sorted(os.listdir(logdir)) == sorted([tb.trial_run_name(t) for t in measured] + ["tune"])
    assert tb.trial_run_name(measured[0]) == "00-baseline-num_workers=0"
    for trial in measured:
        scalars, texts = read(logdir / tb.trial_run_name(trial))
        rec = trial.run.loader(trial.run.window.loader_id)
        assert values(scalars["step/step_time_ms"]) == pytest.approx([1000 * w for w in rec.steps.wall_s], rel=1e-5)
        assert statistics.median(values(scalars["throughput/batches_per_s"])) == pytest.approx(trial.batches_per_s,
                                                                                                rel=1e-5)
        assert f"trial {trial.index} ({trial.role})" in texts["summary"]
    scalars, texts = read(logdir / "tune")
    ok = [t for t in result.trials if t.state == "ok"]
    assert scalars["tune/batches_per_s"] and [s for s, _, _ in scalars["tune/batches_per_s"]] == [t.index for t in ok]
    assert values(scalars["tune/batches_per_s"]) == pytest.approx([t.batches_per_s for t in ok], rel=1e-5)
    assert all(line in texts["recommendation"] for line in result.recommendation.paste_line.splitlines())
    assert "| 0 | baseline | num_workers=0 | ok |" in texts["recommendation"]


def test_trial_run_names():
    def trial(index, role, text, config=None):
        return Trial(index=index, role=role, config=config or {}, state="ok", config_text=text)

    assert tb.trial_run_name(trial(3, "search", "num_workers=8, persistent_workers=True")) == \
        "03-search-num_workers=8,persistent_workers=True"
    assert tb.trial_run_name(trial(1, "ceiling", "one cached batch replayed")) == "01-ceiling"
    assert tb.trial_run_name(trial(2, "search", "", {"workers": 4, "use_multiprocessing": True})) == \
        "02-search-use_multiprocessing=True,workers=4"
    assert tb.trial_run_name(trial(4, "search", "map: num_parallel_calls=AUTOTUNE / 8")) == \
        "04-search-map_num_parallel_calls=AUTOTUNE_8"


# --------------------------------------------------------- missing package


def test_missing_tensorboard_says_what_to_install(tmp_path, monkeypatch, capsys):
    from feedprof.cli import main

    for name in [m for m in sys.modules if m.startswith("tensorboard.")] + ["tensorboard"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install tensorboard"):
        feedprof.to_tensorboard(Run(), str(tmp_path / "tb"))
    script = write_script(tmp_path, "train.py", "print('never run')\n")
    assert main(["profile", "--out", str(tmp_path / "out"), "--tensorboard", str(tmp_path / "tb"), script]) == 2
    err = capsys.readouterr().err
    assert "pip install tensorboard" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "run.json").exists()  # refused before running anything


def test_a_tensorboard_dir_that_cannot_be_written_is_refused_first(tmp_path, capsys):
    from feedprof.cli import main

    script = write_script(tmp_path, "train.py", "print('never run')\n")
    (tmp_path / "a-file").write_text("")
    assert main(["tune", "--out", str(tmp_path / "out"), "--tensorboard", str(tmp_path / "a-file"), script]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"feedprof: --tensorboard {tmp_path / 'a-file'}: File exists"
