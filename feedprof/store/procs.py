"""Inert records of processes: those on a GPU (``feedprof gpus``) and those a
run left behind (``Run.leftovers``). Same rules as every record here: frozen,
plain data, ``None`` means "not known"; words for people are written by
``render/gpus.py`` and ``render/leftovers.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

# Why a process looks abandoned (ProcessInfo.orphan).
ORPHAN_ADOPTED = "adopted"  # its parent is gone: init (PID 1) or a subreaper adopted it
ORPHAN_JOB_GONE = "job_gone"  # the job it belonged to (its process group's leader) has ended
ORPHAN_KERNEL_UNOWNED = "kernel_unowned"  # a Jupyter kernel whose server no longer knows it


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    visible: bool = True  # False: not in this PID namespace (NVML reports the host's PIDs in a container)
    command: str = ""
    user: str = ""
    state: str = ""  # psutil's status: running, sleeping, zombie, ...
    ppid: Optional[int] = None  # the parent now (after an adoption: init or a subreaper)
    parent_command: str = ""
    parent_alive: Optional[bool] = None  # False: the process that started it is gone
    pgid: Optional[int] = None
    group_leader_alive: Optional[bool] = None  # None: it leads its own group
    orphan: str = ""  # an ORPHAN_* code, "" when nothing says it was abandoned


@dataclass(frozen=True)
class GpuProcess:
    process: ProcessInfo
    gpu_mem_bytes: Optional[int] = None  # None: NVML does not say
    kind: str = "C"  # C compute, G graphics, C+G


@dataclass(frozen=True)
class GpuState:
    cuda_index: Optional[int]
    nvml_index: int
    uuid: str
    name: str
    mem_total_bytes: Optional[int] = None
    util_pct: Optional[float] = None
    mem_used_bytes: Optional[int] = None
    power_w: Optional[float] = None
    processes: Optional[Tuple[GpuProcess, ...]] = ()  # None: NVML would not list them


@dataclass(frozen=True)
class GpusView:
    """What ``feedprof gpus`` shows: every CUDA-visible GPU and who is on it."""

    status: str = "ok"  # a codes.GpuStatus value: "ok", or why there is no GPU to show
    detail: str = ""  # NVML's own error text, where there is one
    driver_version: str = ""
    gpus: Tuple[GpuState, ...] = ()


@dataclass(frozen=True)
class GpuMemoryHeld:
    pid: int
    uuid: str
    cuda_index: Optional[int]
    used_bytes: Optional[int]


@dataclass(frozen=True)
class Leftovers:
    """What was still there once a run had ended and its process group was
    killed: processes of the run that escaped it, and GPU memory that
    processes of the run still held."""

    processes: Tuple[ProcessInfo, ...] = ()
    gpu_memory: Tuple[GpuMemoryHeld, ...] = ()
    gpu_checked: bool = False  # NVML answered: GPU memory was checked too
    slurm: Tuple[str, ...] = ()  # Slurm jobs or steps ("JOB", "JOB.STEP") of the run squeue still listed

    def __bool__(self) -> bool:
        return bool(self.processes or self.gpu_memory or self.slurm)
