"""Beyond the knobs: where the recommended config's batch time goes past its step alone, which part
binds, and the remedies that target it, each with the rate the measured parts predict, or the rate
a trial measured.

NOTE [ What would close the gap ]

    the pick's BatchTime (analyse/batch_time.py): batch = blocked + loop_loading + step_alone + slowdown
    gap to the step alone = blocked + loop_loading + slowdown; the largest part (>= MIN_PART of a
    batch) binds:
      blocked       the loader cannot keep up; its code (the loading profile) computes or waits:
                      computes, the workers fill the CPUs ─► cores: cheaper, cached or on-device
                                                             work for its costliest lines
                      computes, CPU to spare             ─► workers: more of them
                      waits (I/O, sleep)                 ─► waiting: thread workers, deeper prefetch
      loop_loading  the training process receives (or at 0 workers loads) each batch itself
                    ─► training_process: less to receive; pin_memory where it is the pinning
      slowdown      the step runs slower beside the workers, told apart by the training process's
                    CPU and its wait for a CPU (analyse/batch_time.py):
                      waiting for a CPU        ─► contention: cores of its own for the training process
                                                  (capped too by what the workers supply on the cores left)
                      more CPU work a step     ─► step_work: less to touch a batch; pin_memory as measured
                      waiting on neither       ─► step_waits: a GPU job's copy of each fresh batch: pinned
                                                  memory (asynchronous copies), a smaller dtype to copy
    every prediction is capped by the step alone (the ceiling) and by the CPUs: no config can run
    faster than the machine's cores can compute its loading and its step (their CPU a batch, measured)
"""
from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence

from feedprof.analyse.diagnose import workers_of
from feedprof.analyse.evidence import config_key
from feedprof.analyse.loading import Cost, costs, cpu_share
from feedprof.analyse.measurements import CpuUse
from feedprof.store import BatchTime, ConfigEvidence, LoadingProfile
from feedprof.store.knobs.threads import threads_of, without_threads
from feedprof.store.reasons import GapExplained, PartNotMeasured, Reason, Remedy

MIN_PART = 0.05  # a part under this share of a batch's time binds nothing
MIN_GAIN = 0.05  # a remedy predicted to gain less than this is not said
COMPUTING = 0.5  # loading code that computes this share of its time is CPU work
LINES = 2  # lines of the loading code a remedy names, costliest first


def time_of(times: Sequence[BatchTime], role: str) -> Optional[BatchTime]:
    return next((t for t in times if t.role == role), None)


def explain_gap(times: Sequence[BatchTime], loading: Optional[LoadingProfile], cpu_bound: Optional[bool],
                use: Optional[CpuUse], evidence: Sequence[ConfigEvidence], ceiling: Optional[float],
                space: Any, cpus: Optional[int]) -> List[Reason]:
    """Why the recommended config (the pick, else the script's own) runs short of its step alone,
    and what would close it; where a part cannot be measured here, which and why."""
    t = time_of(times, "pick") or time_of(times, "script")
    if t is None:
        return []
    notes: List[Reason] = []
    if t.seconds("step_alone") is None:
        notes.append(PartNotMeasured(part="step_alone", why="no_ceiling"))
    if loading is None and workers_of(t.config) is not None:
        notes.append(PartNotMeasured(part="loading_profile", why="not_profiled"))
    gap = gap_explained(t, loading, cpu_bound)
    out: List[Reason] = [gap] if gap is not None else []
    if gap is not None and gap.bound:
        budget = _cpu_budget(t, use, cpus)
        cap = min([x for x in (ceiling, budget, _alone_rate(t)) if x], default=None)
        out += remedies(gap, t, loading, evidence, cap, space, _workers_left(t, use, cpus))
    return out + notes


def _alone_rate(t: BatchTime) -> Optional[float]:
    alone = t.seconds("step_alone")
    return 1 / alone if alone else None


def _workers_left(t: BatchTime, use: Optional[CpuUse], cpus: Optional[int]) -> Optional[float]:
    """The most batches/s the workers could supply on the cores left once the training process
    has cores of its own (as many as it uses now, at least one): those cores over the workers' CPU a
    batch. None: not measured; 0: no core would be left."""
    if use is None or not cpus or use.main_cores is None or not use.workers_cores:
        return None
    left = cpus - max(1, round(use.main_cores))
    return max(0.0, left) / (use.workers_cores * t.batch_s)


def _cpu_budget(t: BatchTime, use: Optional[CpuUse], cpus: Optional[int]) -> Optional[float]:
    """The most batches/s the machine's CPUs allow: its cores over the job's CPU a batch (the
    training process's and the workers')."""
    if use is None or not cpus or use.main_cores is None:
        return None
    per_batch = (use.main_cores + (use.workers_cores or 0.0)) * t.batch_s
    return cpus / per_batch if per_batch > 0 else None


