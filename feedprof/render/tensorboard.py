"""TensorBoard export of a profile (``Run``) or a tune (``TuneResult``).

NOTE [ What goes where in TensorBoard ]

    Run (profile, feedprof.profile(), one trial)  ─► LOGDIR/                    one TensorBoard run
    TuneResult ─► LOGDIR/00-baseline-num_workers=0/  one run per trial that measured (named by
                  LOGDIR/03-search-num_workers=8/    its index, role and config): they overlay
                  LOGDIR/tune/                       recommendation text, throughput per trial

    tag                                      x (step)                    one point per
    step/data_wait_ms, step/step_time_ms     batches delivered so far    steady-state step (merged
                                                                         records: mean per step)
    throughput/batches_per_s, …/samples_per_s   the same, at chunk end   chunk of the window
    cpu/*, memory/*, workers/count, gpuN/*   milliseconds since start    sampler row
    tune/batches_per_s                       trial index                 trial that measured

Every event's wall time is the moment it describes (the run's start plus
the record's time), so TensorBoard's "Relative" axis shows seconds into the
run. ``None`` means "not measured": no point is written (a gap, never a 0).
Everything is a generator feeding one synchronous writer, so memory does not
grow with the length of the run.
"""
from __future__ import annotations

import datetime as _dt
import errno
import itertools
import math
import os
import re
import time
from typing import Any, Iterator, List, NamedTuple, Optional

from feedprof.analyse import stats
from feedprof.analyse.diagnose import training_loader
from feedprof.render.progress import format_recommendation
from feedprof.render.text import format_summary
from feedprof.render.words import config_words
from feedprof.store import LoaderRecord, Run, Samples, Trial, TuneResult, Window
from feedprof.units import fmt_num, fmt_pct

MIB = 1024 * 1024
TUNE_RUN = "tune"  # the sub-run of a tune's own figures


class Scalar(NamedTuple):
    tag: str
    step: int
    t_s: float  # seconds since the run started
    value: float


# ------------------------------------------------------------ what to write


def global_steps(rec: LoaderRecord) -> Iterator[int]:
    """Per step record: batches the loader had delivered when it ended (epochs'
    first batches and warm-up included, so it is the training loop's own step)."""
    e = rec.epochs
    step, k = rec.warmup_batches, 0
    for t, n in zip(rec.steps.t_end_s, rec.steps.n_steps):
        while k < len(e.t_start_s) and e.t_start_s[k] <= t:  # epochs begun so far: their first batches
            step += e.n_epochs[k]
            k += 1
        step += n
        yield step


def step_scalars(rec: LoaderRecord) -> Iterator[Scalar]:
    """Per steady-state step: data wait (when observable) and step time, in ms."""
    s = rec.steps
    for step, t, n, wait, wall in zip(global_steps(rec), s.t_end_s, s.n_steps, s.wait_s, s.wall_s):
        if rec.wait_observable:
            yield Scalar("step/data_wait_ms", step, t, 1000.0 * wait / n)
        yield Scalar("step/step_time_ms", step, t, 1000.0 * wall / n)


def chunk_scalars(rec: LoaderRecord, window: Optional[Window] = None) -> Iterator[Scalar]:
    """Throughput of each chunk of the measured window (the chunks the summary's
    median is taken over: warm-up and settling before the window are left out)."""
    steps = list(global_steps(rec))  # bounded: a loader keeps at most STEP_CAPACITY records
    bounds = (window.t_start_s, window.t_end_s) if window and window.loader_id == rec.loader_id else (None, None)
    for index, rate in stats.chunks(rec.steps, stats.DEFAULT_CHUNKS, *bounds):
        step, t = steps[index], rec.steps.t_end_s[index]
        yield Scalar("throughput/batches_per_s", step, t, rate)
        if rec.batch_size:
            yield Scalar("throughput/samples_per_s", step, t, rate * rec.batch_size)


def sample_scalars(samples: Samples) -> Iterator[Scalar]:
    """The sampler's series: CPU, memory of the process tree, /dev/shm, GPUs."""
    columns = [
        ("cpu/system_pct", samples.system_cpu_pct, 1.0),
        ("cpu/main_cores", samples.main_cpu_pct, 0.01),
        ("cpu/workers_cores", samples.workers_cpu_pct, 0.01),
        ("workers/count", samples.n_workers, 1.0),
        ("memory/main_rss_mib", samples.main_rss_bytes, 1 / MIB),
        ("memory/workers_rss_mib", samples.workers_rss_bytes, 1 / MIB),
        ("memory/tree_rss_mib", _tree_rss(samples), 1 / MIB),
        ("memory/tree_pss_mib", samples.tree_pss_bytes, 1 / MIB),
        ("memory/tree_uss_mib", samples.tree_uss_bytes, 1 / MIB),
        ("memory/shm_used_mib", samples.shm_used_bytes, 1 / MIB),
    ]
    for g in samples.gpus:
        name = f"gpu{g.cuda_index}" if g.cuda_index is not None else f"gpu-{g.uuid}"
        columns += [
            (f"{name}/util_pct", g.util_pct, 1.0),
            (f"{name}/mem_used_mib", g.mem_used_bytes, 1 / MIB),
            (f"{name}/power_w", g.power_w, 1.0),
            (f"{name}/sm_clock_mhz", g.sm_clock_mhz, 1.0),
            (f"{name}/pcie_rx_mib_per_s", g.pcie_rx_bytes_per_s, 1 / MIB),
            (f"{name}/pcie_tx_mib_per_s", g.pcie_tx_bytes_per_s, 1 / MIB),
        ]
    for tag, values, scale in columns:
        for t, v in zip(samples.t_s, values):
            if v is not None:
                yield Scalar(tag, int(round(t * 1000)), t, v * scale)


