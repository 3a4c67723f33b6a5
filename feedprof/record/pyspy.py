"""The stacks of a job feedprof did not start, read from outside without stopping it (py-spy).

NOTE [ Reading a job from outside ]

    feedprof attach PID  (trial/attach.py)
      ─► two `py-spy record` processes side by side, for the window: --nonblocking (the job is never
         paused; a stack read while it changes is dropped or off by a frame), --subprocesses (its
         loader workers too), --threads (each thread apart), --full-filenames (the user's files told
         from libraries by path), the raw format (each stack with its count)
            every sample (--idle)       ─► where each thread's time goes
            the active samples only     ─► the part of it the thread computed (py-spy's own idle
                                           test: a thread in a wait, a sleep or a read is idle)
      ─► Stacks: per process and thread, each stack (frames outermost first) with its samples
         and its active samples

py-spy reads another process's memory with ptrace rights: root, the CAP_SYS_PTRACE capability, or
the same user where kernel.yama.ptrace_scope is 0 (``why_not_readable`` says which is missing).
Python 3.14's sys.remote_exec would let an agent run inside the job instead; these machines run
3.11, so py-spy is what runs (``Sampler.name``).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

from feedprof import defaults

_PROCESS = re.compile(r'process (\d+):"(.*?)"(?=;(?:process \d+:|thread \())', re.S)  # (a command may hold newlines)
_THREAD = re.compile(r"thread \((\d+)\)(?:: ?(.*))?")  # (a thread py-spy has no name for: no colon)
_FRAME = re.compile(r"^(.*) \((.*):(\d+)\)$")

Frame = Tuple[str, str, int]  # (function, file, line)


@dataclass
class ThreadStacks:
    """One thread's stacks over the window: frames outermost first -> [samples, active samples]."""

    pid: int
    tid: int
    name: str
    parents: Tuple[int, ...]  # the processes above its own, outermost first (the job's tree)
    command: str
    stacks: Dict[Tuple[Frame, ...], List[int]] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return sum(c[0] for c in self.stacks.values())

    @property
    def active(self) -> int:
        return sum(c[1] for c in self.stacks.values())


def find_pyspy() -> Optional[str]:
    """The py-spy binary: beside this Python (a wheel's script), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.access(here, os.X_OK) else shutil.which("py-spy")


def parse_line(line: str) -> Optional[Tuple[Tuple[int, ...], str, int, str, Tuple[Frame, ...], int]]:
    """One raw line: (its processes' pids outermost first, its own command, tid, thread name, frames
    outermost first, count); None for a line that is not a stack."""
    line = line.rstrip("\n")
    head, _, count = line.rpartition(" ")
    if not head or not count.isdigit():
        return None
    procs = list(_PROCESS.finditer(head))
    rest = head[procs[-1].end() + 1:] if procs else head
    parts = rest.split(";")
    thread = _THREAD.match(parts[0]) if parts else None
    if not procs or thread is None:
        return None
    frames = []
    for part in parts[1:]:
        m = _FRAME.match(part)
        if m is not None:
            frames.append((m.group(1), m.group(2), int(m.group(3))))
    pids = tuple(int(p.group(1)) for p in procs)
    return pids, procs[-1].group(2), int(thread.group(1)), thread.group(2) or "", tuple(frames), int(count)


def _stack_lines(text: str) -> Iterator[str]:
    """A raw file's stacks, one each: a process whose command line holds newlines (``python -c``) has
    its stacks written across lines, joined back here."""
    held = ""
    for line in text.splitlines():
        held = f"{held}\n{line}" if held else line
        if parse_line(held) is not None or not held.startswith("process ") or held.count("\n") > 100:
            yield held
            held = ""
    if held:
        yield held


def read_raw(text: str, into: Dict[Tuple[int, int], ThreadStacks], active: bool) -> None:
    """A raw file's stacks added to ``into`` (as samples, or as active samples)."""
    for line in _stack_lines(text):
        parsed = parse_line(line)
        if parsed is None:
            continue
        pids, command, tid, name, frames, count = parsed
        key = (pids[-1], tid)
        t = into.get(key)
        if t is None:
            t = into[key] = ThreadStacks(pid=pids[-1], tid=tid, name=name, parents=pids[:-1], command=command)
        cell = t.stacks.setdefault(frames, [0, 0])
        cell[1 if active else 0] += count


class Sampler:
    """The two py-spy processes of one target, started and stopped together."""

    name = "py-spy"

    def __init__(self, pid: int, duration_s: float, rate_hz: int = defaults.ATTACH_RATE_HZ,
                 binary: Optional[str] = None):
        self.pid, self.duration_s, self.rate_hz = pid, duration_s, rate_hz
        self.binary = binary or find_pyspy() or "py-spy"
        self.folder = tempfile.mkdtemp(prefix="feedprof-attach-")
        self.procs: List[subprocess.Popen] = []

    def _command(self, out: str, idle: bool) -> List[str]:
        return [self.binary, "record", "--pid", str(self.pid), "--format", "raw", "--threads", "--subprocesses",
                "--nonblocking", "--full-filenames", "--rate", str(self.rate_hz),
                "--duration", str(max(1, round(self.duration_s))), "--output", out] + (["--idle"] if idle else [])

    def start(self) -> "Sampler":
        for idle in (True, False):
            out = os.path.join(self.folder, "all.txt" if idle else "active.txt")
            log = open(os.path.join(self.folder, f"{'all' if idle else 'active'}.log"), "wb")
            self.procs.append(subprocess.Popen(self._command(out, idle), stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True))
        return self

    def wait(self, timeout_s: Optional[float] = None) -> None:
        for p in self.procs:
            p.wait(timeout=timeout_s)

    def stop(self) -> None:
        """Ended early (Ctrl-C, SIGTERM): py-spy writes what it sampled when it gets SIGINT."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def result(self) -> Tuple[Dict[Tuple[int, int], ThreadStacks], str]:
        """Every thread's stacks, and what py-spy said where it wrote none ("" when all went well)."""
        threads: Dict[Tuple[int, int], ThreadStacks] = {}
        said = ""
        for name, active in (("all", False), ("active", True)):
            try:
                with open(os.path.join(self.folder, f"{name}.txt"), encoding="utf-8", errors="replace") as fh:
                    read_raw(fh.read(), threads, active)
            except OSError:
                with open(os.path.join(self.folder, f"{name}.log"), encoding="utf-8", errors="replace") as fh:
                    said = said or fh.read().strip()[-500:]
        shutil.rmtree(self.folder, ignore_errors=True)
        return threads, said


def why_not_readable(pid: int) -> str:
    """"" where this process may read ``pid``'s memory, else a code: no_pid, not_python, ptrace_scope,
    other_user."""
    if not os.path.exists(f"/proc/{pid}"):
        return "no_pid"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
        maps = open(f"/proc/{pid}/maps").read()
    except PermissionError:
        return "other_user"
    except OSError:
        return "no_pid"
    if "python" not in maps.lower() and not any("python" in os.path.basename(a).lower() for a in argv[:1]):
        return "not_python"
    if os.geteuid() == 0:
        return ""
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return "no_pid"
    if owner != os.geteuid():
        return "other_user"
    try:
        scope = int(open("/proc/sys/kernel/yama/ptrace_scope").read().strip())
    except (OSError, ValueError):
        scope = 0
    return "ptrace_scope" if scope >= 1 else ""
