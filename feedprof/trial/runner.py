"""Run one isolated trial: the user's script in a child process, sampled from
outside, ended once measured, and always reaped with its whole process group.

The result is a :class:`feedprof.store.Run` whatever happened: a failure is a
state with its cause (Optuna's habit), never an exception that ends a tune.
Only the parent's own interrupt (Ctrl-C, SIGTERM) propagates, after the
child's group has been killed.

NOTE [ How a trial ends ]  (child.py is the other half)

    _Watch.wait polls, every POLL_S on the trial's clock:
      the child exited ─────────────────────────► its result.json says how
      "window_done" event + EXIT_GRACE_S passed ─► measured; the script lingers
      no first batch within loader_timeout_s ───► timeout (NoBatchWithin)
      past timeout_s ───────────────────────────► timeout (TrialTimedOut)
    then: kill_group (every process of the trial), stop the sampler, and
    _assemble: the child's Run + the samples; classify_end names a bad end.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import psutil

from feedprof import defaults
from feedprof.analyse.diagnose import summarize
from feedprof.reasons import (ExitedWithCode, Interrupted, KilledBySignal, NoBatchWithin, OutOfMemoryKilled, Reason,
                              SharedMemoryExhausted, TooManyOpenFiles, TrialTimedOut)
from feedprof.record.host import memory_limit_bytes
from feedprof.record.clock import MONOTONIC, Clock
from feedprof.record.leftovers import TRIAL_ENV, check_run, process_clock_s
from feedprof.record.others import OtherLoad
from feedprof.record.sampler import Sampler
from feedprof.record.workers import OBSERVED  # a trial is sampled from this process, not the script's
from feedprof.record.clock import now_iso
from feedprof.store import HostInfo, Outcome, Run, Samples, StoreError, TrialState, Window, WindowEnd, load
from feedprof.trial.failures import cause_of_text
from feedprof.trial.protocol import Mode, TrialSpec, read_events
from feedprof.trial.signals import deferred_signals

POLL_S = 0.05
EXIT_GRACE_S = 3.0  # after the window is measured, how long the child may take to exit
REAP_WAIT_S = 5.0  # after SIGKILL, how long to wait for the group to be gone
KNOWN_REFRESH_S = 1.0  # how often descendants are listed, in case they leave the group


@dataclass
class TrialOptions:
    """How one trial is run and bounded (everything but the config itself)."""

    window_batches: int = defaults.PROFILE_WINDOW.batches
    window_seconds: float = defaults.PROFILE_WINDOW.seconds
    min_window_batches: int = defaults.PROFILE_WINDOW.min_batches
    warmup_batches: int = defaults.PROFILE_WINDOW.warmup_batches
    full: bool = False
    timeout_s: Optional[float] = None  # whole trial
    loader_timeout_s: Optional[float] = defaults.LOADER_TIMEOUT_S  # until the first loader yields a batch
    interval_s: float = defaults.INTERVAL_S
    gpu: bool = True
    capture_output: bool = True  # False: the script's output goes to our terminal
    extra_env: Dict[str, str] = field(default_factory=dict)
    zygote: Any = None  # a trial.zygote.Zygote to fork the trial from (captured output only)


@dataclass(frozen=True)
class Injection:
    """What the trial does to the script's loaders (the default: nothing)."""

    mode: Mode = Mode.OBSERVE
    config: Dict[str, Any] = field(default_factory=dict)  # knobs (inject, ceiling)
    framework: Optional[str] = None  # the target loader's framework
    chain: Optional[Tuple[str, ...]] = None  # the target loader's call chain
    site: Optional[str] = None  # or its FILE:LINE (--loader)


OBSERVE = Injection()


class TrialInterrupted(BaseException):
    """The parent was told to stop (SIGINT/SIGTERM) during a trial."""

    def __init__(self, run: Optional[Run], signum: int):
        super().__init__(signum)
        self.run = run
        self.signum = signum


