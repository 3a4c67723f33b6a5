"""Running a seeded script (scripts_online.py) as written and under ``feedprof tune --online``,
for the online tests: what each run saw, and feedprof's results.json."""
import json
import subprocess
import sys

from conftest import run_feedprof

SAW = ("epochs", "batches", "weights", "next_rand", "next_np", "next_py")  # what a run as written must match


def as_written(script, report, *args):
    proc = subprocess.run([sys.executable, script, "--report", str(report), *args], capture_output=True, text=True,
                          timeout=180)
    return proc, (json.loads(report.read_text()) if report.exists() else None)


def online(tmp_path, script, report, *args, extra=()):
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--online", "--out", str(out), *extra, script, "--report", str(report), *args],
                        timeout=240)
    seen = json.loads(report.read_text()) if report.exists() else None
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    return proc, seen, results


def saw(run):
    """What a run's loop saw, as comparable fields."""
    return {k: run.get(k) for k in SAW}
