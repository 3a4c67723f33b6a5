"""Run one isolated trial: the user's script in a child process, sampled from
outside, ended once measured, and always reaped with its whole process group.

The result is a :class:`feedprof.store.Run` whatever happened: a failure is a
state with a message (Optuna's habit), never an exception that ends a tune.
Only the parent's own interrupt (Ctrl-C, SIGTERM) propagates, after the
child's group has been killed.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import psutil

from feedprof.analyse.diagnose import summarize
from feedprof.record.clock import MONOTONIC
from feedprof.record.leftovers import TRIAL_ENV, check_run, process_clock_s
from feedprof.record.sampler import DEFAULT_INTERVAL_S, Sampler
from feedprof.session import now_iso
from feedprof.store import HostInfo, Outcome, Run, StoreError, Window, load
from feedprof.tune.protocol import MODE_OBSERVE, TrialSpec, read_events
from feedprof.tune.signals import deferred_signals

POLL_S = 0.05
EXIT_GRACE_S = 3.0  # after the window is measured, how long the child may take to exit
LOOKED_FOR = ("a torch.utils.data.DataLoader, keras.utils.PyDataset, tf_keras Sequence or generator, "
              "or tf.data.Dataset being iterated")


@dataclass
class TrialOptions:
    """How one trial is run and bounded (everything but the config itself)."""

    window_batches: int = 200
    window_seconds: float = 30.0
    min_window_batches: int = 10
    warmup_batches: int = 5
    full: bool = False
    timeout_s: Optional[float] = None  # whole trial
    loader_timeout_s: Optional[float] = 120.0  # until the first loader yields a batch
    interval_s: float = DEFAULT_INTERVAL_S
    gpu: bool = True
    capture_output: bool = True  # False: the script's output goes to our terminal
    extra_env: Dict[str, str] = field(default_factory=dict)
    zygote: Any = None  # a tune.zygote.Zygote to fork the trial from (captured output only)


class TrialInterrupted(BaseException):
    """The parent was told to stop (SIGINT/SIGTERM) during a trial."""

    def __init__(self, run: Optional[Run], signum: int):
        super().__init__(signum)
        self.run = run
        self.signum = signum


def kill_group(proc: Any, known: List[psutil.Process]) -> None:
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
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and group_alive(proc.pid):
        time.sleep(0.02)


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
            [sys.executable, "-m", "feedprof.tune.child", spec_path],
            stdout=out, stderr=subprocess.STDOUT if out else None,
            stdin=subprocess.DEVNULL if opts.capture_output else None,
            start_new_session=True,  # its own process group: one killpg reaps its workers
            env={**os.environ, **env_extra})
    except BaseException:
        if out:
            out.close()
        raise
    return proc, out


def run_trial(script: str, argv: List[str], trial_dir: str, host: HostInfo,
              opts: TrialOptions = TrialOptions(), mode: str = MODE_OBSERVE,
              inject: Optional[Dict[str, Any]] = None, target: Optional[Dict[str, Any]] = None,
              on_event: Optional[Callable[[dict], None]] = None,
              on_poll: Optional[Callable[[], None]] = None) -> Run:
    """Measure one config; return the Run (its ``outcome.state`` says how it went)."""
    os.makedirs(trial_dir, exist_ok=True)
    result_path = os.path.join(trial_dir, "result.json")
    events_path = os.path.join(trial_dir, "events.jsonl")
    for stale in (result_path, events_path):
        if os.path.exists(stale):
            os.remove(stale)
    origin = MONOTONIC.now_s()
    target = target or {}
    spec = TrialSpec(
        script=script, argv=list(argv), result_path=result_path, events_path=events_path,
        origin_s=origin, mode=mode, inject=dict(inject or {}),
        framework=target.get("framework"), target_chain=target.get("chain"), target_site=target.get("site"),
        window_batches=opts.window_batches, window_seconds=opts.window_seconds,
        min_window_batches=opts.min_window_batches, warmup_batches=opts.warmup_batches, full=opts.full)
    spec_path = os.path.join(trial_dir, "spec.json")
    with open(spec_path, "w", encoding="utf-8") as fh:
        fh.write(spec.to_json())
    log_path = os.path.join(trial_dir, "output.log")
    # Inherited by every descendant (fork or spawn): how tests find stragglers.
    env_extra = {**opts.extra_env, TRIAL_ENV: trial_dir}
    started_at = now_iso()
    sampler: Optional[Sampler] = None
    state: Optional[_Watch] = None
    out = None

    def on_child_event(ev: dict) -> None:
        if sampler is not None and ev.get("event") in ("loader", "first_batch"):
            sampler.refresh_tree()  # workers start now: look for them at the next sample
        if on_event is not None:
            on_event(ev)

    proc = None
    launched_s = process_clock_s()  # what started later and is still there after the trial is the trial's
    try:  # from the launch on, so that a Ctrl-C at any point reaps what was started
        proc, out = _launch(spec_path, log_path, env_extra, opts)
        state = _Watch(proc, origin, opts, events_path, on_child_event, on_poll)
        try:
            sampler = Sampler(pid=proc.pid, interval_s=opts.interval_s, gpu=opts.gpu, origin_s=origin).start()
        except psutil.NoSuchProcess:  # it died before we could look at it
            pass
        state.wait()
    except BaseException as exc:  # Ctrl-C / SIGTERM in the parent (or a bug here): reap, then pass it on
        if proc is None:
            raise  # nothing was started
        run = None
        with deferred_signals():
            kill_group(proc, state.known if state else [])
            samples = sampler.stop() if sampler else None
            if state is not None:
                run = _assemble(script, argv, host, started_at, origin, result_path, log_path, samples, state,
                                interrupted=True)
                run = _with_leftovers(run, trial_dir, proc.pid, state.known, opts, launched_s)
            if out:
                out.close()
        if not isinstance(exc, KeyboardInterrupt):
            raise
        signum = getattr(exc, "signum", signal.SIGINT)
        raise TrialInterrupted(run, signum) from None
    kill_group(proc, state.known)
    samples = sampler.stop() if sampler else None
    if out:
        out.close()
    run = _assemble(script, argv, host, started_at, origin, result_path, log_path, samples, state)
    return _with_leftovers(run, trial_dir, proc.pid, state.known, opts, launched_s)


def _with_leftovers(run: Run, trial_dir: str, pid: int, known: List[psutil.Process], opts: TrialOptions,
                    launched_s: float) -> Run:
    """The run with what it left behind: whatever escaped the group (setsid, a
    double fork) is reported, not killed; it may be meant to outlive the run."""
    server = opts.zygote.proc.pid if opts.zygote is not None and opts.capture_output else None
    return dataclasses.replace(run, leftovers=check_run(trial_dir, pid, known, opts.gpu, since_s=launched_s,
                                                        fork_server_pid=server))


class _Watch:
    """Polls the child: its events, its exit, and the trial's time limits."""

    def __init__(self, proc: subprocess.Popen, origin: float, opts: TrialOptions,
                 events_path: str, on_event: Optional[Callable[[dict], None]],
                 on_poll: Optional[Callable[[], None]] = None):
        self.proc = proc
        self.origin = origin
        self.opts = opts
        self.events_path = events_path
        self.on_event = on_event
        self.on_poll = on_poll
        self.offset = 0
        self.events: List[dict] = []
        self.timed_out = ""
        self.window_done_at: Optional[float] = None
        self.first_batch = False
        self.known: List[psutil.Process] = []
        self._t_known = 0.0

    def _poll_events(self) -> None:
        new, self.offset = read_events(self.events_path, self.offset)
        for ev in new:
            self.events.append(ev)
            if ev.get("event") == "first_batch":
                self.first_batch = True
            elif ev.get("event") == "window_done":
                self.window_done_at = time.monotonic()
            if self.on_event is not None:
                self.on_event(ev)

    def wait(self) -> None:
        opts = self.opts
        while True:
            self._poll_events()
            if self.proc.poll() is not None:
                self._poll_events()
                return
            now = MONOTONIC.now_s()
            elapsed = now - self.origin
            if now - self._t_known > 1.0:  # remember descendants in case they leave the group
                self.known = list({p.pid: p for p in self.known + _descendants(self.proc.pid)}.values())
                self._t_known = now
            if self.window_done_at is not None and time.monotonic() - self.window_done_at > EXIT_GRACE_S:
                return  # measured; the script is ignoring StopTrial or slow to unwind
            if not self.first_batch and opts.loader_timeout_s is not None and elapsed > opts.loader_timeout_s:
                self.timed_out = (f"no data loader delivered a batch within {opts.loader_timeout_s:g} s "
                                  f"(looked for {LOOKED_FOR})")
                return
            if opts.timeout_s is not None and elapsed > opts.timeout_s:
                self.timed_out = f"the trial did not finish within its {opts.timeout_s:.0f} s limit"
                return
            if self.on_poll is not None:
                self.on_poll()
            time.sleep(POLL_S)