def gap_explained(t: BatchTime, loading: Optional[LoadingProfile],
                  cpu_bound: Optional[bool]) -> Optional[GapExplained]:
    alone = t.seconds("step_alone")
    parts = {name: t.seconds(name) for name in ("blocked", "loop_loading", "slowdown")}
    big = {k: v for k, v in parts.items() if v is not None and v >= MIN_PART * t.batch_s}
    top = max(big, key=big.get, default="")
    share = cpu_share(loading) if loading is not None else None
    if top == "slowdown":
        bound = _slowdown_bound(t)
    else:
        bound = {"": "", "loop_loading": "training_process"}.get(top) or _loader_bound(share, cpu_bound)
    short = 1 - alone / t.batch_s if alone and t.batch_s else 0.0
    return GapExplained(config=dict(t.config), fraction_short=max(0.0, short), batch_s=t.batch_s, step_alone_s=alone,
                        step_alone_from=t.step_alone_from, blocked_s=parts["blocked"],
                        loop_loading_s=parts["loop_loading"], slowdown_s=parts["slowdown"],
                        slowdown_runq_s=t.seconds("slowdown_runq"), slowdown_cpu_s=t.seconds("slowdown_cpu"),
                        slowdown_wait_s=t.seconds("slowdown_wait"), bound=bound, loading_cpu_share=share)


def _slowdown_bound(t: BatchTime) -> str:
    """Why the step runs slower beside the workers: the largest of the slowdown's measured parts."""
    split = {"contention": t.seconds("slowdown_runq"), "step_work": t.seconds("slowdown_cpu"),
             "step_waits": t.seconds("slowdown_wait")}
    if any(v is None for v in split.values()):
        return "step_slower"
    return max(split, key=split.get)


def _loader_bound(share: Optional[float], cpu_bound: Optional[bool]) -> str:
    """What limits a loader the loop waits on: its code's CPU share, and the workers' CPU verdict."""
    if share is not None:
        return "waiting" if share < COMPUTING else "cores" if cpu_bound else "workers"
    return {True: "cores", False: "waiting"}.get(cpu_bound, "workers")  # (not profiled: the workers' CPU says)


def remedies(gap: GapExplained, t: BatchTime, loading: Optional[LoadingProfile],
             evidence: Sequence[ConfigEvidence], cap: Optional[float], space: Any,
             workers_left: Optional[float] = None) -> List[Reason]:
    rate = 1 / t.batch_s
    device = bool(getattr(space, "cuda_used", False))
    if gap.bound == "contention":  # (cores of its own are cores the workers lose: their supply caps it too)
        own = None if workers_left is None else min(x for x in (cap, workers_left) if x is not None)
        out = [_part_remedy("own_cores", gap, t, gap.slowdown_runq_s, cap if workers_left is None else own)]
    elif gap.bound == "step_work":
        out = [_part_remedy("receive_less", gap, t, gap.slowdown_cpu_s, cap)] + _pin(t, evidence, gap.bound, rate)
    elif gap.bound == "step_waits":
        out = (_pin(t, evidence, gap.bound, rate) or _pin_predicted(gap, t, cap, device)) + \
            ([_part_remedy("smaller_copy", gap, t, gap.slowdown_wait_s, cap)] if device else [])
    elif gap.bound == "step_slower":
        out = _pin(t, evidence, gap.bound, rate)
    elif gap.bound == "training_process":
        out = [_part_remedy("receive_less", gap, t, gap.loop_loading_s, cap)] + _pin(t, evidence, gap.bound, rate)
    elif gap.bound in ("cores", "workers"):
        out = _line_remedies(gap.bound, loading, rate, cap, device)
    else:
        out = _waiting_remedies(loading, t, evidence, rate)
    tried = _threads_tried(t, evidence, gap.bound, rate)
    if any(r.kind == "own_cores" for r in tried):  # (measured: the prediction is not said beside it)
        out = [r for r in out if r is None or r.kind != "own_cores"]
    return [r for r in out + tried if r is not None and _worth(r, rate)]


THREAD_REMEDY = {"worker_threads": "hold_pools", "main_threads": "main_threads", "main_cores": "own_cores"}


def _threads_tried(t: BatchTime, evidence: Sequence[ConfigEvidence], bound: str, rate: float) -> List[Remedy]:
    """The thread and core knobs (store/knobs/threads.py) a trial measured beside the same loader
    settings: each remedy with the rate it measured, whether or not it was picked."""
    own, mine = without_threads(t.config), threads_of(t.config)
    out: List[Remedy] = []
    for e in evidence:
        changed = [k for k in THREAD_REMEDY if threads_of(e.config).get(k) != mine.get(k)]
        if not e.figure or config_key(without_threads(e.config)) != config_key(own) or len(changed) != 1:
            continue
        if threads_of(e.config).get(changed[0]):  # (a knob the pick has, measured without: not a remedy)
            out.append(Remedy(kind=THREAD_REMEDY[changed[0]], bound=bound, measured_batches_per_s=e.figure,
                              from_batches_per_s=rate, config=dict(e.config)))
    return out