def kill_group(proc: Any, known: List[psutil.Process], clock: Clock = MONOTONIC) -> None:
    """SIGKILL the child's process group, and any descendant that left it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in known:
        try:
            if p.is_running():
                p.kill()
        except psutil.Error:
            pass
    if proc.poll() is None:  # forked before it could setsid: its group is not its pid yet
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process stuck in the kernel
        pass
    deadline = clock.now_s() + REAP_WAIT_S
    while clock.now_s() < deadline and group_alive(proc.pid):
        clock.sleep_s(0.02)


def group_alive(pgid: int) -> bool:
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False


def _descendants(pid: int) -> List[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _launch(spec_path: str, log_path: str, env_extra: Dict[str, str], opts: TrialOptions) -> Tuple[Any, Any]:
    """Start the trial child, forked from the zygote or cold; (process, log file or None)."""
    if opts.zygote is not None and opts.capture_output:
        return opts.zygote.fork(spec_path, log_path, env_extra, os.getcwd()), None
    out = open(log_path, "wb") if opts.capture_output else None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "feedprof.trial.child", spec_path],
            stdout=out, stderr=subprocess.STDOUT if out else None,
            stdin=subprocess.DEVNULL if opts.capture_output else None,
            start_new_session=True,  # its own process group: one killpg reaps its workers
            env={**os.environ, **env_extra})
    except BaseException:
        if out:
            out.close()
        raise
    return proc, out


@dataclass(frozen=True)
class _Paths:
    spec: str
    result: str
    events: str
    log: str

    @classmethod
    def fresh(cls, trial_dir: str) -> "_Paths":
        os.makedirs(trial_dir, exist_ok=True)
        paths = cls(*(os.path.join(trial_dir, name) for name in ("spec.json", "result.json", "events.jsonl",
                                                                    "output.log")))
        for stale in (paths.result, paths.events):
            if os.path.exists(stale):
                os.remove(stale)
        return paths


def _write_spec(paths: _Paths, script: str, argv: List[str], opts: TrialOptions, what: Injection,
                origin_s: float) -> None:
    spec = TrialSpec(
        script=script, argv=list(argv), result_path=paths.result, events_path=paths.events, origin_s=origin_s,
        window_batches=opts.window_batches, window_seconds=opts.window_seconds,
        min_window_batches=opts.min_window_batches, warmup_batches=opts.warmup_batches,
        mode=what.mode, inject=dict(what.config), framework=what.framework,
        target_chain=list(what.chain) if what.chain is not None else None, target_site=what.site, full=opts.full)
    with open(paths.spec, "w", encoding="utf-8") as fh:
        fh.write(spec.to_json())


def run_trial(script: str, argv: List[str], trial_dir: str, host: HostInfo,
              opts: TrialOptions = TrialOptions(), what: Injection = OBSERVE,
              on_poll: Optional[Callable[[], None]] = None, clock: Clock = MONOTONIC) -> Run:
    """Measure one config; return the Run (its ``outcome.state`` says how it went)."""
    paths = _Paths.fresh(trial_dir)
    origin = clock.now_s()
    _write_spec(paths, script, argv, opts, what, origin)
    # Inherited by every descendant (fork or spawn): how tests find stragglers.
    env_extra = {**opts.extra_env, TRIAL_ENV: trial_dir}
    started_at = now_iso()
    proc, out, watch, sampler = None, None, None, None
    others = OtherLoad()
    launched_s = process_clock_s()  # what started later and is still there after the trial is the trial's
    try:  # from the launch on, so that a Ctrl-C at any point reaps what was started
        proc, out = _launch(paths.spec, paths.log, env_extra, opts)
        watch = _Watch(proc, origin, opts, paths.events, on_poll, clock)
        try:
            sampler = Sampler(pid=proc.pid, interval_s=opts.interval_s, gpu=opts.gpu, origin_s=origin,
                              clock=clock, worker_probe=OBSERVED).start()
            watch.sampler = sampler
        except psutil.NoSuchProcess:  # it died before we could look at it
            pass
        watch.wait()
    except BaseException as exc:  # Ctrl-C / SIGTERM in the parent (or a bug here): reap, then pass it on
        if proc is None:
            raise  # nothing was started
        with deferred_signals():
            kill_group(proc, watch.known if watch else [], clock)
            samples = sampler.stop() if sampler else None
            run = _assemble(script, argv, host, started_at, origin, paths, samples, watch, clock,
                            interrupted=True) if watch is not None else None
            if run is not None:
                run = _with_leftovers(run, trial_dir, proc.pid, watch.known, opts, launched_s)
            if out:
                out.close()
        if not isinstance(exc, KeyboardInterrupt):
            raise
        raise TrialInterrupted(run, getattr(exc, "signum", signal.SIGINT)) from None
    job = {proc.pid} | {p.pid for p in watch.known}
    kill_group(proc, watch.known, clock)
    samples = sampler.stop() if sampler else None
    if out:
        out.close()
    run = _assemble(script, argv, host, started_at, origin, paths, samples, watch, clock)
    run = dataclasses.replace(run, other_processes=others.stop(job))
    return _with_leftovers(run, trial_dir, proc.pid, watch.known, opts, launched_s)


def _with_leftovers(run: Run, trial_dir: str, pid: int, known: List[psutil.Process], opts: TrialOptions,
                    launched_s: float) -> Run:
    """The run with what it left behind: whatever escaped the group (setsid, a
    double fork) is reported, not killed; it may be meant to outlive the run."""
    server = opts.zygote.proc.pid if opts.zygote is not None and opts.capture_output else None
    return dataclasses.replace(run, leftovers=check_run(trial_dir, pid, known, opts.gpu, since_s=launched_s,
                                                        fork_server_pid=server))


class _Watch:
    """Polls the child: its events, its exit, and the trial's time limits.
    (jobrunner.py's watch of a multi-process job builds on it.)"""

    exit_grace_s = EXIT_GRACE_S

    def __init__(self, proc: Any, origin: float, opts: TrialOptions, events_path: str,
                 on_poll: Optional[Callable[[], None]], clock: Clock):
        self.proc = proc
        self.origin = origin
        self.opts = opts
        self.events_path = events_path
        self.on_poll = on_poll
        self.clock = clock
        self.sampler: Optional[Sampler] = None
        self.offset = 0
        self.events: List[dict] = []
        self.timed_out: Optional[Reason] = None
        self.window_done_at: Optional[float] = None
        self.first_batch = False
        self.known: List[psutil.Process] = []
        self._t_known = float("-inf")

    def _poll_events(self) -> None:
        new, self.offset = read_events(self.events_path, self.offset)
        for ev in new:
            self.events.append(ev)
            kind = ev.get("event")
            if kind == "first_batch":
                self.first_batch = True
            elif kind == "window_done":
                self.window_done_at = self.clock.now_s()
            if kind in ("loader", "first_batch") and self.sampler is not None:
                self.sampler.refresh_tree()  # workers start now: look for them at the next sample

    def _limit_reached(self, now: float) -> bool:
        opts, elapsed = self.opts, now - self.origin
        if self.window_done_at is not None and now - self.window_done_at >= self.exit_grace_s:
            return True  # measured; the script is ignoring StopTrial or slow to unwind
        if not self.first_batch and opts.loader_timeout_s is not None and elapsed > opts.loader_timeout_s:
            self.timed_out = NoBatchWithin(limit_s=opts.loader_timeout_s)
            return True
        if opts.timeout_s is not None and elapsed > opts.timeout_s:
            self.timed_out = TrialTimedOut(limit_s=opts.timeout_s)
            return True
        return False

    def wait(self) -> None:
        while True:
            self._poll_events()
            if self.proc.poll() is not None:
                self._poll_events()
                return
            now = self.clock.now_s()
            if now - self._t_known > KNOWN_REFRESH_S:  # remember descendants in case they leave the group
                self.known = list({p.pid: p for p in self.known + _descendants(self.proc.pid)}.values())
                self._t_known = now
            if self._limit_reached(now):
                return
            if self.on_poll is not None:
                self.on_poll()
            self.clock.sleep_s(POLL_S)


def _tail(path: str, n_bytes: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - n_bytes))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _assemble(script: str, argv: List[str], host: HostInfo, started_at: str, origin: float, paths: _Paths,
              samples: Any, watch: _Watch, clock: Clock, interrupted: bool = False) -> Run:
    child: Optional[Run] = None
    if os.path.exists(paths.result):
        try:
            child = load(paths.result)
        except StoreError:
            child = None
    rc = watch.proc.returncode
    if child is None or child.outcome.state != TrialState.OK:
        outcome = classify_end(child.outcome if child else None, rc, watch.timed_out, interrupted,
                               _tail(paths.log))
        outcome = _with_figures(outcome, samples, host)
    else:
        outcome = dataclasses.replace(child.outcome, exit_code=rc if rc is not None else child.outcome.exit_code)
        if interrupted:
            outcome = dataclasses.replace(outcome, state=TrialState.INTERRUPTED, cause=Interrupted())
    base = child or Run(kind="trial", window=Window(end=WindowEnd.NO_RESULT))
    run = dataclasses.replace(
        base, kind="trial", script=script, argv=tuple(argv), started_at=started_at,
        duration_s=clock.now_s() - origin, host=host, outcome=outcome,
        **({"samples": samples} if samples is not None else {}))
    return dataclasses.replace(run, summary=summarize(run))


