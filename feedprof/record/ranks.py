"""Which rank of a multi-process job this process is, read from the
environment its launcher set: torchrun / torch.distributed.launch, Open MPI,
MPICH-style PMI, Horovod, TensorFlow's TF_CONFIG, Slurm. One reader for every
launcher whose ranks are Python processes (DESIGN.md, "Multi-process jobs")."""
from __future__ import annotations

import json
import socket
import sys
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from feedprof.store import RankInfo

# (launcher, rank, local rank, world size, local world size): the first whose rank variable is set wins.
# Horovod first: horovodrun on MPI sets OMPI_* too, and HOROVOD_* are the ones it means.
_VARIABLES: List[Tuple[str, str, str, str, str]] = [
    ("horovod", "HOROVOD_RANK", "HOROVOD_LOCAL_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_SIZE"),
    ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),
    ("mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("pmi", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS"),
    ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE"),
]


def _int(env: Mapping[str, str], name: str) -> Optional[int]:
    try:
        return int(env[name].split("(")[0])  # Slurm writes e.g. "2(x3)" for tasks per node
    except (KeyError, ValueError):
        return None


def _from_variables(env: Mapping[str, str]) -> Optional[RankInfo]:
    for launcher, rank_v, local_v, size_v, local_size_v in _VARIABLES:
        rank = _int(env, rank_v)
        if rank is None:
            continue
        size = _int(env, size_v) or rank + 1
        local = _int(env, local_v)
        local_size = _int(env, local_size_v)
        return RankInfo(rank=rank, local_rank=rank if local is None else local, world_size=size,
                        local_world_size=local_size or (size if local is None else max(local + 1, 1)),
                        launcher=launcher)
    return None


def _from_tf_config(env: Mapping[str, str]) -> Optional[RankInfo]:
    """TF_CONFIG {"cluster": {"chief": [...], "worker": [...]}, "task": {"type", "index"}}:
    the chief first, then the workers, as MultiWorkerMirroredStrategy numbers them."""
    try:
        config = json.loads(env["TF_CONFIG"])
        cluster, task = config["cluster"], config["task"]
        roles = [r for r in ("chief", "worker") if r in cluster]
        rank = sum(len(cluster[r]) for r in roles[:roles.index(task["type"])]) + int(task["index"])
        size = sum(len(cluster[r]) for r in roles)
        hosts = [h.rsplit(":", 1)[0] for r in roles for h in cluster[r]]
    except (KeyError, ValueError, TypeError, AttributeError):
        return None
    mine = hosts[rank] if rank < len(hosts) else ""
    local = [i for i, h in enumerate(hosts) if h == mine]
    return RankInfo(rank=rank, local_rank=local.index(rank) if rank in local else 0, world_size=size,
                    local_world_size=max(1, len(local)), launcher="tf_config")


READERS: Tuple[Callable[[Mapping[str, str]], Optional[RankInfo]], ...] = (_from_variables, _from_tf_config)


_NODE_RANK = ("GROUP_RANK", "OMPI_COMM_WORLD_NODE_RANK", "SLURM_NODEID")


def rank_from_env(env: Mapping[str, str]) -> Optional[RankInfo]:
    """This process's rank, if a launcher started it (None: a plain process)."""
    for read in READERS:
        info = read(env)
        if info is not None:
            node_rank = next((_int(env, v) for v in _NODE_RANK if _int(env, v) is not None), None)
            return RankInfo(**{**info.__dict__, "node": socket.gethostname(), "node_rank": node_rank})
    return None


def cuda_device() -> Dict[str, str]:
    """The CUDA device this rank trains on, if it uses one (never initialises CUDA itself)."""
    from feedprof.record.cuda import cuda_in_use

    if not cuda_in_use():
        return {"device": "cpu"}
    torch = sys.modules["torch"]
    try:
        index = torch.cuda.current_device()
        return {"device": f"cuda:{index}", "gpu_uuid": str(torch.cuda.get_device_properties(index).uuid)}
    except (RuntimeError, AttributeError):
        return {"device": "cuda"}
