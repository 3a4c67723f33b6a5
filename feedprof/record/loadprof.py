"""Where the loading code spends its time: a sampling profile of the user's loading code, in every
process and thread that loads, with no root, no ptrace and no signal.

NOTE [ Where the loading code spends its time ]

    a loading call: torch's fetcher.fetch (a DataLoader worker, or the training process at 0
    workers), a Keras PyDataset's __getitem__, a tf.data py_function (frameworks/ wrap them)
      └─ with PROFILER.loading(label): this thread is marked loading; the call's wall time and
         the thread's CPU time are added up exactly (calls, wall_s, cpu_s per dataset)
    a sampler thread per process, started by its first loading call (a forked worker starts its
    own: os.register_at_fork), asleep while nothing loads (a training step beside it is never
    woken into: a wake-up every 10 ms took a core from torch's intra-op threads, which then spin
    at their barrier), and every interval_s while something does:
      for each thread marked loading: its current frame (sys._current_frames), then its CPU clock
      read twice PROBE_S apart, the GIL let go between (a computing thread runs on, a waiting one
      does not) ─► the share it computes there
        ─► the frame: the innermost frame of the user's code
           (record/userframes.py) inside the call; library frames are folded into the user's line
           that called them (Image.open at dataset.py:42 is dataset.py:42); no user frame: the
           library function the call entered
        ─► the tick's elapsed time on that line, split into CPU and waiting by that share
    During a loading call the GIL's switch interval is SWITCH_S (restored after): a thread
    computing in Python lets the sampler in within it, so a sample lands where it was due. At
    Python's 5 ms a stretch of Python shorter than that was never seen, only the sleep or read
    after it (measured: a 2 ms decode between 3 ms reads read as 0 % of the time; at 0.5 ms the
    samples landed up to 0.5 ms late, in the next stage: 9 points too many on the read).
    every FLUSH_S: this process's counts to <trial dir>/loading-<pid>.json (a worker is killed
    with its trial, and keeps what it flushed); the trial's parent merges them (read_profiles)

Biases, measured in benchmarks/stages.py: a thread that holds the GIL in one long C call is seen
only after it (its time lands on the line that made the call, or the next); a line shorter than
the interval is seen in proportion to its time over many calls, not in each.
"""
from __future__ import annotations

import glob
import json
import os
import random
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from feedprof.record.userframes import display_path, is_user_file
from feedprof.store.loading import LoadingLine, LoadingProfile

INTERVAL_S = float(os.environ.get("FEEDPROF_LOADPROF_INTERVAL_S", "0.02"))  # 50 Hz; 0 turns it off
PROBE_S = 0.0002  # how long the sampler watches a thread's CPU clock after it saw its frame
SWITCH_S = 0.0001  # the GIL's switch interval while a loading call runs (Python's default: 0.005)
FLUSH_S = 1.0
FILE_GLOB = "loading-*.json"
MAX_LINES = 200  # lines kept per dataset (the costliest)


class _Call:
    """A loading call in progress on one thread."""

    __slots__ = ("label", "entry", "t0", "c0", "native_id")

    def __init__(self, label: str, entry: Any, t0: float, c0: float):
        self.label, self.entry, self.t0, self.c0 = label, entry, t0, c0
        self.native_id = threading.get_native_id()


class _Stats:
    """One dataset's loading in this process: exact call totals, sampled lines."""

    def __init__(self) -> None:
        self.calls = 0
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.sampled_s = 0.0
        # (site, function) -> [wall_s, cpu_s, runq_s] of the innermost user line; "file:function" -> the
        # same, cumulative (runq_s: runnable, waiting for a CPU)
        self.lines: Dict[Tuple[str, str], List[float]] = {}
        self.functions: Dict[str, List[float]] = {}

    def as_json(self) -> Dict[str, Any]:
        lines = sorted(self.lines.items(), key=lambda kv: -kv[1][0])[:MAX_LINES]
        functions = sorted(self.functions.items(), key=lambda kv: -kv[1][0])[:MAX_LINES]
        return {"calls": self.calls, "wall_s": self.wall_s, "cpu_s": self.cpu_s, "sampled_s": self.sampled_s,
                "lines": [[site, fn, *cell] for (site, fn), cell in lines],
                "functions": [[fn, *cell] for fn, cell in functions]}


