"""Which rank holds a synchronous job back, window by window.

Every rank of a synchronous job steps together (gradients are averaged every step), so the
ranks' rates are one rate; what tells them apart is the data wait. In each window the rank
that waits longest for its own loader is the one the others wait for (in the all-reduce,
which is not data wait). Always the same rank, by a clear margin: a slow node or disk, named
in the advice. A different rank from window to window: noise.

Windows are compared by position, not by clock: ranks on different nodes have unrelated
monotonic clocks, but step k is step k on every rank.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

from feedprof.analyse import stats
from feedprof.analyse.window import training_loader, window_steps
from feedprof.store import OnlineWindow, Run
from feedprof.store.reasons import NodesDiffer, RankSpread

WINDOWS_PER_RUN = 8  # a rank's measured steps, cut into this many windows
MIN_WINDOWS = 3  # fewer cannot tell a slow node from noise
HOLDS_BACK_SHARE = 0.75  # the same rank the worst in at least this share of the windows,
HOLDS_BACK_LEAD = 0.10  # and waiting at least this much more of its time than the median rank

RankWaits = Dict[Tuple[int, str], List[float]]  # (rank, node) -> its data wait, window by window


def _chunks(wait_s: Sequence[float], wall_s: Sequence[float], n: int) -> List[float]:
    size = len(wall_s) // n
    if size < 1:
        return []
    out = []
    for k in range(n):
        wall = sum(wall_s[k * size:(k + 1) * size])
        out.append(sum(wait_s[k * size:(k + 1) * size]) / wall if wall > 0 else 0.0)
    return out


def waits_of_run(run: Run) -> RankWaits:
    """Each rank's data wait over its measured steps, cut into windows (a run without ranks: none)."""
    found: RankWaits = {}
    for i, r in enumerate(run.ranks):
        rec = training_loader(r)
        if rec is None or not rec.wait_observable:
            continue
        steps = window_steps(r, rec)
        chunks = _chunks(steps.wait_s, steps.wall_s, WINDOWS_PER_RUN)
        if chunks:
            found[(r.rank.rank if r.rank else i, r.rank.node if r.rank else "")] = chunks
    return found


def waits_of_online(windows: Sequence[OnlineWindow], nodes: Dict[int, str]) -> RankWaits:
    """Each rank's data wait over the real run's windows, in the order the rank measured them."""
    found: RankWaits = {}
    for w in sorted(windows, key=lambda w: w.t_start_s):
        if w.wall_s > 0:
            found.setdefault((w.rank, nodes.get(w.rank, "")), []).append(min(1.0, w.wait_s / w.wall_s))
    return found


def rank_spread(waits: RankWaits) -> Optional[RankSpread]:
    """The median rank against the worst, window by window; None for fewer than two ranks or windows."""
    if len(waits) < 2:
        return None
    n = min(len(v) for v in waits.values())
    if n < MIN_WINDOWS:
        return None
    medians, worsts, worst_of = [], [], []
    for k in range(n):
        column = {key: v[k] for key, v in waits.items()}
        key, top = max(column.items(), key=lambda kv: kv[1])
        medians.append(stats.median(list(column.values())))
        worsts.append(top)
        worst_of.append(key)
    (rank, node), times = Counter(worst_of).most_common(1)[0]
    median, worst = stats.median(medians), stats.median(worsts)
    share = times / n
    return RankSpread(windows=n, ranks=len(waits), median_wait_fraction=median, worst_wait_fraction=worst,
                      worst_rank=rank, worst_node=node, worst_share=share,
                      holds_back=share >= HOLDS_BACK_SHARE and worst - median >= HOLDS_BACK_LEAD)


def ranks_per_node(run: Run) -> int:
    """The most ranks of the job on one node: they share its CPUs and memory (ranks that name no
    node count as one node's)."""
    per_node = Counter(r.rank.node if r.rank is not None else "" for r in run.ranks)
    return max(per_node.values(), default=1)


def nodes_differ(run: Run) -> Optional[NodesDiffer]:
    """Where one job's ranks run on nodes that differ in the CPUs a rank may use there (as each rank
    reported its share, and each node's usable CPUs where known): each node's, and the rank that
    sets the pace. None for a job on one node, or on nodes alike."""
    by_node: Dict[str, List[Run]] = {}
    for r in run.ranks:
        if r.rank is not None and r.rank.node:
            by_node.setdefault(r.rank.node, []).append(r)
    if len(by_node) < 2:
        return None
    nodes = sorted(by_node)
    rank_cpus = tuple(min(r.rank.cpus or 0 for r in by_node[n] if r.rank) for n in nodes)
    node_cpus = tuple(max(r.host.cpus_usable for r in by_node[n]) for n in nodes)
    if len(set(rank_cpus)) < 2 and len({c for c in node_cpus if c}) < 2:
        return None
    waits = [(r.rank.rank, r.rank.node, r.summary.data_wait_fraction) for n in nodes for r in by_node[n]
             if r.rank and r.summary is not None and r.summary.data_wait_fraction is not None]
    ordered = sorted(waits, key=lambda w: w[2])
    pace = ordered[-1] if ordered else None
    others = [w for _, _, w in ordered[:-1]]
    return NodesDiffer(nodes=tuple(nodes), rank_cpus=rank_cpus, node_cpus=node_cpus,
                       pace_rank=pace[0] if pace else 0, pace_node=pace[1] if pace else "",
                       pace_wait_fraction=pace[2] if pace else None,
                       others_wait_fraction=stats.median(others) if others else None)
