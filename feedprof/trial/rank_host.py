"""A process as one rank of a multi-process job: its own spec (result and event files), its
controller with the adapters installed, and its own samples where feedprof cannot see it
(trial/hosted.py makes a launcher's ranks so; trial/ray_train.py Ray Train's workers)."""
from __future__ import annotations

import dataclasses
import os
import time
from typing import List, Mapping, Optional, Tuple

from feedprof.frameworks.install import install_adapters
from feedprof.record.ranks import step_tasks
from feedprof.store import RankInfo
from feedprof.trial.controller import Controller
from feedprof.trial.protocol import TrialSpec
from feedprof.trial.rank_meter import RankMeter, samples_path

JOB_SPEC_ENV = "FEEDPROF_JOB_SPEC"


def rank_paths(spec: TrialSpec, rank: int) -> TrialSpec:
    """The job's spec for one rank: its own result and events files."""
    return dataclasses.replace(spec, result_path=spec.result_path.format(rank=rank),
                               events_path=spec.events_path.format(rank=rank))


def host_rank(spec: TrialSpec, info: RankInfo, script: str, argv: List[str],
              env: Optional[Mapping[str, str]] = None) -> Tuple[Controller, Optional[RankMeter]]:
    """This process as rank ``info`` of the job: its controller and adapters, and, where feedprof
    cannot see it (``info.self_sampled``), the meter of its own process tree."""
    env = os.environ if env is None else env
    out_of_sight = info.self_sampled
    spec = dataclasses.replace(rank_paths(spec, info.rank), script=script, argv=argv,
                               origin_s=origin_here(spec) if out_of_sight else spec.origin_s)
    ctl = Controller(spec, rank=info)
    meter = RankMeter(samples_path(os.path.dirname(spec.result_path), info.rank), info, spec.interval_s, spec.gpu,
                      spec.origin_s).start() if out_of_sight else None
    if meter is not None:
        ctl.emit = meter.emitting(ctl.emit)  # type: ignore[method-assign]
    ctl.emit("started", pid=os.getpid(), rank=info.rank, local_rank=info.local_rank,
             world_size=info.world_size, local_world_size=info.local_world_size, node=info.node, job=info.job,
             cpus=info.cpus, launcher=info.launcher, self_sampled=out_of_sight, step_tasks=step_tasks(env))
    install_adapters(ctl)
    return ctl, meter


def origin_here(spec: TrialSpec, now_s: Optional[float] = None, wall_s: Optional[float] = None) -> float:
    """The trial's time zero on this process's monotonic clock, where the launching feedprof's is
    another (another node's): through the wall clock, which a cluster's nodes keep in step."""
    if spec.origin_wall_s is None:
        return spec.origin_s
    now_s = time.monotonic() if now_s is None else now_s
    wall_s = time.time() if wall_s is None else wall_s
    return now_s - (wall_s - spec.origin_wall_s)
