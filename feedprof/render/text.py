"""Plain-text summaries for terminals and ``print(prof.summary())``."""
from __future__ import annotations

from typing import Optional

from feedprof.analyse.diagnose import verdict_words
from feedprof.render.leftovers import format_leftovers
from feedprof.store import Summary
from feedprof.store_procs import Leftovers
from feedprof.units import fmt_bytes, fmt_cores, fmt_num, fmt_pct, fmt_rate, fmt_seconds

__all__ = ["format_summary", "verdict_line", "fmt_bytes", "fmt_cores", "fmt_num", "fmt_pct", "fmt_rate",
           "fmt_seconds"]


def verdict_line(s: Summary) -> str:
    words = verdict_words(s.input_bound)
    if s.data_wait_fraction is None:
        return words
    return f"{words}: the loop waits for data {fmt_pct(s.data_wait_fraction)} of the time"


def format_summary(s: Summary, gpu_status: str = "", leftovers: Optional[Leftovers] = None) -> str:
    """The summary's rows; ``leftovers`` (``Run.leftovers``) adds what the run left behind."""
    workers = "" if s.num_workers is None else f", {s.num_workers} worker{'s' if s.num_workers != 1 else ''}"
    lines = [f"feedprof: {s.loader or 'no loader'} ({s.framework or 'unknown framework'}{workers})"]
    row = lambda k, v: lines.append(f"  {k:<12} {v}")  # noqa: E731
    row("verdict", verdict_line(s))
    if s.batches_per_s is not None:
        spread = ""
        if s.n_chunks > 1:
            spread = f" ({fmt_num(s.batches_per_s_low)}–{fmt_num(s.batches_per_s_high)} over {s.n_chunks} chunks)"
        samples = f", {fmt_rate(s.samples_per_s, 'samples/s')}" if s.samples_per_s is not None else ""
        row("throughput", f"{fmt_rate(s.batches_per_s)}{spread}{samples}; "
                          f"{s.batches_measured} batches measured over {fmt_seconds(s.measured_s)}")
    if s.time_to_first_batch_s is not None:
        later = "" if s.epoch_startup_s is None else f"; later epochs start in {fmt_seconds(s.epoch_startup_s)}"
        row("first batch", f"{fmt_seconds(s.time_to_first_batch_s)}{later}")
    row("CPU", f"system {fmt_pct(None if s.system_cpu_pct is None else s.system_cpu_pct / 100)}, "
               f"main process {fmt_cores(s.main_cpu_pct)}, workers {fmt_cores(s.workers_cpu_pct)}")
    if s.gpu_util_pct:
        row("GPU", ", ".join(f"cuda:{i} {fmt_pct(None if u is None else u / 100)}"
                             for i, u in enumerate(s.gpu_util_pct)) + " utilisation")
    else:
        gpu_note = next((n for n in s.notes if n.startswith("GPU:")), gpu_status or "GPU: not sampled")
        row("GPU", gpu_note.removeprefix("GPU: "))
    mem = [f"peak RSS of the process tree {fmt_bytes(s.peak_tree_rss_bytes)}"]
    if s.peak_tree_pss_bytes is not None:
        mem.append(f"PSS {fmt_bytes(s.peak_tree_pss_bytes)}")
    if s.peak_worker_pss_bytes is not None:
        mem.append(f"largest worker PSS {fmt_bytes(s.peak_worker_pss_bytes)} (USS {fmt_bytes(s.peak_worker_uss_bytes)})")
    if s.peak_shm_used_bytes is not None:
        mem.append(f"/dev/shm peak {fmt_bytes(s.peak_shm_used_bytes)}")
    row("memory", "; ".join(mem))
    for note in s.notes:
        if not note.startswith("GPU:"):
            row("note", note)
    left = format_leftovers(leftovers)
    return "\n".join(lines + ([left] if left else []))