class LoadingProfiler:
    """One per process (PROFILER); ``configure`` turns it on in a trial."""

    def __init__(self) -> None:
        self.directory = ""  # where the counts go ("": off)
        self.script_dir = ""
        self.interval_s = INTERVAL_S
        self.main_pid = 0  # the training process (its loading is the loop's own)
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        """A fresh start in this process (a forked worker: nothing of its parent's counts)."""
        self._lock = threading.Lock()
        self._active: Dict[int, _Call] = {}
        self._stats: Dict[str, _Stats] = {}
        self._thread: Optional[threading.Thread] = None
        self._loading = threading.Event()  # set while a loading call runs: the sampler is awake
        self._dirty = False  # counts not yet flushed
        self._user: Dict[str, str] = {}  # file -> how it is shown ("": not the user's)
        self._sampler_cpu_s = 0.0
        self._switch_s = sys.getswitchinterval()  # the process's own, while no loading call runs

    def configure(self, directory: str, script_dir: str, main_pid: int) -> None:
        self.directory, self.script_dir, self.main_pid = directory, script_dir, main_pid

    @property
    def on(self) -> bool:
        return bool(self.directory) and self.interval_s > 0

    # -- the loading threads' side (a few microseconds a call) ------------------------------

    def enter(self, label: str, entry: Any) -> Optional[_Call]:
        if not self.on:
            return None
        if self._thread is None:
            self._start()
        call = _Call(label, entry, time.perf_counter(), time.thread_time())
        with self._lock:  # (the first of several loading threads saves the switch interval, the last restores it)
            if not self._active:
                self._switch_s = sys.getswitchinterval()
                sys.setswitchinterval(SWITCH_S)
            self._active[threading.get_ident()] = call
        if not self._loading.is_set():
            self._loading.set()
        return call

    def leave(self, call: Optional[_Call]) -> None:
        if call is None:
            return
        wall, cpu = time.perf_counter() - call.t0, time.thread_time() - call.c0
        with self._lock:
            self._active.pop(threading.get_ident(), None)
            if not self._active:
                sys.setswitchinterval(self._switch_s)
            st = self._stats.setdefault(call.label, _Stats())
            st.calls += 1
            st.wall_s += wall
            st.cpu_s += cpu
            self._dirty = True

    # -- the sampler ---------------------------------------------------------------------

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="feedprof-loadprof", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        c_start = time.thread_time()
        last_flush = time.perf_counter()
        jitter = random.Random()  # its own: never a draw from the script's random streams
        while True:
            if self._active:
                self._ticks(jitter)
            else:  # asleep until a loading call starts (or it is time to flush)
                self._loading.clear()
                if not self._active:
                    self._loading.wait(FLUSH_S)
            now = time.perf_counter()
            if now - last_flush >= FLUSH_S and self._dirty:
                self._sampler_cpu_s = time.thread_time() - c_start
                self.flush()
                last_flush = now

    def _ticks(self, jitter: random.Random) -> None:
        """Sample while something loads, on a fixed schedule (each tick's time is set by the
        schedule, never by how long the last one took: waits for the GIL must not move the phase),
        each tick at a random point of its interval, so that neither calls shorter than it nor a
        periodic loop line up with it. Each sample stands for one interval."""
        interval = self.interval_s
        start = time.perf_counter()
        k = 0
        while self._active:
            due = start + (k + jitter.random()) * interval
            k += 1
            time.sleep(max(0.0, due - time.perf_counter()))
            self._sample(interval)
            k = max(k, int((time.perf_counter() - start) / interval))  # fell behind: skip, never bunch

    def _sample(self, elapsed_s: float) -> None:
        """One tick: where each loading thread is, and whether it computes there (its CPU clock over
        the PROBE_S after its frame is taken, the GIL let go meanwhile)."""
        frames = sys._current_frames()  # first: a sample lands where it was due
        active = list(self._active.items())
        before = {tid: (_cpu_clock(tid), _run_delay(call.native_id)) for tid, call in active}
        t0 = time.perf_counter()
        time.sleep(PROBE_S)
        spent = time.perf_counter() - t0
        for tid, call in active:
            frame = frames.get(tid)
            if frame is None or frame.f_code.co_filename == __file__:
                continue  # (a thread in this module's own bookkeeping, entering or leaving its call)
            cpu, runq = _shares(before[tid], _cpu_clock(tid), _run_delay(call.native_id), spent)
            line, functions = self._where(frame, call.entry)
            with self._lock:
                st = self._stats.setdefault(call.label, _Stats())
                st.sampled_s += elapsed_s
                for cell in [st.lines.setdefault(line, [0.0, 0.0, 0.0])] + [
                        st.functions.setdefault(fn, [0.0, 0.0, 0.0]) for fn in functions]:
                    cell[0] += elapsed_s
                    cell[1] += elapsed_s * cpu
                    cell[2] += elapsed_s * runq

    def _where(self, frame: Any, entry: Any) -> Tuple[Tuple[str, str], Tuple[str, ...]]:
        """((site, function) of the innermost user frame inside the call, every user function on
        the stack inside it, innermost first); no user frame: the library function the call entered."""
        line: Optional[Tuple[str, str]] = None
        functions: List[str] = []
        outermost = below = None  # the outermost frame inside the call, and the one it called
        f = frame
        while f is not None and f is not entry:
            code = f.f_code
            where = self._user.get(code.co_filename)
            if where is None:  # "" for a library file, else how the user's file is shown
                where = self._user[code.co_filename] = display_path(code.co_filename, self.script_dir) \
                    if is_user_file(code.co_filename, self.script_dir) else ""
            if where:
                if line is None:
                    line = (f"{where}:{f.f_lineno}", _name(code))
                fn = f"{where}:{_name(code)}"
                if fn not in functions:
                    functions.append(fn)
            below, outermost = outermost, f
            f = f.f_back
        if line is not None:
            return line, tuple(functions)
        # no code of the user's: the library function the loader's own call made (the collate), else it
        lib = below or outermost
        if lib is None:
            return ("", "(the loader itself)"), ()
        module = lib.f_globals.get("__name__", "")
        name = f"{module}.{_name(lib.f_code)}" if module else _name(lib.f_code)
        return ("", name), (name,)

    # -- output ----------------------------------------------------------------------------

    def snapshot(self) -> Dict[str, Any]:
        with self._lock:
            datasets = {label: st.as_json() for label, st in self._stats.items()}
        return {"pid": os.getpid(), "main": os.getpid() == self.main_pid, "interval_s": self.interval_s,
                "sampler_cpu_s": self._sampler_cpu_s, "datasets": datasets}

    def flush(self) -> None:
        if not self.directory or not self._stats:
            return
        self._dirty = False
        path = os.path.join(self.directory, f"loading-{os.getpid()}.json")
        tmp = f"{path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self.snapshot(), fh)
            os.replace(tmp, path)
        except OSError:  # a full disk or a removed directory: the profile is lost, never the run
            pass


