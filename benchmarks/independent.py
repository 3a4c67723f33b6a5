"""Independent re-measurement: run a training script with a loader config forced
at construction and time its training steps over long windows, with no
feedprof code at all (it is what feedprof's figures are checked against).

    python benchmarks/independent.py train.py --framework torch --config '{"num_workers": 8}' \\
        [--config '{"num_workers": 16}' ...] [--site train.py:54] [--reps 3] [--window-s 10] \\
        [--batch-size 32] [--fit-steps 200] [--launch 'torchrun --nproc-per-node 2'] [-- script args]

One line per repetition, then a JSON summary (medians and spreads per config).
Several --config are measured interleaved (rotating order), so drift on a
shared machine hits each alike.

How: the script runs unmodified as `python train.py args` in its own process
group, with benchmarks/independent_boot/ on PYTHONPATH; its sitecustomize
patches, in that process only, DataLoader.__init__ / PyDataset.__init__ /
tf.data map, interleave, prefetch (and a private thread pool on the dataset the
script iterates or fits on). Steps are the batches the training loader's
iterator delivers (torch, tf.data loops) or Keras's on_train_batch_end (fit);
the loader delivering the most batches is the training one. The first
max(30, 2 x batches in flight) steps are skipped, then each window runs until
window_s has passed: steps / wall time, epoch start-ups and validation
included. --fit-steps times a whole fit call from outside instead (fit is
stopped after that many steps; rate = steps / wall time of the call).
--epochs N times whole epochs instead: the script runs until N epochs have
started and ended after warm-up, each timed from its start to the next one's
(its start-up, its end and what the loop does between epochs, validation
included): epoch_rate_per_s = their steps over their wall time, what a
stopwatch around whole epochs sees (the windows' rate_per_s is measured
beside it, over the same run).

A multi-process job (--launch) runs to its end with the config forced in every
rank; its rate is the slowest rank's over all that rank's windows.

Library: measure(), measure_job(), measure_interleaved(), time_fit(), observe_command().
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

HERE = os.path.dirname(os.path.abspath(__file__))
BOOT_DIR = os.path.join(HERE, "independent_boot")
SPEC_ENV = "INDEP_HARNESS_SPEC"
FRAMEWORKS = ("torch", "keras", "tf.data")
TAIL_CHARS = 3000


def child_env(spec: Dict[str, Any], base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment that makes any Python process started with it measured by the
    harness (also usable around another tool's run, with stop=False: observe only)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (BOOT_DIR, env.get("PYTHONPATH")) if p)
    env[SPEC_ENV] = json.dumps(spec)
    return env


def _tail(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()[-TAIL_CHARS:]
    except OSError:
        return ""


def _end_group(proc: subprocess.Popen) -> None:
    """The child's whole process group (its loader workers too) ends with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _read_result(out_dir: str) -> Optional[Dict[str, Any]]:
    results = []
    for path in glob.glob(os.path.join(out_dir, "result-*.json")):
        with open(path, encoding="utf-8") as fh:
            results.append(json.load(fh))
    # the process that timed steps (spawned workers write nothing)
    return max(results, key=lambda r: sum(ld["steps"] for ld in r["loaders"]), default=None)


def run_child(script: str, spec: Dict[str, Any], args: Sequence[str] = (), timeout_s: float = 180.0,
              python: Optional[str] = None, cwd: Optional[str] = None) -> Dict[str, Any]:
    """Run the script once under the bootstrap; the raw result plus how the process ended."""
    out_dir = tempfile.mkdtemp(prefix="indep-")
    try:
        spec = {**spec, "out_dir": out_dir}
        out_path, err_path = os.path.join(out_dir, "stdout.txt"), os.path.join(out_dir, "stderr.txt")
        t0 = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen([python or sys.executable, script, *args], env=child_env(spec), cwd=cwd,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, process_group=0)
            # a group of its own (one killpg ends its workers) in this session, as a script run from a
            # user's shell is: a session of its own would be scheduled apart from the rest (autogroup)
            try:
                rc: Optional[int] = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                _end_group(proc)
        return {"result": _read_result(out_dir), "returncode": rc, "wall_s": time.monotonic() - t0,
                "load_avg_1m": os.getloadavg()[0],  # how busy the machine was (the run's own share included)
                "stdout_tail": _tail(out_path), "stderr_tail": _tail(err_path)}
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)



