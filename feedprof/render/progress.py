"""Live progress of a tune on stderr, and the closing recommendation.

``ConsoleProgress`` is the tuner's observer (tune/tuner.py: TuneObserver).

NOTE [ Two kinds of stream ]

    a terminal (isatty, TERM not "dumb"): sized to its columns at every draw
        finished trials ── printed rows; a config too long for the row goes on
                           continuation lines under the config column
        running trial ──── one live line, cut to the width, redrawn in place
                           (\\r + erase line) at most 4 times a second
    anything else (a file, a pipe, CI, Jupyter's stderr):
        one line per finished trial, nothing cut, no \\r and no escape codes

Hand-written rather than ``rich``: the rows must stream into logs one per
trial as trials end, which rich's tables and Live do not do (Live renders
into a file only when it stops), and the terminal side is one live line.
"""
from __future__ import annotations

import os
import sys
import textwrap
import time
from typing import IO, Any, List, Optional

from feedprof.analyse.limits import repeats_records
from feedprof.analyse.measured import score
from feedprof.analyse.recommend import keeps_own_settings
from feedprof.render.leftovers import format_tune_leftovers
from feedprof.render.ranks import format_ranks
from feedprof.render.words import CEILING_TEXT, OWN_SETTINGS_TEXT, config_cell, gpu_status, headline, say
from feedprof.store import GpuStatus, LoaderRecord, Recommendation, Role, Trial, TrialState, TuneResult, TuneStart
from feedprof.store.reasons import BudgetCutShort, NothingTried
from feedprof.units import fmt_num, fmt_path, fmt_pct, fmt_seconds

REDRAW_S = 0.25
ERASE_LINE = "\r\033[K"
# "  12  baseline    24.0 ±17%   84 %    1.00×   9.4 s  " then the config
_ROW = "{index:>4}  {role:<8}  {bps:>6} {spread:<5} {wait:>5}  {vs:>7}  {time:>6}  "
HEADER = f"{'#':>4}  {'role':<8}  {'batches/s':<12} {'wait':>5}  {'vs base':>7}  {'time':>6}  config"
CONFIG_COLUMN = len(HEADER) - len("config")


def _figures(t: Trial, baseline_score: Optional[float]) -> dict:
    s = score(t)
    spread = ""
    if t.batches_per_s and t.batches_per_s_low is not None and t.batches_per_s_high is not None:
        spread = f"±{50 * (t.batches_per_s_high - t.batches_per_s_low) / t.batches_per_s:.0f}%"
    vs = f"{s / baseline_score:.2f}×" if s and baseline_score else ""
    if repeats_records(t):  # not a speedup: each record arrives once per worker
        vs = "dupes"
    return dict(bps=fmt_num(s), spread=spread, wait=fmt_pct(t.data_wait_fraction), vs=vs)


def trial_row(t: Trial, baseline_score: Optional[float]) -> str:
    """One finished trial on one line: figures first, then the config (or why it did not run)."""
    config = config_cell(t)
    if t.state != TrialState.OK:
        figures = dict(bps="", spread="", wait="", vs="")
        config = f"{config} — {t.state}" + (f": {say(t.cause)}" if t.cause else "")
    else:
        figures = _figures(t, baseline_score)
    took = fmt_seconds(t.duration_s) if t.state != TrialState.REJECTED else ""  # rejected: never ran
    return _ROW.format(index=t.index, role=str(t.role), time=took, **figures) + config


def fit(line: str, width: Optional[int], indent: int = CONFIG_COLUMN) -> List[str]:
    """``line`` as terminal lines of at most ``width - 1`` columns (the last
    column makes some terminals wrap early), its tail wrapped at word breaks
    under column ``indent``; unchanged when ``width`` is None."""
    if width is None or len(line) < width:
        return [line]
    head, tail = line[:indent], line[indent:]
    if indent >= width - 10:  # too narrow for a column: plain wrapping
        head, tail, indent = "", line, 0
    lines = textwrap.wrap(tail, width=width - 1 - indent, break_on_hyphens=False) or [""]
    return [head + lines[0]] + [" " * indent + rest for rest in lines[1:]]


def cut(line: str, width: int) -> str:
    return line if len(line) < width else line[:max(0, width - 2)] + "…"


def terminal_width(stream: Any) -> Optional[int]:
    """Columns of the terminal ``stream`` writes to; None when it is not one
    that can redraw a line (a file, a pipe, TERM=dumb)."""
    try:
        if not stream.isatty() or os.environ.get("TERM") == "dumb":
            return None
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None


