"""``feedprof gpus`` in words: an nvidia-smi-like table, then what looks
abandoned and the command that ends it (feedprof never ends a process)."""
from __future__ import annotations

import textwrap
from typing import List, Optional

from feedprof.store.procs import ORPHAN_ADOPTED, ORPHAN_JOB_GONE, ORPHAN_KERNEL_UNOWNED, GpusView, ProcessInfo
from feedprof.render.commands import cut, short_command
from feedprof.render.words import gpu_status
from feedprof.units import fmt_bytes, fmt_pct

_ROW = "{mark}{pid:>7}  {user:<9.9} {mem:>10}  {kind:<4} {parent:<16.16}  {command}"


def why_abandoned(p: ProcessInfo) -> List[str]:
    """The reasons a process looks abandoned, as phrases (empty: it does not)."""
    why = []
    if p.orphan == ORPHAN_ADOPTED:
        why.append(f"its parent is gone (PID {p.ppid} {p.parent_command or '?'} adopted it)")
    # A gone leader says the job ended only where the record classified it so: a job whose
    # leader exited while the process's parent goes on is still running.
    if p.orphan in (ORPHAN_ADOPTED, ORPHAN_JOB_GONE) and p.pgid not in (None, p.pid) and p.group_leader_alive is False:
        why.append(f"its job, process group {p.pgid}, has ended (PID {p.pgid} is gone)")
    if p.orphan == ORPHAN_KERNEL_UNOWNED:
        why.append("a Jupyter kernel its server no longer knows (its connection file is gone)")
    if p.state == "zombie":
        why.append(f"it has exited but is not reaped: ending its parent (PID {p.ppid}) frees it")
    return why


def end_command(p: ProcessInfo) -> str:
    if p.state == "zombie" and p.ppid and p.ppid > 1:  # a zombie goes when its parent reaps it or ends
        return f"kill {p.ppid}"
    return f"kill {p.pid}"


def process_row(p: ProcessInfo, mem: Optional[int], kind: str, width: Optional[int]) -> str:
    flagged = bool(p.orphan) or p.state == "zombie"
    parent = "" if p.ppid is None else f"{p.ppid} {p.parent_command}".strip()
    if not p.visible:
        command = "(not in this PID namespace: run feedprof gpus on the host to see it)"
    elif width is not None:  # a terminal: the program's name, not a virtual environment's long path
        command = short_command(p.command, None)
    else:  # a pipe or a file: the command line whole
        command = p.command
    row = _ROW.format(mark="!" if flagged else " ", pid=p.pid, user=p.user or "?",
                      mem=fmt_bytes(mem) if mem is not None else "n/a", kind=kind, parent=parent or "?",
                      command=command)
    return cut(row, width)


def format_gpus(view: GpusView, width: Optional[int] = None) -> str:
    """The view as text; ``width`` (a terminal's columns) cuts long command lines
    and shows each program by its name (None: every command line whole)."""
    if view.status != "ok":

        return f"feedprof gpus: GPU {gpu_status(view.status, view.detail)}"
    n = len(view.gpus)
    driver = f"driver {view.driver_version}, " if view.driver_version else ""
    lines = [f"feedprof gpus: {driver}{n} GPU{'s' if n != 1 else ''} visible to CUDA"]
    flagged = []
    for g in view.gpus:
        util = fmt_pct(None if g.util_pct is None else g.util_pct / 100)
        power = "n/a" if g.power_w is None else f"{g.power_w:.0f} W"
        label = f"cuda:{g.cuda_index}" if g.cuda_index is not None else f"NVML {g.nvml_index}"
        lines += ["", cut(f"{label}  {g.name}  (NVML index {g.nvml_index}, {g.uuid})", width),
                  f"  utilisation {util}   memory {fmt_bytes(g.mem_used_bytes)} of "
                  f"{fmt_bytes(g.mem_total_bytes)}   power {power}"]
        if g.processes is None:
            lines.append("  NVML would not list the processes on this GPU")
            continue
        if not g.processes:
            lines.append("  no processes")
            continue
        lines.append(cut(_ROW.format(mark=" ", pid="PID", user="user", mem="GPU memory", kind="type",
                                     parent="parent", command="command"), width))
        for gp in g.processes:
            lines.append(process_row(gp.process, gp.gpu_mem_bytes, gp.kind, width))
            if why_abandoned(gp.process):
                flagged.append((g, gp))
    if flagged:
        lines += ["", f"! {len(flagged)} process{'es' if len(flagged) != 1 else ''} on a GPU look"
                      f"{'' if len(flagged) != 1 else 's'} abandoned (feedprof never ends a process itself):"]
        for g, gp in flagged:
            p = gp.process
            where = f"cuda:{g.cuda_index}" if g.cuda_index is not None else f"NVML {g.nvml_index}"
            held = "memory" if gp.gpu_mem_bytes is None else fmt_bytes(gp.gpu_mem_bytes)
            why = cut(f"  PID {p.pid} holds {held} on {where}: " + "; ".join(why_abandoned(p)), None)
            lines += textwrap.wrap(why, width - 1, subsequent_indent="    ") if width else [why]
            lines.append(f"    end it with: {end_command(p)}")
    return "\n".join(lines)
