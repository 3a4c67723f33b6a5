"""The machine's facts a tune works within, read once by its caller and handed
to the Tuner (which never reads the machine itself, so tests pass their own)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

from feedprof.analyse.stragglers import ranks_per_node
from feedprof.store import HostInfo, Run
from feedprof.tune.budget import MemoryBudget


@dataclass(frozen=True)
class MachineFacts:
    host: HostInfo = field(default_factory=HostInfo)
    cpus_usable: int = 1  # affinity- and cgroup-aware (record/host.usable_cpu_count)
    local_world_size: int = 1  # processes of one job sharing these CPUs (from the launcher's environment)
    ram_bytes: Optional[int] = None  # what a job may use: a share of the free RAM, or of its container's limit
    shm_bytes: Optional[int] = None  # a share of what is free in /dev/shm (None: no /dev/shm)

    @property
    def cpu_cap(self) -> int:
        """CPUs one training process's loader may use."""
        return max(1, self.cpus_usable // self.local_world_size)


def read_machine(gpu: bool = True) -> MachineFacts:
    """This machine, now (``gpu``: open NVML to list its GPUs)."""
    from feedprof.record.host import local_world_size, machine_info, usable_cpu_count

    memory = MemoryBudget.of_this_machine()
    return MachineFacts(host=machine_info(gpu=gpu), cpus_usable=usable_cpu_count(),
                        local_world_size=local_world_size(), ram_bytes=memory.ram_bytes, shm_bytes=memory.shm_bytes)


def job_cpu_cap(run: Run, cpus_usable: int, cpu_cap: int) -> Tuple[int, int]:
    """A job's knobs are per rank: (the CPUs each rank's loader may use, the ranks on this node).
    Each rank's CPU budget is what its launcher gave it (Slurm's say), else the machine's CPUs
    over the ranks on it; less the rank's own process where several share the node."""
    local = max([r.rank.local_world_size for r in run.ranks if r.rank] + [ranks_per_node(run), 1])
    shares = [r.rank.cpus for r in run.ranks if r.rank and r.rank.cpus]
    if shares:
        return max(1, min(shares) - (1 if local > 1 else 0)), local
    if local > 1:
        return max(1, cpus_usable // local - 1), local
    return cpu_cap, local
