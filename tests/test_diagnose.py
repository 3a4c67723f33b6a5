import dataclasses

import pytest

from feedprof.analyse import stats
from feedprof.analyse.diagnose import classify, effective_rate, summarize, training_loader
from feedprof.store.reasons import NoLoaderIterated, OnlyWarmup
from feedprof.store import EpochLog, LoaderRecord, Peaks, Run, Samples, StepLog, Window


def steps(n, wait, wall, t0=0.0):
    return StepLog(t_end_s=tuple(t0 + (i + 1) * wall for i in range(n)), n_steps=(1,) * n,
                   wait_s=(wait,) * n, wall_s=(wall,) * n)


@pytest.mark.parametrize("fraction,expected", [
    (None, "unknown"), (0.0, "not"), (0.0499, "not"), (0.05, "moderately"),
    (0.1999, "moderately"), (0.2, "highly"), (0.95, "highly"),
])
def test_tf_profiler_thresholds(fraction, expected):
    assert classify(fraction) == expected


def test_chunk_rates_median_and_spread():
    log = StepLog(t_end_s=tuple(range(100)), n_steps=(1,) * 100, wait_s=(0.0,) * 100,
                  wall_s=(0.1,) * 80 + (1.0,) * 20)  # a hiccup in the last chunk
    rates = stats.chunk_rates(log, 5)
    assert len(rates) == 5
    med, low, high = stats.spread(rates)
    assert med == pytest.approx(10.0)  # the median ignores the hiccup
    assert low == pytest.approx(1.0)
    assert high == pytest.approx(10.0)


def test_chunk_rates_few_steps_make_one_chunk():
    assert len(stats.chunk_rates(steps(5, 0.0, 0.1), 5)) == 1
    assert stats.chunk_rates(StepLog(), 5) == []


def test_effective_rate_amortises_startup():
    # 10 batches per epoch at 10 batches/s, 1 s start-up per epoch: 10 / (1 + 0.9)
    assert effective_rate(10.0, 10, 1.0) == pytest.approx(10 / 1.9)
    assert effective_rate(10.0, None, 1.0) == 10.0


def test_ranked_figure_counts_the_time_between_epochs():
    # 40-batch epochs at 400 b/s of steps, 0.3 s of validation after each:
    # the loop delivers 40 batches every 0.01 + 39/400 + 0.3 s.
    run = make_run()
    train = dataclasses.replace(run.loaders[0], batches_per_epoch=40, steps=steps(100, 0.0, 0.0025), epochs=EpochLog(
        t_start_s=(0.0, 0.41, 0.82), n_epochs=(1, 1, 1), first_batch_s=(0.01,) * 3, n_batches=(40, 40, 20),
        between_s=(0.3, 0.3, 0.0), n_between=(1, 1, 0)))
    s = summarize(dataclasses.replace(run, loaders=(train, run.loaders[1])))
    assert s.batches_per_s == pytest.approx(400.0)  # the steps' own rate
    assert s.effective_batches_per_s == pytest.approx(40 / (0.01 + 39 / 400 + 0.3))


def make_run():
    train = LoaderRecord(loader_id=0, framework="torch", site="train.py:10", batch_size=32,
                         batches_per_epoch=1000, config={"num_workers": 2}, batches=101,
                         steps=steps(100, 0.06, 0.1),
                         epochs=EpochLog(t_start_s=(0.0,), n_epochs=(1,), first_batch_s=(0.5,), n_batches=(101,)))
    val = LoaderRecord(loader_id=1, framework="torch", site="train.py:11", batches=20, steps=steps(19, 0.0, 0.01))
    samples = Samples(t_s=(0.0, 5.0, 10.0, 20.0), main_cpu_pct=(100.0, 50.0, 150.0, 999.0),
                      system_cpu_pct=(50.0, 50.0, 50.0, 50.0), workers_cpu_pct=(0.0, 100.0, 100.0, 0.0),
                      peaks=Peaks(tree_rss_bytes=123, shm_used_bytes=7, n_workers=2))
    return Run(loaders=(train, val), window=Window(loader_id=0, t_start_s=0.0, t_end_s=10.0), samples=samples)


def test_summary_of_a_known_run():
    s = summarize(make_run())
    assert s.loader == "train.py:10"
    assert s.batches_measured == 100
    assert s.batches_per_s == pytest.approx(10.0)
    assert s.samples_per_s == pytest.approx(320.0)
    assert s.data_wait_fraction == pytest.approx(0.6)
    assert s.input_bound == "highly"
    assert s.time_to_first_batch_s == pytest.approx(0.5)
    assert s.num_workers == 2
    assert s.main_cpu_pct == pytest.approx(100.0)  # the reading at t=20 s is outside the window
    assert s.peak_tree_rss_bytes == 123


def test_training_loader_is_the_busiest_without_a_window():
    run = make_run()
    import dataclasses
    run = dataclasses.replace(run, window=Window())
    assert training_loader(run).loader_id == 0


def test_summary_without_steady_steps_says_so():
    rec = LoaderRecord(loader_id=0, framework="torch", batches=3)
    s = summarize(Run(loaders=(rec,)))
    assert s.data_wait_fraction is None and s.input_bound == "unknown"
    assert OnlyWarmup(batches=3) in s.notes


def test_summary_without_loader():
    s = summarize(Run())
    assert s.notes == (NoLoaderIterated(),)


def test_persistent_workers_pay_their_start_up_once():
    import dataclasses

    run = make_run()
    train = run.loaders[0]
    assert train.epochs.n_epochs == (1,)  # only the first epoch seen: its start-up stands in for every epoch's
    short = dataclasses.replace(train, batches_per_epoch=20)
    plain = summarize(dataclasses.replace(run, loaders=(short, run.loaders[1])))
    persistent = summarize(dataclasses.replace(run, loaders=(
        dataclasses.replace(short, config={"num_workers": 2, "persistent_workers": True}), run.loaders[1])))
    assert plain.effective_batches_per_s < plain.batches_per_s  # 0.5 s start-up charged every 20-batch epoch
    assert persistent.effective_batches_per_s == persistent.batches_per_s
