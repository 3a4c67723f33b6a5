"""The search's thread-pool step (tune/search.py, its NOTE One search: "pools"): loader workers whose
pools together ask for more threads than the cores are measured once more with each worker's pools
held to its share of the cores; where that wins, the climb goes on with them held.

    a judged config with workers whose widest pool × workers > the CPUs, the workers computing
    (analyse/pools.py: pools in workers that wait on storage cost nothing)
      ─► the same config, pools held (space.hold_pools), once in a search
    the held config beats its twin as written by more than MIN_GAIN (or the twin failed)
      ─► climb_base: the ladder's and the jump's base hold the pools too (each rung at its share)

A script whose workers hold no wider pool costs no extra trial: the step asks for nothing.
"""
from __future__ import annotations

from typing import List, Optional

from feedprof.analyse import rules
from feedprof.analyse.evidence import config_key
from feedprof.analyse.pools import oversubscribes
from feedprof.store import ConfigEvidence, Phase
from feedprof.store.knobs.threads import without_threads
from feedprof.store.reasons import PoolsTried, Reason
from feedprof.tune.evidence import Evidence, Next
from feedprof.tune.space import Config


def _held(config: Config) -> bool:
    return bool(config.get("worker_threads"))


def _twin(judged: List[ConfigEvidence], held: ConfigEvidence) -> Optional[ConfigEvidence]:
    """The same config as written (its workers' pools not held)."""
    key = config_key({k: v for k, v in held.config.items() if k != "worker_threads"})
    return next((e for e in judged if config_key(e.config) == key), None)


def pools_step(ev: Evidence, mode: rules.Mode, current: Optional[Config], notes: List[Reason]) -> Optional[Next]:
    """The first judged config whose workers' pools oversubscribe the CPUs, with them held: once in a
    search (a held config measured, or failed, has answered it)."""
    sp, judged = ev.space, ev.judged()
    if any(_held(e.config) for e in judged) or any(_held(c) for c, _ in ev.failures()):
        _say(ev, judged, notes)
        return None
    for e in judged:
        if not oversubscribes(sp.workers(e.config), e.pool_threads, ev.cpu_cap, e.workers_cores):
            continue
        held = sp.hold_pools(e.config)
        if held is not None and not ev.tried(held):
            return Next(held, "pools", Phase.LADDER)
    return None


def pools_help(ev: Evidence) -> bool:
    """Did holding the workers' pools beat the same config as written (or did that one fail)?"""
    judged = ev.judged()
    failed = {config_key(c) for c, _ in ev.failures()}
    for e in judged:
        if not _held(e.config) or e.failed:
            continue
        twin = _twin(judged, e)
        if twin is None:
            return config_key(without_threads(e.config)) in failed
        if (e.rate or 0.0) >= (twin.rate or 0.0) * (1 + rules.MIN_GAIN):
            return True
    return False


def climb_base(ev: Evidence, base: Config) -> Config:
    """The climb's base: ``base``, with the workers' pools held where that won (each rung's share is
    set as the rung is made legal: space.legalize)."""
    return {**base, "worker_threads": 1} if pools_help(ev) else base


def _say(ev: Evidence, judged: List[ConfigEvidence], notes: List[Reason]) -> None:
    """How the pools trial went, for "how the search went"."""
    held = next((e for e in judged if _held(e.config)), None)
    if held is None:
        return
    twin = _twin(judged, held)
    notes.append(PoolsTried(config=dict(held.config), threads=int(held.config.get("worker_threads") or 0),
                            held_batches_per_s=held.rate, own_batches_per_s=twin.rate if twin is not None else None,
                            kept=pools_help(ev)))
