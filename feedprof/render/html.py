"""One self-contained HTML page for a tune (results.json) or a run (run.json).

No network fetches of any kind: styles, script and charts (inline SVG) are
in the page. Every string that came from the user (script path, arguments,
loader sites, messages, tracebacks) goes through ``esc``. The page depends only
on the stored record, so re-rendering a saved file gives the same bytes.
"""
from __future__ import annotations

import os
from typing import Any, Iterable, List, Optional, Sequence, Tuple

from feedprof.analyse.diagnose import training_loader, wait_fraction
from feedprof.analyse.evidence import config_key
from feedprof.analyse.limits import repeats_records
from feedprof.analyse.measured import score
from feedprof.analyse.recommend import keeps_own_settings
from feedprof.analyse.batch_time import profile_batch_time
from feedprof.analyse.loading import training_loading
from feedprof.render import plots
from feedprof.render.beyond import beyond_section
from feedprof.render.markup import esc, table
from feedprof.render.online import FAILED, online_lines, timeline_svg
from feedprof.render.leftovers import afterwards_words, labelled_leftovers, leftover_items
from feedprof.render.progress import NO_PASTE_TEXT, paste_shown
from feedprof.render.ranks import ranks_html
from feedprof.render.text import epoch_line, verdict_words
from feedprof.render.words import OWN_SETTINGS_TEXT, config_cell, config_words, gpu_status, headline, paste_intro, say
from feedprof.store import GpuStatus, HostInfo, Recommendation, Run, Summary, Trial, TrialState, TuneResult
from feedprof.units import fmt_bytes, fmt_cores, fmt_num, fmt_pct, fmt_rate, fmt_seconds


CSS = """
:root { --bg: #ffffff; --fg: #1d2430; --muted: #5b6472; --card: #f4f6f9; --line: #d9dee6;
        --good: #2f7d4a; --warn: #a15c00; --bad: #b3261e; --accent: #2c6cb0; --code: #eef1f5; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #14171c; --fg: #e6e9ee; --muted: #9aa4b2; --card: #1d2229; --line: #323a45;
          --good: #6cc58b; --warn: #f0b050; --bad: #f07a70; --accent: #7fb2ee; --code: #232a33; }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 10px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.sub { color: var(--muted); margin: 0 0 16px; word-break: break-all; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.meta th { width: 160px; }
.verdict { margin-top: 16px; background: var(--card); border-left: 6px solid var(--accent); padding: 16px 20px; border-radius: 6px; }
.verdict.highly { border-left-color: var(--bad); } .verdict.moderately { border-left-color: var(--warn); }
.verdict.not { border-left-color: var(--good); }
.verdict .headline { font-size: 20px; font-weight: 650; margin: 0 0 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 0 0 12px; }
.card { background: var(--bg); border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.card .k { color: var(--muted); font-size: 12px; } .card .v { font-size: 20px; font-weight: 650; }
ul.reasons { margin: 8px 0 12px 18px; padding: 0; } ul.reasons li { margin: 3px 0; }
.code { display: flex; gap: 8px; align-items: flex-start; }
pre { background: var(--code); padding: 10px 12px; border-radius: 6px; overflow-x: auto; margin: 0;
      font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; word-break: break-all; }
.code pre { flex: 1; }
button.copy { font: inherit; font-size: 13px; padding: 8px 12px; border-radius: 6px; cursor: pointer;
              border: 1px solid var(--line); background: var(--bg); color: var(--fg); }
svg.chart { width: 100%; height: auto; display: block; color: var(--fg); }
.state-ok { color: var(--good); } .state-failed, .state-killed, .state-timeout { color: var(--bad); }
.state-rejected, .state-interrupted { color: var(--warn); }
tr.picked td { font-weight: 650; }
.note { color: var(--muted); font-size: 13px; }
footer { color: var(--muted); font-size: 12px; margin-top: 40px; }
@media print {
  :root { --bg: #fff; --fg: #000; --muted: #444; --card: #f6f6f6; --line: #ccc; --code: #f3f3f3; }
  button.copy { display: none; } main { max-width: none; padding: 0; }
  h2, .verdict, table, svg.chart { break-inside: avoid; }
}
"""

