"""The words for what more workers break (store/reasons/run.py, "what more workers
break", and the causes of killed or failed trials): what happens, the
numbers feedprof measured, and the fix. The package (render/words/__init__.py) merges ``WORDS``
into its table; ``say`` words a nested finding."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from feedprof.store import reasons as r
from feedprof.units import fmt_bytes, fmt_pct, fmt_seconds

SHM_REMEDY = ("the loader ran out of shared memory (/dev/shm): in Docker, run with --shm-size=8g or "
              "--ipc=host; otherwise use fewer workers or a smaller prefetch_factor")
OOM_REMEDY = ("killed, most likely by the out-of-memory killer: use fewer workers, a smaller "
              "prefetch_factor or smaller batches")
SHARD_FIX = ("info = torch.utils.data.get_worker_info(); "
             "records = itertools.islice(records, info.id, None, info.num_workers) if info else records")
ARRAYS_FIX = ("keep the data in NumPy arrays, torch tensors or Arrow (pyarrow) tables instead of Python lists "
              "and dicts of objects: touching a Python object writes its reference count, so every worker "
              "copies each page it reads")
FILES_FIX = ("raise the limit (ulimit -n 65536, or --ulimit nofile=65536:65536 in Docker), or call "
             "torch.multiprocessing.set_sharing_strategy('file_system') before building the loader")
MiB = 1 << 20


def shm_size_flag(need_bytes: float) -> str:
    """A --shm-size with room to spare: the need plus half, rounded up to a power of two MiB."""
    mib = 64
    while mib * MiB < 1.5 * need_bytes:
        mib *= 2
    return f"--shm-size={mib // 1024}g" if mib >= 1024 else f"--shm-size={mib}m"


def _sig(x: Any) -> str:
    return f"{x.signal}: " if getattr(x, "signal", "") else ""


def _with(workers: Optional[int]) -> str:
    return f" with {workers} worker{'s' if workers != 1 else ''}" if workers else ""


def _shm(x: r.SharedMemoryExhausted, d: Callable) -> str:
    if x.shm_total_bytes is None and x.need_bytes is None:
        return _sig(x) + SHM_REMEDY
    seen = f"/dev/shm is {fmt_bytes(x.shm_total_bytes)}" if x.shm_total_bytes is not None else "/dev/shm"
    if x.shm_peak_bytes is not None:
        seen += f" and its use peaked at {fmt_bytes(x.shm_peak_bytes)}"
    # it ran out: the container needs more than it has, and more than the configs that ran showed
    size = shm_size_flag(max(x.need_bytes or 0, x.shm_total_bytes or 0))
    need = f"the batches in flight need about {fmt_bytes(x.need_bytes)} (measured on the configs that ran): " \
        if x.need_bytes else ""
    fix = f"{need}in Docker, run with {size} or more, or --ipc=host; otherwise use fewer workers or a smaller " \
        "prefetch_factor"
    return f"{_sig(x)}a worker ran out of shared memory{_with(x.workers)} ({seen}): {fix}"


def _oom(x: r.OutOfMemoryKilled, d: Callable) -> str:
    figures = []
    if x.tree_pss_bytes is not None:
        figures.append(f"the job's memory peaked at {fmt_bytes(x.tree_pss_bytes)}")
    if x.worker_pss_bytes is not None:
        figures.append(f"{fmt_bytes(x.worker_pss_bytes)} PSS per worker")
    if x.ram_bytes:
        figures.append(f"of {fmt_bytes(x.ram_bytes)} of RAM")
    measured = f" ({', '.join(figures)})" if figures else ""
    return (f"{_sig(x)}killed, most likely by the out-of-memory killer{_with(x.workers)}{measured}: use fewer "
            "workers, a smaller prefetch_factor or smaller batches")


def _files(x: r.TooManyOpenFiles, d: Callable) -> str:
    held = [f"the main process held {x.main_fds}" if x.main_fds is not None else "",
            f"a worker {x.worker_fds}" if x.worker_fds is not None else ""]
    held_text = " and ".join(h for h in held if h)
    limit = f" of the limit of {x.limit_fds} per process (ulimit -n)" if x.limit_fds else ""
    measured = f"; {held_text} open files{limit}" if held_text else (f"; the limit is {x.limit_fds}" if x.limit_fds else "")
    return f"too many open files{_with(x.workers)} ({x.error}{measured}): use fewer workers, or {FILES_FIX}"


def _duplicated(x: r.DuplicatedPerWorker, d: Callable) -> str:
    evidence = []
    if x.batches_checked and x.part:
        evidence.append(f"part {x.part} of the batches (their labels, ids or names) came in the same sequence from "
                        f"every worker over the first {x.batches_checked} batches")
    elif x.batches_checked:
        evidence.append(f"the workers delivered the same batches in turn: of the first {x.batches_checked} batches "
                        f"only {x.distinct_batches} were distinct")
    if x.epoch_batches and x.single_epoch_batches:
        evidence.append(f"an epoch held {x.epoch_batches} batches or more, against {x.single_epoch_batches} "
                        "with one process")
    if x.worker_info_asked is False:
        evidence.append("its workers never called get_worker_info()")
    return (f"{x.dataset or 'The dataset'} is an IterableDataset that does not split its records between workers: "
            f"each of the {x.workers} workers yields the whole stream, so the loop gets every record {x.workers} "
            f"times ({'; '.join(evidence)}). More workers repeat the data instead of loading it faster, so this is "
            f"not a speedup, and at most one worker is recommended until __iter__ shards by worker: {SHARD_FIX}")


def _growth_projected(x: r.MemoryGrowthProjected, d: Callable) -> str:
    parts = [f"Each worker's memory grows about {fmt_bytes(x.growth_bytes_per_s)}/s (copy-on-read): one worker "
             f"holds {fmt_bytes(x.worker_now_bytes)} of its own now"]
    if x.worker_epoch_end_bytes is not None:
        epoch = f" ({fmt_seconds(x.epoch_s)})" if x.epoch_s else ""
        parts.append(f", about {fmt_bytes(x.worker_epoch_end_bytes)} by the end of an epoch{epoch}, and with "
                     f"{x.workers} worker(s) the job about {fmt_bytes(x.total_epoch_end_bytes)}")
        if x.budget_bytes:
            parts.append(f" of the {fmt_bytes(x.budget_bytes)} it may use")
    if x.persistent and x.full_copy_bytes:
        parts.append(f"; persistent workers keep growing every epoch, up to a full copy each "
                     f"({fmt_bytes(x.full_copy_bytes)})")
    return "".join(parts) + f". To fix it, {ARRAYS_FIX}."


def _capped(x: r.WorkersCapped, d: Callable, say: Callable) -> str:
    if isinstance(x.because, r.DuplicatedPerWorker):
        return say(x.because)
    verb = {"failed": "failed", "timeout": "timed out"}.get(x.state, f"was {x.state}")
    return (f"{d(x.config)} {verb} ({say(x.because) or 'no cause recorded'}): no config with "
            f"{x.max_workers + 1} or more workers is recommended or tried, and this is the best that ran with fewer.")


def _near(x: r.OpenFilesNearLimit, d: Callable) -> str:
    share = fmt_pct(x.fds / x.limit_fds) if x.limit_fds else "n/a"
    return (f"The {x.process} process held {x.fds} open files{_with(x.workers)}, {share} of its limit "
            f"({x.limit_fds}, ulimit -n): more workers or a deeper prefetch may fail with \"Too many open files\"; "
            f"{FILES_FIX}.")


def words(say: Callable[[Optional[r.Reason]], str]) -> Dict[type, Callable[[Any, Callable], str]]:
    """The table the package (render/words/__init__.py) merges into its own (``say`` words nested findings)."""
    return {
        r.SharedMemoryExhausted: _shm,
        r.OutOfMemoryKilled: _oom,
        r.TooManyOpenFiles: _files,
        r.CudaInForkedWorker: lambda x, d: (
            f"a DataLoader worker touched CUDA, which a forked process cannot use ({x.error}): build the loader "
            "with multiprocessing_context=\"spawn\", or keep CUDA out of the dataset's __getitem__ (move batches "
            "to the GPU in the training loop)"),
        r.GrowthOverMemoryBudget: lambda x, d: (
            f"its workers' memory grows (copy-on-read, {fmt_bytes(x.growth_per_batch_bytes)} per batch): by the end "
            f"of an epoch ({x.epoch_batches} batches) each worker would hold about {fmt_bytes(x.per_worker_bytes)} "
            f"and the job about {fmt_bytes(x.need_bytes)}, more than the {fmt_bytes(x.free_bytes)} it may use"),
        r.OverFdLimit: lambda x, d: (
            f"predicted to need about {x.need_fds} open files in the {x.process} process, past 80 % of its limit "
            f"({x.limit_fds}, ulimit -n): it would fail with \"Too many open files\""),
        r.DuplicatedPerWorker: _duplicated,
        r.WorkerInfoNeverAsked: lambda x, d: (
            f"{x.dataset} is an IterableDataset whose workers never call torch.utils.data.get_worker_info(); their "
            f"batches differed here, but if each worker reads the same source, every record arrives {x.workers} "
            f"times: shard it by worker ({SHARD_FIX})"),
        r.MemoryGrows: lambda x, d: (
            f"a worker's own memory (USS) grew {fmt_bytes(x.growth_bytes_per_s)}/s over {x.window_s:.1f} s "
            f"({fmt_bytes(x.uss_start_bytes)} to {fmt_bytes(x.uss_end_bytes)}"
            + (f", {fmt_bytes(x.growth_per_batch_bytes)} per batch" if x.growth_per_batch_bytes else "")
            + f"): copy-on-read, most likely; it goes on until the machine swaps or the OOM killer strikes. "
            f"To fix it, {ARRAYS_FIX}"),
        r.MemoryGrowthProjected: _growth_projected,
        r.WorkersCapped: lambda x, d: _capped(x, d, say),
        r.OpenFilesNearLimit: _near,
    }