def _tree_rss(samples: Samples) -> Iterator[Optional[int]]:
    """Main process plus workers, as the sampler's peak adds them (None only if both are)."""
    for main, workers in itertools.zip_longest(samples.main_rss_bytes, samples.workers_rss_bytes):
        yield None if main is None and workers is None else (main or 0) + (workers or 0)


def run_scalars(run: Run) -> Iterator[Scalar]:
    rec = training_loader(run)
    if rec is not None:
        yield from step_scalars(rec)
        yield from chunk_scalars(rec, run.window)
    yield from sample_scalars(run.samples)


def trial_run_name(trial: Trial) -> str:
    """``03-search-num_workers=8,persistent_workers=True``: a directory name that sorts by index."""
    what = "" if trial.role == "ceiling" else (trial.config_text or _config_name(trial.config))
    name = f"{trial.index:02d}-{trial.role}" + (f"-{what}" if what else "")
    name = re.sub(r",\s*", ",", name)
    return re.sub(r"[^A-Za-z0-9._=,+-]+", "_", name)[:120]


def _config_name(config: dict) -> str:
    """A config without its words (a hand-built trial): every knob, in name order, as a stable name."""
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


# ------------------------------------------------------------------ writing


def check_logdir(logdir: str) -> None:
    """Fail before anything is measured: ImportError if the writer is missing, OSError if DIR is not writable."""
    from feedprof.render.tb_events import require_tensorboard

    require_tensorboard()
    os.makedirs(logdir, exist_ok=True)
    if not os.access(logdir, os.W_OK):
        raise PermissionError(errno.EACCES, "not writable", logdir)


def write(obj: Any, logdir: str) -> List[str]:
    """Write ``obj`` (a Run or a TuneResult) as TensorBoard runs under ``logdir``;
    returns the event files written."""
    if isinstance(obj, TuneResult):
        return write_tune(obj, logdir)
    if isinstance(obj, Run):
        return [write_run(obj, logdir)]
    raise TypeError(f"expected a feedprof Run or TuneResult, got {type(obj).__name__}")


def write_run(run: Run, logdir: str, title: str = "") -> str:
    """One TensorBoard run in ``logdir``: the scalars of ``run`` and its summary as text."""
    from feedprof.render.tb_events import EventFile
    t0 = start_epoch_s(run.started_at, run.duration_s)
    with EventFile(logdir) as out:
        for p in run_scalars(run):
            if math.isfinite(p.value):  # a chunk measured in no time has no rate to draw
                out.scalar(p.tag, p.step, t0 + p.t_s, p.value)
        words = [title] if title else []
        if run.summary is not None:
            words.append(format_summary(run.summary))
        if words:
            out.text("summary", _preformatted("\n\n".join(words)), wall_time_s=t0 + run.duration_s)
    return out.path


def write_tune(result: TuneResult, logdir: str) -> List[str]:
    from feedprof.render.tb_events import EventFile

    paths = [write_run(t.run, os.path.join(logdir, trial_run_name(t)), title=_trial_words(t))
             for t in result.trials if t.run is not None]
    t0 = start_epoch_s(result.started_at, result.duration_s)
    with EventFile(os.path.join(logdir, TUNE_RUN)) as out:
        for t in result.trials:
            if t.state == "ok" and t.batches_per_s is not None:
                out.scalar("tune/batches_per_s", t.index, t0 + t.duration_s, t.batches_per_s)
        out.text("recommendation", recommendation_markdown(result), wall_time_s=t0 + result.duration_s)
    return paths + [out.path]


def start_epoch_s(started_at: str, duration_s: float) -> float:
    """The run's start as Unix time, from its ISO timestamp (else: now minus its duration)."""
    try:
        return _dt.datetime.fromisoformat(started_at).timestamp()
    except (TypeError, ValueError):
        return time.time() - duration_s


# ------------------------------------------------------------------- words


def recommendation_markdown(result: TuneResult) -> str:
    rows = ["| # | role | config | state | batches/s | data wait |", "|---|---|---|---|---|---|"]
    for t in result.trials:
        figures = (fmt_num(t.batches_per_s), fmt_pct(t.data_wait_fraction)) if t.state == "ok" else (t.reason, "")
        rows.append(f"| {t.index} | {t.role} | {_cell(t.config_text)} | {t.state} | {_cell(figures[0])} "
                    f"| {figures[1]} |")
    base = (result.recommendation.baseline_config if result.recommendation else None) or None
    for i, e in enumerate(result.evidence if not result.trials else ()):  # (online: configs tried in the run)
        role = "baseline" if e.config == base else "search"
        rows.append(f"| {i} | {role} | {_cell(config_words(e.config, result.framework))} "
                    f"| {'failed' if e.failed else 'ok'} | {_cell(fmt_num(e.rate))} | {fmt_pct(e.waited_share)} |")
    return _preformatted(format_recommendation(result.recommendation, result)) + "\n\n" + "\n".join(rows)


def _trial_words(t: Trial) -> str:
    head = f"trial {t.index} ({t.role}): {t.config_text or _config_name(t.config)}"
    return head + (f"\n{t.state}: {t.reason}" if t.state != "ok" else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _preformatted(text: str) -> str:
    """A Markdown code block: TensorBoard's text tab keeps the columns."""
    return "\n".join("    " + line for line in text.splitlines())