def _tail(path: str, n_bytes: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - n_bytes))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _assemble(script: str, argv: List[str], host: HostInfo, started_at: str, origin: float,
              result_path: str, log_path: str, samples: Any, state: _Watch,
              interrupted: bool = False) -> Run:
    child: Optional[Run] = None
    if os.path.exists(result_path):
        try:
            child = load(result_path)
        except StoreError:
            child = None
    rc = state.proc.returncode
    if child is None or child.outcome.state != "ok":
        outcome = classify_end(child.outcome if child else None, rc, state.timed_out, interrupted,
                               _tail(log_path))
    else:
        outcome = dataclasses.replace(child.outcome, exit_code=rc if rc is not None else child.outcome.exit_code)
        if interrupted:
            outcome = dataclasses.replace(outcome, state="interrupted", message="interrupted")
    base = child or Run(kind="trial", window=Window(reason="no result"))
    run = dataclasses.replace(
        base, kind="trial", script=script, argv=tuple(argv), started_at=started_at,
        duration_s=MONOTONIC.now_s() - origin, host=host, outcome=outcome,
        **({"samples": samples} if samples is not None else {}))
    return dataclasses.replace(run, summary=summarize(run))


SHM_REMEDY = ("the loader ran out of shared memory (/dev/shm): in Docker, run with --shm-size=8g or "
              "--ipc=host; otherwise use fewer workers or a smaller prefetch_factor")
