"""The machine a run ran on: its CPUs, memory, Python and frameworks, and the
GPUs NVML and CUDA see (same rules as the other records: frozen, plain data)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from feedprof.store.codes import GpuStatus


@dataclass(frozen=True)
class GpuInfo:
    nvml_index: int
    cuda_index: Optional[int]  # None: NVML sees it but CUDA_VISIBLE_DEVICES hides it
    uuid: str
    name: str
    mem_total_bytes: Optional[int]


@dataclass(frozen=True)
class HostInfo:
    hostname: str = ""
    cpu_model: str = ""
    cpus_usable: int = 0  # affinity- and cgroup-aware
    cpus_online: int = 0
    ram_bytes: int = 0
    shm_total_bytes: Optional[int] = None
    python_version: str = ""
    platform: str = ""
    feedprof_version: str = ""
    frameworks: Dict[str, str] = field(default_factory=dict)
    gpus: Tuple[GpuInfo, ...] = ()
    gpu_status: GpuStatus = GpuStatus.UNKNOWN
    gpu_status_detail: str = ""  # NVML's own error text, where there is one