def _cpu_clock(tid: int) -> Optional[float]:
    """A thread's CPU time (None: it ended, or no per-thread clocks here)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(tid))
    except (OSError, AttributeError):
        return None


def _run_delay(native_id: int) -> Optional[float]:
    """Seconds a thread of this process has waited runnable for a CPU (None: not Linux, or it ended)."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _shares(before: Tuple[Optional[float], Optional[float]], cpu: Optional[float], run_delay: Optional[float],
            spent_s: float) -> Tuple[float, float]:
    """(the share of ``spent_s`` a thread computed, the share it waited for a CPU)."""
    c0, q0 = before
    if c0 is None or cpu is None or spent_s <= 0:
        return 0.0, 0.0
    runq = (run_delay - q0) / spent_s if q0 is not None and run_delay is not None else 0.0
    computed = min(1.0, max(0.0, (cpu - c0) / spent_s))
    return computed, min(1.0 - computed, max(0.0, runq))  # (the kernel's run delay lags: never past the rest)


def _name(code: Any) -> str:
    return getattr(code, "co_qualname", code.co_name)


PROFILER = LoadingProfiler()


class loading:
    """``with loading(label):`` around a loading call (a context manager as a class: no
    generator frame on the stack it walks)."""

    __slots__ = ("label", "call")

    def __init__(self, label: str):
        self.label = label

    def __enter__(self) -> "loading":
        self.call = PROFILER.enter(self.label, sys._getframe(1))
        return self

    def __exit__(self, *exc: Any) -> None:
        PROFILER.leave(self.call)


def read_profiles(directory: str) -> List[Dict[str, Any]]:
    """Every process's flushed counts in a trial directory."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, FILE_GLOB))):
        try:
            with open(path, encoding="utf-8") as fh:
                out.append(json.load(fh))
        except (OSError, ValueError):  # written as it was killed: the .tmp never replaced it
            continue
    return out


def merge_profiles(raw: List[Dict[str, Any]]) -> Tuple[LoadingProfile, ...]:
    """The processes' counts as one profile per dataset, costliest lines first."""
    merged: Dict[str, Dict[str, Any]] = {}
    for proc in raw:
        for label, d in proc.get("datasets", {}).items():
            m = merged.setdefault(label, {"calls": 0, "wall_s": 0.0, "cpu_s": 0.0, "sampled_s": 0.0, "pids": set(),
                                          "main": False, "sampler_cpu_s": 0.0, "lines": {}, "functions": {},
                                          "interval_s": proc.get("interval_s", INTERVAL_S)})
            for k in ("calls", "wall_s", "cpu_s", "sampled_s"):
                m[k] += d.get(k, 0)
            m["pids"].add(proc.get("pid"))
            m["main"] = m["main"] or bool(proc.get("main"))
            m["sampler_cpu_s"] += proc.get("sampler_cpu_s", 0.0)
            for site, fn, *cell in d.get("lines", ()):
                _add(m["lines"], (site, fn), cell)
            for fn, *cell in d.get("functions", ()):
                _add(m["functions"], ("", fn), cell)
    return tuple(LoadingProfile(
        dataset=label, calls=m["calls"], wall_s=m["wall_s"], cpu_s=m["cpu_s"], sampled_s=m["sampled_s"],
        interval_s=m["interval_s"], processes=len(m["pids"]), in_main=m["main"], sampler_cpu_s=m["sampler_cpu_s"],
        lines=_costliest(m["lines"]), functions=_costliest(m["functions"]))
        for label, m in merged.items())


def _add(table: Dict[Tuple[str, str], List[float]], key: Tuple[str, str], cell: List[float]) -> None:
    total = table.setdefault(key, [0.0, 0.0, 0.0])
    for i, value in enumerate(cell[:3]):
        total[i] += value


def _costliest(table: Dict[Tuple[str, str], List[float]]) -> Tuple[LoadingLine, ...]:
    top = sorted(table.items(), key=lambda kv: -kv[1][0])[:MAX_LINES]
    return tuple(LoadingLine(site=site, function=fn, wall_s=w, cpu_s=c, runq_s=q) for (site, fn), (w, c, q) in top)
