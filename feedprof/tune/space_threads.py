"""The training process's threads and cores as secondary knobs (store/knobs/threads.py names them):
tried at the pick only where its trial shows the step competing with the workers for the cores.

    the pick's trial: workers beside it, and the training process waited for a CPU
    (its run queue, MAIN_RUNQ_SHARE of a core or more)
      ─► its torch intra-op pool wider than the cores the workers leave ─► main_threads: those cores
      ─► (where the pick loads in the loop itself: the same at the fastest config with workers)
      ─► cores of its own (main_cores: as many as it uses, at least one; the workers on the rest, their
         pools held to fit them: an OpenBLAS pool of 2 spinning threads on 1 core ran 1.4 batches/s
         where it ran 270 on 2)
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence

from feedprof.analyse.pools import pools_of, widest
from feedprof.analyse.measured import score
from feedprof.store import Trial, TrialState
from feedprof.store.codes import PoolRole

MAIN_RUNQ_SHARE = 0.10  # the training process waited for a CPU this share of a core: the step competes


def thread_variants(cfg: Dict[str, Any], best: Trial, cpu_cap: int) -> List[Dict[str, Any]]:
    """The pick with the training process's threads or cores changed, where its trial points to them."""
    run = best.run
    s = run.summary if run is not None else None
    if s is None or not cfg.get("num_workers") or cpu_cap < 2 or cfg.get("main_threads") or cfg.get("main_cores"):
        return []
    if s.main_runq_pct is None or s.main_runq_pct < 100 * MAIN_RUNQ_SHARE:
        return []
    out: List[Dict[str, Any]] = []
    workers_cores = (s.workers_cpu_pct or 0.0) / 100
    left = max(1, int(cpu_cap - workers_cores + 0.5))
    training = pools_of(run.pools, PoolRole.TRAINING)
    torch_pool = widest([p for p in training.pools if p.api == "torch"]) if training is not None else None
    if torch_pool is not None and torch_pool.threads > left:
        out.append({**cfg, "main_threads": left})
    own = max(1, min(cpu_cap - 1, int((s.main_cpu_pct or 100.0) / 100 + 0.5)))
    out.append({**cfg, "main_cores": own, "worker_threads": 1})  # (the workers' pools fit the cores left them)
    return out


def thread_variants_beside(measured: Sequence[Trial], cpu_cap: int) -> List[Dict[str, Any]]:
    """Where the pick loads in the loop itself (no workers): the fastest config with workers, with
    its threads or cores changed, where its trial shows its step competing with the workers (a CPU
    step beside CPU workers: whether a thread setting makes the workers worth it is measured, not
    assumed)."""
    with_workers = [t for t in measured if t.config.get("num_workers") and t.state == TrialState.OK
                    and score(t) is not None and not any(t.config.get(k) for k in ("main_threads", "main_cores"))]
    best = max(with_workers, key=lambda t: score(t) or 0.0, default=None)
    return thread_variants(dict(best.config), best, cpu_cap) if best is not None else []
