"""What more workers break, read off recorded runs (analyse/hazards.py,
analyse/limits.py, record/digest.py): no processes, the figures of real runs."""
import dataclasses

import numpy as np
import pytest

from feedprof.analyse.hazards import duplicated, fds_near_limit, memory_growth
from feedprof.analyse.limits import duplication_in, growth_need, growth_projection, usable, worker_cap
from feedprof.analyse.recommend import recommend
from feedprof.store.reasons import (CudaInForkedWorker, DuplicatedPerWorker, OutOfMemoryKilled, ScriptFailed,
                              SharedMemoryExhausted, TooManyOpenFiles, TrialTimedOut)
from feedprof.record.digest import batch_digest, digests_wanted
from feedprof.store import EpochLog, LoaderRecord, Peaks, Phase, Role, Run, Samples, TrialState, Window
from feedprof.tune.space import TorchSpace
from tests.records import make_trial

MiB = 2**20


def workers_of(config):
    return config.get("num_workers") or 0


# ------------------------------------------------------------ fingerprints


def test_a_batch_fingerprint_depends_only_on_its_contents(torch):
    x = torch.arange(200_000, dtype=torch.float32).reshape(1000, 200)
    assert batch_digest((x, torch.tensor([1, 2]))) == batch_digest((x.clone(), torch.tensor([1, 2])))
    assert batch_digest((x, torch.tensor([1, 2]))) != batch_digest((x, torch.tensor([1, 3])))
    assert batch_digest({"x": x}) != batch_digest({"x": x + 1})  # every sampled element moved
    assert batch_digest(np.arange(10)) == batch_digest(np.arange(10)) != batch_digest(np.arange(11))
    assert batch_digest(torch.zeros(3, dtype=torch.bfloat16)) == batch_digest(torch.zeros(3, dtype=torch.bfloat16))
    assert batch_digest(["a", 1, None]) != batch_digest(["a", 2, None])
    whole, images, labels, names = batch_digest((torch.randn(4, 3), torch.tensor([1, 2, 3, 4]), ["a", "b"])).split(".")
    assert labels == batch_digest((torch.randn(4, 3), torch.tensor([1, 2, 3, 4]), ["a", "b"])).split(".")[2]
    assert whole != batch_digest((torch.randn(4, 3), torch.tensor([1, 2, 3, 4]), ["a", "b"])).split(".")[0]


def test_a_few_batches_from_each_workers_stream():
    assert digests_wanted(0) == 32 and digests_wanted(16) == 64 and digests_wanted(1000) == 256


# ------------------------------------------------------ duplicated records


def stream(records, workers, batches):
    """Digests of the batches a loader delivers, workers taking turns: with
    ``records(worker, j)`` the j-th batch of each worker."""
    return tuple(f"{records(i % max(1, workers), i // max(1, workers))}" for i in range(batches))


def loader(digests, iterable=True, asked=None, epochs=()):
    return LoaderRecord(loader_id=0, framework="torch", dataset="Stream", iterable=iterable,
                        batch_digests=digests, worker_info_asked=asked,
                        epochs=EpochLog(n_epochs=tuple(1 for _ in epochs), n_batches=tuple(epochs)))


def test_every_worker_yielding_the_whole_stream_is_duplication():
    dup = duplicated(loader(stream(lambda w, j: j, 4, 32), asked=False), workers=4)
    assert dup == DuplicatedPerWorker(dataset="Stream", workers=4, batches_checked=32, distinct_batches=8,
                                      worker_info_asked=False)


@pytest.mark.parametrize("records,iterable", [
    (lambda w, j: (w, j), True),  # sharded: each worker its own records
    (lambda w, j: 0, True),  # constant batches: they repeat within one worker's stream too
    (lambda w, j: j, False),  # a map-style dataset: the sampler splits it, whatever the digests say
])
def test_what_is_not_duplication(records, iterable):
    assert duplicated(loader(stream(records, 4, 32), iterable=iterable), workers=4) is None


