"""A Ray Train job's CPUs per training worker: what Ray reserved for each
(``ScalingConfig(resources_per_worker=...)``, its CPU budget for the search),
against what each used with the pick, its loader workers included.

Ray places workers by their reservations, not by what they use: a worker whose
loader uses more than it reserved competes with whatever else Ray places on
those CPUs, and a CPU-bound loader's search stops at the reservation, however
many CPUs the machine has. Either way the advice is to reserve more.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from feedprof.store import Run
from feedprof.store.reasons import RayCpusReserved

RAY_LAUNCHER = "ray"
USE_SLACK_CORES = 0.25  # use this far past the reservation is noise (sampling, the step's own threads)


def used_cores(run: Run) -> Optional[float]:
    """Cores a rank used while measured: its process and its loader workers."""
    s = run.summary
    if s is None or s.main_cpu_pct is None:
        return None
    return (s.main_cpu_pct + (s.workers_cpu_pct or 0.0)) / 100.0


def reservation(pick: Sequence[Run], workers: Optional[int], machine_cpus: int, capped: bool,
                site: str = "") -> Optional[RayCpusReserved]:
    """What the pick's ranks (``pick``: one Run per rank) say of Ray's reservation; None for
    ranks that are not Ray's. ``capped``: CPU-bound loading stopped the search at the reservation."""
    infos = [r.rank for r in pick if r.rank is not None and r.rank.launcher == RAY_LAUNCHER]
    reserved = [i.cpus for i in infos if i.cpus]
    if not reserved:
        return None
    per_worker = min(reserved)
    local = max([i.local_world_size for i in infos] + [1])
    used = [u for u in (used_cores(r) for r in pick) if u is not None]
    busiest = max(used) if used else None
    share = max(1, machine_cpus // local)  # what each worker could reserve on this machine
    reserve = None
    if capped and share > per_worker:
        reserve = share
    elif busiest is not None and busiest > per_worker + USE_SLACK_CORES:
        reserve = math.ceil(busiest - USE_SLACK_CORES)
    return RayCpusReserved(reserved_cpus=per_worker, used_cores=busiest, workers_per_rank=workers, local_ranks=local,
                           world_size=max(i.world_size for i in infos), machine_cpus=machine_cpus,
                           reserve_cpus=reserve, capped=capped and reserve is not None, site=site)
