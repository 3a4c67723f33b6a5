"""What a torch config changes beyond speed, and the one knob that changes it on purpose.

NOTE [ Settings that change the order of samples ]

    persistent_workers=True   the loader's iterator is made once, not every epoch; making it draws the
                              workers' seed from the generator the sampler shuffles with (torch's global
                              RNG without generator=, else the loader's generator): one draw fewer per
                              epoch, so from the second epoch on a seeded shuffle gives another order
                              (tests/test_order.py shows it on a real DataLoader). A sampler with its own
                              generator keeps the order.
                              A random generator the dataset holds (self.rng): each epoch's fresh
                              workers start from the main process's copy of it, so every epoch's
                              draws repeat; persistent workers carry theirs on, and the draws from
                              the second epoch on change (the augmentations a seeded run sees).
    num_workers > 0 (from 0)   the same generator drew in the main process, one stream over the run;
                              in workers each starts from a copy of it (unless a worker_init_fn reseeds
                              it): their streams begin alike, and restart every epoch unless persistent.
    num_workers N -> M         batches go to the workers in turn, each drawing from its own copy: with
                              another count each batch gets another worker's draws (own_rng_workers);
                              N -> 0: one stream in the main process over the run (own_rng_main).
    in_order=False            batches are handed over as they are ready (torch >= 2.6): a slow sample no
                              longer holds back every batch behind it (head-of-line blocking), but the
                              order changes. Measured where the wait shows that blocking; recommended
                              only with --allow-reorder, otherwise reported (InOrderGain).

Each becomes an OrderChanges finding on the recommendation that turns it on (TorchSpace.paste).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from feedprof.store import LoaderRecord, Trial
from feedprof.store.reasons import InOrderGain, OrderChanges, Reason

HOL_TOP_SHARE = 0.10  # the longest waits, as a share of the window's batches ...
HOL_MIN_WAIT_SHARE = 0.5  # ... hold at least this share of the whole wait: one slow sample holds up the rest
HOL_MIN_WAIT = 0.05  # and the loop waits at least this share of the time


def supports_in_order() -> bool:
    """torch's DataLoader takes in_order (2.6 and later)."""
    import inspect

    from torch.utils.data import DataLoader

    return "in_order" in inspect.signature(DataLoader.__init__).parameters


def order_findings(config: Dict[str, Any], loader: Optional[LoaderRecord]) -> List[Reason]:
    """OrderChanges for the settings ``config`` turns on that change what a seeded script sees."""
    script = getattr(loader, "script_config", None) or {}
    site = getattr(loader, "site", "") or ""
    rng = getattr(loader, "shuffle_rng", "") or ""
    out: List[Reason] = []
    turns_on_persistent = bool(config.get("num_workers") and config.get("persistent_workers")
                               and not script.get("persistent_workers"))
    if turns_on_persistent and rng in ("global", "loader"):
        out.append(OrderChanges(knobs=("persistent_workers",), cause="persistent_workers", shuffle_rng=rng,
                                site=site))
    own = tuple(getattr(loader, "own_rng", ()) or ())
    n, n_script = config.get("num_workers") or 0, script.get("num_workers") or 0
    if own and n and not n_script:  # its draws leave the main process
        knobs = ("num_workers", "persistent_workers") if config.get("persistent_workers") else ("num_workers",)
        out.append(OrderChanges(knobs=knobs, cause="own_rng", site=site, generators=own))
    elif own and n and n != n_script:  # batches go to the workers in turn: each gets another worker's draws
        knobs = ("num_workers", "persistent_workers") if turns_on_persistent else ("num_workers",)
        out.append(OrderChanges(knobs=knobs, cause="own_rng_workers", site=site, generators=own))
    elif own and not n and n_script:  # back into the main process: one stream where each worker had a copy
        out.append(OrderChanges(knobs=("num_workers",), cause="own_rng_main", site=site, generators=own))
    elif own and turns_on_persistent:
        out.append(OrderChanges(knobs=("persistent_workers",), cause="own_rng", site=site, generators=own))
    if config.get("num_workers") and config.get("in_order") is False and script.get("in_order") is not False:
        out.append(OrderChanges(knobs=("in_order",), cause="in_order", shuffle_rng=rng, site=site))
    return out


def in_order_variant(cfg: Dict[str, Any], best: Trial) -> List[Dict[str, Any]]:
    """in_order=False at the best config, where its wait shows head-of-line blocking (and torch has it)."""
    if not cfg.get("num_workers") or "in_order" in cfg or not head_of_line(best):
        return []
    return [{**cfg, "in_order": False}] if supports_in_order() else []


def head_of_line(trial: Trial) -> Optional[bool]:
    """Does the wait show head-of-line blocking: a few long waits (a slow sample holding back the batches
    behind it) rather than an even wait on every batch? None: not observable."""
    if not (trial.config.get("num_workers") or 0) or trial.data_wait_fraction is None:
        return None
    run = trial.run
    rec = next((r for r in run.loaders if r.loader_id == run.window.loader_id), None) if run else None
    if rec is None or not rec.steps.wait_s:
        return None
    start, end = run.window.t_start_s, run.window.t_end_s
    waits = sorted((w for t, w in zip(rec.steps.t_end_s, rec.steps.wait_s)
                    if start is None or end is None or start <= t <= end), reverse=True)
    total = sum(waits)
    if len(waits) < 10 or total <= 0:
        return None
    top = sum(waits[:max(1, int(len(waits) * HOL_TOP_SHARE))])
    return trial.data_wait_fraction >= HOL_MIN_WAIT and top / total >= HOL_MIN_WAIT_SHARE


def in_order_gain(pick: Trial, trials: Sequence[Trial], allowed: bool, key: Any) -> Optional[InOrderGain]:
    """in_order=False against in-order delivery at the same other settings: the pick's own pair where it was
    measured, else the pair where out-of-order delivery measured fastest."""
    from feedprof.analyse.measured import score

    pairs = []
    for t in trials:
        if t.config.get("in_order") is not False or not score(t):
            continue
        base = {k: v for k, v in t.config.items() if k != "in_order"}
        twins = [s for s in trials if key(s.config) == key(base) and score(s)]
        if twins:
            pairs.append((base, score(twins[-1]), score(t)))
    if not pairs:
        return None
    mine = [p for p in pairs if key(p[0]) == key({k: v for k, v in pick.config.items() if k != "in_order"})]
    base, in_order, out_of_order = mine[-1] if mine else max(pairs, key=lambda p: p[2])
    return InOrderGain(config=base, in_order_batches_per_s=in_order, out_of_order_batches_per_s=out_of_order,
                       allowed=allowed)
