"""The paste for the thread-pool and core knobs (store/knobs/threads.py): code of the user's own that
does what feedprof did in the trial (frameworks/thread_limits.py), beside the loader's line.

    worker_threads N  ─► a worker_init_fn that holds the worker's pools (threadpoolctl), then runs the
                         script's own one where the loader had one; the loader's call passes it
                         (``worker_init_fn=hold_worker_pools``, written at the call)
                         where the training process computes on a GPU, the variables on the command
                         line do the same and change nothing else (OMP_NUM_THREADS=N ... python train.py)
    main_threads N    ─► torch.set_num_threads(N), once, before the loop
    main_cores K      ─► os.sched_setaffinity for the training process, and in each worker for the rest
"""
from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from feedprof.frameworks.scope import argument
from feedprof.frameworks.source import find_call, parse_file, resolve_site
from feedprof.store.knobs.threads import threads_of

HOLD_FN = "hold_worker_pools"  # the worker_init_fn the paste defines
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class ThreadPaste:
    """Lines to add to the script (each with where it goes), the keywords its loader call takes as
    code (``worker_init_fn=hold_worker_pools``), and a command line that does the same where one can."""

    preamble: Tuple[str, ...] = ()
    code: Tuple[Tuple[str, str], ...] = ()
    command: str = ""


def thread_paste(config: Dict[str, object], chain: Sequence[str], names: Sequence[str], positional: Sequence[str],
                 script: str, argv: Sequence[str], cuda_used: Optional[bool]) -> ThreadPaste:
    t = threads_of(dict(config))
    if not t:
        return ThreadPaste()
    site = chain[-1] if chain else ""
    where = resolve_site(site, script) if site else None
    own = _own_worker_init(where, names, positional)
    pre: List[str] = []
    code: List[Tuple[str, str]] = []
    if "worker_threads" in t or "main_cores" in t:
        pre += _hold_fn(t, own, site)
        code.append(("worker_init_fn", HOLD_FN))
    if "main_threads" in t:
        pre.append(f"torch.set_num_threads({t['main_threads']})  # once, before the training loop "
                   "(the training process's torch threads)")
    if "main_cores" in t:
        pre.append(f"os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:{t['main_cores']}])  "
                   "# before the loop: the training process on cores of its own")
    command = ""
    if set(t) == {"worker_threads"} and not own and cuda_used:  # (on a CPU step the variables would hold its pools too)
        words = [f"{v}={t['worker_threads']}" for v in THREAD_VARS] + ["python", script, *argv]
        command = " ".join(shlex.quote(w) if "=" not in w else w for w in words)
    return ThreadPaste(preamble=tuple(pre), code=tuple(code), command=command)


def _hold_fn(t: Dict[str, int], own: str, site: str) -> List[str]:
    at = f" (for the DataLoader at {site})" if site else ""
    lines = [f"from threadpoolctl import threadpool_limits  # pip install threadpoolctl{at}",
             f"def {HOLD_FN}(worker_id):"]
    if "main_cores" in t:
        lines.append(f"    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[{t['main_cores']}:])"
                     "  # the workers on the cores the training process leaves")
    if "worker_threads" in t:
        lines.append(f"    threadpool_limits({t['worker_threads']})  # this worker's BLAS/OpenMP pools: "
                     f"{t['worker_threads']} thread{'s' if t['worker_threads'] != 1 else ''} each")
    if own:
        lines.append(f"    ({own})(worker_id)  # the loader's own worker_init_fn")
    return lines


def _own_worker_init(where: Optional[Tuple[str, int]], names: Sequence[str], positional: Sequence[str]) -> str:
    """The source of the worker_init_fn the script's loader call passes ("" none, or not found)."""
    if where is None:
        return ""
    tree = parse_file(where[0])
    call = find_call(tree, where[1], names) if tree is not None else None
    node = argument(call, "worker_init_fn", positional) if call is not None else None
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return ""
    return ast.unparse(node)