class ConsoleProgress:
    def __init__(self, stream: IO[str] = sys.stderr):
        self.stream = stream
        self.tty = terminal_width(stream) is not None
        self.baseline_score: Optional[float] = None
        self._live = False
        self._last_draw = 0.0
        self._started = time.monotonic()
        self._what = ""
        self._config = ""

    def _width(self) -> Optional[int]:
        return terminal_width(self.stream) if self.tty else None

    def _print(self, text: str, indent: int = 0) -> None:
        self._clear()
        width = self._width()
        for line in text.splitlines() or [""]:
            lead = len(line) - len(line.lstrip(" "))
            for part in fit(line, width, indent or min(lead + 2, 24)):
                print(part, file=self.stream)
        self.stream.flush()

    def _clear(self) -> None:
        if self.tty and self._live:
            self.stream.write(ERASE_LINE)
            self._live = False

    # -- the tuner's observer -----------------------------------------------

    def tune_started(self, start: TuneStart) -> None:
        host = start.host
        gpu = "GPU ok" if host.gpu_status == GpuStatus.OK else f"GPU {gpu_status(host.gpu_status, host.gpu_status_detail)}"
        what = " ".join(start.launch) if start.launch else fmt_path(start.script)
        self._print(f"feedprof tune: {what} — budget {start.budget_s:.0f} s, {start.cpu_cap} usable CPU(s), {gpu}")
        self._print(f"  results: {fmt_path(start.results_path)} (rewritten after every trial)")
        self._print(HEADER)

    def loader_found(self, loader: LoaderRecord, config_text: str) -> None:
        bpe = f", {loader.batches_per_epoch} batches/epoch" if loader.batches_per_epoch else ""
        self._print(f"  training loader: {loader.site or loader.name} ({loader.framework}, batch size "
                    f"{loader.batch_size or '?'}{bpe}); the script's own settings: {config_text}")

    def trial_started(self, index: int, n_planned: Optional[int], role: Role, config_text: str,
                      elapsed_s: float, budget_s: float) -> None:
        self._started = time.monotonic()
        self._what = f"trial {index}{f' of ~{n_planned}' if n_planned else ''}"
        self._config = CEILING_TEXT if role == Role.CEILING else (config_text or OWN_SETTINGS_TEXT)
        self.tick(elapsed_s, budget_s, force=True)

    def tick(self, elapsed_s: float, budget_s: float, force: bool = False) -> None:
        width = self._width()
        if width is None:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < REDRAW_S:
            return
        self._last_draw = now
        left = max(0.0, budget_s - elapsed_s)
        line = (f"  ▸ {self._what}, {now - self._started:.0f} s · budget {elapsed_s:.0f}/{budget_s:.0f} s, "
                f"{left:.0f} s left · {self._config}")
        self.stream.write(ERASE_LINE + cut(line, width))
        self.stream.flush()
        self._live = True

    def trial_done(self, trial: Trial) -> None:
        if trial.role == Role.BASELINE:
            self.baseline_score = score(trial)
        self._print(trial_row(trial, self.baseline_score), indent=CONFIG_COLUMN)

    def tune_done(self) -> None:
        self._clear()
        self.stream.flush()


def _ranks_of_pick(rec: Recommendation, result: TuneResult) -> List[str]:
    picked = next((t for t in result.trials if t.index == rec.trial_index), None)
    if picked is None or picked.run is None or not picked.run.ranks:
        return []
    return format_ranks(picked.run).replace("ranks (", "ranks with the recommended settings (", 1).splitlines()


def format_recommendation(rec: Optional[Recommendation], result: TuneResult, width: Optional[int] = None) -> str:
    """The closing text; ``width`` (a terminal's columns) wraps its prose at
    word breaks, never the paste-ready line (a terminal's own soft wrap keeps
    it one line when copied)."""
    left = format_tune_leftovers(result).splitlines()
    wrap = lambda lines: [part for line in lines for part in fit(line, width, 4)]  # noqa: E731
    if rec is None:
        why = say(result.stop_reason, result.framework) if result.stop_reason else "no trial succeeded"
        return "\n".join(wrap(["feedprof: no recommendation: " + why] + left))
    fw = rec.framework
    lines = [f"Recommendation for {rec.loader_site or 'the training loader'} ({fw}):", f"  {headline(rec.verdict, fw)}"]
    lines += [f"  - {say(reason, fw)}" for reason in rec.reasons]
    shown = paste_shown(rec)
    if shown:
        lines += ["  Paste this:"]
    elif not keeps_own_settings(rec):
        lines += [f"  {NO_PASTE_TEXT}"]
    tail = _ranks_of_pick(rec, result)
    if result.notes:
        tail.append("  How the search went:")
        tail += [f"  - {say(note, fw)}" for note in result.notes]
    if not result.complete and result.stop_reason and not _stop_said(rec, result):
        tail.append(f"  Note: {say(result.stop_reason, fw)}")
    tail += left
    paste = [f"    {line}" for line in shown.splitlines()]
    return "\n".join(wrap(lines) + paste + wrap(tail))


NO_PASTE_TEXT = "No line to paste: set the recommended settings where the findings above say."


def paste_shown(rec: Recommendation) -> str:
    """The paste line as shown: none where the pick is the script's own settings."""
    return "" if keeps_own_settings(rec) else rec.paste_line.strip("\n")


def _stop_said(rec: Recommendation, result: TuneResult) -> bool:
    """The recommendation's reasons already say why the tune stopped: a tune that
    tried nothing says its budget ran out (NothingTried), once."""
    return isinstance(result.stop_reason, BudgetCutShort) and any(
        isinstance(r, NothingTried) and r.budget_ran_out for r in rec.reasons)