def _signal_name(sig: int) -> str:
    return signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"


def classify_end(child: Optional[Outcome], returncode: Optional[int], timed_out: Optional[Reason],
                 interrupted: bool, log_tail: str = "") -> Outcome:
    """Name how a trial ended that did not end well (the cause carries the figures)."""
    tb = child.traceback if child else ""
    if interrupted:
        return Outcome(state=TrialState.INTERRUPTED, cause=Interrupted(), exit_code=returncode)
    if timed_out is not None:
        return Outcome(state=TrialState.TIMEOUT, cause=timed_out, exit_code=returncode)
    text = " ".join(filter(None, [getattr(child.cause, "error", "") if child else "", tb, log_tail]))
    known = cause_of_text(text)
    # a worker the kernel killed surfaces as the script's error; a script that
    # wrote no result says in its output what it died of
    if known is not None and (known[0] == TrialState.KILLED or child is None):
        return Outcome(state=known[0], cause=known[1], exit_code=returncode,
                       traceback=tb if known[0] == TrialState.KILLED else tb or log_tail)
    if child is not None:
        return dataclasses.replace(child, exit_code=returncode)
    if returncode is not None and returncode < 0:
        sig = -returncode
        name = _signal_name(sig)
        cause = {signal.SIGKILL: OutOfMemoryKilled(signal=name),
                 signal.SIGBUS: SharedMemoryExhausted(signal=name)}.get(sig, KilledBySignal(signal=name))
        return Outcome(state=TrialState.KILLED, cause=cause, exit_code=returncode)
    last = log_tail.strip().splitlines()[-1] if log_tail.strip() else ""
    return Outcome(state=TrialState.FAILED, cause=ExitedWithCode(exit_code=returncode, last_line=last),
                   exit_code=returncode, traceback=log_tail)


