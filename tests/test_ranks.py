"""Which rank a process is, from each launcher's environment."""
import json
import socket

import pytest

from feedprof.record.ranks import cpu_share, is_launcher, rank_from_env, tasks_per_node
from feedprof.store import RankInfo


@pytest.mark.parametrize("env,expected", [
    ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"},
     RankInfo(rank=3, local_rank=1, world_size=8, local_world_size=4, launcher="torchrun")),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
     RankInfo(rank=1, local_rank=1, world_size=2, local_world_size=2, launcher="mpi")),
    ({"PMI_RANK": "5", "PMI_SIZE": "6", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
     RankInfo(rank=5, local_rank=1, world_size=6, local_world_size=2, launcher="pmi")),
    ({"HOROVOD_RANK": "2", "HOROVOD_LOCAL_RANK": "0", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_SIZE": "2",
      "OMPI_COMM_WORLD_RANK": "9"},  # Horovod's own numbering wins over the MPI underneath
     RankInfo(rank=2, local_rank=0, world_size=4, local_world_size=2, launcher="horovod")),
    ({"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2(x2)",
      "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"},
     RankInfo(rank=3, local_rank=1, world_size=4, local_world_size=2, launcher="slurm", job="7.0")),
    # srun without --ntasks-per-node: the step's tasks per node, indexed by this node
    ({"SLURM_PROCID": "4", "SLURM_LOCALID": "1", "SLURM_NTASKS": "5", "SLURM_STEP_NUM_TASKS": "5",
      "SLURM_STEP_TASKS_PER_NODE": "3,2", "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_NODEID": "1",
      "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "2"},
     RankInfo(rank=4, local_rank=1, world_size=5, local_world_size=2, launcher="slurm", job="7.2")),
    ({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2",
      "SLURM_JOB_ID": "9", "SLURM_STEPID": "0"},
     RankInfo(rank=1, local_rank=1, world_size=2, local_world_size=2, launcher="slurm", job="9.0")),
    # torchrun's ranks inside a Slurm task: torchrun's numbering wins
    ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "SLURM_PROCID": "1",
      "SLURM_NTASKS": "2", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "0", "SLURM_TASKS_PER_NODE": "1(x2)"},
     RankInfo(rank=3, local_rank=1, world_size=4, local_world_size=2, launcher="torchrun", job="9.0")),
    ({"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"], "worker": ["a:2", "b:3"]},
                               "task": {"type": "worker", "index": 0}})},
     RankInfo(rank=1, local_rank=1, world_size=3, local_world_size=2, launcher="tf_config")),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]},
                               "task": {"type": "worker", "index": 1}})},
     RankInfo(rank=1, local_rank=1, world_size=2, local_world_size=2, launcher="tf_config")),
])
def test_each_launcher_s_environment(env, expected):
    info = rank_from_env(env)
    node_rank = int(env["SLURM_NODEID"]) if "SLURM_NODEID" in env else None
    assert info == RankInfo(**{**expected.__dict__, "node": socket.gethostname(), "node_rank": node_rank})


@pytest.mark.parametrize("env", [
    {}, {"RANK": "x"}, {"TF_CONFIG": "not json"}, {"LOCAL_WORLD_SIZE": "4"},
    # an sbatch script (and a salloc shell) is in the job, but no task of a step: no rank
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "6", "SLURM_TASKS_PER_NODE": "2"},
])
def test_a_plain_process_is_no_rank(env):
    assert rank_from_env(env) is None


@pytest.mark.parametrize("text,expected", [("2", [2]), ("2(x3),1", [2, 2, 2, 1]), ("", []), ("4(x2)", [4, 4])])
def test_slurm_tasks_per_node(text, expected):
    assert tasks_per_node(text) == expected


@pytest.mark.parametrize("argv,launcher", [
    (["/venv/bin/torchrun", "--nproc-per-node", "2", "train.py"], True),
    (["/venv/lib/python3.11/site-packages/torch/distributed/run.py", "--nproc-per-node", "2"], True),
    (["/usr/bin/srun", "-n", "2", "python"], True), (["accelerate", "launch", "t.py"], True),
    (["deepspeed", "t.py"], True), (["mpirun", "-np", "2"], True),
    (["train.py", "--epochs", "1"], False), (["/venv/bin/python"], False), ([], False),
])
def test_a_launcher_is_never_a_rank(argv, launcher):
    assert is_launcher(argv) is launcher


@pytest.mark.parametrize("cmdline,launcher", [
    (["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"], True),
    (["python", "-m", "accelerate.commands.launch", "t.py"], True),
    (["python", "-m", "mypackage.train", "--epochs", "3"], False),
])
def test_a_launcher_run_with_dash_m_is_known_by_its_module(cmdline, launcher):
    # at interpreter start (sitecustomize) sys.argv is ["-m", ...]: the module is not in it yet
    assert is_launcher(["-m", *cmdline[3:]], cmdline=cmdline) is launcher


@pytest.mark.parametrize("usable,local,env,expected", [
    (16, 4, {}, 4),  # a torchrun node: the CPUs split between its ranks
    (16, 2, {"SLURM_CPUS_PER_TASK": "6"}, 6),  # what Slurm gave each task
    (16, 2, {"SLURM_CPUS_PER_TASK": "32"}, 16),  # ... but no more than the task may use
    (64, 2, {"SLURM_CPUS_ON_NODE": "8"}, 4),  # the job's share of the node, split
    (4, 2, {"SLURM_CPUS_ON_NODE": "8"}, 4),  # a task bound to fewer CPUs than the job's: its own
    (2, 4, {}, 1),  # never none
])
def test_a_rank_s_cpu_share(usable, local, env, expected):
    assert cpu_share(usable, local, env) == expected
