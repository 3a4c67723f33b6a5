"""Beyond the knobs, in words: where a batch's time goes, what binds, what would close the gap
(store/reasons/beyond.py), and a loading profile's costliest lines (analyse/loading.py)."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from feedprof.analyse.diagnose import workers_of
from feedprof.analyse.loading import Cost, costs
from feedprof.store import BatchTime, LoadingProfile
from feedprof.store import reasons as r
from feedprof.units import fmt_pct, fmt_rate

PART_WORDS = {
    "blocked": "waiting for the workers",
    "loop_loading": "receiving batches from the workers",
    "step_alone": "the step alone",
    "slowdown": "the step's slowdown beside the workers",
    "slowdown_runq": "the step waiting for a CPU beside the workers",
    "slowdown_cpu": "more CPU work in each step beside the workers",
    "slowdown_wait": "the step waiting on something else beside the workers",
    "step": "the step (alone and beside the workers, not told apart here)",
}
# At 0 workers the loop loads each batch itself: its wait is its own loading, waiting or computing
PART_WORDS_NO_WORKERS = {**PART_WORDS, "blocked": "loading, waiting (I/O, sleep, a lock)",
                         "loop_loading": "loading, computing"}
ALONE_FROM = {"ceiling": "as the compute ceiling's replay ran it",
              "no_workers": "as it ran with nothing loading beside it (the script's own settings)"}
BOUND_WORDS = {
    "waiting": "the loop waits for loaders whose code mostly waits (I/O, sleep, a lock), not computes",
    "cores": "the loop waits for loaders whose code computes, and the workers fill the CPUs: the cores are the limit",
    "workers": "the loop waits for loaders whose code computes, with CPU time to spare: more workers can help",
    "training_process": "the training process spends that time on its own loading work (receiving each batch "
                        "from the workers, or at 0 workers the loading itself)",
    "contention": "the step runs slower beside the workers, mostly waiting for a CPU: the workers take the "
                  "training process's cores",
    "step_work": "the step runs slower beside the workers, mostly doing more CPU work each step: fresh batches to "
                 "touch and copy, caches and memory bandwidth shared with the workers",
    "step_waits": "the step runs slower beside the workers, mostly waiting on something that is neither a CPU nor "
                  "its own work (on a GPU job: the copy of each fresh batch to the device, or the device)",
    "step_slower": "the step runs slower beside the workers (why was not told apart: the training process's CPU "
                   "was not sampled in both runs)",
}
REMEDY_WORDS = {
    "own_cores": "Give the training process cores of its own (keep the workers off them: os.sched_setaffinity "
                 "in a worker_init_fn, or fewer workers)",
    "receive_less": "Give the training process less to receive a batch: fewer, larger tensors per sample "
                    "(stack them in the dataset), smaller dtypes before the copy (uint8, not float32)",
    "pin_memory": "{config}",
    "cheaper_line": "Make {line} cheaper",
    "cache_line": "Cache what {line} produces (decoded samples in memory or on disk), so later epochs skip it",
    "device_line": "Move {line} to the GPU, batched (torchvision.io.decode_jpeg(device='cuda'), GPU augmentations "
                   "on the whole batch)",
    "thread_workers": "{line} waits rather than computes: threads wait as well as processes, for less memory "
                      "(torchdata.nodes ParallelMapper(method='thread'))",
    "more_prefetch": "{config}",
    "hold_pools": "{config}",
    "main_threads": "{config}",
    "smaller_copy": "Copy less to the device each step: keep samples uint8 until they are on the GPU, and convert "
                    "and normalise there",
}


def ms(seconds: Optional[float]) -> str:
    return "n/a" if seconds is None else f"{1000 * seconds:.1f} ms"


def line_words(site: str, function: str) -> str:
    return f"{site} ({function})" if site else function


def batch_time_words(t: BatchTime) -> str:
    """"21.7 ms a batch = 1.1 ms waiting for the workers + ...": the parts that add up to it."""
    names = PART_WORDS if workers_of(t.config) else PART_WORDS_NO_WORKERS
    parts = [f"{ms(p.s)} {names.get(p.name, p.name)}"
             + (f" (±{ms(p.spread_s)})" if p.spread_s and p.spread_s >= 0.05 * max(p.s, 1e-9) else "")
             for p in t.parts if p.s >= 0.0005 or p.name in ("step_alone", "step")]
    alone = f"; the step alone {ALONE_FROM[t.step_alone_from]}" if t.step_alone_from in ALONE_FROM else ""
    return f"{ms(t.batch_s)} a batch = " + " + ".join(parts) + alone


def _gap(x: r.GapExplained, d: Callable) -> str:
    short = f"{fmt_pct(x.fraction_short)} short of its step alone ({ms(x.step_alone_s)} a batch)" \
        if x.step_alone_s else "its step alone was not measured here"
    names = PART_WORDS if workers_of(x.config) else PART_WORDS_NO_WORKERS
    split = [(x.slowdown_runq_s, names["slowdown_runq"]), (x.slowdown_cpu_s, names["slowdown_cpu"]),
             (x.slowdown_wait_s, names["slowdown_wait"])]
    parts = [(x.blocked_s, names["blocked"]), (x.loop_loading_s, names["loop_loading"])] + (
        split if x.slowdown_wait_s is not None else [(x.slowdown_s, names["slowdown"])])
    because = ", ".join(f"{ms(s)} {words}" for s, words in parts if s is not None and s >= 0.0005)
    bound = BOUND_WORDS.get(x.bound, "")
    share = f" (its loading code computes {fmt_pct(x.loading_cpu_share)} of its time)" \
        if x.bound in ("waiting", "cores", "workers") and x.loading_cpu_share is not None else ""
    head = f"Where a batch's time goes with {d(x.config)}: {ms(x.batch_s)} a batch, {short}"
    if not bound:
        return f"{head}; no part of the gap is a real share: the job runs at its step's pace."
    return f"{head}, because of {because}. What binds: {bound}{share}."


def _remedy(x: r.Remedy, d: Callable) -> str:
    text = REMEDY_WORDS.get(x.kind, x.kind).format(line=line_words(x.site, x.function), config=d(x.config))
    cost = f" (it costs {ms(x.seconds_per_batch)} a batch, {fmt_pct(x.share)} of the loading time)" \
        if x.site or x.function else ""
    if x.measured_batches_per_s is not None:
        return (f"{text}: measured {fmt_rate(x.measured_batches_per_s)} over whole epochs, against the pick's "
                "figure above.")
    if x.predicted_batches_per_s is not None:
        return (f"{text}{cost}: predicted {fmt_rate(x.predicted_batches_per_s)} while training, from "
                f"{fmt_rate(x.from_batches_per_s)} (predicted from the measured parts, not measured).")
    return f"{text}{cost}."


def _not_measured(x: r.PartNotMeasured, d: Callable) -> str:
    return {
        "step_alone": "Not measured here: the step alone (no compute ceiling bounded anything, and the script's "
                      "own settings have workers), so the step's slowdown beside the workers is not told apart "
                      "from the step.",
        "loading_profile": "Not measured here: where the loading code spends its time (no loading call was seen: "
                           "a loader feedprof does not profile, or workers started by spawn or forkserver).",
        "loop_loading": "Not measured here: the training process's own loading work (the framework pulls batches "
                        "where Python cannot see them).",
    }.get(x.part, f"Not measured here: {x.part} ({x.why}).")


def words() -> Dict[type, Callable[[Any, Callable], str]]:
    return {r.GapExplained: _gap, r.Remedy: _remedy, r.PartNotMeasured: _not_measured}


def cost_words(c: Cost) -> str:
    """One line of the loading code: its share, and what its time is."""
    if not c.split:
        return f"{fmt_pct(c.share):>5} {line_words(c.site, c.function)}: {ms(c.seconds_per_call)} a call"
    if not c.seconds_per_call:  # (attached: shares of samples, no calls counted)
        wait = max(0.0, 1 - c.cpu_share - c.runq_share)
        kind = f"computing {fmt_pct(c.cpu_share)}" if c.computes else f"waiting {fmt_pct(wait)} (I/O, sleep, a lock)"
        return f"{fmt_pct(c.share):>5} {line_words(c.site, c.function)}: {kind}"
    wait = max(0.0, 1 - c.cpu_share - c.runq_share)
    kind = (f"computing {fmt_pct(c.cpu_share)}" + (f", waiting for a CPU {fmt_pct(c.runq_share)}"
                                                  if c.runq_share >= 0.05 else "")
            if c.computes else f"waiting {fmt_pct(wait)} (I/O, sleep, a lock)")
    return f"{fmt_pct(c.share):>5} {line_words(c.site, c.function)}: {ms(c.seconds_per_call)} a call, {kind}"


def loading_words(p: LoadingProfile) -> List[str]:
    """The profile's costliest functions (with what they call) and lines, one per row."""
    per_call = p.wall_s / p.calls if p.calls else 0.0
    where = "the training process" if p.in_main else f"{p.processes} worker process(es)"
    if p.source == "attached":
        head = (f"the loading code in {where}, sampled from outside: computing "
                f"{fmt_pct(p.cpu_s / p.wall_s if p.wall_s else None)} of its time")
    elif p.source == "tf.data":
        head = (f"{p.dataset}: its ops' own time (tf.data's statistics, inputs left out; parallel calls summed), "
                f"{ms(per_call)} an element in all")
    else:
        head = (f"{p.dataset}: {p.calls} loading calls in {where}, {ms(per_call)} each, computing "
                f"{fmt_pct(p.cpu_s / p.wall_s if p.wall_s else None)} of it")
    return [head] + [f"function {cost_words(c)}" for c in costs(p, lines=False)] + \
        [f"line     {cost_words(c)}" for c in costs(p)]
