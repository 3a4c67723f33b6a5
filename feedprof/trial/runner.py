"""Run one isolated trial: the user's script in a child process, sampled from
outside, ended once measured, and always reaped with its whole process group.

The result is a :class:`feedprof.store.Run` whatever happened: a failure is a
state with its cause (Optuna's habit), never an exception that ends a tune.
Only the parent's own interrupt (Ctrl-C, SIGTERM) propagates, after the
child's group has been killed.

NOTE [ One trial ]  (watch.py: how it is watched and ends; child.py: the other half)

    TrialPaths.fresh, spec.json ─► InFlight.begin ─► _launch (cold, or forked by the zygote)
      ─► Watch + Sampler ─► Watch.wait ─► _reap: kill_group, stop the sampler, and
    _assemble: the child's Run + the samples; ending.classify_end names a bad end.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import psutil

from feedprof.analyse.diagnose import summarize
from feedprof.store.reasons import Interrupted
from feedprof.record.clock import MONOTONIC, Clock
from feedprof.record.leftovers import TRIAL_ENV, check_run
from feedprof.record.loadprof import merge_profiles, read_profiles
from feedprof.record.pools import read_pools
from feedprof.record.sampler import Sampler
from feedprof.record.workers import OBSERVED  # a trial is sampled from this process, not the script's
from feedprof.store import HostInfo, Run, StoreError, TrialState, Window, WindowEnd, load
from feedprof.trial.ending import classify_end, log_tail, with_figures
from feedprof.trial.flight import InFlight, TrialInterrupted, TrialPaths
from feedprof.trial.group import child_stdin, own_group
from feedprof.trial.lifeline import for_child
from feedprof.trial.options import OBSERVE, Injection, TrialOptions
from feedprof.trial.protocol import Mode, TrialSpec
from feedprof.trial.signals import deferred_signals
from feedprof.trial.watch import Watch, kill_group

__all__ = ["Injection", "OBSERVE", "TrialInterrupted", "TrialOptions", "run_trial"]


def _launch(spec_path: str, log_path: str, env_extra: Dict[str, str], opts: TrialOptions) -> Tuple[Any, Any]:
    """Start the trial child, forked from the zygote or cold; (process, log file or None)."""
    if opts.zygote is not None and opts.capture_output:
        return opts.zygote.fork(spec_path, log_path, env_extra, os.getcwd()), None
    out = open(log_path, "wb") if opts.capture_output else None
    lifeline_env, lifeline_fds = for_child()  # it ends itself if feedprof is killed
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "feedprof.trial.child", spec_path],
            stdout=out, stderr=subprocess.STDOUT if out else None,
            stdin=child_stdin(opts.capture_output),
            env={**os.environ, **env_extra, **lifeline_env}, pass_fds=lifeline_fds,
            **own_group())  # one killpg reaps its workers; scheduled as from the user's shell (group.py)
    except BaseException:
        if out:
            out.close()
        raise
    return proc, out


def _write_spec(paths: TrialPaths, script: str, argv: List[str], opts: TrialOptions, what: Injection,
                origin_s: float) -> None:
    spec = TrialSpec(
        script=script, argv=list(argv), result_path=paths.result, events_path=paths.events, origin_s=origin_s,
        window_batches=opts.window_batches, window_seconds=opts.window_seconds,
        min_window_batches=opts.min_window_batches, warmup_batches=opts.warmup_batches,
        mode=what.mode, inject=dict(what.config), framework=what.framework,
        target_chain=list(what.chain) if what.chain is not None else None, target_site=what.site, full=opts.full,
        decision_path=paths.decision if what.mode == Mode.ONLINE else "",
        allow_rng_change=what.allow_rng_change,
        allow_resharding=what.allow_resharding)
    with open(paths.spec, "w", encoding="utf-8") as fh:
        fh.write(spec.to_json())


def run_trial(script: str, argv: List[str], trial_dir: str, host: HostInfo,
              opts: TrialOptions = TrialOptions(), what: Injection = OBSERVE,
              on_poll: Optional[Callable[[], None]] = None, clock: Clock = MONOTONIC) -> Run:
    """Measure one config; return the Run (its ``outcome.state`` says how it went)."""
    paths = TrialPaths.fresh(trial_dir)
    origin = clock.now_s()
    _write_spec(paths, script, argv, opts, what, origin)
    # Inherited by every descendant (fork or spawn): TRIAL_ENV is how stragglers are found;
    # a trial forked from the fork server gets the same (zygote.py applies it in the fork).
    env_extra = {**opts.script_env(), TRIAL_ENV: trial_dir}
    flight = InFlight.begin(script, argv, paths, host, opts, clock, origin)
    try:  # from the launch on, so that a Ctrl-C at any point reaps what was started
        proc, out = _launch(paths.spec, paths.log, env_extra, opts)
        flight = dataclasses.replace(flight, proc=proc, out=out)
        flight = dataclasses.replace(flight, watch=Watch(flight.proc, origin, opts, paths.events, on_poll, clock))
        flight = _sampled(flight)
        flight.watch.wait()
    except BaseException as exc:  # Ctrl-C / SIGTERM in the parent (or a bug here): reap, then pass it on
        if flight.proc is None:
            raise  # nothing was started
        with deferred_signals():
            run = _reap(flight, interrupted=True)
        if not isinstance(exc, KeyboardInterrupt):
            raise
        raise TrialInterrupted(run, getattr(exc, "signum", signal.SIGINT)) from None
    return _reap(flight)


def _sampled(flight: InFlight) -> InFlight:
    """The flight with its sampler started (unchanged if the child is already gone)."""
    try:
        sampler = Sampler(pid=flight.proc.pid, interval_s=flight.opts.interval_s, gpu=flight.opts.gpu,
                          origin_s=flight.origin_s, clock=flight.clock, worker_probe=OBSERVED).start()
    except psutil.NoSuchProcess:  # it died before we could look at it
        return flight
    flight.watch.sampler = sampler
    return dataclasses.replace(flight, sampler=sampler)


def _reap(flight: InFlight, interrupted: bool = False) -> Optional[Run]:
    """Kill every process of the trial, stop sampling, and put its Run together
    (None: interrupted before it could be watched)."""
    known = flight.watch.known if flight.watch is not None else []
    job = {flight.proc.pid} | {p.pid for p in known}
    kill_group(flight.proc, known, flight.clock)
    samples = flight.sampler.stop() if flight.sampler else None
    if flight.out:
        flight.out.close()
    if flight.watch is None:
        return None
    run = _assemble(flight, samples, interrupted)
    if not interrupted:
        run = dataclasses.replace(run, other_processes=flight.others.stop(job))
    return _with_leftovers(run, flight)


def _with_leftovers(run: Run, flight: InFlight) -> Run:
    """The run with what it left behind: whatever escaped the group (setsid, a
    double fork) is reported, not killed; it may be meant to outlive the run."""
    opts = flight.opts
    server = opts.zygote.proc.pid if opts.zygote is not None and opts.capture_output else None
    return dataclasses.replace(run, leftovers=check_run(flight.paths.directory, flight.proc.pid, flight.watch.known,
                                                        opts.gpu, since_s=flight.launched_s, fork_server_pid=server,
                                                        clock=flight.clock))


def _assemble(flight: InFlight, samples: Any, interrupted: bool = False) -> Run:
    child: Optional[Run] = None
    if os.path.exists(flight.paths.result):
        try:
            child = load(flight.paths.result)
        except StoreError:
            child = None
    rc = flight.proc.returncode
    if child is None or child.outcome.state != TrialState.OK:
        outcome = classify_end(child.outcome if child else None, rc, flight.watch.timed_out, interrupted,
                               log_tail(flight.paths.log))
        outcome = with_figures(outcome, samples, flight.host)
    else:
        outcome = dataclasses.replace(child.outcome, exit_code=rc if rc is not None else child.outcome.exit_code)
        if interrupted:
            outcome = dataclasses.replace(outcome, state=TrialState.INTERRUPTED, cause=Interrupted())
    base = child or Run(kind="trial", window=Window(end=WindowEnd.NO_RESULT))
    run = dataclasses.replace(
        base, kind="trial", script=flight.script, argv=flight.argv, started_at=flight.started_at,
        duration_s=flight.duration_s(), host=flight.host, outcome=outcome,
        loading=merge_profiles(read_profiles(flight.paths.directory)), pools=read_pools(flight.paths.directory),
        **({"samples": samples} if samples is not None else {}))
    return dataclasses.replace(run, summary=summarize(run))
