"""Words for what an online tune checked of the run as written: each epoch's order, draws from
the script's random streams that a switch moves, loaders no longer switched (and why).
"The same samples in the same order" is said only of epochs whose check passed."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

from feedprof.store.online import CHECK_FAILED, OnlineHold, OnlineOrderCheck, OnlineRecord
from feedprof.store.reasons.online import RandomDrawsMove, SwitchingStopped
from feedprof.units import fmt_seconds

STREAM_NAMES = {"torch": "torch's global RNG", "numpy": "numpy.random", "random": "Python's random",
                "own": "a random generator the dataset holds"}
FLAG = "--allow-rng-change"


def streams_words(streams: Sequence[str]) -> str:
    names = [STREAM_NAMES.get(s, s) for s in streams] or ["the script's random streams"]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def what_moves(where: str, streams: Sequence[str]) -> str:
    """What a switch to workers changes, for each kind of draw that moves."""
    if where == "rng_workers":
        return (f"the script's own workers draw from {streams_words(streams)} as they load (augmentation): with other "
                "workers, or other seeds, those draws fall on other samples, so the augmented values differ from a "
                "run with the script's own settings, as in any run with other settings; the samples and their order "
                "do not")
    if where == "rng_sampler":
        return (f"its sampler draws from {streams_words(streams)} as each batch is taken, and the loop draws from "
                "it too: a pool of N workers takes prefetch_factor × N batches ahead, so the two would interleave "
                "otherwise: the samples of every epoch, and the weights, change")
    later = ("from the next epoch on the shuffle order (drawn from torch's global RNG) and the weights follow"
             if "torch" in streams else f"every later draw the script makes from {streams_words(streams)} differs")
    return (f"its dataset or collate_fn draws from {streams_words(streams)} in the script's own process (at 0 "
            f"workers): with workers those draws happen in the workers, so the batches' random values change, and "
            f"{later}")


def _loader(o: OnlineRecord, loader_id: int) -> str:
    return "the tuned loader" if loader_id == o.target_loader_id else f"loader #{loader_id}"


def _epochs(numbers: Sequence[int]) -> str:
    """1–3, 5"""
    parts: List[str] = []
    for n in sorted(set(numbers)):
        if parts and parts[-1][1] == n - 1:
            parts[-1] = (parts[-1][0], n)
        else:
            parts.append((n, n))
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in parts)


def order_lines(o: OnlineRecord) -> List[str]:
    """Per loader: the epochs checked as the run as written, those where the order is the sampler's
    own after moved draws, and those whose check failed (on any rank)."""
    lines = []
    by_loader: Dict[int, List[OnlineOrderCheck]] = {}
    for c in o.order_checks:
        by_loader.setdefault(c.loader_id, []).append(c)
    for loader_id, checks in sorted(by_loader.items()):
        lines.append(_order_line(o, loader_id, checks))
    return lines


def _order_line(o: OnlineRecord, loader_id: int, checks: List[OnlineOrderCheck]) -> str:
    failed = [c for c in checks if not c.same]
    moved = [c.epoch for c in checks if c.same and c.rng_moved and c.epoch not in {f.epoch for f in failed}]
    kept = [c.epoch for c in checks if c.epoch not in {f.epoch for f in failed} and c.epoch not in moved]
    parts = []
    if kept:
        parts.append(f"the same samples in the same order as the run as written in epoch(s) {_epochs(kept)} "
                     "(checked batch by batch against its sampler)")
    if moved:
        parts.append(f"in epoch(s) {_epochs(moved)} the samples its sampler gave, in its order, after a switch had "
                     f"moved random draws ({FLAG}): not claimed as the run as written's")
    for c in failed[:3]:
        rank = f" on rank {c.rank}" if c.rank else ""
        parts.append(f"epoch {c.epoch}{rank} failed its check ({c.problem}): not claimed as the run as written's")
    own = max((c.own_iterators for c in checks), default=0)
    if own:
        parts.append(f"the {own} other iterator(s) the script took of it while an epoch was going (zip(loader, "
                     "loader), a probe batch) were torch's own, with the script's settings, untouched")
    return f"{_loader(o, loader_id)}: " + "; ".join(parts)


def randomness_lines(o: OnlineRecord) -> List[str]:
    """Only where randomness was seen: held (not switched) or moved (switched with the flag)."""
    lines = []
    for r in o.randomness:
        if r.moved_at_s is not None:
            flag = "" if r.where == "rng_workers" else f", {FLAG}"
            lines.append(f"randomness moved at {fmt_seconds(r.moved_at_s)} ({_loader(o, r.loader_id)}{flag}): "
                         f"{what_moves(r.where, r.streams)}")
        elif not r.allowed:
            lines.append(f"{_loader(o, r.loader_id)} was not switched: {what_moves(r.where, r.streams)} "
                         f"(seen at {fmt_seconds(r.t_s)}; {FLAG} switches it anyway)")
    return lines


HOLD_WORDS: Dict[str, Callable[[OnlineHold, Callable[[Dict[str, Any]], str]], str]] = {
    "check_failed": lambda h, d: (f"a check failed at {fmt_seconds(h.t_s)} ({h.detail}): "
                                  "the script's own settings from then on"),
    "iterable_ranks": lambda h, d: (
        "it is an IterableDataset in a job of several ranks: a pool that failed mid-epoch would start that "
        "rank's epoch again, so its ranks would no longer take the same number of steps (their collectives "
        f"would pair up wrongly); it kept {d(h.config)}, as written"),
    "persistent_first_epoch": lambda h, d: (
        f"it keeps its workers (persistent_workers=True): workers started later would see the dataset as the "
        f"main process has it then, and the script's own see it as it was when they started; it was switched "
        f"in its first epoch only, and kept {d(h.config)} from epoch 2"),
}


def hold_lines(o: OnlineRecord, describe: Callable[[Dict[str, Any]], str]) -> List[str]:
    """Loaders no longer switched, other than for randomness (randomness_lines says those)."""
    seen, lines = set(), []
    for h in o.holds:
        words = HOLD_WORDS.get(h.why)
        if words is None or (h.loader_id, h.why) in seen:
            continue
        seen.add((h.loader_id, h.why))
        lines.append(f"{_loader(o, h.loader_id)}: {words(h, describe)}")
    return lines


CARRY_WORDS = {
    "dataset_changed": "the dataset (or a module-level value its code reads) changed between epochs",
    "workers_draw": "the script's own workers draw from their random streams as they load",
    "own_rng": "the dataset holds a random generator of its own: fresh workers get the main process's copy "
               "every epoch, kept ones would go on drawing from theirs",
    "state_unseen": "the dataset's state is too large to check between epochs",
}


def carry_lines(o: OnlineRecord) -> List[str]:
    """Where the script's loader starts its workers every epoch: whether feedprof's served the next
    epochs (the dataset as they forked it, checked at each epoch start) or restarted as written."""
    seen, lines = set(), []
    for c in o.carries:
        if (c.loader_id, c.carried) in seen:
            continue
        seen.add((c.loader_id, c.carried))
        if c.carried:
            lines.append(f"{_loader(o, c.loader_id)}: its workers served the next epochs from epoch {c.epoch} "
                         "without the restart the script's loader makes each epoch, as persistent_workers=True "
                         "would: the dataset was as they forked it (checked at every epoch start)")
        else:
            why = CARRY_WORDS.get(c.why, c.why)
            lines.append(f"{_loader(o, c.loader_id)}: its workers started anew every epoch from epoch {c.epoch}, "
                         f"as the script's own do: {why}")
    return lines


def _draws_move(x: RandomDrawsMove, describe: Callable) -> str:
    if x.where == "rng_workers":
        return f"Randomness: {what_moves(x.where, x.streams)}."
    if not x.held:
        moved = "they moved in this run" if x.moved else "no switch moved them"
        return f"Switched with {FLAG}: {what_moves(x.where, x.streams)} ({moved})."
    predicted = (f" The wait of the script's own settings predicts about num_workers={x.predicted_workers} reaches "
                 "the compute ceiling (not measured).") if x.predicted_workers else ""
    return (f"No other setting was tried: {what_moves(x.where, x.streams)}.{predicted} To try workers anyway, run "
            f"again with {FLAG} (or draw that randomness from a generator of the dataset's own, seeded per "
            "worker, and tune again).")


def _stopped(x: SwitchingStopped, describe: Callable) -> str:
    predicted = (f" The wait of the script's own settings predicts about num_workers={x.predicted_workers} reaches "
                 "the compute ceiling (not measured).") if x.predicted_workers else ""
    if x.why == CHECK_FAILED:
        return (f"Switching stopped before another setting was measured: a check failed ({x.detail}), so the run "
                f"kept the script's own settings.{predicted} `feedprof tune` (offline) measures other settings in "
                "trials of their own.")
    return (f"Switching stopped before the search settled: the loader keeps its workers (persistent_workers=True), "
            f"and workers started after its first epoch would see the dataset otherwise than the script's own; the "
            f"advice is from what its first epoch measured.{predicted}")


def words() -> Dict[type, Callable[[Any, Callable], str]]:
    return {RandomDrawsMove: _draws_move, SwitchingStopped: _stopped}
