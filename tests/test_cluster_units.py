"""The pure parts of running under Slurm and across nodes, on hand-built records: the paste
line that keeps the launch, which rank holds a job back, one feedprof per task's directory and
markers, merging the tunes of several nodes, finding the runs a directory holds; and, for one
feedprof over several nodes, the ranks a trial waits for, which ranks it can see, the clock of a
rank on another node, nodes that differ and the ranks that measured themselves."""
import dataclasses
import os
import socket
import time

import pytest

from feedprof.analyse.merge import MergeError, merge_tunes
from feedprof.analyse.stragglers import nodes_differ, rank_spread, ranks_per_node, waits_of_online
from feedprof.frameworks.paste import with_launch
from feedprof.render.nodes import differences, render_tunes
from feedprof.render.ranks import format_ranks, rank_usage, ranks_html, self_sampled_note
from feedprof.render.words import say
from feedprof.store import (HostInfo, OnlineWindow, RankInfo, Recommendation, Run, Samples, Summary, Trial, TuneResult,
                            records_in, save)
from feedprof.trial.rank_host import origin_here
from feedprof.trial.jobrunner import in_sight, ranks_to_wait_for
from feedprof.trial.peers import Peers, task_dir_name, task_of
from feedprof.trial.protocol import TrialSpec
from feedprof.tune.online_strategy import RunHistory


@pytest.mark.parametrize("launch,want", [
    (["srun", "-n", "2", "python", "{s}", "--epochs", "3"], "srun -n 2 python {s} --epochs 3 --workers 8"),
    (["torchrun", "--nproc-per-node", "8", "{s}", "--epochs", "3"],
     "torchrun --nproc-per-node 8 {s} --epochs 3 --workers 8"),
    (["./launch.sh"], "python {s} --epochs 3 --workers 8"),  # the launch does not name the script: as it was
])
def test_the_paste_line_is_the_launch_command_run_again(tmp_path, launch, want):
    script = str(tmp_path / "train.py")
    # the paste's command line carries the script's own arguments (the ranks'), the flag set
    paste = f"loader = DataLoader(ds, num_workers=args.workers)  # train.py:9\npython {script} --epochs 3 --workers 8"
    line = with_launch(paste, script, [w.format(s=script) for w in launch])
    assert line.splitlines()[0].startswith("loader = DataLoader(")  # a statement is left alone
    assert line.splitlines()[1] == want.format(s=script)


def windows(waits_by_rank):
    return [OnlineWindow(rank=r, config={}, batches=10, samples=80, wait_s=w, t_start_s=float(k),
                         t_end_s=float(k) + 1.0) for r, ws in waits_by_rank.items() for k, w in enumerate(ws)]


def test_a_rank_that_is_always_the_worst_by_a_margin_holds_the_others_back():
    s = rank_spread(waits_of_online(windows({0: [0.1] * 6, 1: [0.12] * 6, 2: [0.6, 0.5, 0.55, 0.6, 0.7, 0.5]}),
                                    {2: "node-b"}))
    assert s.holds_back and s.worst_rank == 2 and s.worst_node == "node-b" and s.worst_share == 1.0
    assert s.windows == 6 and s.ranks == 3 and s.worst_wait_fraction > 0.5 > s.median_wait_fraction


def test_a_worst_rank_that_moves_is_noise():
    s = rank_spread(waits_of_online(windows({0: [0.5, 0.1, 0.5, 0.1], 1: [0.1, 0.5, 0.1, 0.5]}), {}))
    assert not s.holds_back and s.worst_share == 0.5


@pytest.mark.parametrize("by_rank", [{0: [0.1] * 6}, {0: [0.1, 0.2], 1: [0.3, 0.4]}], ids=["one rank", "two windows"])
def test_too_little_to_tell(by_rank):
    assert rank_spread(waits_of_online(windows(by_rank), {})) is None


def test_a_task_of_several_has_a_directory_of_its_own_and_a_batch_script_is_no_task():
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0",
           "SLURM_TASKS_PER_NODE": "2"}
    task = task_of(env)
    assert task.rank == 1 and task.job == "7.0" and task_dir_name(task).endswith("-rank1")
    assert task_of({**env, "SLURM_STEP_ID": ""}) is None  # the sbatch script itself
    assert task_of({**env, "SLURM_NTASKS": "1", "SLURM_TASKS_PER_NODE": "1", "SLURM_PROCID": "0"}) is None


