"""Live progress of a tune on stderr, and the final table.

On a terminal the running trial's line is redrawn in place (elapsed, budget
left); in a log file each trial is one finished line.
"""
from __future__ import annotations

import sys
import time
from typing import IO, Any, Optional, Sequence

from feedprof.analyse.recommend import score
from feedprof.render.leftovers import format_tune_leftovers
from feedprof.store import Recommendation, Trial, TuneResult
from feedprof.units import fmt_num, fmt_pct, fmt_seconds

ROLE_LABEL = {"baseline": "baseline", "ceiling": "ceiling", "search": "search", "confirm": "confirm"}


def trial_row(t: Trial, describe: Any, baseline_score: Optional[float]) -> str:
    cfg = "one cached batch replayed" if t.role == "ceiling" else describe(t.config)
    s = score(t)
    if t.state != "ok":
        figures = f"{t.state}: {t.reason}"
    else:
        spread = ""
        if t.batches_per_s and t.batches_per_s_low is not None and t.batches_per_s_high is not None:
            spread = f" ±{50 * (t.batches_per_s_high - t.batches_per_s_low) / t.batches_per_s:.0f}%"
        vs = f"{s / baseline_score:5.2f}×" if s and baseline_score else "     "
        figures = f"{fmt_num(s):>8}{spread:<5} {fmt_pct(t.data_wait_fraction):>6}  {vs}"
    return f"  {t.index:>2}  {ROLE_LABEL.get(t.role, t.role):<8}  {cfg:<52.52}  {figures}  {fmt_seconds(t.duration_s):>6}"


HEADER = f"   #  {'role':<8}  {'config':<52}  {'batches/s':>8}      {'wait':>6}  {'vs base':>7}  {'time':>6}"


class ConsoleProgress:
    def __init__(self, stream: IO[str] = sys.stderr, describe: Any = str):
        self.stream = stream
        self.describe = describe
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.baseline_score: Optional[float] = None
        self._live = ""
        self._last_draw = 0.0

    def _print(self, text: str) -> None:
        self._clear()
        print(text, file=self.stream, flush=True)

    def _clear(self) -> None:
        if self.tty and self._live:
            self.stream.write("\r\033[K")
            self._live = ""

    def header(self, lines: Sequence[str]) -> None:
        for line in lines:
            self._print(line)

    def table_header(self) -> None:
        self._print(HEADER)

    def trial_started(self, index: int, n_planned: Optional[int], role: str, config_text: str,
                      elapsed_s: float, budget_s: float) -> None:
        self._started = time.monotonic()
        self._what = f"trial {index}{f' of ~{n_planned}' if n_planned else ''}: {config_text}"
        self.tick(elapsed_s, budget_s, force=True)

    def tick(self, elapsed_s: float, budget_s: float, force: bool = False) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < 0.25:
            return
        self._last_draw = now
        left = max(0.0, budget_s - elapsed_s)
        line = f"  … {self._what}  ({now - self._started:.0f} s; {elapsed_s:.0f} s elapsed, {left:.0f} s of budget left)"
        self.stream.write("\r\033[K" + line[:200])
        self.stream.flush()
        self._live = line

    def trial_done(self, trial: Trial) -> None:
        if trial.role == "baseline":
            self.baseline_score = score(trial)
        self._print(trial_row(trial, self.describe, self.baseline_score))

    def message(self, text: str) -> None:
        self._print(text)

    def done(self) -> None:
        self._clear()


class NullProgress(ConsoleProgress):
    def __init__(self) -> None:
        super().__init__(stream=None, describe=str)  # type: ignore[arg-type]
        self.tty = False

    def _print(self, text: str) -> None:
        pass

    def tick(self, elapsed_s: float, budget_s: float, force: bool = False) -> None:
        pass


def format_recommendation(rec: Optional[Recommendation], result: TuneResult) -> str:
    if rec is None:
        left = format_tune_leftovers(result)
        return "feedprof: no recommendation: " + (result.stop_reason or "no trial succeeded") + \
            (f"\n{left}" if left else "")
    lines = [f"Recommendation for {rec.loader_site or 'the training loader'} ({rec.framework}):",
             f"  {rec.verdict}"]
    for reason in rec.reasons:
        lines.append(f"  - {reason}")
    lines.append("  Paste this:")
    lines.append(f"    {rec.code}")
    if result.notes:
        lines.append("  How the search went:")
        lines.extend(f"  - {note}" for note in result.notes)
    if not result.complete and result.stop_reason:
        lines.append(f"  Note: {result.stop_reason}")
    left = format_tune_leftovers(result)
    if left:
        lines.append(left)
    return "\n".join(lines)
