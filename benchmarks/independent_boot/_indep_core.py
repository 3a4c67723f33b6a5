"""Inside the measured process: the spec, which loaders to force, and the clock.

NOTE [ Independent harness, child side ]

    PYTHONPATH=benchmarks/independent_boot  INDEP_HARNESS_SPEC='{...}'  python train.py args
      sitecustomize ─► install(): post-import hooks on torch.utils.data, keras, tensorflow
      script builds a loader ─► patched constructor: force the config (site filter), register()
      script starts an epoch ─► patched __iter__ / on_epoch_begin ─► epoch_start(rec)
      script pulls a batch   ─► patched __next__ / on_train_batch_end ─► delivered(rec, n)
           the loader with the most deliveries is the training one; skip its first
           max(30, 2 x batches in flight) steps, then time windows of >= window_s:
           from one epoch start to another when epochs are shorter than a window
           (each window holds whole epochs, start-ups included), else by the clock
      windows measured ─► write result-<pid>.json, os._exit (the parent kills the group)

Shares no code with feedprof on purpose: it is what feedprof is checked against.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import sysconfig
import time
from typing import Any, Dict, List, Optional

SPEC_ENV = "INDEP_HARNESS_SPEC"
HERE = os.path.dirname(os.path.abspath(__file__))
T0 = time.perf_counter()


class Loader:
    """One loader the script built (or one fit call's input), as the clock sees it."""

    def __init__(self, key: int, kind: str, site: str, forced: bool, config: Dict[str, Any],
                 in_flight: int, batch_size: Optional[int]):
        self.key, self.kind, self.site, self.forced = key, kind, site, forced
        self.config, self.in_flight, self.batch_size = config, in_flight, batch_size
        self.steps = 0
        self.epoch_starts: List[float] = []
        self.epoch_start_steps: List[int] = []  # steps delivered when each epoch started
        self.first_t: Optional[float] = None  # first delivery
        self.batches_per_epoch: Optional[int] = None

    def as_json(self) -> Dict[str, Any]:
        return {"key": self.key, "kind": self.kind, "site": self.site, "forced": self.forced,
                "config": self.config, "in_flight": self.in_flight, "batch_size": self.batch_size,
                "steps": self.steps, "epochs_started": len(self.epoch_starts),
                "batches_per_epoch": self.batches_per_epoch}


class State:
    def __init__(self, spec: Dict[str, Any]):
        self.spec = spec
        self.framework: Optional[str] = spec.get("framework")
        self.config: Optional[Dict[str, Any]] = spec.get("config")
        self.site: Optional[str] = spec.get("site")
        self.loaders: List[Loader] = []
        self.leader: Optional[Loader] = None
        self.window_start: Optional[tuple] = None  # (t, steps)
        self.align: Optional[bool] = None  # None: the leader is still warming up
        self.warm_t = 0.0
        self.window_marks: List[tuple] = []  # (t, steps) of each delivery inside the window
        self.windows: List[Dict[str, Any]] = []
        self.epochs: List[Dict[str, Any]] = []  # whole epochs of the leader after warm-up: steps, wall
        self.fit_calls: List[Dict[str, Any]] = []
        self.first_step_s: Optional[float] = None
        self.pid: Optional[int] = None  # the process that timed steps (not a forked worker)


STATE: Optional[State] = None


# ---- which code is the user's, and where a loader was built ----

def _library_dirs() -> tuple:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")} | {HERE}
    return tuple(os.path.realpath(d) + os.sep for d in dirs if d)


LIBRARY_DIRS = _library_dirs()


def is_user_file(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    return not os.path.realpath(filename).startswith(LIBRARY_DIRS)


def _call_lines(frame: Any) -> tuple:
    """First and last line of the call a frame is executing (a call may span lines)."""
    try:
        pos = list(frame.f_code.co_positions())[frame.f_lasti // 2]
        if pos[0] is not None and pos[1] is not None:
            return pos[0], pos[1]
    except (IndexError, AttributeError):
        pass
    return frame.f_lineno, frame.f_lineno


def user_site(depth: int = 2) -> str:
    """The user frames above the caller, innermost first ("train.py:54 < train.py:80"):
    where a loader is built (a subclass's super().__init__ line comes first)."""
    f, sites = sys._getframe(depth), []
    while f is not None and len(sites) < 4:
        if is_user_file(f.f_code.co_filename):
            sites.append(f"{os.path.basename(f.f_code.co_filename)}:{_call_lines(f)[0]}")
        f = f.f_back
    return " < ".join(sites) or "?"


def called_from_user(depth: int = 2) -> bool:
    return is_user_file(sys._getframe(depth).f_code.co_filename)


def _site_matches(site: str, depth: int) -> bool:
    path, _, line = site.rpartition(":")
    want = int(line)
    f = sys._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename
        same = (os.path.basename(name) == path if os.sep not in path
                else os.path.realpath(name) == os.path.realpath(path))
        if same:
            first, last = _call_lines(f)
            if first <= want <= last:
                return True
        f = f.f_back
    return False


def force_config(framework: str, depth: int = 2) -> Optional[Dict[str, Any]]:
    """The config to force on a loader being built now, or None to leave it alone."""
    st = STATE
    if st is None or st.config is None or st.framework != framework:
        return None
    if st.site and not _site_matches(st.site, depth + 1):
        return None
    return st.config


# ---- the clock ----

def register(kind: str, site: str, forced: bool, config: Dict[str, Any], in_flight: int,
             batch_size: Optional[int], batches_per_epoch: Optional[int] = None) -> Loader:
    st = STATE
    rec = Loader(len(st.loaders), kind, site, forced, config, in_flight, batch_size)
    rec.batches_per_epoch = batches_per_epoch
    st.loaders.append(rec)
    return rec


def window_s() -> float:
    return float(STATE.spec.get("window_s", 10.0))


def warmup_steps(rec: Loader) -> int:
    spec = STATE.spec
    if spec.get("warmup_steps") is not None:
        return int(spec["warmup_steps"])
    return max(int(spec.get("warmup_min_steps", 30)), 2 * rec.in_flight)


def epoch_len_s(rec: Loader, now: float) -> Optional[float]:
    """Expected seconds per epoch: the last one's, else batches per epoch at the rate so far."""
    if len(rec.epoch_starts) >= 2:
        return rec.epoch_starts[-1] - rec.epoch_starts[-2]
    if rec.batches_per_epoch and rec.first_t is not None and now > rec.first_t and rec.steps > 1:
        return rec.batches_per_epoch * (now - rec.first_t) / (rec.steps - 1)
    return None


def _warmed_up(st: State, rec: Loader, now: float) -> None:
    """Warm-up done. Epochs shorter than a window: windows span whole epochs (from one
    epoch start to another), so each holds its share of epoch start-ups exactly."""
    est = epoch_len_s(rec, now)
    st.warm_t = now
    st.align = bool(st.spec.get("align_epochs", True)) and est is not None and est <= window_s()
    if not st.align:
        st.window_start, st.window_marks = (now, rec.steps), []


def epoch_start(rec: Loader) -> None:
    now = time.perf_counter()
    rec.epoch_starts.append(now)
    rec.epoch_start_steps.append(rec.steps)
    st = STATE
    if rec is st.leader and st.align is not None:
        _whole_epoch(st, rec, now)
    if rec is not st.leader or not st.align:
        return
    if st.window_start is None:
        st.window_start, st.window_marks = (now, rec.steps), []
    elif now - st.window_start[0] >= window_s():
        _close_window(st, rec, now)


def delivered(rec: Loader, n: int = 1, batch: Any = None) -> None:
    """n training steps were delivered by rec just now."""
    st = STATE
    now = time.perf_counter()
    st.pid = os.getpid()
    if st.first_step_s is None:
        st.first_step_s = now - T0
    if rec.first_t is None:
        rec.first_t = now
    rec.steps += n
    if rec.batch_size is None and batch is not None:
        rec.batch_size = leading_dim(batch)
    if st.leader is not rec:
        if st.leader is not None and rec.steps <= st.leader.steps:
            return
        st.leader, st.window_start, st.window_marks, st.align = rec, None, [], None  # warm up again
    if st.align is None:
        if rec.steps >= warmup_steps(rec):
            _warmed_up(st, rec, now)
        return
    if st.window_start is None:  # waiting for an epoch start to begin the window
        if now - st.warm_t >= window_s():  # epochs turned out long: time-based windows after all
            st.align = False
            st.window_start, st.window_marks = (now, rec.steps), []
        return
    st.window_marks.append((now, rec.steps))
    elapsed = now - st.window_start[0]
    if st.align and elapsed >= 3 * window_s():  # an epoch far longer than predicted: close by the clock
        st.align = False
    if elapsed >= window_s() and not st.align:
        _close_window(st, rec, now)


def _whole_epoch(st: State, rec: Loader, now: float) -> None:
    """The epoch that just ended, start to start (its start-up, its end and whatever the loop did
    between epochs included: what a stopwatch around whole epochs sees), if it began after warm-up."""
    if len(rec.epoch_starts) < 2 or rec.epoch_starts[-2] < st.warm_t:
        return
    st.epochs.append({"steps": rec.steps - rec.epoch_start_steps[-2], "wall_s": now - rec.epoch_starts[-2]})
    wanted = int(st.spec.get("epochs") or 0)
    if wanted and len(st.epochs) >= wanted and st.spec.get("stop", True):
        finish()
    write_result("running")


def _close_window(st: State, rec: Loader, now: float) -> None:
    t0, s0 = st.window_start
    wall_s, steps = now - t0, rec.steps - s0
    mid = t0 + wall_s / 2
    s_mid, t_mid = s0, t0
    for t, s in st.window_marks:
        if t > mid:
            break
        t_mid, s_mid = t, s
    st.windows.append({
        "loader": rec.key, "steps": steps, "wall_s": wall_s, "rate_per_s": steps / wall_s,
        "first_half_per_s": (s_mid - s0) / (t_mid - t0) if t_mid > t0 else None,
        "second_half_per_s": (rec.steps - s_mid) / (now - t_mid) if now > t_mid else None,
        "epochs_started": sum(1 for t in rec.epoch_starts if t0 < t <= now), "whole_epochs": bool(st.align),
        "batch_size": rec.batch_size, "warmup_steps": warmup_steps(rec), "started_s": t0 - T0})
    st.window_start, st.window_marks = (now, rec.steps), []  # the next window starts here
    n_windows = int(st.spec.get("windows", 1))
    if st.spec.get("stop", True) and not st.spec.get("fit_steps") and not st.spec.get("epochs") and n_windows \
            and len(st.windows) >= n_windows:
        finish()
    write_result("running")  # observing: every window is kept as soon as it is measured


def fit_done(rec: Loader, wall_s: float, steps: int) -> None:
    """A whole fit call timed from outside (external timing): steps / wall of the call."""
    st = STATE
    st.fit_calls.append({"loader": rec.key, "wall_s": wall_s, "steps": steps,
                         "rate_per_s": steps / wall_s if wall_s > 0 else None})
    if st.spec.get("fit_steps"):
        finish()
    write_result("running")


def leading_dim(batch: Any) -> Optional[int]:
    """Batch size from the first array-like leaf of a batch (tensor, tuple, dict)."""
    for _ in range(8):
        shape = getattr(batch, "shape", None)
        if shape is not None:
            try:
                return int(shape[0]) if len(shape) else None
            except (TypeError, ValueError):
                return None
        if isinstance(batch, dict):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        else:
            return None
    return None


# ---- result ----

def write_result(state: str) -> None:
    st = STATE
    out_dir = st.spec.get("out_dir")
    if not out_dir:
        return
    data = {"state": state, "pid": os.getpid(), "framework": st.framework, "config": st.config,
            "site": st.site, "leader": st.leader.key if st.leader else None,
            "loaders": [r.as_json() for r in st.loaders], "windows": st.windows, "epochs": st.epochs,
            "fit_calls": st.fit_calls, "first_step_s": st.first_step_s, "elapsed_s": time.perf_counter() - T0}
    path = os.path.join(out_dir, f"result-{os.getpid()}.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def finish() -> None:
    """Measured: end the script now (the parent ends the process group)."""
    write_result("measured")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _at_exit() -> None:
    st = STATE
    if st is not None and st.pid == os.getpid():  # the script ended before the harness stopped it
        write_result("ended")


def install() -> None:
    global STATE
    raw = os.environ.get(SPEC_ENV)
    if not raw or STATE is not None:
        return
    STATE = State(json.loads(raw))
    atexit.register(_at_exit)
    from _indep_hooks import after_import  # noqa: E402  (the bootstrap's own dir is on sys.path)

    import _indep_keras
    import _indep_tfdata
    import _indep_torch

    after_import("torch.utils.data", _indep_torch.install)
    after_import("tensorflow", _indep_tfdata.install)
    after_import("keras", _indep_keras.install)