def _with_figures(outcome: Outcome, samples: Optional[Samples], host: HostInfo) -> Outcome:
    """A kill's or a hazard's cause, with what this trial measured (None where
    nothing was): memory per worker, /dev/shm, open files."""
    cause = outcome.cause
    if samples is None or not isinstance(cause, (OutOfMemoryKilled, SharedMemoryExhausted, TooManyOpenFiles)):
        return outcome
    p = samples.peaks
    workers = p.n_workers or None
    if isinstance(cause, OutOfMemoryKilled):
        worker = max((b for b in (p.worker_pss_bytes, *samples.worker_pss_bytes) if b is not None), default=None)
        cause = dataclasses.replace(cause, workers=workers, worker_pss_bytes=worker,
                                    tree_pss_bytes=p.tree_pss_bytes or p.tree_rss_bytes,
                                    ram_bytes=memory_limit_bytes() or host.ram_bytes or None)
    elif isinstance(cause, SharedMemoryExhausted):
        cause = dataclasses.replace(cause, workers=workers, shm_total_bytes=host.shm_total_bytes,
                                    shm_peak_bytes=p.shm_used_bytes)
    else:
        cause = dataclasses.replace(cause, workers=workers, limit_fds=samples.fd_limit, main_fds=p.main_fds,
                                    worker_fds=p.worker_fds)
    return dataclasses.replace(outcome, cause=cause)