OOM_REMEDY = ("killed, most likely by the out-of-memory killer: use fewer workers, a smaller "
              "prefetch_factor or smaller batches")


def classify_end(child: Optional[Outcome], returncode: Optional[int], timed_out: str,
                 interrupted: bool, log_tail: str = "") -> Outcome:
    """Name how a trial ended that did not end well, with the remedy where there is one."""
    if interrupted:
        return Outcome(state="interrupted", message="interrupted", exit_code=returncode)
    if timed_out:
        return Outcome(state="timeout", message=timed_out, exit_code=returncode)
    text = " ".join(filter(None, [child.message if child else "", child.traceback if child else "", log_tail]))
    if "Bus error" in text or ("No space left on device" in text and "shm" in text):
        return Outcome(state="killed", message=SHM_REMEDY, exit_code=returncode,
                       traceback=child.traceback if child else "")
    if "killed by signal: Killed" in text:
        return Outcome(state="killed", message=OOM_REMEDY, exit_code=returncode,
                       traceback=child.traceback if child else "")
    if child is not None:
        return dataclasses.replace(child, exit_code=returncode)
    if returncode is not None and returncode < 0:
        sig = -returncode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        if sig == signal.SIGKILL:
            return Outcome(state="killed", message=f"SIGKILL: {OOM_REMEDY}", exit_code=returncode)
        if sig == signal.SIGBUS:
            return Outcome(state="killed", message=f"SIGBUS: {SHM_REMEDY}", exit_code=returncode)
        return Outcome(state="killed", message=f"the script was killed by {name}", exit_code=returncode)
    last = log_tail.strip().splitlines()[-1] if log_tail.strip() else "no output"
    return Outcome(state="failed", message=f"the trial process exited with code {returncode}: {last}",
                   exit_code=returncode, traceback=log_tail)