def _worth(r: Remedy, rate: float) -> bool:
    """Not said where the measured parts predict it gains nothing real (a trial's measurement, or a
    remedy with no prediction of speed, is always said: its words say which)."""
    return r.predicted_batches_per_s is None or r.predicted_batches_per_s >= rate * (1 + MIN_GAIN)


def _part_remedy(kind: str, gap: GapExplained, t: BatchTime, part_s: Optional[float],
                 cap: Optional[float]) -> Optional[Remedy]:
    """The rate were ``part_s`` gone from each batch (capped by the ceiling and the CPUs)."""
    if not part_s:
        return None
    predicted = _capped(1 / max(t.batch_s - part_s, 1e-9), cap)
    return Remedy(kind=kind, bound=gap.bound, predicted_batches_per_s=predicted, from_batches_per_s=1 / t.batch_s,
                  config=dict(t.config), share=part_s / t.batch_s, seconds_per_batch=part_s)


def _capped(rate: float, cap: Optional[float]) -> float:
    return min(rate, cap) if cap else rate


def _pin(t: BatchTime, evidence: Sequence[ConfigEvidence], bound: str, rate: float) -> List[Optional[Remedy]]:
    """pin_memory the other way, where a trial measured it beside the same settings."""
    if "pin_memory" not in t.config:
        return []
    other = {**t.config, "pin_memory": not t.config["pin_memory"]}
    e = next((e for e in evidence if config_key(e.config) == config_key(other) and e.figure), None)
    if e is None:
        return []
    return [Remedy(kind="pin_memory", bound=bound, measured_batches_per_s=e.figure, from_batches_per_s=rate,
                   config=dict(other))]


def _pin_predicted(gap: GapExplained, t: BatchTime, cap: Optional[float], device: bool) -> List[Optional[Remedy]]:
    """A GPU job whose step waits beside the workers, unpinned: pinned batches copy asynchronously
    (with non_blocking=True), so the step need not wait for the copy (predicted: that wait gone)."""
    if not device or t.config.get("pin_memory") is not False:
        return []
    r = _part_remedy("pin_memory", gap, t, gap.slowdown_wait_s, cap)
    return [None if r is None else dataclasses.replace(r, config={**t.config, "pin_memory": True})]


def _line_remedies(bound: str, loading: Optional[LoadingProfile], rate: float, cap: Optional[float],
                   device: bool) -> List[Optional[Remedy]]:
    """The costliest computing lines of the loading code, each made cheaper, cached, or (with a GPU)
    moved to the device: the rate were its CPU gone (the loader's CPU a batch less the line's)."""
    if loading is None or not loading.calls or loading.cpu_s <= 0:
        return []
    cpu_per_call = loading.cpu_s / loading.calls
    out: List[Optional[Remedy]] = []
    for i, c in enumerate([c for c in costs(loading) if c.computes][:LINES]):
        line_cpu = c.seconds_per_call * c.cpu_share
        predicted = _capped(rate * cpu_per_call / max(cpu_per_call - line_cpu, 1e-9), cap) if bound == "cores" else None
        kinds = ["cheaper_line"] + (["cache_line"] + (["device_line"] if device else []) if i == 0 else [])
        out += [Remedy(kind=k, bound=bound, predicted_batches_per_s=predicted, from_batches_per_s=rate,
                       site=c.site, function=c.function, share=c.share, seconds_per_batch=line_cpu) for k in kinds]
    return out


def _waiting_remedies(loading: Optional[LoadingProfile], t: BatchTime, evidence: Sequence[ConfigEvidence],
                      rate: float) -> List[Optional[Remedy]]:
    """Loading code that waits: threads wait as well as processes, for less memory (no prediction of
    speed: the same wait); a deeper prefetch where a trial measured one."""
    waits: List[Cost] = [c for c in costs(loading) if not c.computes][:1] if loading is not None else []
    out: List[Optional[Remedy]] = [Remedy(kind="thread_workers", bound="waiting", from_batches_per_s=rate,
                                          site=c.site, function=c.function, share=c.share,
                                          seconds_per_batch=c.seconds_per_call) for c in waits]
    deeper = [e for e in evidence if e.figure and workers_of(e.config) == workers_of(t.config)
              and (e.config.get("prefetch_factor") or 2) > (t.config.get("prefetch_factor") or 2)]
    best = max(deeper, key=lambda e: e.figure, default=None)
    if best is not None:
        out.append(Remedy(kind="more_prefetch", bound="waiting", measured_batches_per_s=best.figure,
                          from_batches_per_s=rate, config=dict(best.config)))
    return out
