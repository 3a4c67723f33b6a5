"""Charts for the HTML report. Each chart is two functions: one computes what to
draw from stored records (plain data, tested), one draws it (matplotlib, Agg-free
SVG via the object API: no pyplot state, no display).

Charts follow the page's light or dark theme: axes and text are drawn in a
sentinel colour that the SVG then swaps for ``currentColor``, so an inline
SVG takes the colour of the text around it. Output is deterministic (fixed
hash salt, no date) so that re-rendering a saved run gives the same bytes.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from feedprof.analyse.diagnose import training_loader
from feedprof.analyse.evidence import config_key
from feedprof.analyse.measured import score
from feedprof.render.words import config_cell, config_words
from feedprof.store import Recommendation, Run, TuneResult
from feedprof.store.reasons import PickFigures

INK = "#0a0b0c"  # sentinel for text and axes: becomes currentColor
GRID = "#0b0c0d"  # sentinel for grid lines: currentColor at low opacity
PALETTE = ("#3b82c4", "#e07b39", "#4fa36c", "#c0504d", "#8e6bbf", "#b8860b")  # readable on light and dark
WAIT_BIN_S = 0.5  # data-wait fraction is shown per half second
CEILING_ON_CHART = 3.0  # draw the ceiling line only if it is within this factor of the tallest bar


# ------------------------------------------------------------- what to draw


@dataclass(frozen=True)
class Bar:
    label: str  # the config, in feedprof's words for it (a line per setting; offline, the trial's number first)
    value: Optional[float]
    low: Optional[float]
    high: Optional[float]
    state: str
    role: str
    picked: bool
    own: bool = False  # the script's own settings (the baseline, or a trial that measured them again)


@dataclass(frozen=True)
class ThroughputChart:
    bars: Tuple[Bar, ...]
    ceiling: Optional[float]
    baseline: Optional[float]


def throughput_data(result: TuneResult) -> ThroughputChart:
    rec = result.recommendation
    picked = next((t for t in result.trials if rec is not None and t.index == rec.trial_index), None)
    rec_trial_config = picked.config if picked is not None else {}
    own = next((config_key(t.config) for t in result.trials if t.role == "baseline"), None)
    bars = []
    for t in result.trials:
        if t.role == "ceiling":
            continue
        s = score(t)
        # the spread of chunk throughputs, scaled onto the amortised score
        scale = s / t.batches_per_s if s and t.batches_per_s else 1.0
        bars.append(Bar(label=bar_label(config_cell(t), f"#{t.index}"), value=s,
                        low=None if t.batches_per_s_low is None else t.batches_per_s_low * scale,
                        high=None if t.batches_per_s_high is None else t.batches_per_s_high * scale,
                        state=t.state, role=t.role, own=config_key(t.config) == own,
                        picked=rec is not None and config_key(t.config) == config_key(rec_trial_config)))
    bars += _evidence_bars(result) if not result.trials else []
    return ThroughputChart(bars=tuple(bars), ceiling=rec.ceiling_batches_per_s if rec else None,
                           baseline=rec.baseline_batches_per_s if rec else None)


def bar_label(config_text: str, number: str = "") -> str:
    """A bar's label: its config a setting to a line ("num_workers=8" over "persistent_workers=True"),
    after the trial's number where there is one; a "$" kept as text (matplotlib would read mathtext)."""
    lines = [part.strip() for part in config_text.split(", ")]
    if number:
        lines[0] = f"{number} {lines[0]}"
    return "\n".join(lines).replace("$", r"\$")


def measured_pick(rec: Optional[Recommendation]) -> Optional[tuple]:
    """The measured config a recommendation was made from (its settings judged rather than
    measured left out): PickFigures', else the script's own settings kept."""
    if rec is None:
        return None
    figures = next((r for r in rec.reasons if isinstance(r, PickFigures)), None)
    return config_key(figures.config if figures is not None else rec.baseline_config or rec.config)


def _evidence_bars(result: TuneResult) -> List[Bar]:
    """A search without trials (online: stretches of the real run), bar by config from its evidence:
    whiskers span its slowest and fastest window, scaled onto its amortised rate; a config that
    failed has no bar, as a trial that failed has none."""
    rec = result.recommendation
    picked, base = measured_pick(rec), config_key((rec.baseline_config if rec else {}) or {})
    bars = []
    for i, e in enumerate(result.evidence):
        scale = e.rate / e.steady_rate if e.rate and e.steady_rate else 1.0
        low, high = (min(e.rates) * scale, max(e.rates) * scale) if e.rates and not e.failed else (None, None)
        bars.append(Bar(label=bar_label(config_words(e.config, result.framework)),
                        value=None if e.failed else e.rate, low=low, high=high,
                        state="failed" if e.failed else "ok",
                        role="baseline" if config_key(e.config) == base else "search", own=config_key(e.config) == base,
                        picked=config_key(e.config) == picked))
    return bars


