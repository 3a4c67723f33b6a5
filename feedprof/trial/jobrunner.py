"""Run one trial of a multi-process job: the user's own launch command, every
rank instrumented (hosted.py), sampled from outside, ended together.

NOTE [ A trial of a job ]

    env: FEEDPROF_JOB_SPEC, PYTHONPATH=bootstrap/:..., a fresh MASTER_PORT / PET_MASTER_PORT
    launcher ─► ranks (each: result-<rank>.json, events-<rank>.jsonl; a rank out of this
                feedprof's sight, on another node, samples-<rank>.json too: rank_meter.py)
    _JobWatch (a watch.Watch) polls every rank's events:
      "started" (rank, pid, node) ─► a sampler of that rank's process tree, where its PID means
          something here (in_sight); how many ranks report here (ranks_to_wait_for: a Slurm
          step's, on every node; else this node's)
      every such rank's "window_done" ─► the whole job is ended at once (ranks are
          never ended alone: the others would hang in a collective)
      the launcher exits first ─► how it ended (a rank's traceback, if one failed)
      the runner's limits (no batch in time, the trial's timeout), as for one process
    _finish (the InFlight record, flight.py): every process of the job killed, leftovers checked;
    _assemble_job: a Run per rank (with its samples and host: this feedprof's, or the rank's own
    from samples-<rank>.json, and its summary) inside the job's Run,
    whose samples are the launcher's whole tree and whose summary the job's (diagnose.py)
"""
from __future__ import annotations

import dataclasses
import glob
import os
import re
import socket
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import psutil

from feedprof.analyse.diagnose import summarize
from feedprof.store.reasons import Interrupted, QueuedForResources, QueueWaitTooLong, RankFailed
from feedprof.record.clock import MONOTONIC, Clock
from feedprof.record.leftovers import TRIAL_ENV, check_run
from feedprof.record.ranks import sight
from feedprof.record.sampler import Sampler
from feedprof.record.workers import OBSERVED
from feedprof.store import HostInfo, Outcome, RankInfo, Run, Samples, StoreError, TrialState, load
from feedprof.trial.ending import classify_end, log_tail, with_figures
from feedprof.trial.flight import InFlight, TrialInterrupted, TrialPaths
from feedprof.trial.group import child_stdin, own_group, own_session
from feedprof.trial.hosted import JOB_SPEC_ENV
from feedprof.trial.launch import Launch
from feedprof.trial.lifeline import for_child
from feedprof.trial.options import OBSERVE, Injection, TrialOptions
from feedprof.trial.protocol import Mode, TrialSpec, read_events
from feedprof.trial import rank_meter
from feedprof.trial.ray_train import RAY_LAUNCHER, driver_notes, job_env as ray_job_env
from feedprof.trial.signals import deferred_signals
from feedprof.trial.slurm import SlurmStep, in_allocation, preexec_for_srun, scancel
from feedprof.trial.watch import Watch, descendants, kill_group

RANK_FAILED_GRACE_S = 5.0  # after a rank fails, the others may record their own end this long
BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap")
_RANK_FILE = re.compile(r"-(\d+)\.json(l?)$")


