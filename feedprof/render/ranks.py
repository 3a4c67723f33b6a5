"""A multi-process job, rank by rank: the table (text and HTML) and the
data-wait curves of every rank on one chart."""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from feedprof.render import plots
from feedprof.render.words import say
from feedprof.store import RankInfo, Run
from feedprof.units import fmt_bytes, fmt_cores, fmt_num, fmt_pct


@dataclass(frozen=True)
class RankRow:
    rank: int
    local_rank: int
    node: str
    device: str
    state: str
    batches_per_s: Optional[float]
    data_wait_fraction: Optional[float]
    main_cpu_pct: Optional[float]
    workers_cpu_pct: Optional[float]
    peak_pss_bytes: Optional[int]


def _node(info: Optional[RankInfo]) -> str:
    if info is None:
        return ""
    return info.node + (f" (node {info.node_rank})" if info.node_rank is not None else "")


def rank_rows(run: Run) -> List[RankRow]:
    """One row per rank, grouped by node, in rank order."""
    rows = []
    for i, r in enumerate(run.ranks):
        info, s = r.rank, r.summary
        rows.append(RankRow(
            rank=info.rank if info else i, local_rank=info.local_rank if info else i,
            node=_node(info), device=info.device if info else "", state=str(r.outcome.state),
            batches_per_s=s.batches_per_s if s else None, data_wait_fraction=s.data_wait_fraction if s else None,
            main_cpu_pct=s.main_cpu_pct if s else None, workers_cpu_pct=s.workers_cpu_pct if s else None,
            peak_pss_bytes=s.peak_tree_pss_bytes if s else None))
    return sorted(rows, key=lambda row: (row.node, row.rank))


HEADERS = ("rank", "local", "node", "device", "state", "batches/s", "data wait", "CPU main", "CPU workers", "PSS")


def _cells(row: RankRow) -> Tuple[str, ...]:
    return (str(row.rank), str(row.local_rank), row.node or "?", row.device or "?", row.state,
            fmt_num(row.batches_per_s), fmt_pct(row.data_wait_fraction), fmt_cores(row.main_cpu_pct),
            fmt_cores(row.workers_cpu_pct), fmt_bytes(row.peak_pss_bytes))


