"""What a loading profile says (record/loadprof.py samples it): the costliest lines and functions of
the user's loading code, each as a share of the loading time, and whether that time is computing,
waiting for a CPU, or waiting on something else (I/O, sleep, a lock)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from feedprof.analyse.diagnose import training_loader
from feedprof.store import LoadingLine, LoadingProfile, OpTime, Run

COMPUTING = 0.5  # a line whose thread computed (or waited for a CPU to compute) this share of its time computes
TOP = 5  # lines and functions said


@dataclass(frozen=True)
class Cost:
    """One line or function of the loading code, as shares of the loading time."""

    site: str  # "dataset.py:42" ("" for a function, or a library function with no line of the user's)
    function: str
    share: float  # of the sampled loading time
    cpu_share: float  # of its own time: computing
    runq_share: float  # of its own time: ready to compute, waiting for a CPU
    seconds_per_call: float  # its time in one loading call (a batch, an item), from the exact totals
    split: bool = True  # its time is split into computing and waiting (not for a tf.data pipeline's ops)

    @property
    def computes(self) -> bool:
        return self.split and self.cpu_share + self.runq_share >= COMPUTING


def training_loading(run: Optional[Run]) -> Optional[LoadingProfile]:
    """The loading profile of the run's training loader's dataset (a tf.data pipeline: its ops, from
    tf.data's own statistics, where no Python code of its was sampled)."""
    if run is None:
        return None
    rec = training_loader(run)
    named = [p for p in run.loading if rec is not None and p.dataset == rec.dataset]
    chosen = named[0] if named else (run.loading[0] if len(run.loading) == 1 else None)
    if chosen is not None and chosen.sampled_s > 0:
        return chosen
    # (Python loading in threads beside the main one is timed, not sampled: tf.data's ops say more)
    ops = pipeline_profile(rec.autotune[-1].ops if rec is not None and rec.autotune else ())
    return ops if ops is not None else chosen


def pipeline_profile(ops: Sequence[OpTime]) -> Optional[LoadingProfile]:
    """A tf.data pipeline's ops as a loading profile: each op's time (its inputs' left out) as a line."""
    timed = [o for o in ops if o.processing_s > 0]
    total = sum(o.processing_s for o in timed)
    if total <= 0:
        return None
    source = timed[0]
    lines = tuple(LoadingLine(site=f"op {o.position}", function=o.op, wall_s=o.processing_s, cpu_s=0.0)
                  for o in sorted(timed, key=lambda o: -o.processing_s))
    return LoadingProfile(dataset="tf.data pipeline", calls=max(source.elements, 1), wall_s=total, cpu_s=0.0,
                          sampled_s=total, interval_s=0.0, processes=1, in_main=True, sampler_cpu_s=0.0,
                          source="tf.data", lines=lines)


def costs(profile: LoadingProfile, lines: bool = True, top: int = TOP) -> List[Cost]:
    """The costliest lines (or, ``lines=False``, functions with what they call) of a profile."""
    items: Tuple[LoadingLine, ...] = profile.lines if lines else profile.functions
    if profile.sampled_s <= 0 or (profile.calls <= 0 and profile.source != "attached"):
        return []
    per_call = profile.wall_s / profile.calls if profile.calls else 0.0  # (attached: calls are not counted)
    out = []
    for item in items:
        share = item.wall_s / profile.sampled_s
        if not lines and share >= 0.999:  # a function every sample was in (__getitem__): says nothing
            continue
        out.append(Cost(site=item.site, function=item.function, share=share,
                        cpu_share=item.cpu_s / item.wall_s if item.wall_s else 0.0,
                        runq_share=item.runq_s / item.wall_s if item.wall_s else 0.0,
                        seconds_per_call=share * per_call, split=profile.source in ("sampled", "attached")))
        if len(out) >= top:
            break
    return out


def cpu_share(profile: LoadingProfile) -> Optional[float]:
    """The share of the loading time its threads computed (exact, from the calls' totals; None where
    the statistics do not split it: a tf.data pipeline's ops)."""
    if profile.source not in ("sampled", "attached"):
        return None
    return profile.cpu_s / profile.wall_s if profile.wall_s > 0 else None
