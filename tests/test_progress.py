"""The live tune display as people see it: in a real terminal (a pty sized to
80 columns) and piped to a file (no carriage returns, no escape codes, one
line per trial)."""
import fcntl
import io
import json
import os
import re
import struct
import termios

import pytest

from feedprof.store.reasons import BaselineFigures, OverMemoryBudget, Verdict
from feedprof.render.progress import CONFIG_COLUMN, ConsoleProgress, format_recommendation
from feedprof.store import GpuStatus, HostInfo, LoaderRecord, Recommendation, TuneResult, TuneStart
from tests.conftest import run_feedprof, write_script
from tests.scripts import torch_loop
from tests.records import make_trial

ROW = re.compile(r"\s+\d+\s+(baseline|ceiling|search|confirm)\s")  # a trial's row
LONG = "num_workers=12, pin_memory=True, prefetch_factor=4, persistent_workers=True"
TRIALS = [
    make_trial(index=0, role="baseline", config={}, state="ok", config_text="num_workers=0", batches_per_s=11.7,
          batches_per_s_low=11.5, batches_per_s_high=11.8, data_wait_fraction=0.81, duration_s=6.3),
    make_trial(index=1, role="ceiling", config={}, state="ok", batches_per_s=219.0, data_wait_fraction=0.001,
          duration_s=1.9),
    make_trial(index=2, role="search", config={}, state="ok", config_text=LONG, batches_per_s=63.0,
          batches_per_s_low=60.0, batches_per_s_high=66.0, data_wait_fraction=0.2, duration_s=3.4),
    make_trial(index=3, role="search", config={}, state="rejected", config_text="num_workers=64",
          cause=OverMemoryBudget(need_bytes=30 * 2**30, per_worker_bytes=2**29, free_bytes=20 * 2**30)),
]
START = TuneStart(  # what the display is told of the tune
    host=HostInfo(gpu_status=GpuStatus.NO_LIBRARY), budget_s=60.0,
    script=os.path.abspath("train.py"), results_path="feedprof-out/results.json", cpu_cap=2)


def drive(progress):
    progress.tune_started(START)
    for i, trial in enumerate(TRIALS):
        progress.trial_started(i, 5 if i else None, trial.role, trial.config_text, 10.0 * i, 60.0)
        progress.tick(10.0 * i + 1, 60.0, force=True)
        progress.trial_done(trial)
        if i == 0:
            progress.loader_found(LoaderRecord(loader_id=0, framework="torch", site="train.py:54", batch_size=32,
                                               batches_per_epoch=128), "num_workers=0")
    progress.tune_done()