SCRIPT = """
document.querySelectorAll('button.copy').forEach(function (button) {
  button.addEventListener('click', function () {
    var node = document.getElementById(button.getAttribute('data-target'));
    var text = node.textContent;
    function done(word) { button.textContent = word; setTimeout(function () { button.textContent = 'Copy'; }, 1500); }
    function select() {
      var range = document.createRange(); range.selectNodeContents(node);
      var sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
      try { document.execCommand('copy'); done('Copied'); } catch (e) { done('Selected: press Ctrl+C'); }
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done('Copied'); }, select);
    } else { select(); }
  });
});
"""


def page(title: str, body: Iterable[str]) -> str:
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
        "<meta name=\"color-scheme\" content=\"light dark\">\n",
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n",
        "\n".join(body),
        f"\n</main>\n<script>{SCRIPT}</script>\n</body>\n</html>\n",
    ])


def _machine(host: HostInfo) -> str:
    gpus = ", ".join(f"cuda:{g.cuda_index} {g.name}" for g in host.gpus) if host.gpus else \
        gpu_status(host.gpu_status, host.gpu_status_detail)
    return (f"{host.cpu_model or 'unknown CPU'} — {host.cpus_usable} usable of {host.cpus_online} CPUs, "
            f"{fmt_bytes(host.ram_bytes)} RAM, /dev/shm {fmt_bytes(host.shm_total_bytes)}; GPUs: {gpus}")


def _title(kind: str, script: Optional[str], argv: Sequence[str]) -> List[str]:
    name = os.path.basename(script) if script else "training loop"
    command = " ".join([script or "(inside a Python process)"] + list(argv))
    return [f"<h1>feedprof {esc(kind)} — {esc(name)}</h1>", f"<p class=\"sub\">{esc(command)}</p>"]


def _details(script: Optional[str], argv: Sequence[str], started_at: str, host: HostInfo,
             extra: Sequence[Tuple[str, str]] = ()) -> List[str]:
    command = " ".join([script or "(inside a Python process)"] + list(argv))
    versions = ", ".join(f"{k} {v}" for k, v in sorted(host.frameworks.items())) or "none found"
    rows = [("Script", f"<code>{esc(command)}</code>"), ("Date", esc(started_at)),
            ("Machine", esc(_machine(host))), ("Python", esc(f"{host.python_version} on {host.platform}")),
            ("Frameworks", esc(versions)), ("feedprof", esc(host.feedprof_version))]
    rows += [(k, v) for k, v in extra]
    meta = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return ["<h2>Run details</h2>", f"<table class=\"meta\">{meta}</table>"]


def _card(key: str, value: str) -> str:
    return f"<div class=\"card\"><div class=\"k\">{esc(key)}</div><div class=\"v\">{esc(value)}</div></div>"


def _code_block(code: str) -> str:
    return (f"<div class=\"code\"><pre id=\"paste\">{esc(code)}</pre>"
            f"<button class=\"copy\" type=\"button\" data-target=\"paste\">Copy</button></div>")


def _state(state: str, reason: str = "") -> str:
    text = state if not reason else f"{state}: {reason}"
    return f"<span class=\"state-{esc(state)}\">{esc(text)}</span>"


def no_gpu(host: HostInfo) -> str:
    """Why there is no GPU column ("" when there is one)."""
    return "" if host.gpus or host.gpu_status == GpuStatus.OK else gpu_status(host.gpu_status, host.gpu_status_detail)


def curves_section(labelled_runs: Sequence[Tuple[str, Run]], gpu_note: str) -> List[str]:
    curves = [plots.curves_data(label, run) for label, run in labelled_runs if run.samples.t_s]
    if not curves:
        return ["<p class=\"note\">No utilisation samples were recorded.</p>"]
    return [plots.draw_curves(curves, gpu_note=gpu_note),
            "<p class=\"note\">One row per trial, shared axes per column; the shaded band is the measured "
            "steady-state window. CPU is in cores (1 = one core busy); <em>workers</em> is every child process "
            "of the script. Data wait is the share of each half second the loop spent blocked on the loader."
            + (f" No GPU column: {esc(gpu_note)}." if gpu_note else "") + "</p>"]