def test_the_tasks_markers_count_only_this_run_s(tmp_path):
    task0, task1 = (RankInfo(rank=r, world_size=2, job="7.0") for r in (0, 1))
    old = Peers.of_task(str(tmp_path), task1)
    old.window_done()  # an earlier run's marker, long before this one started
    past = time.time() - 3600
    os.utime(os.path.join(old.directory, "window-1"), (past, past))
    mine, theirs = Peers.of_task(str(tmp_path), task0), Peers.of_task(str(tmp_path), task1)
    mine.window_done()
    assert not mine.all_done() and mine.done_ranks() == 1
    theirs.window_done()
    assert mine.all_done() and theirs.all_done()


def tune(node, workers, rate, ranks=(0,)):
    rec = Recommendation(framework="torch", config={"num_workers": workers, "pin_memory": False},
                         config_text=f"num_workers={workers}", trial_index=1, batches_per_s=rate, speedup=rate / 10,
                         paste_line=f"torchrun train.py --workers {workers}")
    run = Run(ranks=tuple(Run(rank=RankInfo(rank=r, node=node)) for r in ranks))
    return TuneResult(recommendation=rec, trials=(Trial(index=0, role="baseline", config={}, state="ok"),
                                                  Trial(index=1, role="search", config=rec.config, state="ok", run=run)))


def test_merged_tunes_say_where_the_nodes_picks_differ():
    m = merge_tunes([tune("a", 8, 100.0, (0, 1)), tune("b", 12, 70.0, (2, 3))], ["a", "b"])
    assert [p.ranks for p in m.picks] == [(0, 1), (2, 3)] and m.slowest == "b"
    assert m.differing == (("num_workers", (("a", 8), ("b", 12))),)
    said = " ".join(differences(m))
    assert "num_workers differs: a 8, b 12" in said and "slowest node, b" in said
    page = render_tunes(m)
    assert "2 nodes of one job" in page and "torchrun train.py --workers 12" in page


def test_merged_tunes_that_agree_say_so_and_one_tune_is_no_merge():
    m = merge_tunes([tune("a", 8, 100.0), tune("b", 8, 98.0, (1,))], ["a", "b"])
    assert m.differing == () and "every node picked the same settings" in differences(m)[0]
    with pytest.raises(MergeError):
        merge_tunes([tune("a", 8, 100.0)], ["a"])


def test_a_directory_holds_its_own_record_or_its_tasks(tmp_path):
    for name in ("vm-rank1", "vm-rank0", ".job-7.0", "trial"):
        (tmp_path / "out" / name).mkdir(parents=True)
    save(Run(), str(tmp_path / "out" / "vm-rank0" / "run.json"))
    save(Run(), str(tmp_path / "out" / "vm-rank1" / "run.json"))
    assert [os.path.basename(os.path.dirname(p)) for p in records_in(str(tmp_path / "out"))] == ["vm-rank0",
                                                                                                 "vm-rank1"]
    save(TuneResult(), str(tmp_path / "out" / "results.json"))
    assert records_in(str(tmp_path / "out")) == [str(tmp_path / "out" / "results.json")]


# ------------------------------------------------ several nodes, one feedprof (srun -N 2 under feedprof)

@pytest.mark.parametrize("started,launcher,want", [
    ({"launcher": "slurm", "world_size": 2, "local_world_size": 1, "step_tasks": 2}, "slurm", 2),  # srun -N 2 -n 2
    ({"launcher": "slurm", "world_size": 8, "local_world_size": 4, "step_tasks": 8}, "slurm", 8),
    # torchrun in each of srun's 2 tasks, 4 ranks each: the step's 8
    ({"launcher": "torchrun", "world_size": 8, "local_world_size": 4, "step_tasks": 2}, "slurm", 8),
    # srun -n 1 torchrun --nnodes 2: the other node's agent is no task of this step
    ({"launcher": "torchrun", "world_size": 8, "local_world_size": 4, "step_tasks": 1}, "slurm", 4),
    ({"launcher": "torchrun", "world_size": 8, "local_world_size": 4}, "torchrun", 4),  # this node's agent
    ({"launcher": "torchrun", "world_size": 2, "local_world_size": 2}, "torchrun", 2),
], ids=["tasks", "tasks per node", "torchrun per task", "one task of a wider job", "torchrun node", "torchrun"])
def test_a_trial_waits_for_every_rank_that_reports_to_it(started, launcher, want):
    assert ranks_to_wait_for(started, launcher) == want


def test_a_rank_out_of_sight_is_not_found_by_its_pid():
    here = socket.gethostname()
    assert in_sight({"node": here, "pid": 7})
    assert not in_sight({"node": "elsewhere", "pid": 7})
    assert not in_sight({"node": here, "pid": 7, "self_sampled": True})  # another PID namespace