@pytest.mark.parametrize("records,workers", [
    (lambda w, j: (w, j // 2), 2),  # every record twice in a row in each worker's own stream: not the workers'
    (lambda w, j: (w * 7 + j) % 5, 4),  # periodic data out of step between workers
])
def test_data_that_repeats_anyway_is_not_blamed_on_the_workers(records, workers):
    assert duplicated(loader(stream(records, workers, 32)), workers=workers) is None


def test_periodic_records_repeated_in_step_are():
    assert duplicated(loader(stream(lambda w, j: j % 3, 4, 32)), workers=4) is not None


def augmented(workers, batches, asked):
    """Whole batches differ (random jitter), their labels repeat once per worker."""
    rec = loader(tuple(f"{w}{j}whole.{j}label" for w, j in ((i % workers, i // workers) for i in range(batches))),
                 asked=asked)
    return duplicated(rec, workers)


def test_records_repeated_under_random_augmentation_show_in_their_labels():
    dup = augmented(4, 32, asked=False)
    assert dup is not None and dup.part == 1 and dup.distinct_batches == 8
    # a dataset that asks which worker it is in may repeat a part across workers (a
    # line number restarting in every shard): only whole batches count for it
    assert augmented(4, 32, asked=True) is None


def trial(index, n, state=TrialState.OK, cause=None, rec=None, rate=100.0, config=None, run=None, role=Role.SEARCH):
    run = run or (Run(kind="trial", loaders=(rec,), window=Window(loader_id=0)) if rec is not None else None)
    return make_trial(index=index, role=role, config=config or {"num_workers": n}, state=state, cause=cause,
                 phase=Phase.LADDER, batches_per_s=rate, batches_per_s_low=rate, batches_per_s_high=rate, run=run)


def test_an_epoch_that_grows_with_the_workers_is_duplication_too():
    # random records (no digest repeats), but each worker yields the whole epoch
    single = trial(0, 0, rec=loader(stream(lambda w, j: ("a", j), 1, 32), epochs=(100, 100)))
    four = trial(1, 4, rec=loader(stream(lambda w, j: (w, j), 4, 32), epochs=(400, 37)))
    found = duplication_in([single, four], workers_of)
    assert found is not None and found[0] is four
    assert found[1].epoch_batches == 400 and found[1].single_epoch_batches == 100


# ------------------------------------------------------------- the cap


def test_the_cap_comes_from_the_trial_history():
    oom = OutOfMemoryKilled(signal="SIGKILL")
    trials = [trial(0, 0), trial(1, 2), trial(2, 8, TrialState.KILLED, oom), trial(3, 4)]
    cap = worker_cap(trials, workers_of)
    assert cap.max_workers == 7 and cap.because == oom and cap.state == "killed"
    trials.append(trial(4, 6, TrialState.FAILED, TooManyOpenFiles(error="OSError: [Errno 24]")))
    assert worker_cap(trials, workers_of).max_workers == 5
    trials.append(trial(5, 5, TrialState.FAILED, ScriptFailed(error="ValueError: x")))  # the script's own bug
    assert worker_cap(trials, workers_of).max_workers == 5
    dup = loader(stream(lambda w, j: j, 2, 32))
    trials.append(trial(6, 2, rec=dup))
    assert worker_cap(trials, workers_of).max_workers == 1  # duplicated records: at most one worker
    assert [t.index for t in usable(trials, worker_cap(trials, workers_of), workers_of)] == [0]


def test_a_kill_caps_the_workers_even_where_other_settings_ran():
    shm = SharedMemoryExhausted(signal="SIGBUS")
    deep = {"num_workers": 8, "prefetch_factor": 4}
    trials = [trial(0, 8), trial(1, 8, TrialState.KILLED, shm, config=deep)]
    assert worker_cap(trials, workers_of).max_workers == 7  # correct before fast: 8 workers died once


def test_a_deeper_prefetch_past_the_file_limit_rules_out_that_config_not_the_workers():
    files = TooManyOpenFiles(error="OSError: [Errno 24] Too many open files")
    deep = {"num_workers": 8, "prefetch_factor": 4}
    trials = [trial(0, 8), trial(1, 8, TrialState.FAILED, files, config=deep),
              trial(2, 8, config=deep)]  # it ran once before it failed: not safe
    assert worker_cap(trials, workers_of) is None
    assert [t.index for t in usable(trials, None, workers_of)] == [0]


def test_a_forked_worker_touching_cuda_caps_every_worker_count():
    cuda = CudaInForkedWorker(error="RuntimeError: Cannot re-initialize CUDA in forked subprocess.")
    assert worker_cap([trial(0, 0), trial(1, 1, TrialState.FAILED, cuda)], workers_of).max_workers == 0


def test_a_duplicating_stream_is_never_recommended_as_a_speedup():
    space = TorchSpace({"num_workers": 0}, cpu_cap=2, max_primary=32, cuda_used=False)
    dup = loader(stream(lambda w, j: j, 16, 64), asked=False)
    trials = [trial(0, 0, role=Role.BASELINE, rate=40.0), trial(1, 16, rec=dup, rate=600.0),
              trial(2, 1, rate=42.0)]
    trials = [dataclasses.replace(t, config=space.legalize(t.config)) for t in trials]
    rec = recommend(trials, space)
    assert rec.config["num_workers"] <= 1 and rec.verdict.kind == "duplicates" and rec.verdict.dataset == "Stream"
    assert rec.batches_per_s < 100  # the 600 batches/s of repeated records is no one's throughput


# ----------------------------------------------------------- memory growth

# One worker's USS (t_s, bytes) in real trials on this machine (feedprof tune):
GROWING = ((3.45, 9625600), (4.05, 35627008), (4.55, 44969984), (5.15, 69201920), (5.75, 88027136),
           (6.35, 101531648), (6.85, 0))  # a dataset of 1 M Python lists, 2 workers; the last: read as it exited
FLAT = ((2.31, 11509760), (2.91, 11849728), (3.51, 12234752), (4.01, 12627968), (4.61, 12836864),
        (5.11, 12943360))  # image-sized tensors made fresh per sample, 2 workers


def run_with(series, window=(None, None), pid=7, main_rss=400 * MiB):
    t = tuple(x for x, _ in series)
    return Run(kind="trial", window=Window(loader_id=0, t_start_s=window[0], t_end_s=window[1]),
               samples=Samples(t_s=t, worker_uss_bytes=tuple(u for _, u in series), worker_pid=(pid,) * len(t),
                               main_rss_bytes=(main_rss,) * len(t),
                               peaks=Peaks(tree_pss_bytes=600 * MiB, worker_pss_bytes=120 * MiB)))


def test_a_worker_copying_its_dataset_grows_steadily():
    grows = memory_growth([(run_with(GROWING, window=(3.40, 6.68)), 2, 98.0)])
    assert grows is not None and 25 * MiB < grows.growth_bytes_per_s < 35 * MiB
    assert grows.uss_start_bytes == 9625600 and grows.uss_end_bytes == 101531648  # the exit's 0 left out
    assert grows.growth_per_batch_bytes == pytest.approx(grows.growth_bytes_per_s / 49.0)


@pytest.mark.parametrize("series,window", [
    (FLAT, (2.14, 5.17)),  # 1.4 MiB over 3 s: allocator noise, not a copy
    (GROWING[:2], (3.4, 6.7)),  # two readings say nothing
    (((1.0, 50 * MiB), (1.5, 90 * MiB), (2.0, 40 * MiB), (2.5, 95 * MiB), (3.0, 45 * MiB)), (0, 5)),  # noise
    (((1.0, 5 * MiB), (1.3, 60 * MiB), (1.6, 60 * MiB), (1.9, 60.2 * MiB)), (0, 5)),  # grew once, then held
])
def test_what_is_not_growth(series, window):
    assert memory_growth([(run_with(series, window=window), 2, 98.0)]) is None


def test_short_windows_are_pooled_over_trials():
    # a 0.6 s window holds two readings: one step each, rising in every trial
    short = [run_with(((1.61, 31.8 * MiB), (1.91, 47.0 * MiB)), window=(1.3, 1.95)),
             run_with(((1.51, 19.8 * MiB), (2.01, 45.3 * MiB)), window=(1.4, 2.05), pid=8)]
    assert memory_growth([(short[0], 2, 98.0)]) is None  # one step says nothing
    grows = memory_growth([(short[0], 2, 98.0), (short[1], 5, 259.0)])
    assert grows is not None and grows.growth_bytes_per_s == pytest.approx((15.2 + 25.5) * MiB / 0.8)


def test_a_worker_restarted_each_epoch_is_followed_by_its_own_readings():
    s = run_with(GROWING[:6], window=(0, 10))
    pids = (1, 1, 2, 2, 2, 2)  # a new worker from the third reading: its own series
    s = dataclasses.replace(s, samples=dataclasses.replace(s.samples, worker_pid=pids))
    grows = memory_growth([(s, 2, 98.0)])
    assert grows is not None and grows.uss_start_bytes == GROWING[2][1]  # the steps of each worker


def test_growth_is_projected_to_the_end_of_an_epoch_and_to_other_worker_counts():
    # 1 MiB per batch each worker makes; 1,000 batches an epoch: 4 workers make 250 each
    total, per_worker = growth_need(200 * MiB, 50 * MiB, 1.0 * MiB, 1000, 4, full_copy_bytes=None)
    assert per_worker == 300 * MiB and total == 200 * MiB + 4 * 300 * MiB
    _, capped = growth_need(200 * MiB, 50 * MiB, 1.0 * MiB, 1000, 1, full_copy_bytes=400 * MiB)
    assert capped == 450 * MiB  # a worker copies at most what it shares with the main process
    run = run_with(GROWING, window=(3.40, 6.68))
    run = dataclasses.replace(run, loaders=(LoaderRecord(loader_id=0, framework="torch", batches_per_epoch=125_000),))
    t = trial(2, 2, run=run, rate=98.0)
    grows = memory_growth([(run, 2, 98.0)])
    p = growth_projection(t, grows, workers=4, budget_bytes=2**31, persistent=False)
    assert p.worker_epoch_end_bytes == 120 * MiB + 400 * MiB  # its peak PSS, plus at most the main's 400 MiB
    assert p.epoch_s == pytest.approx(125_000 / 98.0) and p.total_epoch_end_bytes > 4 * p.worker_epoch_end_bytes


# ------------------------------------------------------------ open files


def test_open_files_near_the_limit():
    near = Run(samples=Samples(fd_limit=64, peaks=Peaks(main_fds=40, worker_fds=20)))
    assert fds_near_limit(near, 8).fds == 40 and fds_near_limit(near, 8).process == "main"
    assert fds_near_limit(Run(samples=Samples(fd_limit=1024, peaks=Peaks(main_fds=40))), 8) is None
    assert fds_near_limit(Run(samples=Samples(peaks=Peaks(main_fds=40))), 8) is None  # no limit known


def test_a_timeout_with_more_workers_than_ever_ran_caps_the_workers():
    """Spawned workers each start an interpreter: 32 of them may not start within
    a trial's time where 2 ran well. The ladder bisects below, it does not stop."""
    slow = TrialTimedOut(limit_s=30.0)
    trials = [trial(0, 0), trial(1, 2), trial(2, 32, TrialState.TIMEOUT, slow)]
    cap = worker_cap(trials, workers_of)
    assert cap.max_workers == 31 and cap.state == "timeout"
    assert worker_cap([trial(0, 4), trial(1, 4, TrialState.TIMEOUT, slow, config={"num_workers": 4,
                                                                                 "prefetch_factor": 8})],
                      workers_of) is None  # as many workers ran: that config alone