def leftovers_section(obj: Any) -> List[str]:
    """A warning box for what the run (or any trial) left behind; nothing when clean."""
    found = labelled_leftovers(obj)
    if not found:
        return []
    items = "".join(f"<li>{'' if isinstance(obj, Run) else esc(label) + ': '}{esc(what)} — end it with "
                    f"<code>{esc(how)}</code></li>" for label, lo in found for what, how in leftover_items(lo))
    return [f"<div class=\"verdict highly\"><p class=\"headline\">Left behind after the run ended</p>"
            f"<ul class=\"reasons\">{items}</ul><p class=\"note\">feedprof ends a run's process group and every "
            f"process it saw in it; these escaped (<code>setsid</code>, a double fork) and are still there. feedprof "
            f"never ends them itself; <code>feedprof gpus</code> shows what is on each GPU.</p></div>"]


# ------------------------------------------------------------------- tune


def trial_label(t: Trial, role: str = "") -> str:
    """A trial's row in the curves: its number, its role and its config (as the chart's bars)."""
    return plots.bar_label(config_cell(t), f"#{t.index} {role or t.role}")


def tune_verdict(result: TuneResult, copy_button: bool = True) -> str:
    """The recommendation box: verdict, figures, reasons and the paste-ready line."""
    rec = result.recommendation
    if rec is None:
        return (f"<div class=\"verdict highly\"><p class=\"headline\">No recommendation</p>"
                f"<p>{esc(say(result.stop_reason, result.framework) or 'no trial succeeded')}</p></div>")
    fw = rec.framework
    predicted = " (predicted, not measured)" if rec.predicted else ""
    cards = [_card("recommended", (rec.config_text or config_words(rec.config, fw)) + predicted),
             _card("speedup over the script's settings", f"{rec.speedup:.2f}×" if rec.speedup else "n/a"),
             _card("throughput", fmt_rate(rec.batches_per_s) +
                   (f" · {fmt_rate(rec.samples_per_s, 'samples/s')}" if rec.samples_per_s else "")),
             _card("of the compute ceiling", fmt_pct(rec.fraction_of_ceiling)),
             _card("input-bound (script's settings)", f"{verdict_words(rec.input_bound)} "
                   f"({fmt_pct(rec.input_bound_fraction)})")]
    reasons = "".join(f"<li>{esc(say(r, fw))}</li>" for r in rec.reasons)
    return (f"<div class=\"verdict {esc(rec.input_bound)}\"><p class=\"headline\">{esc(headline(rec.verdict, fw))}</p>"
            f"<div class=\"cards\">{''.join(cards)}</div><ul class=\"reasons\">{reasons}</ul>"
            f"{_paste_block(rec, copy_button)}</div>")


def _paste_block(rec: Recommendation, copy_button: bool) -> str:
    """The paste line and what it replaces; none where the pick is the script's own settings."""
    line = paste_shown(rec)
    if not line:
        return "" if keeps_own_settings(rec) else f"<p class=\"note\">{esc(NO_PASTE_TEXT)}</p>"
    code = _code_block(line) if copy_button else f"<pre>{esc(line)}</pre>"
    return f"<p class=\"note\">{paste_intro(line, rec.loader_site, _code_words)}</p>{code}"


def _code_words(text: str) -> str:
    return f"<code>{esc(text)}</code>"


