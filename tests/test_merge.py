"""analyse/merge.py: the runs of a job's nodes made one run, on hand-built records."""
import pytest

from feedprof.analyse.merge import MergeError, merge_runs
from feedprof.store.reasons import Straggler
from feedprof.store import HostInfo, RankInfo, Run, Summary


def rank(n, node="", node_rank=None, rate=10.0, wait=0.1, batch=32):
    summary = Summary(loader="train.py:9", batches_per_s=rate, effective_batches_per_s=rate, batch_size=batch,
                      data_wait_fraction=wait, main_cpu_pct=100.0 + n)
    return Run(rank=RankInfo(rank=n, world_size=4, node=node, node_rank=node_rank), summary=summary)


def node(hostname, *ranks, duration_s=30.0):
    return Run(kind="context", host=HostInfo(hostname=hostname), ranks=tuple(ranks), duration_s=duration_s,
               notes=(Straggler(rank=0, wait_fraction=0.9, others_wait_fraction=0.1),))


def test_the_ranks_of_two_nodes_make_one_job_in_node_order():
    second = node("b", rank(3, node_rank=1), rank(2, node_rank=1), duration_s=40.0)
    first = node("a", rank(1, node_rank=0, rate=8.0), rank(0, node_rank=0))
    job = merge_runs([second, first])
    assert [(r.rank.rank, r.rank.node) for r in job.ranks] == [(0, "a"), (1, "a"), (2, "b"), (3, "b")]
    assert job.kind == "profile" and job.duration_s == 40.0  # a profile of the job, as long as its longest node
    assert job.notes == ()  # a node's notes are about that node, not the job
    assert job.host.hostname == "b"  # the first run given stands for the job


def test_the_job_is_as_fast_as_its_slowest_rank_and_as_starved_as_its_most_starved():
    job = merge_runs([node("a", rank(0, rate=10.0, wait=0.1), rank(1, rate=8.0, wait=0.2)),
                      node("b", rank(2, rate=9.0, wait=0.5), rank(3, rate=10.0, wait=0.1))])
    s = job.summary
    assert s.batches_per_s == 8.0 and s.samples_per_s == 8.0 * 4 * 32  # every rank's batch, at the slowest rate
    assert s.data_wait_fraction == 0.5 and s.input_bound == "highly"
    assert Straggler(rank=2, wait_fraction=0.5, others_wait_fraction=0.1) in s.notes


def test_a_rank_keeps_the_node_its_launcher_named():
    job = merge_runs([node("a", rank(0, node="gpu-07")), node("b", rank(1))])
    assert {r.rank.rank: r.rank.node for r in job.ranks} == {0: "gpu-07", 1: "b"}


def test_single_process_runs_are_one_rank_each_named_by_host_or_position_and_grouped_by_node():
    one = Run(host=HostInfo(hostname=""), rank=RankInfo(rank=0), summary=rank(0).summary, duration_s=5.0)
    two = Run(host=HostInfo(hostname="b"), rank=RankInfo(rank=1), summary=rank(1).summary, duration_s=6.0)
    job = merge_runs([one, two])
    assert [(r.rank.rank, r.rank.node) for r in job.ranks] == [(1, "b"), (0, "node0")]  # no node rank: by name
    assert job.ranks[0].ranks == () and job.duration_s == 6.0


@pytest.mark.parametrize("runs,message", [
    ([node("a", rank(0))], "needs the runs of two or more nodes"),
    ([], "needs the runs of two or more nodes"),
    ([node("a", rank(0), rank(1)), node("a", rank(1), rank(0))], r"ranks \[0, 1\] appear in more than one run"),
    ([Run(host=HostInfo(hostname="a")), Run(host=HostInfo(hostname="a"))], r"ranks \[0\] appear in more than one run"),
], ids=["one run", "no run", "one node twice", "one process twice"])
def test_runs_that_are_not_the_nodes_of_one_job(runs, message):
    with pytest.raises(MergeError, match=message):
        merge_runs(runs)
