"""`feedprof attach` in words (store/reasons/attach.py, store/attached.py)."""
from __future__ import annotations

import os
import shlex
from typing import Any, Callable, Dict, List, Sequence

from feedprof.store import reasons as r
from feedprof.store.attached import AttachedInfo, ProcessWait
from feedprof.units import fmt_pct


def tune_command(argv: Sequence[str], cwd: str = "") -> str:
    """`feedprof tune --online` of the job's own command line: a script run by Python as itself, else
    the whole command after --; in the job's folder where that is not here."""
    argv = list(argv)
    python = bool(argv) and os.path.basename(argv[0]).startswith("python") and len(argv) > 1 \
        and argv[1].endswith(".py")
    words = ["feedprof", "tune", "--online"] + (argv[1:] if python else ["--", *argv])
    line = " ".join(shlex.quote(w) for w in words)
    return f"cd {shlex.quote(cwd)} && {line}" if cwd and os.path.abspath(cwd) != os.getcwd() else line


def _advice(x: r.AttachAdvice, d: Callable) -> str:
    measure = (f" Measure it in the real run, where nothing it trains on changes: {tune_command(x.command, x.cwd)}"
               if x.command else "")
    return (f"The loop waited for data {fmt_pct(x.wait_share)} of the samples with num_workers={x.workers}: "
            f"num_workers={x.predicted_workers} is the count that wait predicts reaches the compute ceiling "
            f"(predicted, not measured).{measure}")


def wait_words(w: ProcessWait) -> str:
    who = "the training process" if w.role == "training" else \
        f"worker {w.worker_id} (pid {w.pid})" if w.worker_id is not None else f"pid {w.pid}"
    where = f"{w.site} ({w.function})" if w.site else w.function
    doing = "computing" if w.active else "waiting (a lock, a read, a queue, a sleep)"
    return f"{who}: {doing} at {where}"


def _stopped(x: r.LoopStopped, d: Callable) -> str:
    parts = "; ".join(wait_words(w) for w in x.waits)
    return f"The loop did not get a batch in the whole window: it is stuck in the loader. Where each process waits: {parts}."


def _no_loader(x: r.NoLoaderSeen, d: Callable) -> str:
    return (f"None of the training thread's {x.samples} samples was inside a PyTorch DataLoader's __next__: no "
            "wait for data to read. feedprof attach reads PyTorch DataLoader loops; this job may load through "
            "Keras or tf.data, be outside its training loop (start-up, evaluation, a checkpoint), or iterate "
            "no DataLoader. Read it again while it trains, or run feedprof profile on its script.")


def attached_lines(a: AttachedInfo) -> List[str]:
    """The attached run's own rows: how it was read, and its figures' noise."""
    noise = f" ± {fmt_pct(a.wait_noise)}" if a.wait_noise is not None else ""
    wait = (f"the loop waited for data {fmt_pct(a.wait_share)}{noise} of its samples"
            if a.wait_share is not None else "no sample of the loop")
    out = [f"read from outside by {a.sampler} at {a.rate_hz} Hz for {a.window_s:.0f} s, without stopping the job: "
           f"{a.samples} samples of the training thread; {wait} (sampled, not timed)"]
    if a.unknown:
        out.append("not readable from outside: " + ", ".join(a.unknown))
    return out


REFUSED = {  # why feedprof attach could not read a process (trial/attach.py AttachRefused.why)
    "no_pid": "there is no process {pid}",
    "not_python": "process {pid} is not a Python process: feedprof attach reads a Python training job "
                  "(feedprof profile runs one itself)",
    "other_user": "process {pid} belongs to another user: attach as that user, or with sudo",
    "ptrace_scope": "this machine does not let one process read another's memory (kernel.yama.ptrace_scope is "
                    "1 or more): attach as root (sudo), or grant CAP_SYS_PTRACE (in a container: --cap-add "
                    "SYS_PTRACE), or run the job under feedprof profile instead",
    "no_pyspy": "feedprof attach reads the job with py-spy, which is not installed: pip install py-spy",
    "pyspy_failed": "py-spy could not read process {pid} ({detail}): attach as root (sudo) or with "
                    "CAP_SYS_PTRACE, or run the job under feedprof profile instead",
}


def refused(why: str, pid: int, detail: str = "") -> str:
    """The one line a PID attach cannot read gets."""
    return REFUSED.get(why, why).format(pid=pid, detail=detail or why)


def words() -> Dict[type, Callable[[Any, Callable], str]]:
    return {r.AttachAdvice: _advice, r.LoopStopped: _stopped, r.NoLoaderSeen: _no_loader}
