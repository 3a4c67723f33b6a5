"""A rank out of the launching feedprof's sight measures itself: its own process tree and host,
written to the trial directory where feedprof reads it (in this process, sampled for real)."""
import os
import socket
import time

from feedprof.store import RankInfo, load
from feedprof.trial.rank_meter import RankMeter, clear, samples_path


def test_a_rank_writes_its_own_samples_and_host(tmp_path):
    path = samples_path(str(tmp_path), 1)
    meter = RankMeter(path, RankInfo(rank=1, node="n2", self_sampled=True), interval_s=0.05, gpu=False,
                      origin_s=time.monotonic()).start()
    try:
        time.sleep(0.3)
    finally:
        meter.stop()  # the rank's end: its last write
    run = load(path)
    assert run.kind == "rank" and run.rank.rank == 1 and run.rank.self_sampled
    assert run.host.hostname == socket.gethostname() and run.host.cpus_usable >= 1  # where it ran
    assert run.samples.n_taken >= 3 and run.samples.peaks.tree_rss_bytes > 0
    assert all(t >= 0 for t in run.samples.t_s)
    clear(str(tmp_path))
    assert not os.path.exists(path)


def test_a_rank_writes_before_feedprof_hears_its_window_is_done(tmp_path):
    """feedprof ends the job as soon as every rank's window is done: the samples must be there by then."""
    path = samples_path(str(tmp_path), 0)
    meter = RankMeter(path, RankInfo(rank=0), interval_s=0.05, gpu=False, origin_s=time.monotonic())
    said = []
    emit = meter.emitting(lambda event, **fields: said.append((event, os.path.exists(path))))
    emit("loader", site="train.py:9")
    emit("window_done", loader_id=0)
    assert said == [("loader", False), ("window_done", True)]
