"""Which rank a process is, from each launcher's environment."""
import json
import socket

import pytest

from feedprof.record.ranks import rank_from_env
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
    ({"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2(x2)"},
     RankInfo(rank=3, local_rank=1, world_size=4, local_world_size=2, launcher="slurm")),
    ({"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"], "worker": ["a:2", "b:3"]},
                               "task": {"type": "worker", "index": 0}})},
     RankInfo(rank=1, local_rank=1, world_size=3, local_world_size=2, launcher="tf_config")),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]},
                               "task": {"type": "worker", "index": 1}})},
     RankInfo(rank=1, local_rank=1, world_size=2, local_world_size=2, launcher="tf_config")),
])
def test_each_launcher_s_environment(env, expected):
    info = rank_from_env(env)
    assert info == RankInfo(**{**expected.__dict__, "node": socket.gethostname()})


@pytest.mark.parametrize("env", [{}, {"RANK": "x"}, {"TF_CONFIG": "not json"}, {"LOCAL_WORLD_SIZE": "4"}])
def test_a_plain_process_is_no_rank(env):
    assert rank_from_env(env) is None
