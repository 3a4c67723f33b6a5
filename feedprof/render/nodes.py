"""The tunes of a job's nodes on one page (``feedprof report A/results.json B/results.json``):
every node's pick and figures side by side, where they differ, then each node's own verdict."""
from __future__ import annotations

from typing import List, Tuple

from feedprof.analyse.merge import MergedTunes, NodePick
from feedprof.render.html import esc, page, table, tune_verdict
from feedprof.render.ranks import ranks_html
from feedprof.units import fmt_pct, fmt_rate

HEADERS = (("node", False), ("ranks", False), ("mode", False), ("recommended", False), ("batches/s", True),
           ("vs its own settings", True), ("input-bound", True))


def _ranks(p: NodePick) -> str:
    if not p.ranks:
        return "?"
    return f"{p.ranks[0]}–{p.ranks[-1]}" if len(p.ranks) > 2 and list(p.ranks) == list(
        range(p.ranks[0], p.ranks[-1] + 1)) else ", ".join(map(str, p.ranks))


def _row(p: NodePick, slowest: str) -> Tuple[str, List[str]]:
    label = p.label + (f" ({p.node})" if p.node and p.node != p.label else "")
    return ("picked" if p.label == slowest else "",
            [esc(label), esc(_ranks(p)), "online" if p.online else "offline", esc(p.config_text or "none"),
             esc(fmt_rate(p.batches_per_s)), esc(f"{p.speedup:.2f}×" if p.speedup else "n/a"),
             esc(fmt_pct(p.input_bound_fraction))])


def differences(m: MergedTunes) -> List[str]:
    """Where the nodes' tunes differ, in words (one sentence each)."""
    out = []
    for knob, values in m.differing:
        out.append(f"{knob} differs: " + ", ".join(f"{label} {value!r}" for label, value in values) +
                   " (each node decided for its own ranks: CPUs and storage differ between nodes)")
    if m.rate_spread is not None and m.rate_spread > 0.15:
        out.append(f"the picks' rates differ by {fmt_pct(m.rate_spread)}: a synchronous job runs at the pace of its "
                   f"slowest node, {m.slowest}; what is slower there (its disk, its CPUs, its load) sets the job's rate")
    if not out:
        out.append("every node picked the same settings, and their figures agree within "
                   f"{fmt_pct(m.rate_spread or 0.0)}")
    return out


def render_tunes(m: MergedTunes) -> str:
    body = [f"<h1>feedprof tune — {len(m.picks)} nodes of one job</h1>",
            f"<p class=\"sub\">{esc(' · '.join(p.label for p in m.picks))}</p>",
            "<h2>Every node's pick</h2>", table(HEADERS, [_row(p, m.slowest) for p in m.picks]),
            "<p class=\"note\">Each node tuned its own ranks. Highlighted: the slowest pick, whose pace a "
            "synchronous job keeps.</p>",
            "<h2>Where they differ</h2><ul class=\"reasons\">" +
            "".join(f"<li>{esc(d)}</li>" for d in differences(m)) + "</ul>"]
    for p, t in zip(m.picks, m.tunes):
        body.append(f"<h2>{esc(p.label)}{esc(' (' + p.node + ')' if p.node and p.node != p.label else '')}</h2>")
        body.append(tune_verdict(t, copy_button=False))
        picked = next((x.run for x in t.trials if t.recommendation is not None
                       and x.index == t.recommendation.trial_index and x.run is not None), None)
        run = t.run if t.run is not None else picked
        if run is not None and run.ranks:
            body += ranks_html(run)
    body.append("<footer>Merged by feedprof report from each node's results.json; this page makes no network "
                "requests.</footer>")
    return page(f"feedprof tune — {len(m.picks)} nodes", body)
