"""feedprof.profile() on real PyTorch DataLoaders (sleep-bound: unambiguous verdicts)."""
import time

import pytest

import feedprof
from feedprof.session import NullProfile


@pytest.fixture(scope="module")
def SleepyDataset(torch):  # noqa: N802 (the class it gives, defined once torch is known to be there)
    class SleepyDataset(torch.utils.data.Dataset):
        def __init__(self, n, sleep_s):
            self.n, self.sleep_s = n, sleep_s

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            time.sleep(self.sleep_s)
            return torch.zeros(3), i

    return SleepyDataset


def train(prof, loader, step_s, epochs=1):
    for _ in range(epochs):
        for _batch in prof.watch(loader) if prof else loader:
            time.sleep(step_s)


def test_input_bound_loop(DataLoader, SleepyDataset):
    loader = DataLoader(SleepyDataset(40, 0.01), batch_size=2)  # 20 ms to load, 1 ms to train
    with feedprof.profile(interval_s=0.05, warmup_batches=2) as prof:
        for _ in prof.watch(loader):
            time.sleep(0.001)
    s = prof.summary()
    assert s.input_bound == "highly"
    assert s.data_wait_fraction > 0.8
    assert s.framework == "torch" and s.batch_size == 2 and s.num_workers == 0
    assert s.samples_per_s == pytest.approx(2 * s.batches_per_s)


@pytest.mark.serial
def test_compute_bound_loop_with_workers(DataLoader, SleepyDataset, e2e):  # worker processes
    # Each batch from a worker still costs ~2 ms of IPC here (a socket round trip
    # per tensor under the file_descriptor strategy), so the step must be long.
    loader = DataLoader(SleepyDataset(48, 0.001), batch_size=2, num_workers=2)
    with feedprof.profile(interval_s=0.05, warmup_batches=4) as prof:
        for _ in prof.watch(loader):
            time.sleep(0.08)  # the step dominates; workers keep ahead
    s = prof.summary()
    assert s.input_bound == "not", s
    assert s.data_wait_fraction < 0.05
    assert s.num_workers == 2
    run = prof.run
    assert max(run.samples.n_workers) >= 2  # the workers were seen by the sampler
    assert s.time_to_first_batch_s is not None and s.time_to_first_batch_s > 0


def test_the_busiest_loader_is_the_training_loader(tmp_path, DataLoader, SleepyDataset):
    train_loader = DataLoader(SleepyDataset(30, 0.0), batch_size=1)
    val_loader = DataLoader(SleepyDataset(5, 0.0), batch_size=1)
    with feedprof.profile(interval_s=0.05) as prof:
        for _ in range(2):
            for _ in prof.watch(train_loader, name="train"):
                pass
            for _ in prof.watch(val_loader, name="val"):
                pass
    assert prof.summary().loader == "train"
    assert prof.run.loaders[0].site.startswith("test_session.py:")
    path = prof.save(str(tmp_path / "run.json"))
    back = feedprof.load(path)
    assert back.schema == "feedprof.run/1" and back.kind == "context"
    assert back.summary.data_wait_fraction == prof.summary().data_wait_fraction
    assert [r.name for r in back.loaders] == ["train", "val", "train", "val"]  # one record per watch()


def test_any_iterable_can_be_watched():
    def batches():
        for i in range(20):
            time.sleep(0.005)
            yield [i] * 8

    with feedprof.profile(interval_s=0.05, warmup_batches=1) as prof:
        for _ in prof.watch(batches()):
            pass
    s = prof.summary()
    assert s.framework == "iterable" and s.batch_size == 8
    assert s.input_bound == "highly"


def test_summary_prints_in_plain_words(DataLoader, SleepyDataset):
    loader = DataLoader(SleepyDataset(20, 0.005), batch_size=1)
    with feedprof.profile(interval_s=0.05, warmup_batches=1) as prof:
        for _ in prof.watch(loader):
            pass
    text = str(prof.summary())
    assert "input-bound" in text and "batches/s" in text and "GPU" in text


def test_disabled_profiler_hands_the_loader_back_untouched(DataLoader, SleepyDataset):
    loader = DataLoader(SleepyDataset(3, 0.0))
    with feedprof.profile(enabled=False) as prof:
        assert isinstance(prof, NullProfile)
        assert prof.watch(loader) is loader
    assert prof.save("never-written.json") is None


def test_watch_overhead_is_microseconds():
    """The per-batch cost of watch(): a budget, like a feature (fast iterable, no sampling)."""
    data = list(range(200_000))
    prof = feedprof.profile(sample=False, gpu=False).start()
    watched = prof.watch(data)
    t0 = time.perf_counter()
    for _ in watched:
        pass
    per_batch_s = (time.perf_counter() - t0) / len(data)
    prof.stop()
    assert per_batch_s < 20e-6, f"{per_batch_s * 1e6:.1f} µs per batch"


def test_the_public_tune_takes_every_tune_option_by_name_with_its_default():
    """feedprof.tune() has its real signature (no **options): one keyword per TuneOptions field,
    with the same default, so help() and an editor show them and a typo is a TypeError."""
    import dataclasses
    import inspect

    from feedprof.tune.job import TuneOptions

    params = inspect.signature(feedprof.tune).parameters
    options = {f.name: f.default for f in dataclasses.fields(TuneOptions)}
    keywords = {name: p.default for name, p in params.items() if p.kind == inspect.Parameter.KEYWORD_ONLY}
    assert keywords == options
    with pytest.raises(TypeError):
        feedprof.tune("train.py", budget=60)  # (budget_s)


def test_the_public_tune_stays_a_function_once_its_package_is_imported():
    """feedprof.tune() imports the feedprof.tune package; a second call in the same session (a
    notebook) must still call the function, not the package."""
    import feedprof.tune.job as job  # what the first call imports (and every way to import it works)
    from feedprof.tune.job import TuneOptions

    assert callable(feedprof.tune) and job.TuneOptions is TuneOptions
    with pytest.raises(TypeError):  # (the function's own signature, whichever object holds the name)
        feedprof.tune("train.py", budget=60)
