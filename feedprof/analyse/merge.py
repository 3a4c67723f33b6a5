"""One job from the runs of its nodes or tasks: ``feedprof report node0/run.json
node1/run.json -o job.html``, or ``feedprof report feedprof-out`` where one feedprof
per task wrote ``feedprof-out/<node>-rank<N>/``. Loader settings are per node, so each
node is profiled (or tuned) on its own; their ranks are put together here, grouped by
node, and the job summarised as one. Tunes are set side by side: each node's pick and
figures, and where they differ."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from feedprof.analyse.diagnose import summarize_job
from feedprof.store import RankInfo, Run, RunKind, TuneResult


class MergeError(ValueError):
    """Runs that are not the nodes of one job."""


def _ranks_of(run: Run, node_index: int) -> List[Run]:
    """A node's ranks (a single-process run counts as one), each knowing its node."""
    node = run.host.hostname or f"node{node_index}"
    ranks = list(run.ranks) or [dataclasses.replace(run, rank=run.rank or RankInfo(node=node))]
    return [dataclasses.replace(r, rank=dataclasses.replace(r.rank or RankInfo(), node=(r.rank.node if r.rank and
                                                                                          r.rank.node else node)))
            for r in ranks]


def merge_runs(runs: Sequence[Run]) -> Run:
    if len(runs) < 2:
        raise MergeError("merging needs the runs of two or more nodes")
    ranks = [r for i, run in enumerate(runs) for r in _ranks_of(run, i)]
    seen = [r.rank.rank for r in ranks]
    if len(set(seen)) != len(seen):
        raise MergeError(f"ranks {sorted({r for r in seen if seen.count(r) > 1})} appear in more than one run: "
                         "are these the nodes of one job?")
    ranks.sort(key=lambda r: (r.rank.node_rank if r.rank.node_rank is not None else -1, r.rank.node, r.rank.rank))
    first = runs[0]
    merged = dataclasses.replace(first, kind=RunKind.PROFILE, ranks=tuple(ranks),
                                 duration_s=max(r.duration_s for r in runs), notes=())
    return dataclasses.replace(merged, summary=summarize_job(merged))


# ------------------------------------------------------------------- tunes


@dataclass(frozen=True)
class NodePick:
    """One node's (or task's) tune, as the merged report compares it."""

    label: str  # where it was written (its directory), as the user named it
    node: str
    ranks: Tuple[int, ...]
    online: bool
    framework: str
    config: Dict[str, Any]
    config_text: str
    batches_per_s: Optional[float]
    speedup: Optional[float]
    baseline_batches_per_s: Optional[float]
    input_bound_fraction: Optional[float]
    paste_line: str


@dataclass(frozen=True)
class MergedTunes:
    """The tunes of every node of one job: each node decides for its own ranks (nodes differ in
    CPUs and storage); this says where their picks and figures differ."""

    tunes: Tuple[TuneResult, ...]
    picks: Tuple[NodePick, ...]
    differing: Tuple[Tuple[str, Tuple[Tuple[str, Any], ...]], ...]  # knob -> (label, value) per node, where they differ
    slowest: str  # the node whose pick runs slowest: a synchronous job runs at its pace
    rate_spread: Optional[float]  # the fastest pick's rate over the slowest's, minus one


FIGURES_DIFFER = 0.15  # picks whose rates differ more than this are said to differ


def _ranks_of_tune(t: TuneResult) -> List[Run]:
    rec = t.recommendation
    picked = next((x.run for x in t.trials if rec is not None and x.index == rec.trial_index and x.run), None)
    run = t.run if t.run is not None else picked
    return list(run.ranks) if run is not None and run.ranks else ([run] if run is not None else [])


def _pick(t: TuneResult, label: str) -> NodePick:
    ranks = _ranks_of_tune(t)
    nodes = sorted({r.rank.node for r in ranks if r.rank and r.rank.node}) or [t.host.hostname]
    rec = t.recommendation
    return NodePick(label=label, node=", ".join(n for n in nodes if n), ranks=tuple(sorted(
        r.rank.rank for r in ranks if r.rank)), online=t.online is not None, framework=str(t.framework),
        config=dict(rec.config) if rec else {}, config_text=rec.config_text if rec else "",
        batches_per_s=rec.batches_per_s if rec else None, speedup=rec.speedup if rec else None,
        baseline_batches_per_s=rec.baseline_batches_per_s if rec else None,
        input_bound_fraction=rec.input_bound_fraction if rec else None, paste_line=rec.paste_line if rec else "")


def merge_tunes(tunes: Sequence[TuneResult], labels: Sequence[str]) -> MergedTunes:
    if len(tunes) < 2:
        raise MergeError("merging needs the tunes of two or more nodes")
    picks = [_pick(t, label) for t, label in zip(tunes, labels)]
    knobs = sorted({k for p in picks for k in p.config})
    differing = []
    for k in knobs:
        values = tuple((p.label, p.config.get(k)) for p in picks)
        if len({repr(v) for _, v in values}) > 1:
            differing.append((k, values))
    rated = [p for p in picks if p.batches_per_s]
    slowest = min(rated, key=lambda p: p.batches_per_s).label if rated else ""
    spread = (max(p.batches_per_s for p in rated) / min(p.batches_per_s for p in rated) - 1) if rated else None
    return MergedTunes(tunes=tuple(tunes), picks=tuple(picks), differing=tuple(differing), slowest=slowest,
                       rate_spread=spread)
