"""Words and the timeline for an online tune (``feedprof tune --online``)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from feedprof.analyse.evidence import config_key
from feedprof.render.words.autotune import autotune_lines
from feedprof.render.online_checks import FLAG, carry_lines, hold_lines, order_lines, randomness_lines, what_moves
from feedprof.render.words import config_words
from feedprof.store import TuneResult
from feedprof.store.online import TORCH_SWITCHED
from feedprof.units import fmt_bytes, fmt_pct, fmt_rate, fmt_seconds

FAILED = {"killed": "a worker was killed", "hung": "no batch came", "error": "an error in a worker",
          "memory": "the job's memory passed the budget"}
WHY_NOT = {"iterable_dataset": "an IterableDataset: its worker count decides what each worker yields, so another "
                               "count would change the samples of an epoch (their batches and their order) unless "
                               "the dataset shards by a fixed key; it ran with its own settings. With "
                               "--allow-resharding feedprof switches such a loader between epochs, and each epoch's "
                               "samples are then those of the worker count in force",
           "persistent_iterable": "an IterableDataset with persistent_workers=True: it is switched only between "
                                  "epochs, and its own workers outlive the first, so there is no epoch to switch "
                                  "at; `feedprof tune` (offline) tunes it",
           "out_of_order": "in_order=False: batches may arrive out of order, so a switch could lose some",
           "own_iterator": "a DataLoader subclass with its own iterator",
           "framework:tf.data": "a tf.data pipeline: AUTOTUNE already tunes its parallelism inside the run, and "
                                "feedprof does not rebuild a pipeline mid-run; `feedprof tune` (offline) explores "
                                "the private thread pool and the settings AUTOTUNE leaves alone",
           "pydataset_unbounded": "a Keras PyDataset without a length: there is no epoch's order to keep across a "
                                  "switch; `feedprof tune` (offline) tunes workers and use_multiprocessing",
           "steps_per_epoch": "a Keras PyDataset read with fit(steps_per_epoch=...) other than its length: Keras "
                              "carries its iterator across epochs in a way a switch cannot keep; `feedprof tune` "
                              "(offline) tunes it",
           "framework:tf.keras": "legacy tf.keras fit(workers=...): tuned offline only (`feedprof tune`)",
           "framework:torchdata.nodes": "a torchdata.nodes pipeline: tuned offline only (`feedprof tune`)",
           "framework:ray.data": "Ray Data's iter_torch_batches: tuned offline only (`feedprof tune`)"}
SWITCHED_AT = {"mid_epoch": "at batch boundaries, the epoch's order kept",
               "epoch": "between epochs only (an IterableDataset, --allow-resharding)"}


def why_not_words(code: str) -> str:
    """Why a loader was observed rather than switched, from its reason code."""
    kind, _, detail = code.partition(":")
    if kind == "torch_version":
        (a, b), (c, d) = TORCH_SWITCHED
        return (f"torch {detail}: online switching supports torch {a}.{b} to {c}.{d}, whose DataLoader internals it "
                "was tested against; `feedprof tune` (offline) tunes it")
    if kind == "torch_private":
        return (f"this torch's DataLoader iterator is not as online switching expects ({detail}); "
                "`feedprof tune` (offline) tunes it")
    return WHY_NOT.get(code, code)



def online_lines(result: TuneResult) -> List[str]:
    """What the run did, for the terminal and the report."""
    o = result.online
    if o is None:
        return []
    configs = {config_key(s.config) for s in o.switches}
    ended = "to its own end" if not o.exit_code else f"and ended with its own status {o.exit_code}"
    if not result.complete:
        ended = "until it was interrupted"
    if len(configs) <= 1 and not o.failures:  # (no switch, or only to the script's own: a held loader)
        return [f"The job ran once, {ended}; its loader's settings were not changed"] \
            + _untuned_lines(result, unchanged=True) + autotune_lines(result.run) + _check_lines(result)
    lines = [f"The job ran once, {ended}; feedprof {_tried_words(result)} over {fmt_seconds(o.explored_s)} of "
             f"the run ({len(o.windows)} windows), switching {SWITCHED_AT.get(o.switch_at, o.switch_at)}"]
    if o.settled_at_s is not None:
        lines.append(f"settled on {config_words(o.settled_config, result.framework)} at {fmt_seconds(o.settled_at_s)} "
                     f"and kept it for the rest of the run")
    else:
        lines.append("the run ended before the search settled; the pick is from what was measured")
    lines += [_failure_line(f, result.framework) for f in o.failures]
    lines += _untuned_lines(result, unchanged=False) + autotune_lines(result.run)
    if o.workers_changed and o.switch_at == "epoch":
        lines.append("the loader's settings changed between epochs only: an IterableDataset decides what each "
                     "worker yields, so each epoch's samples (their batches and their order) were those of the "
                     "worker count in force, as --allow-resharding allowed")
    return lines + _check_lines(result)


def _tried_words(result: TuneResult) -> str:
    """How many configs the run tried, counted as the throughput chart and the table count them
    (its evidence: every config measured, or that failed before its first window), not by its
    switches: a switch the run ended before measuring (or a loader rebuilt since) is no config tried."""
    keys = {config_key(e.config) for e in result.evidence}
    failed = sum(1 for e in result.evidence if e.failed)
    rec = result.recommendation
    own = config_key(rec.baseline_config) in keys if rec is not None and rec.baseline_config else False
    words = f"tried {len(keys)} config(s)" + (", the script's own settings included" if own else "")
    if failed:
        words += f" ({failed} of them failed)"
    tried = {config_words(e.config, result.framework) for e in result.evidence}
    unmeasured = {config_words(s.config, result.framework) for s in result.online.switches if s.config} - tried
    if unmeasured:
        words += f", and switched to {len(unmeasured)} more that no window measured"
    return words


def _failure_line(f: Any, framework: str) -> str:
    failed = f"{config_words(f.config, framework)} failed at {fmt_seconds(f.t_s)} ({FAILED[f.kind]})"
    after = "the run went on; no config with as many workers was tried after"
    if f.kind == "memory":  # (no pool failed: feedprof left the config at the next batch)
        took = f" ({fmt_bytes(f.taken_bytes)} of {fmt_bytes(f.budget_bytes)})" if f.taken_bytes and f.budget_bytes else ""
        return (f"{config_words(f.config, framework)} was left at {fmt_seconds(f.t_s)}: the job's memory passed the "
                f"budget{took}, so the best measured config with fewer workers took over at the next batch; {after}")
    if f.replayed_batches is None:
        return f"{failed}: the batches in flight were fetched again with the script's own settings and {after}"
    epoch = f"epoch {f.epoch}" if f.epoch else "its epoch"
    again = (f"the {f.replayed_batches} batch(es) the loop had of it came again, then the rest of it"
             if f.replayed_batches else "the loop had had none of it yet")
    return (f"{failed}: an IterableDataset's iterator cannot go on where dead workers were, so {epoch} started "
            f"again from its first sample with the script's own settings ({again}); {after}")


def _check_lines(result: TuneResult) -> List[str]:
    """What was checked of the run as written: randomness only where it was seen, the order only
    where its check passed."""
    o = result.online
    return (randomness_lines(o) + hold_lines(o, lambda c: config_words(c, result.framework)) + carry_lines(o)
            + order_lines(o))


def _untuned_lines(result: TuneResult, unchanged: bool) -> List[str]:
    o = result.online
    lines = [f"the training loader was not tuned online: {why_not_words(m.why_not)}"
             for m in o.loaders if m.mode == "none"]
    lines += [f"another loader (#{m.loader_id}, a validation pass?) waited {fmt_pct(float(m.why_not or 0))} "
              f"of its time with its own settings: it took the tuned loader's config from then on"
              for m in o.loaders if m.mode == "follows"]
    if not o.switches and not o.loaders:
        lines.append("no loader that feedprof switches online (a torch DataLoader, a Keras PyDataset) was iterated")
    s = result.run.summary if result.run is not None else None
    if unchanged and s is not None and s.batches_per_s:
        wait = f", waiting for data {fmt_pct(s.data_wait_fraction)} of the time" \
            if s.data_wait_fraction is not None else ""
        lines.append(f"the run measured {fmt_rate(s.batches_per_s)} with its own settings{wait}")
    return lines


STEP_WORDS = {"climb": "trying more workers", "refine": "trying fewer workers, as fast",
              "pools": "the same workers, each one's thread pools held to its share of the cores",
              "confirm": "measuring again, interleaved with its rival", "measuring": "measuring",
              "retreat_memory": "leaving a config whose memory passed the budget",
              "retreat_failed": "leaving the kept config: it failed (a worker was killed, hung or raised an error)",
              "settled": "settled: kept for the rest of the run", "budget": "explore budget spent: kept for the rest",
              "not_input_bound": "not input-bound: the script's own settings are kept", "baseline": "measuring",
              "held": "no more switching (the summary says why): kept for the rest of the run"}


def decision_line(config: Dict[str, Any], why: str, final: bool, t_s: float, framework: str = "torch",
                  held: str = "", predicted_workers: Optional[int] = None) -> str:
    """One progress line per decision, on stderr while the job's own output goes on."""
    at = f"feedprof --online: {fmt_seconds(t_s)} into the run:"
    if why != "held" or not held.startswith("rng_"):
        return f"{at} {config_words(config, framework)} ({STEP_WORDS.get(why, why)})"
    would = (f"; it would have tried num_workers={predicted_workers}, which the wait of these settings predicts "
             "reaches the compute ceiling") if predicted_workers else ""
    return (f"{at} held at {config_words(config, framework)}: {what_moves(held, ())}{would}. "
            f"{FLAG} lets the run try other settings")


def format_online(result: TuneResult) -> str:
    lines = online_lines(result)
    return "\n".join(["feedprof --online: " + lines[0]] + [f"  - {line}" for line in lines[1:]]) if lines else ""


def timeline_data(result: TuneResult) -> Tuple[List[Tuple[float, float]], List[float], List[float], List[str]]:
    """What the timeline draws: rank 0's windows in time order, each (its span, its rate, its data
    wait %, the config in force in the words of the chart's bars); empty without windows."""
    o = result.online
    ws = sorted((w for w in o.windows if w.rank == 0), key=lambda w: w.t_start_s) if o is not None else []
    return ([(w.t_start_s, w.t_end_s) for w in ws], [w.batches_per_s for w in ws],
            [100 * w.wait_fraction for w in ws], [config_words(w.config, result.framework) for w in ws])


def timeline_svg(result: TuneResult) -> str:
    """The report's timeline of an online run (rank 0's windows), or "" without windows."""
    from feedprof.render import plots

    spans, rates, waits, labels = timeline_data(result)
    if not spans:
        return ""
    o = result.online
    return plots.draw_timeline(spans, rates, waits, labels, o.settled_at_s, [f.t_s for f in o.failures])