def test_a_rank_on_another_node_counts_from_the_trial_s_moment_through_the_wall_clock():
    spec = TrialSpec(script="t.py", argv=[], result_path="", events_path="", origin_s=50.0, window_batches=1,
                     window_seconds=1.0, min_window_batches=1, warmup_batches=0, origin_wall_s=1000.0)
    # 3 s after the trial's start on the wall clock, this node's monotonic clock reads 7003
    assert origin_here(spec, now_s=7003.0, wall_s=1003.0) == pytest.approx(7000.0)
    assert origin_here(dataclasses.replace(spec, origin_wall_s=None), now_s=7003.0, wall_s=1003.0) == 50.0


def test_an_online_config_is_measured_once_every_rank_has_its_windows():
    h = RunHistory(baseline={"num_workers": 0}, ranks_expected=2)
    h.windows += [OnlineWindow(rank=0, config={"num_workers": 0}, batches=10, samples=80, wait_s=0.1,
                               t_start_s=float(k), t_end_s=k + 1.0) for k in range(4)]
    assert h.n_windows({"num_workers": 0}) == 0  # rank 1, on another node, has yet to report one
    h.windows.append(OnlineWindow(rank=1, config={"num_workers": 0}, batches=10, samples=80, wait_s=0.1,
                                  t_start_s=0.0, t_end_s=1.0))
    assert h.n_windows({"num_workers": 0}) == 1


def _rank(rank, node, cpus, wait, host_cpus=0, self_sampled=False):
    info = RankInfo(rank=rank, node=node, cpus=cpus, self_sampled=self_sampled)
    samples = Samples(t_s=(0.0, 0.5), main_cpu_pct=(50.0, 70.0), workers_cpu_pct=(100.0, 130.0),
                      main_rss_bytes=(2 ** 30, 2 ** 30), workers_rss_bytes=(2 ** 29, 2 ** 29))
    return Run(kind="rank", rank=info, host=HostInfo(hostname=node, cpus_usable=host_cpus), samples=samples,
               summary=Summary(data_wait_fraction=wait, batches_per_s=50.0))


def test_nodes_that_differ_are_said_with_the_rank_that_sets_the_pace():
    job = Run(ranks=(_rank(0, "n1", 4, 0.1, 8), _rank(1, "n1", 4, 0.15, 8), _rank(2, "n2", 1, 0.7, 2)))
    found = nodes_differ(job)
    assert found.nodes == ("n1", "n2") and found.rank_cpus == (4, 1) and found.node_cpus == (8, 2)
    assert (found.pace_rank, found.pace_node, found.pace_wait_fraction) == (2, "n2", 0.7)
    assert found.others_wait_fraction == pytest.approx(0.125)
    words = say(found)
    assert "n2" in words and "fewest CPUs" in words and "rank 2 (node n2) sets the job's pace" in words
    assert ranks_per_node(job) == 2  # n1's two ranks share its CPUs, not all three


def test_nodes_alike_or_one_node_say_nothing():
    assert nodes_differ(Run(ranks=(_rank(0, "n1", 2, 0.1, 2), _rank(1, "n2", 2, 0.7, 2)))) is None
    assert nodes_differ(Run(ranks=(_rank(0, "n1", 2, 0.1), _rank(1, "n1", 1, 0.7)))) is None


def test_the_ranks_that_measured_themselves_are_named_with_their_cpu_and_memory():
    job = Run(host=HostInfo(hostname="n1"), ranks=(_rank(0, "n1", 2, 0.1), _rank(1, "n2", 2, 0.2, self_sampled=True)))
    note = self_sampled_note(job)
    assert note.startswith("rank 1 (node n2) measured itself on its own node") and "feedprof on n1" in note
    assert note in format_ranks(job)
    usage = {label: (cores, gib) for label, _, cores, gib in rank_usage(job)}
    assert usage["rank 1 (n2)"] == ((1.5, 2.0), ((0.0, 1.5), (0.5, 1.5)))  # the rank and its workers: cores, GiB
    pss = dataclasses.replace(job.ranks[1].samples, tree_pss_bytes=(None, 2 ** 30))
    job = dataclasses.replace(job, ranks=(job.ranks[0], dataclasses.replace(job.ranks[1], samples=pss)))
    assert {label: gib for label, _, _, gib in rank_usage(job)}["rank 1 (n2)"] == ((0.5, 1.0),)  # PSS, where read
    assert self_sampled_note(Run(ranks=(_rank(0, "n1", 2, 0.1),))) == ""
    page = "".join(ranks_html(job))
    assert "CPU and memory per rank" in page and "<svg" in page and "measured itself on its own node" in page
