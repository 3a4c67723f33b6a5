"""A trainer's own advice on the loader, against what the tune measured.

Lightning warns that a training loader with fewer than two workers "may be a
bottleneck" and suggests ``num_workers`` = CPUs - 1, from the CPU count alone
(frameworks/lightning.py records it in the baseline run). The tune measured
whether the loop waits and what more workers deliver: this says whether the
two agree, with the numbers, so the user is never left with two verdicts that
contradict each other without an explanation.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from feedprof.analyse.diagnose import workers_of
from feedprof.store.reasons import Reason, TrainerAdviceChecked, TrainerSuggestedWorkers
from feedprof.store import InputBound, Trial


def trainer_advice(baseline: Optional[Trial], measured: Sequence[Any], verdict: Any) -> Optional[Reason]:
    """``measured``: analyse.measured.Measured configs; ``verdict``: the recommendation's."""
    run = baseline.run if baseline is not None else None
    said = next((n for n in (run.notes if run is not None else ()) if isinstance(n, TrainerSuggestedWorkers)), None)
    if said is None:
        return None
    picked = next((m for m in measured if m.config == verdict.config), None)
    at_suggested = [m.score for m in measured if workers_of(m.config) == said.suggested]
    picked_workers = workers_of(verdict.config) or 0
    agrees = verdict.input_bound in (InputBound.HIGHLY, InputBound.MODERATELY) and picked_workers > said.num_workers
    return TrainerAdviceChecked(
        trainer=said.trainer, suggested=said.suggested, script_workers=said.num_workers, picked_workers=picked_workers,
        agrees=agrees, input_bound=verdict.input_bound, data_wait_fraction=baseline.data_wait_fraction,
        speedup=verdict.speedup, fraction_of_ceiling=verdict.fraction_of_ceiling,
        suggested_batches_per_s=max(at_suggested) if at_suggested else None,
        picked_batches_per_s=picked.score if picked is not None else None)