def free_port() -> int:
    """A port nothing listens on now: each trial's rendezvous gets its own, so a
    trial never meets the previous one still shutting down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ranks_to_wait_for(started: Dict[str, Any], launcher: str) -> int:
    """How many ranks report into the trial's directory, from one rank's "started" event: where
    feedprof launched a Slurm step, every rank of it on every node (its tasks, or the ranks a
    launcher starts in each task); else this node's ranks. A rank still starting on another node
    is waited for: it is no rank that died."""
    local = int(started.get("local_world_size") or 1)
    if launcher != "slurm":
        return local
    world = int(started.get("world_size") or local)
    tasks = started.get("step_tasks")
    if started.get("launcher") == "slurm" or not tasks:  # the step's tasks are the ranks
        return world
    return max(local, min(world, local * int(tasks)))


def in_sight(started: Dict[str, Any]) -> bool:
    """Can this feedprof find the rank by the PID it reported (the same node, the same PID
    namespace)? Else the rank measures itself (trial/rank_meter.py)."""
    return not started.get("self_sampled") and started.get("node") in (None, "", socket.gethostname())


def job_env(trial_dir: str, spec_path: str, opts: TrialOptions) -> Dict[str, str]:
    env = {**os.environ, **opts.script_env(), TRIAL_ENV: trial_dir, JOB_SPEC_ENV: spec_path}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (BOOTSTRAP_DIR, env.get("PYTHONPATH", "")) if p)
    port = str(free_port())
    env["PET_MASTER_PORT"] = port  # torchrun's --master-port, unless the command gives one
    env.setdefault("MASTER_PORT", port)
    return env


def _write_job_spec(paths: TrialPaths, launch: Launch, opts: TrialOptions, what: Injection, origin_s: float) -> None:
    spec = TrialSpec(
        script=launch.script or "", argv=list(launch.command), origin_s=origin_s,
        result_path=paths.result, events_path=paths.events,
        window_batches=opts.window_batches, window_seconds=opts.window_seconds,
        min_window_batches=opts.min_window_batches, warmup_batches=opts.warmup_batches, mode=what.mode,
        inject=dict(what.config), framework=what.framework,
        target_chain=list(what.chain) if what.chain is not None else None, target_site=what.site, full=opts.full,
        decision_path=paths.decision if what.mode == Mode.ONLINE else "",
        allow_rng_change=what.allow_rng_change,
        allow_resharding=what.allow_resharding, sight=sight(), origin_wall_s=time.time(),
        interval_s=opts.interval_s, gpu=opts.gpu, launcher=launch.launcher)
    with open(paths.spec, "w", encoding="utf-8") as fh:
        fh.write(spec.to_json())


class _JobWatch(Watch):
    """Every rank's events; done once each local rank has its window."""

    exit_grace_s = 0.0  # the ranks train on after their windows: end the job at once

    def __init__(self, proc: Any, origin: float, opts: TrialOptions, trial_dir: str,
                 on_poll: Optional[Callable[[], None]], clock: Clock, slurm: Optional[SlurmStep] = None,
                 launcher: str = ""):
        super().__init__(proc, origin, opts, "", on_poll, clock)
        self.trial_dir = trial_dir
        self.launcher = launcher  # the launch command's (launch.py): which ranks report here
        self.slurm = slurm  # the step srun started: its tasks are not the launcher's descendants
        self.offsets: Dict[str, int] = {}
        self.ranks: Dict[int, dict] = {}  # rank -> its "started" event
        self.done: set = set()
        self.expected: Optional[int] = None  # ranks reporting here, as they say (ranks_to_wait_for)
        self.rank_samplers: Dict[int, Sampler] = {}
        self.failed_at: Dict[int, float] = {}  # rank -> when it failed (the first is the cause)

    def _poll_events(self) -> None:
        for path in sorted(glob.glob(os.path.join(self.trial_dir, "events-*.jsonl"))):
            rank = int(_RANK_FILE.search(path).group(1))
            new, self.offsets[path] = read_events(path, self.offsets.get(path, 0))
            for ev in new:
                self._on_event(rank, ev)

    def _on_event(self, rank: int, ev: dict) -> None:
        self.events.append({**ev, "rank": rank})
        kind = ev.get("event")
        if kind == "started":
            self.ranks[rank] = ev
            self.expected = max(self.expected or 0, ranks_to_wait_for(ev, self.launcher))
            if self.slurm is not None:
                self.slurm.task_started(ev.get("job") or "")
            if in_sight(ev):  # a PID means something on this node only: a rank elsewhere measures itself
                self._sample_rank(rank, ev.get("pid"))
        elif kind == "first_batch":
            self.first_batch = True
        elif kind == "failed":
            self.failed_at.setdefault(rank, float(ev.get("t_s", 0.0)))
            if self.window_done_at is None:  # the others would wait for it in a collective, for ever
                self.window_done_at = self.clock.now_s() + RANK_FAILED_GRACE_S
        elif kind == "window_done":
            self.done.add(rank)
            if self.expected is not None and len(self.done) >= self.expected and self.window_done_at is None:
                self.window_done_at = self.clock.now_s()
                if self.opts.peers is not None:  # this node's ranks are done; other tasks' feedprofs run the rest
                    self.opts.peers.window_done()
        if kind in ("loader", "first_batch"):
            for sampler in [self.sampler, self.rank_samplers.get(rank)]:
                if sampler is not None:
                    sampler.refresh_tree()

    def _sample_rank(self, rank: int, pid: Optional[int]) -> None:
        if pid is None or rank in self.rank_samplers:
            return
        if self.sampler is not None and pid not in {p.pid for p in descendants(self.proc.pid)}:
            self.sampler.adopt(pid)  # the job's curves are its ranks' too (a Slurm task is slurmstepd's)
        try:  # the job's sampler reads the GPUs; a rank's reads its own process tree
            self.rank_samplers[rank] = Sampler(pid=pid, interval_s=self.opts.interval_s, gpu=False,
                                               origin_s=self.origin, clock=self.clock,
                                               worker_probe=OBSERVED).start()
        except psutil.NoSuchProcess:
            pass

    starts_paused = False  # a Ray job: Ray's own start, until a training worker reports, is no loader's time

    def paused_s(self) -> float:
        if self.starts_paused and self.ranks:
            return min(float(ev.get("t_s") or 0.0) for ev in self.ranks.values())
        return self.slurm.waited_now_s() if self.slurm is not None else 0.0

    def _limit_reached(self, now: float) -> bool:
        """While the Slurm step waits for resources, no limit of the trial's runs: only the queue's own."""
        if not self.ranks and not self.opts.full and driver_notes(self.trial_dir):
            return True  # a Ray job's driver joined a running cluster: no rank of it will report here
        if self.slurm is None or self.ranks or not self.slurm.waiting():
            return super()._limit_reached(now)
        limit = self.opts.queue_timeout_s
        if limit is not None and self.slurm.waited_now_s() > limit:
            self.timed_out = QueueWaitTooLong(job=self.slurm.queued, waited_s=self.slurm.waited_now_s(), limit_s=limit)
            return True
        return False

    def local_ranks(self) -> List[psutil.Process]:
        """The ranks on this node that reported in (a Slurm task is no descendant of the launcher)."""
        found = []
        for ev in self.ranks.values():
            if ev.get("pid") and in_sight(ev):
                try:
                    found.append(psutil.Process(int(ev["pid"])))
                except psutil.Error:
                    continue
        return found

    def stop_samplers(self) -> Dict[int, Samples]:
        return {rank: s.stop() for rank, s in self.rank_samplers.items()}


