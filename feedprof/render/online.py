"""Words and the timeline for an online tune (``feedprof tune --online``)."""
from __future__ import annotations

from typing import Any, Dict, List

from feedprof.store import TuneResult
from feedprof.units import fmt_seconds

FAILED = {"killed": "a worker was killed", "hung": "no batch came", "error": "an error in a worker"}
WHY_NOT = {"iterable_dataset": "an IterableDataset: the worker count decides what each worker yields",
           "out_of_order": "in_order=False: batches may arrive out of order, so a switch could lose some",
           "own_iterator": "a DataLoader subclass with its own iterator"}


def describe_config(config: Dict[str, Any]) -> str:
    from feedprof.frameworks.torch import describe_config as torch_words

    return torch_words(config) if config else "the script's own settings"


def online_lines(result: TuneResult) -> List[str]:
    """What the run did, for the terminal and the report."""
    o = result.online
    if o is None:
        return []
    configs = {repr(sorted(s.config.items())) for s in o.switches}
    ended = "to its own end" if not o.exit_code else f"and ended with its own status {o.exit_code}"
    if not result.complete:
        ended = "until it was interrupted"
    lines = [f"The job ran once, {ended}; feedprof explored {len(configs)} config(s) over "
             f"{fmt_seconds(o.explored_s)} of the run ({len(o.windows)} windows)"]
    if o.settled_at_s is not None:
        lines.append(f"settled on {describe_config(o.settled_config)} at {fmt_seconds(o.settled_at_s)} "
                     f"and kept it for the rest of the run")
    else:
        lines.append("the run ended before the search settled; the pick is from what was measured")
    for f in o.failures:
        lines.append(f"{describe_config(f.config)} failed at {fmt_seconds(f.t_s)} ({FAILED[f.kind]}): "
                     f"the batches in flight were fetched again with the script's own settings and the run "
                     f"went on; no config with as many workers was tried after")
    for mode in o.loaders:
        if mode.mode != "mid_epoch":
            lines.append(f"loader {mode.loader_id} was not tuned online: {WHY_NOT.get(mode.why_not, mode.why_not)}")
    if o.workers_changed:
        lines.append("the samples and their order were the script's own; randomness inside the workers "
                     "(augmentation drawn in a worker) follows the worker count, so it differed from a run as written")
    return lines


def format_online(result: TuneResult) -> str:
    lines = online_lines(result)
    return "\n".join(["feedprof --online: " + lines[0]] + [f"  - {line}" for line in lines[1:]]) if lines else ""


def timeline_svg(result: TuneResult) -> str:
    """The report's timeline of an online run (rank 0's windows), or "" without windows."""
    from feedprof.render import plots

    o = result.online
    ws = sorted((w for w in o.windows if w.rank == 0), key=lambda w: w.t_start_s) if o is not None else []
    if not ws:
        return ""
    return plots.draw_timeline([(w.t_start_s, w.t_end_s) for w in ws], [w.batches_per_s for w in ws],
                               [100 * w.wait_fraction for w in ws], [describe_config(w.config) for w in ws],
                               o.settled_at_s, [f.t_s for f in o.failures])