def render_tune(result: TuneResult) -> str:
    online = result.online is not None  # (its configs were tried in the real run: no trials, no replayed batch)
    extra = [("Training loader", f"<code>{esc(result.loader_site or 'not found')}</code> "
              f"({esc(result.framework or 'unknown framework')})"),
             ("Tune", esc((f"{len(result.evidence or result.trials)} configs tried in the run, "
                           f"{fmt_seconds(result.duration_s)} "
                           f"(explore budget {fmt_seconds(result.budget_s)})" if online else
                           f"{len(result.trials)} trials in {fmt_seconds(result.duration_s)} "
                           f"(budget {fmt_seconds(result.budget_s)})") +
                          ("" if result.complete else f" — stopped early: {say(result.stop_reason, result.framework)}")))]
    body = _title("tune", result.script, result.argv)
    body.append(tune_verdict(result))
    body += leftovers_section(result)
    body += _details(result.script, result.argv, result.started_at, result.host, extra)
    rec = result.recommendation
    picked = next((t for t in result.trials if rec is not None and t.index == rec.trial_index), None)
    if picked is not None and picked.run is not None and picked.run.ranks:
        body += ranks_html(picked.run)
    chart = plots.throughput_data(result)
    if chart.bars:  # as wide as its bars need: a few bars stretched to the page's width would be all bar
        body.append("<h2>Throughput of every config tried</h2>")
        body.append(f"<div style=\"max-width: {plots.chart_width_px(chart)}px\">"
                    f"{plots.draw_throughput(chart)}</div>")
        ceiling = ("the step time while data was ready, from the run's windows" if online
                   else "one cached batch replayed")
        whiskers = "window of the run" if online else "chunk of the window"
        body.append("<p class=\"note\">Batches per second in steady state with per-epoch start-up amortised; "
                    f"whiskers span the slowest and fastest {whiskers}. Green: recommended; orange: "
                    f"the script's own settings. Dashed: the compute ceiling ({ceiling}), "
                    "dotted: the baseline.</p>")
    if rec is not None:
        body += beyond_section(rec.batch_time, rec.loading, result.framework)
    if online:
        body += online_section(result)
    else:
        body.append("<h2>Utilisation over time, every trial</h2>")
        body += curves_section([(trial_label(t), t.run) for t in result.trials if t.run is not None],
                                no_gpu(result.host))
    body.append("<h2>Every config the run tried</h2>" if online else "<h2>All trials</h2>")
    body.append(evidence_table(result) if online and result.evidence else trials_table(result))
    if result.notes:
        body.append("<h2>How the search went</h2><ul class=\"reasons\">" +
                    "".join(f"<li>{esc(say(n, result.framework))}</li>" for n in result.notes) + "</ul>")
    failures = [t for t in result.trials if t.run is not None and t.run.outcome.traceback]
    for t in failures[:3]:
        body.append(f"<h2>Trial #{t.index}: the script's error</h2><pre>{esc(t.run.outcome.traceback)}</pre>")
    body.append(_footer(result.host))
    return page(f"feedprof tune — {os.path.basename(result.script)}", body)


def online_section(result: TuneResult) -> List[str]:
    """tune --online: what the run did, its timeline, and its utilisation curves."""
    body = ["<h2>The run, as it was tuned</h2><ul class=\"reasons\">" +
            "".join(f"<li>{esc(line)}</li>" for line in online_lines(result)) + "</ul>"]
    svg = timeline_svg(result)
    if svg:
        body.append(svg)
        body.append("<p class=\"note\">Each segment is a window of the real run at the config in force "
                    "(its colour): its batches per second above, the share of it the loop waited for data below. "
                    "Dashed: the search settled; dotted red: a worker pool failed and the run went on.</p>")
    if result.run is not None:
        body += curves_section([("the run", result.run)], no_gpu(result.host))
    return body