@dataclass(frozen=True)
class TrialCurves:
    label: str
    t_s: Tuple[float, ...]
    gpu_util_pct: Tuple[Tuple[Optional[float], ...], ...]  # per device
    system_cores: Tuple[Optional[float], ...]
    main_cores: Tuple[Optional[float], ...]
    workers_cores: Tuple[Optional[float], ...]
    rss_gib: Tuple[Optional[float], ...]
    pss_t_s: Tuple[float, ...]
    pss_gib: Tuple[float, ...]
    shm_gib: Tuple[Optional[float], ...]
    wait_t_s: Tuple[float, ...]
    wait_pct: Tuple[float, ...]
    window: Tuple[Optional[float], Optional[float]]


def _div(x: Optional[float], d: float) -> Optional[float]:
    return None if x is None else x / d


def binned_wait(run: Run, bin_s: float = WAIT_BIN_S) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
    """Data-wait fraction (%) of the training loader's steps, per time bin."""
    rec = training_loader(run)
    if rec is None or not rec.steps.t_end_s or not rec.wait_observable:
        return (), ()
    bins: dict = {}
    for t, wait, wall in zip(rec.steps.t_end_s, rec.steps.wait_s, rec.steps.wall_s):
        k = int(t // bin_s)
        w = bins.setdefault(k, [0.0, 0.0])
        w[0] += wait
        w[1] += wall
    keys = sorted(bins)
    return (tuple((k + 0.5) * bin_s for k in keys),
            tuple(100.0 * bins[k][0] / bins[k][1] if bins[k][1] > 0 else 0.0 for k in keys))


def curves_data(label: str, run: Run) -> TrialCurves:
    s = run.samples
    cores = max(1, run.host.cpus_online or (len(s.per_core_cpu_pct[0]) if s.per_core_cpu_pct else 1))
    gib = float(2 ** 30)
    rss = tuple(None if m is None else (m + (w or 0)) / gib for m, w in zip(s.main_rss_bytes, s.workers_rss_bytes))
    pss = [(t, p / gib) for t, p in zip(s.t_s, s.tree_pss_bytes) if p is not None]
    wait_t, wait_pct = binned_wait(run)
    return TrialCurves(
        label=label, t_s=tuple(s.t_s), gpu_util_pct=tuple(g.util_pct for g in s.gpus),
        system_cores=tuple(_div(x, 100.0 / cores) for x in s.system_cpu_pct),
        main_cores=tuple(_div(x, 100.0) for x in s.main_cpu_pct),
        workers_cores=tuple(_div(x, 100.0) for x in s.workers_cpu_pct),
        rss_gib=rss, pss_t_s=tuple(p[0] for p in pss), pss_gib=tuple(p[1] for p in pss),
        shm_gib=tuple(_div(x, gib) for x in s.shm_used_bytes),
        wait_t_s=wait_t, wait_pct=wait_pct, window=(run.window.t_start_s, run.window.t_end_s))


# ------------------------------------------------------------------ drawing


def new_figure(width_in: float, height_in: float):
    """A figure drawn to SVG, without pyplot (no global state across reports)."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), facecolor="none")
    FigureCanvasSVG(fig)
    return fig


def style_axes(ax, ylabel: str = "") -> None:
    ax.set_facecolor("none")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color(INK)
    ax.tick_params(colors=INK, labelsize=8)
    ax.grid(True, color=GRID, linewidth=0.5)
    ax.set_axisbelow(True)
    if ylabel:
        ax.set_ylabel(ylabel, color=INK, fontsize=8)


def to_svg(fig) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "feedprof", "svg.fonttype": "none",
                                "font.family": "sans-serif", "text.color": INK}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight",
                    transparent=True)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: inline SVG
    svg = svg.replace(INK, "currentColor")
    svg = re.sub(f"stroke: ?{GRID}", "stroke: currentColor; stroke-opacity: 0.15", svg)
    svg = svg.replace(GRID, "currentColor")
    # width/height in pt would stop the chart from shrinking on narrow screens
    svg = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 class="chart"', svg, count=1)
    return svg


def chart_width_px(chart: ThroughputChart) -> int:
    """How wide the throughput chart is shown: as its bars need, up to a page's width."""
    return min(1000, 240 + 80 * len(chart.bars))


def draw_throughput(chart: ThroughputChart) -> str:
    fig = new_figure(max(4.0, 0.55 * len(chart.bars) + 2), 2.6)
    ax = fig.add_subplot(1, 1, 1)
    style_axes(ax, "batches/s")
    xs = list(range(len(chart.bars)))
    for x, b in zip(xs, chart.bars):
        if b.value is None:
            ax.text(x, 0, b.state, rotation=90, ha="center", va="bottom", fontsize=7, color=INK)
            continue
        color = PALETTE[2] if b.picked else PALETTE[1] if b.own else PALETTE[0]
        ax.bar(x, b.value, color=color, width=0.7)
        if b.low is not None and b.high is not None:
            ax.errorbar(x, b.value, yerr=[[max(0.0, b.value - b.low)], [max(0.0, b.high - b.value)]],
                        color=INK, capsize=2, linewidth=0.8)
    top = max([b.high or b.value or 0.0 for b in chart.bars] + [chart.baseline or 0.0]) or 1.0
    if chart.ceiling and chart.ceiling <= CEILING_ON_CHART * top:
        ax.axhline(chart.ceiling, color=PALETTE[3], linestyle="--", linewidth=1)
        ax.text(len(xs) - 0.5, chart.ceiling, " compute ceiling", color=PALETTE[3], fontsize=7, va="bottom", ha="right")
    elif chart.ceiling:  # far above every config: say so instead of flattening the bars
        ax.set_ylim(0, 1.25 * top)
        ax.annotate(f"compute ceiling {chart.ceiling:.0f} batches/s, off the chart ↑", xy=(len(xs) - 0.5, 1.22 * top),
                    color=PALETTE[3], fontsize=7, ha="right", va="top")
    if chart.baseline:
        ax.axhline(chart.baseline, color=PALETTE[1], linestyle=":", linewidth=1)
        ax.text(len(xs) - 0.5, chart.baseline, " baseline", color=PALETTE[1], fontsize=7, va="bottom", ha="right")
    ax.set_xticks(xs)
    # upright: a label's lines side by side, each ending at the axis, so that many bars' labels never overlap
    ax.set_xticklabels([b.label for b in chart.bars], fontsize=6.5, rotation=90, ha="center", va="top",
                       multialignment="right")
    ax.set_xlim(-0.6, len(xs) - 0.4)
    return to_svg(fig)


def draw_line(ax, xs: Sequence[float], ys: Sequence[Optional[float]], color: str, label: str, **kw) -> None:
    """A line with gaps where readings are missing (None): a lost GPU shows as a gap."""
    seg_x: List[float] = []
    seg_y: List[float] = []
    first = True
    for x, y in list(zip(xs, ys)) + [(None, None)]:
        if y is None or x is None:
            if seg_x:
                ax.plot(seg_x, seg_y, color=color, linewidth=1, label=label if first else None, **kw)
                first = False
            seg_x, seg_y = [], []
        else:
            seg_x.append(x)
            seg_y.append(y)


COLUMNS = ("GPU utilisation %", "CPU (cores)", "data wait %", "memory (GiB)")


def _top(values) -> float:
    return max((v for v in values if v is not None), default=1.0) or 1.0


def draw_curves(curves: Sequence[TrialCurves], gpu_note: str = "") -> str:
    """Small multiples: a row per trial, a column per resource, shared axes per
    column. Without GPU data in any trial the GPU column is left out (the page
    says why)."""
    has_gpu = any(c.gpu_util_pct for c in curves)
    columns = COLUMNS if has_gpu else COLUMNS[1:]
    rows = max(1, len(curves))
    fig = new_figure(10.0 if has_gpu else 8.0, 1.35 * rows + 0.9)
    axes = fig.subplots(rows, len(columns), sharex=True, sharey="col", squeeze=False)
    for r, c in enumerate(curves):
        by_name = dict(zip(columns, axes[r]))
        for ax, title in zip(axes[r], columns):
            style_axes(ax)
            if r == 0:
                ax.set_title(title, color=INK, fontsize=9, pad=22)
            if c.window[0] is not None and c.window[1] is not None:
                ax.axvspan(c.window[0], c.window[1], color=GRID, alpha=0.06, linewidth=0)
        axes[r][0].set_ylabel(c.label, color=INK, fontsize=8, rotation=0, ha="right", va="center")
        if has_gpu:
            gpu_ax = by_name["GPU utilisation %"]
            for d, util in enumerate(c.gpu_util_pct):
                draw_line(gpu_ax, c.t_s, util, PALETTE[d % len(PALETTE)], f"cuda:{d}")
            gpu_ax.set_ylim(0, 100)
        cpu_ax, wait_ax, mem_ax = by_name["CPU (cores)"], by_name["data wait %"], by_name["memory (GiB)"]
        draw_line(cpu_ax, c.t_s, c.system_cores, PALETTE[5], "system")
        draw_line(cpu_ax, c.t_s, c.main_cores, PALETTE[0], "main process")
        draw_line(cpu_ax, c.t_s, c.workers_cores, PALETTE[1], "workers")
        if c.wait_t_s:
            draw_line(wait_ax, c.wait_t_s, c.wait_pct, PALETTE[3], "data wait")
        wait_ax.set_ylim(0, 100)
        draw_line(mem_ax, c.t_s, c.rss_gib, PALETTE[0], "RSS (tree)")
        if c.pss_t_s:
            mem_ax.plot(c.pss_t_s, c.pss_gib, "o", color=PALETTE[2], markersize=2.5, label="PSS (tree)")
        draw_line(mem_ax, c.t_s, c.shm_gib, PALETTE[4], "/dev/shm")
    # Shared y-axes: one range per column from every row (set once, after all rows are drawn).
    axes[0][columns.index("CPU (cores)")].set_ylim(0, 1.08 * _top(
        v for c in curves for col in (c.system_cores, c.main_cores, c.workers_cores) for v in col))
    axes[0][columns.index("memory (GiB)")].set_ylim(0, 1.08 * _top(
        v for c in curves for col in (c.rss_gib, c.pss_gib, c.shm_gib) for v in col))
    for ax in axes[-1]:
        ax.set_xlabel("seconds", color=INK, fontsize=8)
    for col in range(len(columns)):  # one legend per column, between its title and its first chart
        handles, labels = [], []
        for r in range(rows):
            h, lab = axes[r][col].get_legend_handles_labels()
            for hh, ll in zip(h, lab):
                if ll not in labels:
                    handles.append(hh)
                    labels.append(ll)
        if handles:
            axes[0][col].legend(handles, labels, fontsize=6, frameon=False, labelcolor=INK, loc="lower left",
                                bbox_to_anchor=(0.0, 1.0), ncol=3, borderaxespad=0.2, handlelength=1.2)
    fig.subplots_adjust(hspace=0.25, wspace=0.25)
    return to_svg(fig)


def draw_timeline(t_s: Sequence[Tuple[float, float]], rates: Sequence[float], wait_pct: Sequence[float],
                  labels: Sequence[str], settled_at_s: Optional[float], failures_t_s: Sequence[float]) -> str:
    """An online run (tune --online): each window of the run as a segment at its rate and its
    data wait, coloured by the config in force; the moment the search settled; failed pools."""
    fig = new_figure(8.0, 3.4)
    top, bottom = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2, sharex=None)
    style_axes(top, "batches/s")
    style_axes(bottom, "data wait %")
    colours: dict = {}
    for (t0, t1), rate, wait, label in zip(t_s, rates, wait_pct, labels):
        first = label not in colours  # one legend entry per config
        colour = colours.setdefault(label, PALETTE[len(colours) % len(PALETTE)])
        top.plot([t0, t1], [rate, rate], color=colour, linewidth=3, solid_capstyle="butt",
                 label=label if first else None)
        bottom.plot([t0, t1], [wait, wait], color=colour, linewidth=3, solid_capstyle="butt")
    for ax in (top, bottom):
        if settled_at_s is not None:
            ax.axvline(settled_at_s, color=INK, linestyle="--", linewidth=0.8)
        for t in failures_t_s:
            ax.axvline(t, color=PALETTE[3], linestyle=":", linewidth=1)
    top.set_ylim(bottom=0)
    bottom.set_ylim(0, 100)
    bottom.set_xlabel("seconds into the run", color=INK, fontsize=8)
    if colours:
        top.legend(fontsize=7, frameon=False, loc="lower right", labelcolor=INK)
    return to_svg(fig)
