"""What a run left behind (``Run.leftovers``), in words for the summary, the
tune's closing text and the HTML report."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from feedprof.render.commands import short_command
from feedprof.store import Run, TuneResult
from feedprof.store.procs import Leftovers
from feedprof.units import fmt_bytes

FEEDPROF_COMMANDS = ("feedprof.trial.child", "feedprof.trial.zygote")  # what a fork of a trial inherits


def _where(cuda_index: Optional[int], uuid: str) -> str:
    return f"cuda:{cuda_index}" if cuda_index is not None else uuid


def leftover_items(lo: Optional[Leftovers]) -> List[Tuple[str, str]]:
    """(what is left, the command that ends it) for each thing left behind."""
    if not lo:
        return []
    held: Dict[int, List[str]] = {}
    for h in lo.gpu_memory:
        amount = "memory" if h.used_bytes is None else fmt_bytes(h.used_bytes)
        held.setdefault(h.pid, []).append(f"{amount} on {_where(h.cuda_index, h.uuid)}")
    items = []
    for p in lo.processes:
        gpu = f", holding {' and '.join(held.pop(p.pid))}" if p.pid in held else ""
        if any(m in p.command for m in FEEDPROF_COMMANDS):  # forked, not exec'd: it shows our trial's command
            what = f"PID {p.pid}, a fork of the script, is still running{gpu}"
        else:
            what = f"PID {p.pid} is still running{gpu}" + (f": {short_command(p.command)}" if p.command else "")
        items.append((what, f"kill {p.pid}"))
    for pid, places in held.items():  # gone from the process table, yet NVML still lists it
        items.append((f"PID {pid} has ended but the GPU still holds {' and '.join(places)} for it",
                      "feedprof gpus (the driver frees it once the process is fully gone)"))
    for what in lo.slurm:
        items.append((f"Slurm {'step' if '.' in what else 'job'} {what} is still listed by squeue", f"scancel {what}"))
    return items


def afterwards_words(lo: Optional[Leftovers]) -> str:
    """One line on what the run left: for the report's details."""
    if lo is None:
        return "not checked (a run inside your own process)"
    if lo:
        n = len(lo.processes) + len(lo.gpu_memory)
        return f"{n} thing{'s' if n != 1 else ''} left behind: see above"
    gpu = "; no process of the run holds GPU memory" if lo.gpu_checked else ""
    return f"every process of the run had ended{gpu}"


def format_leftovers(lo: Optional[Leftovers]) -> str:
    """Rows for the plain-text summary ("" when nothing was left behind)."""
    rows = [f"{what} (end it with: {how})" for what, how in leftover_items(lo)]
    return "\n".join(f"  {'left behind' if i == 0 else '':<12} {row}" for i, row in enumerate(rows))


def tune_leftovers(result: TuneResult) -> List[Tuple[str, Leftovers]]:
    """(trial label, what it left) for every trial that left something."""
    return [(f"trial #{t.index} ({t.role})", t.run.leftovers) for t in result.trials
            if t.run is not None and t.run.leftovers]


def labelled_leftovers(obj: object) -> List[Tuple[str, Leftovers]]:
    if isinstance(obj, TuneResult):
        return tune_leftovers(obj)
    if isinstance(obj, Run) and obj.leftovers:
        return [("the run", obj.leftovers)]
    return []


def format_tune_leftovers(result: TuneResult) -> str:
    """Lines for the tune's closing text ("" when no trial left anything)."""
    found = tune_leftovers(result)
    if not found:
        return ""
    lines = ["Left behind after the trials ended (feedprof ends a trial's process group, not what escaped it):"]
    for label, lo in found:
        lines += [f"  - {label}: {what} (end it with: {how})" for what, how in leftover_items(lo)]
    return "\n".join(lines)
