"""Live progress of a tune on stderr, and the recommendation in words.

``ConsoleProgress`` is the tuner's observer (tune/tuner.py: TuneObserver):
on a terminal the running trial's line is redrawn in place (elapsed, budget
left); in a log file each trial is one finished line.
"""
from __future__ import annotations

import os
import sys
import time
from typing import IO, Any, Optional

from feedprof.analyse.recommend import score
from feedprof.render.words import config_words, gpu_status, headline, say
from feedprof.store import LoaderRecord, Recommendation, Role, Trial, TrialState, TuneResult
from feedprof.units import fmt_num, fmt_pct, fmt_seconds

CEILING_TEXT = "one cached batch replayed"
OWN_SETTINGS_TEXT = "the script's own settings"
REDRAW_S = 0.25  # the live line is redrawn at most this often
LIVE_WIDTH = 200


def config_cell(t: Trial) -> str:
    """A trial's config as the tables show it."""
    if t.role == Role.CEILING:
        return CEILING_TEXT
    return t.config_text or (config_words(t.config) if t.config else OWN_SETTINGS_TEXT)


def trial_row(t: Trial, baseline_score: Optional[float]) -> str:
    s = score(t)
    if t.state != TrialState.OK:
        figures = f"{t.state}: {say(t.cause)}" if t.cause else str(t.state)
    else:
        spread = ""
        if t.batches_per_s and t.batches_per_s_low is not None and t.batches_per_s_high is not None:
            spread = f" ±{50 * (t.batches_per_s_high - t.batches_per_s_low) / t.batches_per_s:.0f}%"
        vs = f"{s / baseline_score:5.2f}×" if s and baseline_score else "     "
        figures = f"{fmt_num(s):>8}{spread:<5} {fmt_pct(t.data_wait_fraction):>6}  {vs}"
    return f"  {t.index:>2}  {t.role:<8}  {config_cell(t):<52.52}  {figures}  {fmt_seconds(t.duration_s):>6}"


HEADER = f"   #  {'role':<8}  {'config':<52}  {'batches/s':>8}      {'wait':>6}  {'vs base':>7}  {'time':>6}"


class ConsoleProgress:
    def __init__(self, stream: IO[str] = sys.stderr):
        self.stream = stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.baseline_score: Optional[float] = None
        self._live = ""
        self._last_draw = 0.0
        self._started = time.monotonic()
        self._what = ""

    def _print(self, text: str) -> None:
        self._clear()
        print(text, file=self.stream, flush=True)

    def _clear(self) -> None:
        if self.tty and self._live:
            self.stream.write("\r\033[K")
            self._live = ""

    # -- the tuner's observer -----------------------------------------------

    def tune_started(self, tuner: Any) -> None:
        host = tuner.host
        gpu = "GPU ok" if host.gpu_status == "ok" else f"GPU {gpu_status(host.gpu_status, host.gpu_status_detail)}"
        self._print(f"feedprof tune: {os.path.relpath(tuner.script)} — budget {tuner.opts.budget_s:.0f} s, "
                    f"{tuner.cpu_cap} usable CPU(s), {gpu}")
        self._print(f"  results: {os.path.relpath(tuner.results_path)} (rewritten after every trial)")
        self._print(HEADER)

    def loader_found(self, loader: LoaderRecord, config_text: str) -> None:
        bpe = f", {loader.batches_per_epoch} batches/epoch" if loader.batches_per_epoch else ""
        self._print(f"  training loader: {loader.site or loader.name} ({loader.framework}, batch size "
                    f"{loader.batch_size or '?'}{bpe}); the script's own settings: {config_text}")

    def trial_started(self, index: int, n_planned: Optional[int], role: Role, config_text: str,
                      elapsed_s: float, budget_s: float) -> None:
        self._started = time.monotonic()
        text = CEILING_TEXT if role == Role.CEILING else (config_text or OWN_SETTINGS_TEXT)
        self._what = f"trial {index}{f' of ~{n_planned}' if n_planned else ''}: {text}"
        self.tick(elapsed_s, budget_s, force=True)

    def tick(self, elapsed_s: float, budget_s: float, force: bool = False) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < REDRAW_S:
            return
        self._last_draw = now
        left = max(0.0, budget_s - elapsed_s)
        line = f"  … {self._what}  ({now - self._started:.0f} s; {elapsed_s:.0f} s elapsed, {left:.0f} s of budget left)"
        self.stream.write("\r\033[K" + line[:LIVE_WIDTH])
        self.stream.flush()
        self._live = line

    def trial_done(self, trial: Trial) -> None:
        if trial.role == Role.BASELINE:
            self.baseline_score = score(trial)
        self._print(trial_row(trial, self.baseline_score))

    def tune_done(self) -> None:
        self._clear()


def format_recommendation(rec: Optional[Recommendation], result: TuneResult) -> str:
    if rec is None:
        why = say(result.stop_reason) if result.stop_reason else "no trial succeeded"
        return "feedprof: no recommendation: " + why
    fw = rec.framework
    lines = [f"Recommendation for {rec.loader_site or 'the training loader'} ({fw}):", f"  {headline(rec.verdict, fw)}"]
    lines += [f"  - {say(reason, fw)}" for reason in rec.reasons]
    lines.append("  Paste this:")
    lines.extend(f"    {line}" for line in rec.code.splitlines() or [""])
    if result.notes:
        lines.append("  How the search went:")
        lines.extend(f"  - {say(note, fw)}" for note in result.notes)
    if not result.complete and result.stop_reason:
        lines.append(f"  Note: {say(result.stop_reason, fw)}")
    return "\n".join(lines)
