"""A Ray Train job's advice beyond the loader's line: the CPUs Ray reserves per
training worker (analyse/ray_cpus.py), and the script's ``ScalingConfig(...)``
with more of them where the reservation is the limit (frameworks/paste.py)."""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

from feedprof.analyse.diagnose import workers_of
from feedprof.analyse.ray_cpus import reservation
from feedprof.frameworks.paste import reservation_paste
from feedprof.store import Recommendation, Trial
from feedprof.store.reasons import CpusAreTheLimit, CpusSaturated, RayCpusReserved, Reason


def ray_advice(trials: Sequence[Trial], rec: Recommendation, script: str, machine_cpus: int, cpu_cap: int,
               notes: Sequence[Reason]) -> Tuple[Optional[RayCpusReserved], str]:
    """(the reservation's finding, the ScalingConfig line to paste: "" where none is needed or
    none can be written); (None, "") for a job that is not Ray Train's."""
    pick = next((t.run for t in trials if t.index == rec.trial_index and t.run is not None), None)
    if pick is None or not pick.ranks:
        return None, ""
    workers = workers_of(rec.config)
    cpu_bound = any(isinstance(n, (CpusAreTheLimit, CpusSaturated)) for n in (*rec.reasons, *notes))
    found = reservation(pick.ranks, workers, machine_cpus, capped=cpu_bound and (workers or 0) >= cpu_cap)
    if found is None or not found.reserve_cpus:
        return found, ""
    line, site = reservation_paste(script, found.reserve_cpus)
    return dataclasses.replace(found, site=site), line
