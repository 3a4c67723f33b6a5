"""Where the loading code spends its time: a sampling profile of the user's loading code, in every
process that loads, with no root and no ptrace.

NOTE [ Where the loading code spends its time ]

    a loading call: torch's fetcher.fetch (a DataLoader worker, or the training process at 0
    workers), a Keras PyDataset's __getitem__, a tf.data py_function (frameworks/ wrap them)
      └─ with PROFILER.loading(label): this thread is marked loading; the call's wall time and
         the thread's CPU time are added up exactly (calls, wall_s, cpu_s per dataset)
    a sampler thread per process, started by its first loading call (a forked worker starts its
    own: os.register_at_fork), asleep while nothing loads (a training step beside it is never
    woken into: a wake-up every 10 ms took a core from torch's intra-op threads, which then spin
    at their barrier), and every interval_s while the process's main thread loads:
      its CPU clock read twice PROBE_S apart, the GIL let go between (a computing thread runs on,
      a waiting one does not) ─► the share it computes
      ─► SIGNAL (SIGPROF) to the main thread, whose handler (at its next bytecode: at once in a
         sleep or a read, which Python retries; after a call in C, on the line that made it)
         reads its own stack:
        ─► the frame: the innermost frame of the user's code
           (record/userframes.py) inside the call; library frames are folded into the user's line
           that called them (Image.open at dataset.py:42 is dataset.py:42); no user frame: the
           library function the call entered
        ─► the tick's elapsed time on that line, split into CPU and waiting by that share
    Why a signal: reading another thread's frames (sys._current_frames) while it runs on crashed
    DataLoader workers under Python 3.11 (SIGSEGV, or a freed object handed back). A thread's own
    stack, read by that thread, is safe. So only a process's main thread is sampled by line (a
    DataLoader worker's, or the training process's at 0 workers); a loading thread beside it
    (Keras thread workers, tf.data's py_function) is timed call by call, not sampled. The handler
    is installed only where SIGPROF has none (another profiler's is left alone), with SA_RESTART.
    During a loading call the GIL's switch interval is SWITCH_S (restored after): a thread
    computing in Python lets the sampler in within it, so a sample lands where it was due. At
    Python's 5 ms a stretch of Python shorter than that was never seen, only the sleep or read
    after it (measured: a 2 ms decode between 3 ms reads read as 0 % of the time; at 0.5 ms the
    samples landed up to 0.5 ms late, in the next stage: 9 points too many on the read).
    every FLUSH_S: this process's counts to <trial dir>/loading-<pid>.json (a worker is killed
    with its trial, and keeps what it flushed); the trial's parent merges them (read_profiles)

Cost (benchmarks/overhead.py --cli --busy 1): at 50 Hz the sampling cost a Hugging Face Trainer
at 0 workers 10 % of its rate on a 2-core machine with a core busy (retained 0.88-0.93; off:
0.99-1.03); at 10 Hz, the default, 0.98-1.05.

Biases, measured in benchmarks/stages.py: a thread that holds the GIL in one long C call is seen
only after it (its time lands on the line that made the call, or the next); a line shorter than
the interval is seen in proportion to its time over many calls, not in each.
"""
from __future__ import annotations

import glob
import json
import os
import random
import signal
import sys
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

from feedprof.record.pools import POOLS
from feedprof.record.userframes import display_path, is_user_file
from feedprof.store.loading import LoadingLine, LoadingProfile