def run_job(launch: Launch, trial_dir: str, host: HostInfo, opts: TrialOptions = TrialOptions(),
            what: Injection = OBSERVE, on_poll: Optional[Callable[[], None]] = None,
            clock: Clock = MONOTONIC) -> Run:
    """Measure one config of a multi-process job; the job's Run, with every rank's inside."""
    paths = TrialPaths.fresh(trial_dir, per_rank=True)
    rank_meter.clear(trial_dir)
    origin = clock.now_s()
    _write_job_spec(paths, launch, opts, what, origin)
    env = {**job_env(trial_dir, paths.spec, opts), **ray_job_env(launch.launcher, launch.script)}
    lifeline_env, lifeline_fds = for_child()  # its Python processes end the job if feedprof is killed
    env.update(lifeline_env)
    flight = InFlight.begin(launch.script, launch.command, paths, host, opts, clock, origin)
    flight = dataclasses.replace(flight, out=open(paths.log, "wb") if opts.capture_output else None)
    out = flight.out
    slurm = launch.launcher == "slurm"
    try:
        proc = subprocess.Popen(list(launch.argv()), stdout=out, stderr=subprocess.STDOUT if out else None,
                                stdin=child_stdin(bool(out)), env=env, pass_fds=lifeline_fds,
                                **(own_session(preexec_for_srun()) if slurm else own_group()))
        flight = dataclasses.replace(flight, proc=proc)
        step = SlurmStep(proc, own_allocation=not in_allocation(env), clock=clock) if slurm else None
        flight = dataclasses.replace(flight, watch=_JobWatch(proc, origin, opts, trial_dir, on_poll, clock, step,
                                                             launch.launcher))
        flight.watch.starts_paused = launch.launcher == RAY_LAUNCHER
        sampler = Sampler(pid=proc.pid, interval_s=opts.interval_s, gpu=opts.gpu, origin_s=origin,
                          clock=clock).start()
        flight.watch.sampler = sampler
        flight = dataclasses.replace(flight, sampler=sampler)
        flight.watch.wait()
    except BaseException as exc:
        if flight.proc is None:
            if out:
                out.close()
            raise
        with deferred_signals():
            run = _finish(flight, interrupted=True)
        if not isinstance(exc, KeyboardInterrupt):
            raise
        raise TrialInterrupted(run, getattr(exc, "signum", 2)) from None
    return _finish(flight)


