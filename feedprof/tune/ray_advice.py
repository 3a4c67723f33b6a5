"""A Ray Train job's advice beyond the loader's line: the CPUs Ray reserves per
training worker (analyse/ray_cpus.py), and the script's ``ScalingConfig(...)``
with more of them where the reservation is the limit (frameworks/paste.py)."""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

from feedprof.analyse.diagnose import workers_of
from feedprof.analyse.ray_cpus import reservation
from feedprof.frameworks.paste import reservation_paste
from feedprof.store import Recommendation, Run, Trial
from feedprof.store.reasons import CpusAreTheLimit, CpusSaturated, RayCpusReserved, Reason


def picked_ranks(trials: Sequence[Trial], rec: Recommendation) -> Sequence[Run]:
    """An offline tune's pick, rank by rank (none where its trial kept no ranks)."""
    pick = next((t.run for t in trials if t.index == rec.trial_index and t.run is not None), None)
    return pick.ranks if pick is not None else ()


def ray_advice(ranks: Sequence[Run], rec: Recommendation, script: str, machine_cpus: int, cpu_cap: int,
               notes: Sequence[Reason]) -> Tuple[Optional[RayCpusReserved], str]:
    """(the reservation's finding, the ScalingConfig line to paste: "" where none is needed or
    none can be written); (None, "") for a job that is not Ray Train's. ``ranks``: each rank's
    run with the pick (online: the whole run, mostly the settled config's)."""
    if not ranks:
        return None, ""
    workers = workers_of(rec.config)
    cpu_bound = any(isinstance(n, (CpusAreTheLimit, CpusSaturated)) for n in (*rec.reasons, *notes))
    found = reservation(ranks, workers, machine_cpus, capped=cpu_bound and (workers or 0) >= cpu_cap)
    if found is None or not found.reserve_cpus:
        return found, ""
    line, site = reservation_paste(script, found.reserve_cpus)
    return dataclasses.replace(found, site=site), line
