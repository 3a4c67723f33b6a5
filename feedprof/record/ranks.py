"""Which rank of a multi-process job this process is, read from the
environment its launcher set: torchrun / torch.distributed.launch, Open MPI,
MPICH-style PMI, Horovod, TensorFlow's TF_CONFIG, Slurm. One reader for every
launcher whose ranks are Python processes (docs/multi-process.md).

A launcher is never a rank, even where it inherited a rank's variables (torchrun
started inside a Slurm task carries SLURM_PROCID): :func:`is_launcher`. Inside
torchrun's ranks, torchrun's variables win over the Slurm task's around them.
"""
from __future__ import annotations

import json
import os
import re
import socket
import sys
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from feedprof.store import RankInfo

# (launcher, rank, local rank, world size, local world size): the first whose rank variable is set wins.
# Horovod first: horovodrun on MPI sets OMPI_* too, and HOROVOD_* are the ones it means.
_VARIABLES: List[Tuple[str, str, str, str, str]] = [
    ("horovod", "HOROVOD_RANK", "HOROVOD_LOCAL_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_SIZE"),
    ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),
    ("mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("pmi", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS"),
]

# Programs that start ranks and are not ranks themselves (their basename, or the module run with -m).
LAUNCHER_PROGRAMS = frozenset({"torchrun", "accelerate", "deepspeed", "horovodrun", "mpirun", "mpiexec", "srun",
                               "orterun", "prterun", "hydra_pmi_proxy", "ray"})
_LAUNCHER_MAINS = (os.path.join("torch", "distributed", "run.py"), os.path.join("torch", "distributed", "launch.py"),
                   os.path.join("accelerate", "commands", "launch.py"), os.path.join("deepspeed", "launcher",
                                                                                     "runner.py"))


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


def tasks_per_node(text: str) -> List[int]:
    """Slurm's compressed list, one entry per node: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    out: List[int] = []
    for part in (text or "").split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if m:
            out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def _slurm_local_tasks(env: Mapping[str, str]) -> Optional[int]:
    """Tasks of this step on this node: SLURM_NTASKS_PER_NODE is set only with --ntasks-per-node,
    SLURM_STEP_TASKS_PER_NODE (else the job's SLURM_TASKS_PER_NODE) always, one entry per node."""
    node = _int(env, "SLURM_NODEID") or 0
    for var in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        per_node = tasks_per_node(env.get(var, ""))
        if per_node:
            return per_node[node] if node < len(per_node) else per_node[-1]
    return _int(env, "SLURM_NTASKS_PER_NODE")


def slurm_step(env: Mapping[str, str]) -> str:
    """``JOBID.STEPID`` of the Slurm step this process is a task of ("" outside one: a batch
    script or a salloc shell is in the job, but no step's task)."""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or ""
    return f"{job}.{step}" if job and step else ""


def step_tasks(env: Mapping[str, str]) -> Optional[int]:
    """How many tasks the Slurm step this process runs in has, on every node (None: no step)."""
    if not slurm_step(env):
        return None
    return _int(env, "SLURM_STEP_NUM_TASKS") or _int(env, "SLURM_NTASKS")


def _from_slurm(env: Mapping[str, str]) -> Optional[RankInfo]:
    """A task of a Slurm step (srun): only there is SLURM_STEP_ID set; the batch script
    carries SLURM_PROCID=0 too, and is no rank."""
    rank = _int(env, "SLURM_PROCID")
    if rank is None or not slurm_step(env):
        return None
    size = step_tasks(env) or rank + 1
    local = _int(env, "SLURM_LOCALID")
    return RankInfo(rank=rank, local_rank=rank if local is None else local, world_size=size,
                    local_world_size=_slurm_local_tasks(env) or 1, launcher="slurm", job=slurm_step(env))


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


# Slurm last: a launcher's ranks inside a Slurm task (torchrun's) carry the task's variables too.
READERS: Tuple[Callable[[Mapping[str, str]], Optional[RankInfo]], ...] = (_from_variables, _from_tf_config,
                                                                           _from_slurm)


_NODE_RANK = ("GROUP_RANK", "OMPI_COMM_WORLD_NODE_RANK", "SLURM_NODEID")


def rank_from_env(env: Mapping[str, str]) -> Optional[RankInfo]:
    """This process's rank, if a launcher started it (None: a plain process)."""
    for read in READERS:
        info = read(env)
        if info is not None:
            node_rank = next((_int(env, v) for v in _NODE_RANK if _int(env, v) is not None), None)
            return RankInfo(**{**info.__dict__, "node": socket.gethostname(), "node_rank": node_rank,
                               "job": info.job or slurm_step(env)})
    return None


def sight() -> str:
    """Where a PID names this process: its host's name and its PID namespace. A process of
    another sight (another node, a container of its own) cannot be found by the PID it reports."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux, or no /proc: the host's name alone
        namespace = ""
    return f"{socket.gethostname()} {namespace}".strip()


_LAUNCHER_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch",
                               "deepspeed.launcher.runner"})


def is_launcher(argv: Sequence[str], cmdline: Optional[Sequence[str]] = None) -> bool:
    """Is ``argv`` (a process's sys.argv, or a command) a launcher that starts ranks? At
    interpreter start, ``python -m torch.distributed.run`` has sys.argv ``["-m", ...]``: the
    module is read from the process's own command line (``cmdline``, default /proc's)."""
    if not argv:
        return False
    first = str(argv[0])
    if os.path.basename(first) in LAUNCHER_PROGRAMS:
        return True
    if first == "-m":
        words = list(cmdline) if cmdline is not None else _own_cmdline()
        module = words[words.index("-m") + 1] if "-m" in words[:-1] else ""
        return module in _LAUNCHER_MODULES
    return any(first.endswith(main) for main in _LAUNCHER_MAINS)


def _own_cmdline() -> List[str]:
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            return [w.decode(errors="replace") for w in fh.read().split(b"\0") if w]
    except OSError:
        return []


def cpu_share(usable_cpus: int, local_world_size: int, env: Mapping[str, str]) -> int:
    """CPUs one rank may use for its loader: what Slurm gave each task (SLURM_CPUS_PER_TASK) where it
    says, else what this task may use (affinity and cgroup, ``usable_cpus``; no more than the job has on
    this node, SLURM_CPUS_ON_NODE) split between the ranks on this node."""
    per_task = _int(env, "SLURM_CPUS_PER_TASK")
    if per_task:
        return max(1, min(per_task, usable_cpus))
    on_node = _int(env, "SLURM_CPUS_ON_NODE")
    if on_node and usable_cpus < on_node:  # bound to fewer CPUs than the job has here: the task's own share
        return max(1, usable_cpus)
    node_cpus = min(usable_cpus, on_node) if on_node else usable_cpus
    return max(1, node_cpus // max(1, local_world_size))


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