def _finish(flight: InFlight, interrupted: bool = False) -> Optional[Run]:
    """End the whole job together, stop sampling, and put the job's Run together."""
    # torchrun starts each rank in a session of its own, out of reach of the group's kill:
    # every descendant now, ranks that have not reported in yet included
    proc, watch = flight.proc, flight.watch
    if interrupted and watch is not None:
        _ask_for_results(watch, flight.clock)
    queued = watch.slurm.end() if watch is not None and watch.slurm is not None else []
    ranks = (watch.known if watch else []) + descendants(proc.pid) + (watch.local_ranks() if watch else [])
    job = {proc.pid} | {p.pid for p in ranks}
    kill_group(proc, ranks, flight.clock)
    use_gpu = bool(flight.opts.gpu and watch is not None)  # no watch: interrupted at once, no Run to tell
    left = check_run(flight.paths.directory, proc.pid, ranks, use_gpu, since_s=flight.launched_s, clock=flight.clock)
    samples = flight.sampler.stop() if flight.sampler else Samples()
    rank_samples = watch.stop_samplers() if watch else {}
    if flight.out:
        flight.out.close()
    if watch is None:
        return None
    run = _assemble_job(flight, samples, rank_samples, interrupted)
    if watch.slurm is not None and watch.slurm.waited_now_s() > 0:
        queued_job = watch.slurm.step.split(".")[0] or watch.slurm.queued
        run = dataclasses.replace(run, notes=run.notes + (QueuedForResources(job=queued_job,
                                                                             waited_s=watch.slurm.waited_now_s()),))
        run = dataclasses.replace(run, summary=summarize(run))
    return dataclasses.replace(run, other_processes=flight.others.stop(job),
                               leftovers=dataclasses.replace(left, slurm=tuple(queued)))


RESULT_GRACE_S = 3.0  # interrupted: how long the ranks get to write what they measured


def _ask_for_results(watch: _JobWatch, clock: Clock) -> None:
    """Interrupted: SIGTERM to every rank that has not written its result, which makes it write
    what it measured before it dies (hosted.py); without it the job's loaders would be unknown."""
    def written() -> set:
        return {int(_RANK_FILE.search(p).group(1)) for p in glob.glob(os.path.join(watch.trial_dir, "result-*.json"))}

    missing = set(watch.ranks) - written()
    if not missing:
        return
    if watch.slurm is not None and watch.slurm.step:
        scancel(watch.slurm.step, signal_name="TERM")
    else:
        for p in watch.local_ranks():
            try:
                p.terminate()
            except psutil.Error:
                continue
    deadline = clock.now_s() + RESULT_GRACE_S
    while clock.now_s() < deadline and not set(watch.ranks) <= written():
        clock.sleep_s(0.05)


def _reported_rank(rank: int, started: dict) -> RankInfo:
    """What a rank said of itself when it started (its result, which says more, never came)."""
    said = {k: started[k] for k in ("local_rank", "world_size", "local_world_size", "launcher", "node", "job", "cpus",
                                    "pid", "self_sampled") if started.get(k) is not None}
    return RankInfo(rank=rank, **said)


def _load_run(path: str) -> Optional[Run]:
    if not path or not os.path.exists(path):
        return None
    try:
        return load(path)
    except StoreError:
        return None


