"""Fork server for trials: import the framework once, fork a fresh child per trial.

NOTE [ Why fork trials from a pre-imported process ]

    tuner ── requests (JSON lines on stdin) ──► zygote (python -m feedprof.trial.zygote torch)
          ◄── {"pid": N} / {"exit": N, "code": C} ──   │ imported torch once (~2.7 s here)
                                                       └─ fork ─► trial child: own group, output to
                                                          the trial's log, run the script, _exit

Every trial is still a fresh child process in its own process group, sampled
and reaped exactly like a cold one (runner.py); it only skips re-importing
the framework, which was over half of each trial's wall time. The baseline
trial always runs cold (it is what finds out which framework the script uses).
Pre-import only what is known to be fork-safe after import, and what the
baseline trial showed the script imports: torch, torch._dynamo, tensorflow
(they start no thread on import; CUDA and the TF runtime start on first
use); the server checks that no thread is running before it forks anything. Memory of the
pre-imported pages is shared with the zygote, so a forked trial's PSS reads a
little lower than a cold one's; RSS and USS are unchanged.
"""
from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from typing import Any, Dict, List, Optional, Set

from feedprof.record.clock import MONOTONIC, Clock
from feedprof.record.leftovers import FORK_SERVER_ENV
from feedprof.trial.group import lead_group_after_fork, own_group
from feedprof.trial.lifeline import die_with_parent, for_child, watch_from_env

# Modules the tuner may pre-import: they start no thread on import (checked
# again before every fork). torch._dynamo is pulled in by the first use of any
# torch optimizer and costs over a second on its own; tensorflow costs ~4 s.
# Not keras: scripts pick its backend (KERAS_BACKEND) before importing it.
# Lightning (~4 s) and transformers' Trainer (~3 s) start no thread on import either.
FORK_SAFE = ("torch", "torch._dynamo", "tensorflow", "lightning", "pytorch_lightning", "transformers.trainer")


class ZygoteError(RuntimeError):
    pass


class Zygote:
    """The tuner's handle on a running fork server."""

    def __init__(self, preload: List[str], env: Optional[Dict[str, str]] = None, timeout_s: float = 120.0,
                 clock: Clock = MONOTONIC):
        self.clock = clock  # how its forked trials wait to be reaped
        # A mark in its exec-time environment, which every fork of it shows in /proc (record/leftovers.py)
        env = {**(os.environ if env is None else env), FORK_SERVER_ENV: f"{os.getpid()}-{id(self)}"}
        lifeline_env, lifeline_fds = for_child()  # for its forks: they end if feedprof is killed
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "feedprof.trial.zygote", *preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={**env, **lifeline_env}, pass_fds=lifeline_fds, text=True, bufsize=1,
            **own_group())  # a Ctrl-C at the terminal is feedprof's to handle, not the server's
        self._exits: Dict[int, int] = {}
        try:
            line = self._readline(timeout_s)
        except BaseException:  # Ctrl-C while it imports: it is in its own session, so end it here
            self.close()
            raise
        if line is None or json.loads(line).get("ready") is not True:
            self.close()
            raise ZygoteError(f"the fork server did not start ({line!r})")

    def _readline(self, timeout_s: float) -> Optional[str]:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return line or None

    def _pump(self, timeout_s: float = 0.0) -> Optional[dict]:
        """Read one message (exit notices are filed as they come)."""
        line = self._readline(timeout_s)
        if line is None:
            if self.proc.poll() is not None:
                raise ZygoteError("the fork server exited")
            return None
        msg = json.loads(line)
        if "exit" in msg:
            self._exits[msg["exit"]] = msg["code"]
        return msg

    def fork(self, spec_path: str, log_path: str, env: Dict[str, str], cwd: str) -> "ForkedTrial":
        self.proc.stdin.write(json.dumps({"spec": spec_path, "log": log_path, "env": env, "cwd": cwd}) + "\n")
        self.proc.stdin.flush()
        while True:
            msg = self._pump(30.0)
            if msg is None:
                raise ZygoteError("the fork server did not answer")
            if "pid" in msg:
                return ForkedTrial(self, msg["pid"])

    def exit_code(self, pid: int) -> Optional[int]:
        while pid not in self._exits:
            if self._pump(0.0) is None:
                return None
        return self._exits[pid]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except (OSError, ValueError):
                pass


class ForkedTrial:
    """Enough of subprocess.Popen for the runner: pid, poll, wait, returncode."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote = zygote
        self.pid = pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                self.returncode = self.zygote.exit_code(self.pid)
            except ZygoteError:  # the server is gone: so is its reaping
                self.returncode = None if _alive(self.pid) else -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        clock = self.zygote.clock
        deadline = None if timeout is None else clock.now_s() + timeout
        while self.poll() is None:
            if deadline is not None and clock.now_s() > deadline:
                raise subprocess.TimeoutExpired("trial", timeout)
            clock.sleep_s(0.02)
        return self.returncode


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ------------------------------------------------------------- the server


def _child(req: dict) -> None:
    """In the forked child: become a trial. Never returns."""
    code = 1
    try:
        lead_group_after_fork()  # its own process group, as a cold trial has (group.py)
        watch_from_env()  # feedprof killed: this trial and its workers end too (lifeline.py)
        fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(req["cwd"])
        os.environ.update(req["env"])
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        from feedprof.trial.child import run_spec_file

        end = run_spec_file(req["spec"])
        code = end.code
        if not end.at_once:  # the script ended by itself: its exit handlers run, as in a cold trial
            import atexit

            atexit._run_exitfuncs()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # a bug in feedprof itself: say so in the trial's log
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)


def serve(preload: List[str]) -> None:
    tuner_pid = os.environ.get(FORK_SERVER_ENV, "").partition("-")[0]
    if tuner_pid.isdigit():  # killed with the tuner, even in the middle of an import
        die_with_parent(int(tuner_pid))
    for name in preload:
        if name not in FORK_SAFE:
            raise SystemExit(f"refusing to pre-import {name!r}: not known to be fork-safe")
        importlib.import_module(name)
    if threading.active_count() != 1:  # a Python thread would not survive the fork
        print(json.dumps({"ready": False, "why": "threads after import"}), flush=True)
        return
    out = sys.stdout
    print(json.dumps({"ready": True}), file=out, flush=True)
    stdin = sys.stdin
    running: Set[int] = set()
    try:
        while True:
            _report_exits(running, out)
            ready, _, _ = select.select([stdin], [], [], 0.05)
            if not ready:
                continue
            line = stdin.readline()
            if not line:
                return  # the tuner went away (or was killed)
            req = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(req)
            lead_group_after_fork(pid)  # before its pid is told: the tuner kills it by its group
            running.add(pid)
            print(json.dumps({"pid": pid}), file=out, flush=True)
    finally:  # the tuner is gone, so is whoever would reap its trials: end them (their groups)
        _end_trials(running)


def _report_exits(running: Set[int], out: Any) -> None:
    """Tell the tuner of every finished child."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        running.discard(pid)
        print(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}), file=out, flush=True)


def _end_trials(running: Set[int]) -> None:
    for pid in running:
        for kill in (os.killpg, os.kill):  # its group; itself, if it had no group of its own yet
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


if __name__ == "__main__":
    serve(sys.argv[1:])
