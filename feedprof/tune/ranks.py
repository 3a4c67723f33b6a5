"""What a tune says of a job's ranks (a launched job's, a Ray Train job's): every rank's share of the
machine, and with the pick, which rank held the job back and where its nodes differ."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from feedprof.analyse.diagnose import workers_of
from feedprof.store import Recommendation, Trial
from feedprof.store.reasons import AppliesToEveryRank, Reason


def rank_reasons(trials: Sequence[Trial], rec: Recommendation, ray: Optional[Reason], local_ranks: int,
                 cpus_usable: int, cpu_cap: int) -> Tuple[Reason, ...]:
    """A job's: every rank's share of the machine (a Ray Train job's: what Ray reserves per worker),
    and, with the pick, which rank held the job back and where its nodes differ."""
    base = trials[0].run if trials and trials[0].run is not None else None
    if base is None or not base.ranks:
        return ()
    info = [r.rank for r in base.ranks if r.rank is not None]
    every = AppliesToEveryRank(local_ranks=local_ranks, world_size=max([i.world_size for i in info] + [1]),
                               workers_per_rank=workers_of(rec.config), cpus=cpus_usable, cpu_cap=cpu_cap)
    picked = next((t.run for t in trials if t.index == rec.trial_index and t.run is not None), None)
    notes = picked.summary.notes if picked is not None and picked.summary else ()
    spread = [n for n in notes if n.code == "rank_spread"][:1] + [n for n in notes if n.code == "nodes_differ"][:1]
    return (ray or every, *spread)
