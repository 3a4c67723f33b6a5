"""Running a seeded script (scripts_online.py) as written and under ``feedprof tune --online``,
for the online tests: what each run saw, and feedprof's results.json.

A run as written is deterministic (seeded): the same script and arguments give the same report,
so a session runs each once (``AsWritten`` keeps it), and it runs beside the run under feedprof
(both mostly wait on their scripts' sleeps), not before it."""
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import run_feedprof

SAW = ("epochs", "batches", "weights", "next_rand", "next_np", "next_py")  # what a run as written must match
_DONE = {}  # (script text, args, env) -> (CompletedProcess, report text or None): this session's runs as written


class AsWritten:
    """``python script --report REPORT ARGS``, started now; ``result()`` waits for it. Run once a
    session per script text, arguments and environment."""

    def __init__(self, script, report, *args, env=None, timeout=300):
        self.report, self.timeout = Path(report), timeout
        self.key = (Path(script).read_text(), tuple(args), tuple(sorted((env or {}).items())))
        self.proc = None
        if self.key not in _DONE:
            self.cmd = [sys.executable, script, "--report", str(report), *args]
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         env={**os.environ, **(env or {})})

    def result(self):
        """(the CompletedProcess, the report it wrote, None if none)."""
        if self.proc is not None:
            try:
                out, err = self.proc.communicate(timeout=self.timeout)
            finally:
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()
            done = subprocess.CompletedProcess(self.cmd, self.proc.returncode, out, err)
            _DONE[self.key] = (done, self.report.read_text() if self.report.exists() else None)
            self.proc = None
        done, text = _DONE[self.key]
        if text is not None and not self.report.exists():
            self.report.write_text(text)
        return done, (json.loads(text) if text is not None else None)


def as_written(script, report, *args):
    return AsWritten(script, report, *args).result()


def online(tmp_path, script, report, *args, extra=()):
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--online", "--out", str(out), *extra, script, "--report", str(report), *args],
                        timeout=240)
    seen = json.loads(report.read_text()) if report.exists() else None
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    return proc, seen, results


def both(tmp_path, script, *args, extra=()):
    """The run as written beside the run under feedprof: ((as written, its report), (online, its
    report, results.json))."""
    plain = AsWritten(script, tmp_path / "plain.json", *args)
    got = online(tmp_path, script, tmp_path / "online.json", *args, extra=extra)
    return plain.result(), got


def saw(run):
    """What a run's loop saw, as comparable fields."""
    return {k: run.get(k) for k in SAW}