def _measured_where(rank: int, watch: _JobWatch, samples: Samples, host: HostInfo) -> Tuple[Samples, HostInfo]:
    """A rank's samples and host: this feedprof's, where it could see the rank; else what the rank
    measured of itself on its own node (rank_meter.py), or at least its node's name."""
    own = _load_run(rank_meter.samples_path(watch.trial_dir, rank))
    if own is not None:
        return own.samples, own.host
    started = watch.ranks.get(rank) or {}
    if started and not in_sight(started):
        return samples, HostInfo(hostname=str(started.get("node") or ""))
    return samples, host


def _rank_run(rank: int, path: str, samples: Samples, host: HostInfo, watch: _JobWatch, interrupted: bool) -> Run:
    child = _load_run(path)
    samples, host = _measured_where(rank, watch, samples, host)
    base = child or Run(kind="trial", rank=_reported_rank(rank, watch.ranks.get(rank) or {}))
    if child is None or child.outcome.state != TrialState.OK:
        outcome = with_figures(classify_end(child.outcome if child else None, None, watch.timed_out, interrupted),
                               samples, host)
    else:
        outcome = child.outcome
    run = dataclasses.replace(base, kind="rank", host=host, samples=samples, outcome=outcome)
    return dataclasses.replace(run, summary=summarize(run))


def _job_outcome(ranks: List[Run], flight: InFlight, interrupted: bool) -> Outcome:
    proc, watch = flight.proc, flight.watch
    if interrupted:
        return Outcome(state=TrialState.INTERRUPTED, cause=Interrupted(), exit_code=proc.returncode)
    bad = [r for r in ranks if r.outcome.state != TrialState.OK]
    if isinstance(watch.timed_out, QueueWaitTooLong):  # never ran: no evidence about the config
        return Outcome(state=TrialState.INTERRUPTED, cause=watch.timed_out, exit_code=proc.returncode)
    if watch.timed_out is not None:
        return Outcome(state=TrialState.TIMEOUT, cause=watch.timed_out, exit_code=proc.returncode)
    if bad:  # the first rank to fail, with its own traceback: the others' errors follow from it
        r = min(bad, key=lambda r: watch.failed_at.get(r.rank.rank if r.rank else 0, float("inf")))
        return Outcome(state=r.outcome.state, cause=RankFailed(rank=r.rank.rank if r.rank else 0, cause=r.outcome.cause),
                       exit_code=proc.returncode, traceback=r.outcome.traceback)
    if not ranks:  # the launcher ended before any rank started (a bad command, no such script...)
        return classify_end(None, proc.returncode, None, False, log_tail(flight.paths.log))
    return Outcome(state=TrialState.OK, exit_code=proc.returncode)


def _assemble_job(flight: InFlight, samples: Samples, rank_samples: Dict[int, Samples], interrupted: bool) -> Run:
    watch, host = flight.watch, flight.host
    paths = {int(_RANK_FILE.search(p).group(1)): p for p in glob.glob(os.path.join(watch.trial_dir, "result-*.json"))}
    ranks = [_rank_run(r, paths.get(r, ""), rank_samples.get(r, Samples()), host, watch, interrupted)
             for r in sorted(set(paths) | set(watch.ranks))]
    first = ranks[0] if ranks else Run()
    run = Run(kind="trial", script=first.script or flight.script, argv=flight.argv, started_at=flight.started_at,
              duration_s=flight.duration_s(), host=host, loaders=first.loaders, window=first.window,
              samples=samples, outcome=_job_outcome(ranks, flight, interrupted),
              cuda_used=any(r.cuda_used for r in ranks) or None, modules=first.modules, notes=first.notes,
              ranks=tuple(ranks))
    run = _out_of_reach(run, watch.trial_dir, interrupted)
    return dataclasses.replace(run, summary=summarize(run))


def _out_of_reach(run: Run, trial_dir: str, interrupted: bool) -> Run:
    """A Ray job whose driver joined a running cluster (trial/ray_train.py): its loaders ran where
    feedprof cannot see them, which is no failure of the script; the finding says so."""
    notes = driver_notes(trial_dir)
    if not notes:
        return run
    ended = run.outcome if run.ranks or interrupted else Outcome(state=TrialState.OK, exit_code=run.outcome.exit_code)
    return dataclasses.replace(run, notes=run.notes + notes, outcome=ended)