INTERVAL_S = float(os.environ.get("FEEDPROF_LOADPROF_INTERVAL_S", "0.1"))  # 10 Hz; 0 turns it off (see NOTE: cost)
PROBE_S = 0.0002  # how long the sampler watches a thread's CPU clock after it saw its frame
SWITCH_S = 0.0001  # the GIL's switch interval while a loading call runs (Python's default: 0.005)
FLUSH_S = 1.0
SIGNAL = getattr(signal, "SIGPROF", None)  # asks a loading main thread where it is (None: not on this OS)
MAX_PENDING = 250  # ticks kept for a main thread that has not answered yet (a long call in C)
ANSWER_POLLS, ANSWER_POLL_S = 20, 0.0001  # how long the sampler waits for the answer before it probes
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
        # a tick: asked of the main thread (tick, call), answered by it (tick -> dataset, line,
        # functions, and (perf_counter, its CPU s) as its handler ended) and probed by the sampler
        # (tick -> elapsed_s, cpu share, runq share)
        self._tick = 0
        self._asked: Deque[Tuple[int, _Call]] = deque()
        self._lines: Dict[int, Tuple[str, Tuple[str, str], Tuple[str, ...], Tuple[float, float]]] = {}
        self._shares: Dict[int, Tuple[float, float, float]] = {}

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
        if _handler is None and threading.current_thread() is threading.main_thread():
            _install_handler()
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
            if self._active:  # (until nothing loads, or a flush is due: a worker that always loads flushes too)
                self._ticks(jitter, until=last_flush + FLUSH_S)
            else:  # asleep until a loading call starts (or it is time to flush)
                self._loading.clear()
                if not self._active:
                    self._loading.wait(FLUSH_S)
            now = time.perf_counter()
            if now - last_flush >= FLUSH_S:
                if self._dirty:
                    self._sampler_cpu_s = time.thread_time() - c_start
                    self.flush()
                last_flush = now

    def _ticks(self, jitter: random.Random, until: float) -> None:
        """Sample while something loads, on a fixed schedule (each tick's time is set by the
        schedule, never by how long the last one took: waits for the GIL must not move the phase),
        each tick at a random point of its interval, so that neither calls shorter than it nor a
        periodic loop line up with it. Each sample stands for one interval."""
        interval = self.interval_s
        start = time.perf_counter()
        k = 0
        while self._active and time.perf_counter() < until:
            due = start + (k + jitter.random()) * interval
            k += 1
            time.sleep(max(0.0, due - time.perf_counter()))
            self._sample(interval)
            k = max(k, int((time.perf_counter() - start) / interval))  # fell behind: skip, never bunch

    def _sample(self, elapsed_s: float) -> None:
        """One tick: where the main thread is, then whether it computes there. Where: it is asked
        (SIGNAL) and answers itself, at its next bytecode; whether it computes: its CPU clock over
        PROBE_S, the GIL let go meanwhile, read once it has answered (its answer is not its work)
        or, in a call in C that has not let it answer yet, at once. Another thread's frames are
        never read from here: in Python 3.11, reading them (sys._current_frames) while that thread
        ran on crashed a DataLoader worker with SIGSEGV or handed back a freed object, in 3 of 3
        forty-second runs at 1 kHz."""
        self._place_answers()
        main = threading.main_thread().ident
        call = self._active.get(main)  # (another thread's calls are timed, not sampled by line)
        if call is None or not _handler_is_ours():
            return
        self._tick += 1
        tick = self._tick
        self._asked.append((tick, call))
        signal.pthread_kill(main, SIGNAL)
        for _ in range(ANSWER_POLLS):
            if tick in self._lines:
                break
            time.sleep(ANSWER_POLL_S)  # (lets the main thread run its handler)
        answered = self._lines.get(tick)  # (its CPU clock as its handler ended: the probe starts there)
        before = (_cpu_clock(call.native_id), _run_delay(call.native_id))
        t0 = time.perf_counter()
        if answered is not None:
            t0, cpu0_s = answered[3]
            before = (cpu0_s, before[1])
        time.sleep(max(0.0, t0 + PROBE_S - time.perf_counter()))
        spent = time.perf_counter() - t0
        cpu, runq = _shares(before, _cpu_clock(call.native_id), _run_delay(call.native_id), spent)
        self._shares[tick] = (elapsed_s, cpu, runq)

    def answer(self, frame: Any) -> None:
        """In the main thread, at SIGNAL: the ticks asked of the call it is in are placed on the line
        it is at (a tick asked during a call in C is answered as it returns, on the line that made
        it). Only atomic appends and stores here: the thread may have been stopped anywhere."""
        if frame is None or frame.f_code.co_filename == __file__:
            return  # in this module's own bookkeeping: the ticks wait for the next answer
        call = self._active.get(threading.get_ident())
        ticks = []
        while self._asked:
            tick, asked_of = self._asked.popleft()
            if asked_of is call:  # (a tick asked of a call that has ended since is dropped)
                ticks.append(tick)
        if call is None or not ticks:
            return
        line, functions = self._where(frame, call.entry)
        stamp = (time.perf_counter(), time.thread_time())  # last: the handler's own work is not the thread's
        for tick in ticks:
            self._lines[tick] = (call.label, line, functions, stamp)

    def _place_answers(self) -> None:
        """Each tick with its line and its shares into the counts (in the sampler thread, under the
        lock); a tick never answered within MAX_PENDING ticks is dropped."""
        for tick in sorted(self._shares):
            where = self._lines.pop(tick, None)
            if where is None:
                if tick < self._tick - MAX_PENDING:
                    del self._shares[tick]
                continue
            (elapsed_s, cpu, runq), (label, line, functions, _) = self._shares.pop(tick), where
            with self._lock:
                st = self._stats.setdefault(label, _Stats())
                st.sampled_s += elapsed_s
                for cell in [st.lines.setdefault(line, [0.0, 0.0, 0.0])] + [
                        st.functions.setdefault(fn, [0.0, 0.0, 0.0]) for fn in functions]:
                    cell[0] += elapsed_s
                    cell[1] += elapsed_s * cpu
                    cell[2] += elapsed_s * runq
                self._dirty = True
        for tick in [t for t in self._lines if t < self._tick - MAX_PENDING]:
            self._lines.pop(tick, None)

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
        self._place_answers()
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


def _cpu_clock(native_id: int) -> Optional[float]:
    """A thread's CPU time (None: it ended, or not Linux). The clock is named by the thread's kernel
    id, as Linux encodes a thread's CPU clock (~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED): an
    ended thread's reads EINVAL, where pthread_getcpuclockid of an ended thread's handle reads freed
    memory."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return time.clock_gettime((~native_id << 3) | 6)
    except (OSError, OverflowError):
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
_handler: Optional[bool] = None  # None: not tried in this process (a forked child inherits it with the handler)


def _on_signal(signum: int, frame: Any) -> None:
    try:
        PROFILER.answer(frame)
    except Exception:  # the user's loop is never broken by the profiler
        pass


def _install_handler() -> None:
    """SIGNAL's handler, installed once from the main thread, and only where nothing else handles
    SIGNAL (another profiler's). SA_RESTART: a system call it interrupts in C code resumes."""
    global _handler
    _handler = False
    if SIGNAL is None or signal.getsignal(SIGNAL) not in (signal.SIG_DFL, None):
        return
    try:
        signal.signal(SIGNAL, _on_signal)
        signal.siginterrupt(SIGNAL, False)
        _handler = True
    except (ValueError, OSError, RuntimeError):
        return


def _handler_is_ours() -> bool:
    """Still ours (the script may have set its own since): never signal a handler that is not."""
    return bool(_handler) and signal.getsignal(SIGNAL) is _on_signal


class loading:
    """``with loading(label):`` around a loading call (a context manager as a class: no
    generator frame on the stack it walks)."""

    __slots__ = ("label", "call")

    def __init__(self, label: str):
        self.label = label

    def __enter__(self) -> "loading":
        POOLS.loading_started()
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
