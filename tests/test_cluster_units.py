"""The pure parts of running under Slurm and across nodes, on hand-built records: the paste
line that keeps the launch, which rank holds a job back, one feedprof per task's directory and
markers, merging the tunes of several nodes, and finding the runs a directory holds."""
import os
import time

import pytest

from feedprof.analyse.merge import MergeError, merge_tunes
from feedprof.analyse.stragglers import rank_spread, waits_of_online
from feedprof.frameworks.paste import with_launch
from feedprof.render.nodes import differences, render_tunes
from feedprof.store import OnlineWindow, RankInfo, Recommendation, Run, Trial, TuneResult, records_in, save
from feedprof.trial.peers import Peers, task_dir_name, task_of


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