def trials_table(result: TuneResult) -> str:
    rec = result.recommendation
    picked = rec.trial_index if rec else None
    base = next((score(t) for t in result.trials if t.role == "baseline"), None)
    headers = [("#", True), ("role", False), ("config", False), ("state", False), ("batches/s", True),
               ("spread", True), ("vs baseline", True), ("samples/s", True), ("data wait", True),
               ("first batch", True), ("CPU main", True), ("CPU workers", True), ("CPU others", True), ("GPU", True),
               ("peak RSS", True), ("peak PSS", True), ("/dev/shm", True), ("time", True)]
    rows = []
    for t in result.trials:
        s = score(t)
        spread = ""
        if t.batches_per_s and t.batches_per_s_low is not None and t.batches_per_s_high is not None:
            spread = f"{fmt_num(t.batches_per_s_low)}–{fmt_num(t.batches_per_s_high)}"
        gpu = ", ".join(fmt_pct(None if u is None else u / 100) for u in t.gpu_util_pct) or "—"
        cause = say(t.cause, result.framework) if t.state != TrialState.OK else ""
        cells = [str(t.index), esc(t.role), esc(config_cell(t)), _state(t.state, cause), esc(fmt_num(s)), esc(spread),
                 esc("repeats data" if repeats_records(t) else f"{s / base:.2f}×" if s and base else ""),
                 esc(fmt_num(t.samples_per_s)),
                 esc(fmt_pct(t.data_wait_fraction)), esc(fmt_seconds(t.time_to_first_batch_s)),
                 esc(fmt_cores(t.main_cpu_pct)), esc(fmt_cores(t.workers_cpu_pct)),
                 esc(fmt_cores(None if t.other_cpu_cores is None else 100 * t.other_cpu_cores)), esc(gpu),
                 esc(fmt_bytes(t.peak_rss_bytes)), esc(fmt_bytes(t.peak_pss_bytes)),
                 esc(fmt_bytes(t.peak_shm_used_bytes)), esc(fmt_seconds(t.duration_s))]
        rows.append(("picked" if t.index == picked else "", cells))
    return table(headers, rows)


def evidence_table(result: TuneResult) -> str:
    """A search without trials (online: stretches of the real run), a row per config from its
    evidence (store/evidence.py), a failure with what the run saw of it."""
    rec = result.recommendation
    picked = plots.measured_pick(rec)
    base_key = config_key(rec.baseline_config) if rec is not None and rec.baseline_config else None
    base = next((e.rate for e in result.evidence if config_key(e.config) == base_key), None)
    failures = {config_key(f.config): f for f in (result.online.failures if result.online else ())}
    headers = [("#", True), ("config", False), ("state", False), ("batches/s", True), ("windows", True),
               ("spread", True), ("vs baseline", True), ("samples/s", True), ("data wait", True),
               ("CPU workers", True), ("time", True)]
    rows = []
    for i, e in enumerate(result.evidence):
        key = config_key(e.config)
        own = key == base_key
        failure = failures.get(key)
        spread = f"{fmt_num(min(e.rates))}–{fmt_num(max(e.rates))}" if len(e.rates) > 1 else ""
        per_batch = e.samples_per_batch
        cells = [str(i), esc((OWN_SETTINGS_TEXT + ": " if own else "") + config_words(e.config, result.framework)),
                 _state(TrialState.FAILED if e.failed else TrialState.OK,
                        FAILED.get(failure.kind, failure.kind) if failure is not None else ""),
                 esc(fmt_num(e.rate)), str(e.measurements), esc(spread),
                 esc(f"{e.rate / base:.2f}×" if e.rate and base else ""),
                 esc(fmt_num(e.rate * per_batch if e.rate and per_batch else None)),
                 esc(fmt_pct(e.waited_share)),
                 esc(fmt_cores(None if e.workers_cores is None else 100 * e.workers_cores)),
                 esc(fmt_seconds(e.wall_s))]
        rows.append(("picked" if key == picked else "", cells))
    return table(headers, rows)


# -------------------------------------------------------------------- run