def _run_observed(cmd: Sequence[str], spec: Dict[str, Any], timeout_s: float,
                  cwd: Optional[str]) -> Dict[str, Any]:
    """Run a command to its end with every Python process it starts under the bootstrap:
    the result each process left (the ones that delivered steps), and how it ended."""
    out_dir = tempfile.mkdtemp(prefix="indep-observe-")
    try:
        try:
            done = subprocess.run(list(cmd), env=child_env({**spec, "out_dir": out_dir}), cwd=cwd,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
            rc: Optional[int] = done.returncode
            out, err = done.stdout, done.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = None, _text(e.stdout), _text(e.stderr)
        procs = []
        for path in sorted(glob.glob(os.path.join(out_dir, "result-*.json"))):
            with open(path, encoding="utf-8") as fh:
                procs.append(json.load(fh))
        return {"processes": [p for p in procs if any(ld["steps"] for ld in p["loaders"])],
                "returncode": rc, "stdout_tail": out[-TAIL_CHARS:], "stderr_tail": err[-TAIL_CHARS:]}
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def _text(b: Any) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")


def observe_command(cmd: Sequence[str], framework: Optional[str] = None, window_s: float = 5.0,
                    warmup_steps: Optional[int] = None, timeout_s: float = 600.0,
                    cwd: Optional[str] = None) -> Dict[str, Any]:
    """Run any command (e.g. ``feedprof profile train.py``) with every Python process it
    starts observed, nothing forced or stopped: the training steps of each process are
    timed in consecutive windows of window_s, kept as soon as each is measured (a
    process killed by its parent keeps the windows it finished). The external timing
    of "the same run" another tool measured. Returns {"processes": [result per
    process that delivered steps], "returncode", "stdout_tail", "stderr_tail"}.

    Caveat, measured: under ``feedprof profile`` (at 8288bcb) on a tf.data pipeline
    through fit, Keras calls on_train_batch_end about twice per step the model
    executes (25 vs 12.3 steps/s, the latter counted by a layer in the model), so a
    fit callback in that process is not an independent count there. Torch loops are
    counted at the DataLoader iterator, which that does not affect."""
    spec = {"framework": framework, "config": None, "window_s": window_s, "windows": 0, "stop": False,
            "warmup_steps": warmup_steps}
    return _run_observed(cmd, spec, timeout_s, cwd)


def measure_job(launch: Sequence[str], script: str, framework: str, config: Optional[Dict[str, Any]], *,
                args: Sequence[str] = (), site: Optional[str] = None, window_s: float = 5.0,
                warmup_steps: Optional[int] = None, warmup_min_steps: int = 30, timeout_s: Optional[float] = None,
                cwd: Optional[str] = None, **_ignored: Any) -> Dict[str, Any]:
    """One run of a multi-process job (``launch + [script] + args``, e.g. torchrun) with
    config forced in every rank, run to its end (a rank stopped early would break the
    others' collectives): each rank's rate over all its windows, and the job's rate,
    which is the slowest rank's (ranks step together). The script must be finite and
    long enough for a window after warm-up."""
    spec = {"framework": framework, "config": config, "site": site, "window_s": window_s, "windows": 0,
            "warmup_steps": warmup_steps, "warmup_min_steps": warmup_min_steps, "stop": False}
    t0 = time.monotonic()
    raw = _run_observed([*launch, script, *args], spec, timeout_s or 600.0, cwd)
    ranks = []
    for proc in raw["processes"]:
        wins = proc["windows"]
        steps, wall_s = sum(w["steps"] for w in wins), sum(w["wall_s"] for w in wins)
        ranks.append({"pid": proc["pid"], "rate_per_s": steps / wall_s if wall_s > 0 else None,
                      "windows": len(wins), "forced": any(ld["forced"] for ld in proc["loaders"])})
    rates = [r["rate_per_s"] for r in ranks]
    if raw["returncode"] is None:
        state = "timeout"
    elif raw["returncode"] != 0 or not ranks:
        state = "failed"
    elif config is not None and not all(r["forced"] for r in ranks):
        state = "not forced"
    else:
        state = "ok" if all(rates) else "ended early"
    rate = min(rates) if ranks and all(rates) else None
    return {"state": state, "config": config, "rate_per_s": rate, "samples_per_s": None, "batch_size": None,
            "ranks": ranks, "window_rates_per_s": rates, "windows": [], "fit_rate_per_s": None, "fit": None,
            "returncode": raw["returncode"], "wall_s": time.monotonic() - t0, "load_avg_1m": os.getloadavg()[0],
            "stdout_tail": raw["stdout_tail"], "stderr_tail": raw["stderr_tail"]}


def _state(raw: Dict[str, Any], config: Any, windows: int, fit_steps: Optional[int], epochs: int = 0) -> str:
    res = raw["result"]
    if raw["returncode"] is None:
        return "timeout"
    if res is None:
        return "failed" if raw["returncode"] else "no steps"
    if config is not None and not any(ld["forced"] for ld in res["loaders"]):
        return "not forced"  # no loader matched the framework or --site: nothing was measured
    done = bool(res["fit_calls"]) if fit_steps else (len(res.get("epochs", [])) >= epochs if epochs
                                                     else len(res["windows"]) >= windows)
    if res["state"] == "measured" and done:
        return "ok"
    return "ended early" if raw["returncode"] == 0 else "failed"


def measure(script: str, framework: str, config: Optional[Dict[str, Any]], *, args: Sequence[str] = (),
            site: Optional[str] = None, window_s: float = 10.0, windows: int = 1,
            warmup_steps: Optional[int] = None, warmup_min_steps: int = 30, batch_size: Optional[int] = None,
            fit_steps: Optional[int] = None, timeout_s: Optional[float] = None, python: Optional[str] = None,
            cwd: Optional[str] = None, epochs: int = 0) -> Dict[str, Any]:
    """One run of the script with config forced; its training rate over `windows`
    windows of >= window_s each (rate_per_s: all their steps / all their wall time).
    With fit_steps: fit is stopped after that many steps and the whole call is timed
    (fit_rate_per_s). With epochs: run until that many whole epochs are timed
    (epoch_rate_per_s). config None: nothing forced, the script's own settings timed."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, not {framework!r}")
    spec = {"framework": framework, "config": config, "site": site, "window_s": window_s, "windows": windows,
            "warmup_steps": warmup_steps, "warmup_min_steps": warmup_min_steps, "fit_steps": fit_steps,
            "stop": True, "epochs": epochs}
    if timeout_s is None:
        timeout_s = 120.0 + 3 * window_s * windows + (600.0 if epochs else 0.0)
    raw = run_child(script, spec, args, timeout_s, python, cwd)
    return summarise_run(raw, config, windows, fit_steps, batch_size, epochs)


def summarise_run(raw: Dict[str, Any], config: Any, windows: int, fit_steps: Optional[int],
                  batch_size: Optional[int], epochs: int = 0) -> Dict[str, Any]:
    res = raw["result"] or {"windows": [], "fit_calls": [], "loaders": []}
    whole = res.get("epochs", [])
    epoch_wall_s = sum(e["wall_s"] for e in whole)
    wins = res["windows"]
    steps, wall_s = sum(w["steps"] for w in wins), sum(w["wall_s"] for w in wins)
    bs = batch_size or next((w["batch_size"] for w in wins if w["batch_size"]), None)
    rate = steps / wall_s if wall_s > 0 else None
    fit = res["fit_calls"][0] if res["fit_calls"] else None
    return {"state": _state(raw, config, windows, fit_steps, epochs), "config": config, "rate_per_s": rate,
            "epoch_rate_per_s": sum(e["steps"] for e in whole) / epoch_wall_s if epoch_wall_s > 0 else None,
            "epochs": whole,
            "samples_per_s": rate * bs if rate and bs else None, "batch_size": bs,
            "window_rates_per_s": [w["rate_per_s"] for w in wins], "windows": wins,
            "fit_rate_per_s": fit["rate_per_s"] if fit else None, "fit": fit,
            "loaders": res["loaders"], "leader": res.get("leader"), "first_step_s": res.get("first_step_s"),
            "returncode": raw["returncode"], "wall_s": raw["wall_s"], "load_avg_1m": raw["load_avg_1m"],
            "stdout_tail": raw["stdout_tail"], "stderr_tail": raw["stderr_tail"]}


def time_fit(script: str, framework: str, config: Optional[Dict[str, Any]], steps: int,
             **kwargs: Any) -> Dict[str, Any]:
    """External timing of model.fit: steps / wall time of the whole call, fit stopped
    after `steps` steps (start-up, tracing and the first batches included, as a
    stopwatch around fit would see them). Windows measured meanwhile come back too."""
    return measure(script, framework, config, fit_steps=steps, **kwargs)


def _labelled(configs: Union[Dict[str, Any], Sequence[Any]]) -> Dict[str, Any]:
    if isinstance(configs, dict):
        return dict(configs)
    out: Dict[str, Any] = {}
    for cfg in configs:
        label = json.dumps(cfg, sort_keys=True)
        n = 2
        while label in out:  # the same config twice: an A/A pair
            label = f"{json.dumps(cfg, sort_keys=True)} #{n}"
            n += 1
        out[label] = cfg
    return out


def spread(values: List[float]) -> Dict[str, Any]:
    if not values:
        return {"median": None, "min": None, "max": None, "spread_pct": None, "n": 0}
    med = statistics.median(values)
    return {"median": med, "min": min(values), "max": max(values), "n": len(values),
            "spread_pct": 100.0 * (max(values) - min(values)) / med if med else None}


def measure_interleaved(script: str, configs: Union[Dict[str, Any], Sequence[Any]], reps: int = 3, *,
                        framework: str, on_result: Optional[Callable[[int, str, Dict[str, Any]], None]] = None,
                        launch: Sequence[str] = (), **kwargs: Any) -> Dict[str, Any]:
    """Each config measured `reps` times, interleaved with the order rotated every
    repetition. Returns {"summary": {label: {config, rate (median/min/max/spread),
    samples_per_s, fit_rate, states}}, "runs": [...]}. configs: {label: config} or
    a list (labelled by their JSON; a config given twice is an A/A pair). launch: a
    multi-process job's launch command before the script (measure_job)."""
    labelled = _labelled(configs)
    labels, runs = list(labelled), []
    for rep in range(reps):
        k = rep % len(labels)
        for label in labels[k:] + labels[:k]:
            r = (measure_job(launch, script, framework, labelled[label], **kwargs) if launch
                 else measure(script, framework, labelled[label], **kwargs))
            runs.append({"rep": rep, "label": label, **r})
            if on_result is not None:
                on_result(rep, label, r)
    summary = {}
    for label in labels:
        mine = [r for r in runs if r["label"] == label]
        ok = [r for r in mine if r["state"] == "ok"]
        summary[label] = {"config": labelled[label], "states": [r["state"] for r in mine],
                          "rate_per_s": spread([r["rate_per_s"] for r in ok if r["rate_per_s"]]),
                          "samples_per_s": spread([r["samples_per_s"] for r in ok if r["samples_per_s"]]),
                          "fit_rate_per_s": spread([r["fit_rate_per_s"] for r in ok if r["fit_rate_per_s"]]),
                          "epoch_rate_per_s": spread([r["epoch_rate_per_s"] for r in ok if r.get("epoch_rate_per_s")])}
    return {"summary": summary, "runs": runs}


def _fmt(v: Optional[float], unit: str = "") -> str:
    return f"{v:.1f}{unit}" if isinstance(v, (int, float)) else "-"


def describe_run(rep: int, reps: int, label: str, r: Dict[str, Any]) -> str:
    """One line per repetition, for people."""
    parts = [f"rep {rep + 1}/{reps}", label, r["state"], f"{_fmt(r['rate_per_s'])} steps/s"]
    if r["samples_per_s"]:
        parts.append(f"{r['samples_per_s']:.0f} samples/s")
    for w in r["windows"][:1]:
        parts.append(f"window {w['wall_s']:.1f} s, {w['steps']} steps after {w['warmup_steps']} warm-up; "
                     f"halves {_fmt(w['first_half_per_s'])}/{_fmt(w['second_half_per_s'])}; "
                     + (f"{w['epochs_started']} whole epochs" if w.get("whole_epochs")
                        else f"{w['epochs_started']} epoch starts"))
    if r.get("ranks"):
        parts.append("ranks " + ", ".join(_fmt(x["rate_per_s"]) for x in r["ranks"]) + " steps/s (the slowest is the job's)")
    parts.append(f"load {r['load_avg_1m']:.1f}")
    if len(r["windows"]) > 1:
        parts.append("windows " + ", ".join(f"{x:.1f}" for x in r["window_rates_per_s"]) + " steps/s")
    if r.get("epochs"):
        parts.append(f"{len(r['epochs'])} whole epoch(s): {_fmt(r['epoch_rate_per_s'])} steps/s")
    if r["fit"]:
        parts.append(f"fit call: {r['fit']['steps']} steps in {r['fit']['wall_s']:.1f} s = "
                     f"{_fmt(r['fit_rate_per_s'])} steps/s")
    if r["state"] != "ok":
        parts.append("stderr: " + " | ".join(r["stderr_tail"].strip().splitlines()[-3:]))
    return "  ".join(parts)


def parse_args(argv: List[str]) -> argparse.Namespace:
    script_args: List[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, script_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(prog="independent.py", description=__doc__.splitlines()[0])
    ap.add_argument("script")
    ap.add_argument("--framework", required=True, choices=FRAMEWORKS)
    ap.add_argument("--config", action="append", default=[], help="JSON object; repeat to interleave configs; "
                    "'null' times the script's own settings")
    ap.add_argument("--site", help="force only loaders built at FILE:LINE (tf.data: the map/interleave line)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--window-s", type=float, default=10.0)
    ap.add_argument("--windows", type=int, default=1, help="windows per run (rate over all of them)")
    ap.add_argument("--warmup-steps", type=int, help="default: max(30, 2 x batches in flight)")
    ap.add_argument("--batch-size", type=int, help="for samples/s where the harness cannot see it (fit)")
    ap.add_argument("--fit-steps", type=int, help="external timing: stop fit after N steps, time the call")
    ap.add_argument("--epochs", type=int, default=0, help="time N whole epochs after warm-up (epoch_rate_per_s)")
    ap.add_argument("--timeout-s", type=float)
    ap.add_argument("--launch", default="", help="a multi-process job: its launch command before the script, "
                    "e.g. 'torchrun --nproc-per-node 2' (every rank forced, the job run to its end)")
    ap.add_argument("--json", metavar="PATH", help="also write the full result here")
    args = ap.parse_args(argv)
    args.script_args = script_args
    if not os.path.isfile(args.script):
        ap.error(f"no such script: {args.script}")
    try:
        args.configs = [json.loads(c) for c in args.config] or [None]
    except json.JSONDecodeError as e:
        ap.error(f"--config is not JSON: {e}")
    if any(c is not None and not isinstance(c, dict) for c in args.configs):
        ap.error("--config must be a JSON object (or null)")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def show(rep: int, label: str, r: Dict[str, Any]) -> None:
        print(describe_run(rep, args.reps, label, r), flush=True)

    out = measure_interleaved(args.script, args.configs, args.reps, framework=args.framework, on_result=show,
                              args=args.script_args, site=args.site, window_s=args.window_s,
                              windows=args.windows, warmup_steps=args.warmup_steps, batch_size=args.batch_size,
                              fit_steps=args.fit_steps, timeout_s=args.timeout_s, launch=shlex.split(args.launch),
                              epochs=args.epochs)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"command": sys.argv, **out}, fh, indent=1)
    print(json.dumps(out["summary"], indent=1))
    return 0 if all(r["state"] == "ok" for r in out["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