def format_ranks(run: Run) -> str:
    """The per-rank table for a terminal ("" for a single process)."""
    if not run.ranks:
        return ""
    rows = [HEADERS] + [_cells(row) for row in rank_rows(run)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    lines = ["  ranks (the job runs at its slowest rank's pace):"]
    lines += ["    " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    said = self_sampled_note(run)
    return "\n".join(lines + ([f"    {said}"] if said else []))


def self_sampled_note(run: Run) -> str:
    """Which ranks' CPU and memory come from the ranks themselves ("" where feedprof sampled every rank)."""
    own = [r.rank for r in run.ranks if r.rank is not None and r.rank.self_sampled]
    if not own:
        return ""
    names = ", ".join(f"rank {info.rank} (node {info.node or '?'})" for info in own)
    here = run.host.hostname or "the launching node"
    if len(own) == 1:
        return (f"{names} measured itself on its own node: the feedprof on {here} cannot see its processes, "
                "so its CPU, memory and device figures are the rank's own; the other ranks' are feedprof's.")
    return (f"{names} measured themselves on their own nodes: the feedprof on {here} cannot see their processes, "
            "so their CPU, memory and device figures are their own; the other ranks' are feedprof's.")


def rank_waits(run: Run) -> List[Tuple[str, Tuple[float, ...], Tuple[float, ...]]]:
    """(label, times, data-wait %) per rank: what the chart draws."""
    out = []
    for i, r in enumerate(run.ranks):
        t, pct = plots.binned_wait(r)
        if t:
            out.append((f"rank {r.rank.rank if r.rank else i}", t, pct))
    return out


def rank_usage(run: Run) -> List[Tuple[str, Tuple[float, ...], Tuple[Optional[float], ...],
                                         Tuple[Tuple[float, float], ...]]]:
    """(label, times, cores, (time, GiB) points) per rank: the CPU of its process tree, its loader
    workers included, and the tree's memory: PSS where it was read (RSS counts the pages the
    workers share with the rank once per worker), else RSS."""
    gib = float(2 ** 30)
    out = []
    for i, r in enumerate(run.ranks):
        s = r.samples
        if not s.t_s:
            continue
        cores = tuple(None if m is None else (m + (w or 0.0)) / 100.0 for m, w in zip(s.main_cpu_pct, s.workers_cpu_pct))
        memory = tuple((t, p / gib) for t, p in zip(s.t_s, s.tree_pss_bytes) if p is not None) or tuple(
            (t, (m + (w or 0)) / gib) for t, m, w in zip(s.t_s, s.main_rss_bytes, s.workers_rss_bytes) if m is not None)
        info = r.rank
        label = f"rank {info.rank if info else i}" + (f" ({info.node})" if info and info.node else "")
        out.append((label, tuple(s.t_s), cores, memory))
    return out


def draw_rank_usage(usage: Sequence[Tuple[str, Tuple[float, ...], Tuple[Optional[float], ...],
                                          Tuple[Tuple[float, float], ...]]]) -> str:
    fig = plots.new_figure(8.0, 2.4)
    cpu_ax, mem_ax = fig.subplots(1, 2, sharex=True)
    plots.style_axes(cpu_ax, "CPU (cores)")
    plots.style_axes(mem_ax, "memory (GiB)")
    for k, (label, t, cores, memory) in enumerate(usage):
        color = plots.PALETTE[k % len(plots.PALETTE)]
        plots.draw_line(cpu_ax, t, cores, color, label)
        plots.draw_line(mem_ax, [x for x, _ in memory], [y for _, y in memory], color, label)
    for ax in (cpu_ax, mem_ax):
        ax.set_ylim(bottom=0)
        ax.set_xlabel("seconds", color=plots.INK, fontsize=8)
    mem_ax.legend(fontsize=7, frameon=False, labelcolor=plots.INK, loc="lower right")
    return plots.to_svg(fig)


def draw_rank_waits(waits: Sequence[Tuple[str, Tuple[float, ...], Tuple[float, ...]]]) -> str:
    fig = plots.new_figure(8.0, 2.4)
    ax = fig.add_subplot(1, 1, 1)
    plots.style_axes(ax, "data wait %")
    for k, (label, t, pct) in enumerate(waits):
        plots.draw_line(ax, t, pct, plots.PALETTE[k % len(plots.PALETTE)], label)
    ax.set_ylim(0, 100)
    ax.set_xlabel("seconds", color=plots.INK, fontsize=8)
    ax.legend(fontsize=7, frameon=False, labelcolor=plots.INK, loc="upper right")
    return plots.to_svg(fig)


def ranks_html(run: Run) -> List[str]:
    """The page's "Ranks" section ([] for a single process)."""
    if not run.ranks:
        return []
    esc = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    head = "".join(f"<th>{esc(h)}</th>" for h in HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in _cells(row)) + "</tr>" for row in rank_rows(run))
    out = ["<h2>Ranks</h2>", f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"]
    lags = [n for n in (run.summary.notes if run.summary else ()) if n.code == "straggler"]
    out += [f"<p class=\"note\">{esc(say(n))}</p>" for n in lags]
    out += [f"<p class=\"note\">{esc(said)}</p>" for said in [self_sampled_note(run)] if said]
    usage = rank_usage(run)
    if usage:
        out += ["<h2>CPU and memory per rank</h2>", draw_rank_usage(usage),
                "<p class=\"note\">Each rank's process tree: the rank and its loader workers, on its own node. Memory is "
                "PSS (pages the workers share with the rank counted once), where it was read.</p>"]
    waits = rank_waits(run)
    if waits:
        out += ["<h2>Data wait per rank</h2>", draw_rank_waits(waits),
                "<p class=\"note\">The share of each half second every rank's loop spent blocked on its own "
                "loader. Training is synchronous: a rank waiting here slows every other rank, which waits for it "
                "in the all-reduce instead.</p>"]
    return out
