"""The report's "beyond the knobs" section: where a batch's time goes (one stacked bar per config)
and where the loading code spent its time (a table of its costliest functions and lines)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from feedprof.analyse.loading import costs
from feedprof.render import plots
from feedprof.render.markup import esc, table
from feedprof.render.words import config_words
from feedprof.render.words.beyond import batch_time_words, cost_words, line_words, ms
from feedprof.store import BatchTime, LoadingProfile
from feedprof.units import fmt_pct

ROLE_WORDS = {"script": "the script's own settings", "pick": "recommended", "ceiling": "compute ceiling",
              "run": "this run"}
PART_ORDER = ("blocked", "loop_loading", "step_alone", "slowdown", "slowdown_runq", "slowdown_cpu", "slowdown_wait",
              "step")
LEGEND = {"blocked": "the loop waiting in the loader", "loop_loading": "loading work in the training process",
          "step_alone": "the step alone", "slowdown": "the step's slowdown beside the workers",
          "slowdown_runq": "slowdown: waiting for a CPU", "slowdown_cpu": "slowdown: more CPU work a step",
          "slowdown_wait": "slowdown: waiting on something else",
          "step": "the step (alone not measured)"}
PART_COLORS = {"blocked": plots.PALETTE[1], "loop_loading": plots.PALETTE[4 % len(plots.PALETTE)],
               "step_alone": plots.PALETTE[0], "slowdown": plots.PALETTE[3], "slowdown_runq": plots.PALETTE[3],
               "slowdown_cpu": plots.PALETTE[5], "slowdown_wait": plots.PALETTE[2], "step": plots.PALETTE[0]}


@dataclass(frozen=True)
class StackedBars:
    labels: Tuple[str, ...]  # one per config, top to bottom
    parts: Tuple[Tuple[Tuple[str, float], ...], ...]  # per config: (part, milliseconds a batch), in PART_ORDER


def batch_time_data(times: Sequence[BatchTime], framework: str = "") -> StackedBars:
    """What the chart draws: each config's parts in milliseconds a batch."""
    labels, parts = [], []
    for t in times:
        labels.append(f"{ROLE_WORDS.get(t.role, t.role)}: {config_words(t.config, framework)}"
                      if t.role != "ceiling" else ROLE_WORDS["ceiling"])
        by_name = {p.name: p.s for p in t.parts}
        parts.append(tuple((name, 1000 * by_name[name]) for name in PART_ORDER if name in by_name))
    return StackedBars(labels=tuple(labels), parts=tuple(parts))


def draw_batch_time(data: StackedBars) -> str:
    fig = plots.new_figure(7.0, 0.5 * len(data.labels) + 0.9)
    ax = fig.add_subplot(1, 1, 1)
    plots.style_axes(ax)
    ax.set_xlabel("milliseconds a batch", fontsize=8, color=plots.INK)
    ys = list(range(len(data.labels)))[::-1]
    seen = set()
    for y, parts in zip(ys, data.parts):
        left = 0.0
        for name, value in parts:
            if value <= 0:
                continue
            ax.barh(y, value, left=left, color=PART_COLORS.get(name, plots.INK), height=0.6,
                    label=None if name in seen else LEGEND.get(name, name),
                    hatch="//" if name.startswith("slowdown") else None)
            seen.add(name)
            left += value
    ax.set_yticks(ys)
    ax.set_yticklabels(data.labels, fontsize=7)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, frameon=False)
    return plots.to_svg(fig)


def beyond_section(times: Sequence[BatchTime], loading: Optional[LoadingProfile], framework: str = "") -> List[str]:
    """The section's HTML pieces (every string in them escaped)."""
    body: List[str] = []
    if times:
        body.append("<h2>Where a batch's time goes</h2>")
        body.append(draw_batch_time(batch_time_data(times, framework)))
        body.append("<ul class=\"reasons\">" + "".join(
            f"<li>{esc(ROLE_WORDS.get(t.role, t.role))}: {esc(batch_time_words(t))}</li>" for t in times) + "</ul>")
        body.append("<p class=\"note\">Each part is measured: the loop's wait in the loader's <code>__next__</code>, "
                    "split by the training thread's CPU time there; the step with nothing loading beside it, from "
                    "the compute ceiling's replay (or the script at 0 workers); the step's slowdown beside the "
                    "workers is the rest of the step. ± is half the range over the window's chunks.</p>")
    if loading is not None:
        body.append("<h2>Where the loading code spends its time</h2>")
        body.append(table([("share of loading", True), ("function or line", False), ("time", False)],
                          _loading_rows(loading)))
        per_call = loading.wall_s / loading.calls if loading.calls else None
        body.append(f"<p class=\"note\">{esc(loading.dataset)}: {loading.calls} loading calls, {esc(ms(per_call))} "
                    f"each, computing {esc(fmt_pct(loading.cpu_s / loading.wall_s if loading.wall_s else None))} of "
                    f"the time; sampled every {esc(ms(loading.interval_s))} in "
                    f"{'the training process' if loading.in_main else str(loading.processes) + ' process(es)'} "
                    f"(sampling cost {esc(ms(loading.sampler_cpu_s))} of CPU). Functions count what they call; "
                    "a line is where the user's code was, library calls folded into it.</p>")
    return body


def _loading_rows(p: LoadingProfile) -> List[Tuple[str, Sequence[str]]]:
    rows = []
    for kind, items in (("function", costs(p, lines=False)), ("line", costs(p))):
        for c in items:
            words = cost_words(c).split(": ", 1)[-1]
            rows.append(("", (esc(fmt_pct(c.share)), esc(f"{kind} {line_words(c.site, c.function)}"), esc(words))))
    return rows
