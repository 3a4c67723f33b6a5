"""Plain-text summaries for terminals and ``print(prof.summary())``."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from feedprof.analyse.batch_time import profile_batch_time
from feedprof.analyse.loading import training_loading
from feedprof.render.words.threads import pools_line
from feedprof.render.leftovers import format_leftovers
from feedprof.render.progress import format_recommendation
from feedprof.render.ranks import format_ranks
from feedprof.render.words import gpu_status, say
from feedprof.render.words.attach import attached_lines
from feedprof.render.words.beyond import batch_time_words, loading_words
from feedprof.store import HostInfo, InputBound, Run, Summary, TuneResult
from feedprof.store.procs import Leftovers
from feedprof.store.reasons import GpuUnavailable, Reason
from feedprof.units import fmt_bytes, fmt_cores, fmt_num, fmt_pct, fmt_rate, fmt_seconds

VERDICT_WORDS = {InputBound.HIGHLY: "highly input-bound", InputBound.MODERATELY: "moderately input-bound",
                 InputBound.NOT: "not input-bound", InputBound.UNKNOWN: "input-bound: unknown"}


def verdict_words(input_bound: InputBound) -> str:
    return VERDICT_WORDS.get(input_bound, input_bound)


def verdict_line(s: Summary) -> str:
    words = verdict_words(s.input_bound)
    if s.data_wait_fraction is None:
        return words
    return f"{words}: the loop waits for data {fmt_pct(s.data_wait_fraction)} of the time"


def gpu_line(s: Summary, host: Optional[HostInfo] = None) -> str:
    if s.gpu_util_pct:
        return ", ".join(f"cuda:{i} {fmt_pct(None if u is None else u / 100)}"
                         for i, u in enumerate(s.gpu_util_pct)) + " utilisation"
    note = next((n for n in s.notes if isinstance(n, GpuUnavailable)), None)
    if note is not None:
        return gpu_status(note.status, note.detail)
    return gpu_status(host.gpu_status, host.gpu_status_detail) if host is not None else "not sampled"


def epoch_line(s: Summary) -> str:
    """The epoch rate beside the training rate, where per-epoch costs make them differ."""
    rate, cost = s.sustained_batches_per_s, s.per_epoch_cost_s
    if rate is None or not cost or not s.batches_per_epoch:
        return ""
    return (f"{fmt_rate(rate)} over whole epochs: each epoch's {s.batches_per_epoch} batches with its start-up and "
            f"what the loop does between epochs (validation, checkpoints), {fmt_seconds(cost)} an epoch")


def format_summary(s: Summary, host: Optional[HostInfo] = None, leftovers: Optional[Leftovers] = None,
                   run: Optional[Run] = None) -> str:
    """The summary's rows; ``leftovers`` (``Run.leftovers``) adds what the run left behind; ``run``
    where a batch's time goes and where the loading code spent it."""
    workers = "" if s.num_workers is None else f", {s.num_workers} worker{'s' if s.num_workers != 1 else ''}"
    lines = [f"feedprof: {s.loader or 'no loader'} ({s.framework or 'unknown framework'}{workers})"]
    row = lambda k, v: lines.append(f"  {k:<12} {v}")  # noqa: E731
    row("verdict", verdict_line(s))
    for line in (attached_lines(run.attached) if run is not None and run.attached is not None else ()):
        row("attached", line)
    if run is not None and run.attached is not None and run.attached.rest:
        row("the rest", "; ".join(f"{fmt_pct(x.wall_s / max(run.attached.window_s, 1e-9))} "
                                  f"{x.site + ' ' if x.site else ''}({x.function})" for x in run.attached.rest[:4]))
    if s.batches_per_s is not None:
        spread = ""
        if s.n_chunks > 1:
            spread = f" ({fmt_num(s.batches_per_s_low)}–{fmt_num(s.batches_per_s_high)} over {s.n_chunks} chunks)"
        samples = f", {fmt_rate(s.samples_per_s, 'samples/s')}" if s.samples_per_s is not None else ""
        row("training", f"{fmt_rate(s.batches_per_s)} while the loop trains{spread}{samples}; "
                        f"{s.batches_measured} batches measured over {fmt_seconds(s.measured_s)}")
        epoch = epoch_line(s)
        if epoch:
            row("per epoch", epoch)
    if s.time_to_first_batch_s is not None:
        later = "" if s.epoch_startup_s is None else f"; later epochs start in {fmt_seconds(s.epoch_startup_s)}"
        row("first batch", f"{fmt_seconds(s.time_to_first_batch_s)}{later}")
    others = f", other processes {s.other_cpu_cores:.2f} cores" if s.other_cpu_cores else ""
    row("CPU", f"system {fmt_pct(None if s.system_cpu_pct is None else s.system_cpu_pct / 100)}, "
               f"main process {fmt_cores(s.main_cpu_pct)}, workers {fmt_cores(s.workers_cpu_pct)}{others}")
    row("GPU", gpu_line(s, host))
    mem = [f"peak RSS of the process tree {fmt_bytes(s.peak_tree_rss_bytes)}"]
    if s.peak_tree_pss_bytes is not None:
        mem.append(f"PSS {fmt_bytes(s.peak_tree_pss_bytes)}")
    if s.peak_worker_pss_bytes is not None:
        mem.append(f"largest worker PSS {fmt_bytes(s.peak_worker_pss_bytes)} (USS {fmt_bytes(s.peak_worker_uss_bytes)})")
    if s.peak_shm_used_bytes is not None:
        mem.append(f"/dev/shm peak {fmt_bytes(s.peak_shm_used_bytes)}")
    row("memory", "; ".join(mem))
    if s.peak_main_fds is not None:
        worker = f", busiest worker {s.peak_worker_fds}" if s.peak_worker_fds is not None else ""
        limit = f" (limit {s.fd_limit} per process)" if s.fd_limit else ""
        row("open files", f"main process {s.peak_main_fds}{worker}{limit}")
    pools = pools_line(run) if run is not None else ""
    if pools:
        row("threads", pools)
    for k, v in beyond_rows(run):
        row(k, v)
    for note in s.notes:
        if not isinstance(note, GpuUnavailable):
            row("note", say(note))
    left = format_leftovers(leftovers)
    return "\n".join(lines + ([left] if left else []))


def beyond_rows(run: Optional[Run]) -> List[Tuple[str, str]]:
    """Where a batch's time goes in the run, and where its loading code spent its time."""
    if run is None:
        return []
    rows = []
    t = profile_batch_time(run) if run.attached is None else None  # (attached: no batch was timed)
    if t is not None:
        rows.append(("batch time", batch_time_words(t)))
    profile = training_loading(run)
    if profile is not None:
        rows += [("loading", line) for line in loading_words(profile)]
    return rows


def words_for(obj: Any) -> str:
    """feedprof.text(): any record feedprof returns, in words."""
    if isinstance(obj, TuneResult):
        return format_recommendation(obj.recommendation, obj)
    if isinstance(obj, Run):
        return "\n".join(filter(None, [format_summary(obj.summary or Summary(), obj.host, obj.leftovers, obj),
                                        format_ranks(obj)]))
    if isinstance(obj, Summary):
        return format_summary(obj)
    if isinstance(obj, Reason):
        return say(obj)
    raise TypeError(f"feedprof.text() words a TuneResult, Run, Summary or finding, not a {type(obj).__name__}")
