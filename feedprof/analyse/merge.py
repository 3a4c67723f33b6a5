"""One job from the runs of its nodes: ``feedprof report node0/run.json
node1/run.json -o job.html``. Loader settings are per node, so each node is
profiled on its own (feedprof profile -- LAUNCH... there); their ranks are put
together here, grouped by node, and the job summarised as one."""
from __future__ import annotations

import dataclasses
from typing import List, Sequence

from feedprof.analyse.diagnose import summarize_job
from feedprof.store import RankInfo, Run, RunKind


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
