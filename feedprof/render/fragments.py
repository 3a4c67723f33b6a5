"""Compact HTML for a Jupyter cell's output: a Summary, a Run (or a live
profile) and a tune's result, with the curves inline.

The pieces are the report's own (``render/html.py``, ``render/plots.py``);
what differs is the frame: a ``<div>`` with styles scoped to it instead of a
page, colours that follow the notebook's theme, no script (notebooks do not
run a cell output's scripts), and of a tune only the baseline's and the
recommended trial's curves.
"""
from __future__ import annotations

from typing import Any, List

from feedprof.render import plots
from feedprof.render.html import (curves_section, esc, evidence_table, leftovers_section, no_gpu, summary_verdict,
                                  trial_label, trials_table, tune_verdict)
from feedprof.store import Run, StoreError, Summary, TuneResult
from feedprof.units import fmt_seconds

CSS = """
.feedprof-nb { font: 13px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; max-width: 1100px;
  --line: rgba(128, 128, 128, 0.35); --card: rgba(128, 128, 128, 0.08);
  --good: #2f9d5a; --warn: #c77700; --bad: #d0453b; --accent: #3a7bd5; }
.feedprof-nb h4 { font-size: 14px; margin: 14px 0 6px; }
.feedprof-nb .verdict { background: var(--card); border-left: 5px solid var(--accent); padding: 10px 14px;
  border-radius: 5px; margin: 6px 0; }
.feedprof-nb .verdict.highly { border-left-color: var(--bad); }
.feedprof-nb .verdict.moderately { border-left-color: var(--warn); }
.feedprof-nb .verdict.not { border-left-color: var(--good); }
.feedprof-nb .headline { font-size: 16px; font-weight: 650; margin: 0 0 8px; }
.feedprof-nb .cards { display: flex; flex-wrap: wrap; gap: 8px; margin: 0 0 8px; }
.feedprof-nb .card { border: 1px solid var(--line); border-radius: 5px; padding: 4px 10px; min-width: 120px; }
.feedprof-nb .card .k { opacity: 0.7; font-size: 11px; } .feedprof-nb .card .v { font-size: 16px; font-weight: 650; }
.feedprof-nb ul.reasons { margin: 4px 0 8px 18px; padding: 0; }
.feedprof-nb .note { opacity: 0.75; font-size: 12px; }
.feedprof-nb pre { background: var(--card); padding: 6px 10px; border-radius: 5px; white-space: pre-wrap;
  word-break: break-all; margin: 0; font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; }
.feedprof-nb table { border-collapse: collapse; width: 100%; font-size: 12px; }
.feedprof-nb th, .feedprof-nb td { text-align: left; padding: 3px 6px; border-bottom: 1px solid var(--line); }
.feedprof-nb td.num, .feedprof-nb th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.feedprof-nb tr.picked td { font-weight: 650; }
.feedprof-nb .state-ok { color: var(--good); }
.feedprof-nb .state-failed, .feedprof-nb .state-killed, .feedprof-nb .state-timeout { color: var(--bad); }
.feedprof-nb .state-rejected, .feedprof-nb .state-interrupted { color: var(--warn); }
.feedprof-nb svg.chart { width: 100%; height: auto; display: block; }
"""


def _frame(title: str, body: List[str]) -> str:
    return (f"<div class=\"feedprof-nb\"><style>{CSS}</style><h4>{esc(title)}</h4>" + "".join(body)
            + "</div>")


def summary_html(summary: Summary) -> str:
    return _frame("feedprof summary", [summary_verdict(summary)])


def run_html(run: Run) -> str:
    gpu_note = no_gpu(run.host)
    body = [summary_verdict(run.summary)] + leftovers_section(run)
    body += curves_section([("run", run)], gpu_note)
    return _frame(f"feedprof profile — {fmt_seconds(run.duration_s)}", body)


def tune_html(result: TuneResult) -> str:
    rec = result.recommendation
    picked = rec.trial_index if rec is not None else None
    shown = [t for t in result.trials if t.run is not None and (t.role == "baseline" or t.index == picked)]
    body = [tune_verdict(result, copy_button=False)] + leftovers_section(result)
    chart = plots.throughput_data(result)
    if chart.bars:  # as wide as its bars need: a two-bar chart stretched to the cell's width is all bar
        body.append(f"<div style=\"max-width: {plots.chart_width_px(chart)}px\">"
                    f"{plots.draw_throughput(chart)}</div>")
    body += curves_section([(trial_label(t, "recommended" if t.index == picked else ""), t.run) for t in shown],
                           no_gpu(result.host))
    if result.online is not None and result.evidence:  # (configs tried in the real run: their evidence)
        body.append(f"<details><summary>All {len(result.evidence)} configs tried in the run</summary>"
                    f"{evidence_table(result)}</details>")
        return _frame(f"feedprof tune --online — {len(result.evidence)} configs tried in the run, "
                      f"{fmt_seconds(result.duration_s)}", body)
    body.append(f"<details><summary>All {len(result.trials)} trials</summary>{trials_table(result)}</details>")
    return _frame(f"feedprof tune — {len(result.trials)} trials in {fmt_seconds(result.duration_s)}", body)


def fragment(obj: Any) -> str:
    """The cell output of a Summary, Run or TuneResult."""
    if isinstance(obj, TuneResult):
        return tune_html(obj)
    if isinstance(obj, Run):
        return run_html(obj)
    if isinstance(obj, Summary):
        return summary_html(obj)
    raise StoreError(f"cannot render a {type(obj).__name__}")