def summary_verdict(s: Optional[Summary]) -> str:
    """The verdict box of one run: is the loop waiting for data, and the figures behind it."""
    if s is None or s.batches_per_s is None:
        return ("<div class=\"verdict\"><p class=\"headline\">Nothing measured in steady state</p>"
                + "".join(f"<p>{esc(say(n))}</p>" for n in (s.notes if s else ())) + "</div>")
    cards = [_card("data wait", fmt_pct(s.data_wait_fraction)),
             _card("while training", fmt_rate(s.batches_per_s) +
                   (f" · {fmt_rate(s.samples_per_s, 'samples/s')}" if s.samples_per_s else "")),
             *([_card("over whole epochs", fmt_rate(s.sustained_batches_per_s))] if epoch_line(s) else []),
             _card("first batch", fmt_seconds(s.time_to_first_batch_s)),
             _card("workers", "n/a" if s.num_workers is None else str(s.num_workers)),
             _card("CPU main / workers", f"{fmt_cores(s.main_cpu_pct)} / {fmt_cores(s.workers_cpu_pct)}"),
             _card("GPU utilisation", ", ".join(fmt_pct(None if u is None else u / 100) for u in s.gpu_util_pct)
                   or "no GPU data"),
             _card("peak memory (tree)", fmt_bytes(s.peak_tree_pss_bytes or s.peak_tree_rss_bytes))]
    notes = "".join(f"<li>{esc(say(n))}</li>" for n in s.notes)
    return (f"<div class=\"verdict {esc(s.input_bound)}\"><p class=\"headline\">"
            f"{esc(verdict_words(s.input_bound).capitalize())}: the loop waits for data "
            f"{esc(fmt_pct(s.data_wait_fraction))} of the time</p><div class=\"cards\">{''.join(cards)}</div>"
            f"<p>Training loader: <code>{esc(s.loader)}</code> ({esc(s.framework)}); "
            f"{s.batches_measured} steady-state batches over {esc(fmt_seconds(s.measured_s))}."
            f" Run <code>feedprof tune</code> on the script to find the settings that feed it best.</p>"
            + (f"<ul class=\"reasons\">{notes}</ul>" if notes else "") + "</div>")


WINDOW_END = {"batches": "the window's batches were measured", "seconds": "the window's seconds were measured",
              "script_ended": "the script ended first", "full_run": "the whole run",
              "no_loader": "no loader was iterated", "no_result": "the trial wrote no result"}


def render_run(run: Run) -> str:
    body = _title("profile", run.script, run.argv)
    body.append(summary_verdict(run.summary))
    body += leftovers_section(run)
    body += _details(run.script, run.argv, run.started_at, run.host,
                     [("Outcome", _state(run.outcome.state, say(run.outcome.cause))),
                      ("Window", esc(f"{WINDOW_END.get(run.window.end, 'n/a')}; run lasted "
                                     f"{fmt_seconds(run.duration_s)}")),
                      ("Afterwards", esc(afterwards_words(run.leftovers)))])
    body += ranks_html(run)
    t = profile_batch_time(run)
    body += beyond_section([t] if t is not None else [], training_loading(run),
                           run.summary.framework if run.summary is not None else "")
    body.append("<h2>Utilisation over time</h2>")
    body += curves_section([("run", run)], no_gpu(run.host))
    body.append("<h2>Loaders seen</h2>")
    body.append(_loaders_table(run))
    if run.outcome.traceback:
        body.append(f"<h2>The script's error</h2><pre>{esc(run.outcome.traceback)}</pre>")
    body.append(_footer(run.host))
    return page(f"feedprof profile — {os.path.basename(run.script or 'run')}", body)


def _loaders_table(run: Run) -> str:
    train = training_loader(run)
    headers = [("loader", False), ("framework", False), ("settings", False), ("batch size", True),
               ("batches", True), ("steady batches", True), ("data wait", True)]
    rows = []
    for rec in run.loaders:
        steady = sum(rec.steps.n_steps)
        wait = wait_fraction(rec)
        config = ", ".join(f"{k}={v}" for k, v in rec.config.items() if v is not None)
        name = rec.name or rec.site or f"loader {rec.loader_id}"
        rows.append(("picked" if train is not None and rec.loader_id == train.loader_id else "",
                     [f"<code>{esc(name)}</code>" + (" (training)" if train and rec.loader_id == train.loader_id else ""),
                      esc(rec.framework), esc(config), esc(rec.batch_size if rec.batch_size is not None else "?"),
                      str(rec.batches), str(steady), esc(fmt_pct(wait))]))
    return table(headers, rows) if rows else "<p class=\"note\">No data loader was iterated.</p>"


def _footer(host: HostInfo) -> str:
    return (f"<footer>Recorded with feedprof {esc(host.feedprof_version)}. Re-render with "
            f"<code>feedprof report results.json</code> (or <code>run.json</code>); this page makes no "
            f"network requests.</footer>")