@pytest.fixture
def terminal():
    """A real pseudo-terminal, 80 columns wide: (what the program writes to, what the screen receives)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 80, 0, 0))
    stream = os.fdopen(slave, "w", encoding="utf-8")

    def screen():
        stream.flush()
        chunks = []
        while True:
            try:
                fcntl.fcntl(master, fcntl.F_SETFL, os.O_NONBLOCK)
                chunk = os.read(master, 65536)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")  # the tty's own newline translation

    yield stream, screen
    stream.close()
    os.close(master)


def test_in_an_80_column_terminal_every_line_fits(terminal, monkeypatch):
    monkeypatch.setenv("TERM", "xterm-256color")
    stream, screen = terminal
    drive(ConsoleProgress(stream))
    out = screen()
    drawn = [part for line in out.split("\n") for part in line.split("\r\x1b[K")]
    assert all(len(part) <= 79 for part in drawn), [p for p in drawn if len(p) > 79]
    live = [part for part in drawn if "▸" in part]
    assert live and "trial 2 of ~5, 0 s · budget 21/60 s, 39 s left · num_workers=12" in "\n".join(live)
    rows = out.split("\n")
    i = next(n for n, line in enumerate(rows) if re.match(r"\s+2\s+search\s+63\.0 ±5%", line.split("\x1b[K")[-1]))
    continued = rows[i + 1]  # the long config goes on under its column, nothing cut
    assert continued[:CONFIG_COLUMN].strip() == "" and continued[CONFIG_COLUMN] != " "
    assert "persistent_workers=True" in "".join(rows[i:i + 5])
    assert out.endswith("\n") and not out.endswith("\x1b[K")  # done(): no live line left half drawn


def test_piped_to_a_stream_one_line_per_trial_and_no_escape_codes():
    stream = io.StringIO()
    drive(ConsoleProgress(stream))
    out = stream.getvalue()
    assert "\r" not in out and "\x1b" not in out
    rows = [line for line in out.splitlines() if ROW.match(line)]
    assert len(rows) == len(TRIALS)
    assert LONG in rows[2] and "rejected: predicted to need 30.0 GiB of memory" in rows[3]
    assert "NVML library not found" in out and "training loader: train.py:54" in out


def test_a_dumb_terminal_gets_no_redraws(terminal, monkeypatch):
    monkeypatch.setenv("TERM", "dumb")
    stream, screen = terminal
    drive(ConsoleProgress(stream))
    out = screen()
    assert "\r" not in out and "\x1b" not in out and "▸" not in out


def test_the_recommendation_wraps_its_words_never_the_line_to_paste():
    code = "train = DataLoader(RemoteImages(args.samples, args.fetch_ms), batch_size=args.batch_size, num_workers=8)"
    verdict = Verdict(kind="faster", input_bound="highly", config={"num_workers": 8}, speedup=5.4,
                      fraction_of_ceiling=0.29)
    rec = Recommendation(framework="torch", config={"num_workers": 8}, verdict=verdict, reasons=(BaselineFigures(
        config={"num_workers": 0}, batches_per_s=11.7, data_wait_fraction=0.81, ceiling_batches_per_s=219.0),),
        paste_line=code, loader_site="t.py:5")
    text = format_recommendation(rec, TuneResult(recommendation=rec, complete=True), width=80)
    lines = text.splitlines()
    assert f"    {code}" in lines
    assert all(len(line) <= 79 for line in lines if code not in line)
    assert any(line.startswith("    ") and line.strip() and code not in line for line in lines)  # hanging indent


def test_the_scripts_own_settings_as_the_pick_show_no_line_to_paste():
    """"Leave them as they are" and a changed line to paste would contradict each
    other: the pick that is the script's own settings shows no paste (in the text
    and the report), even from a record that holds one."""
    from feedprof.render.html import tune_verdict
    from feedprof.store.reasons import KeepScriptSettings

    rec = Recommendation(framework="torch", config={"num_workers": 2}, verdict=Verdict(kind="no_better"),
                         reasons=(KeepScriptSettings(),), loader_site="train.py:40",
                         paste_line="loader = create_loader(ds, **kw, num_workers=2)  # train.py:40")
    text = format_recommendation(rec, TuneResult(recommendation=rec, complete=True))
    assert "already the best found" in text and "Paste this" not in text and "create_loader" not in text
    assert "create_loader" not in tune_verdict(TuneResult(recommendation=rec, complete=True))
    # a pick that differs, with nothing that could be pasted: said, not an empty "Paste this:"
    other = Recommendation(framework="torch", config={"num_workers": 8}, verdict=Verdict(kind="faster"))
    text = format_recommendation(other, TuneResult(recommendation=other, complete=True))
    assert "Paste this" not in text and "No line to paste" in text


def test_a_tune_piped_to_a_file_has_one_line_per_trial(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=5, step_ms=2, n=400, batch_size=4, epochs=50))
    out = tmp_path / "out"
    # room for two trials on a loaded machine; a short search (two workers at most) ends it early on a quiet one
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "40", "--max-workers", "2",
                         "--window-seconds", "0.6",
                         "--min-window-batches", "20", "--warmup-batches", "2", "--interval", "0.1", script],
                        env={"TERM": "xterm-256color"})  # a terminal's TERM, yet stderr is a pipe
    assert proc.returncode == 0, proc.stderr
    for text in (proc.stderr, proc.stdout):
        assert "\r" not in text and "\x1b" not in text
    trials = json.loads((out / "results.json").read_text())["trials"]
    rows = [line for line in proc.stderr.splitlines() if ROW.match(line)]
    assert len(trials) >= 2 and len(rows) == len(trials)
    for row, trial in zip(rows, trials):
        assert row.split()[:2] == [str(trial["index"]), trial["role"]]
