"""A loader whose stages cost what they are built to cost, and say what they cost: every sample is
read from "storage" (a 3 ms wait, no CPU), decoded (2 ms of pure-Python CPU) and augmented (1 ms
of pure-Python CPU), each stage timed by the workload itself (wall and CPU time, per process, in
STAGES_TIMERS_DIR/stages-<pid>.json, flushed every second), so that a profiler's shares can be
checked against timers that share no code with it (benchmarks/stages.py). The step is a 5 ms wait
(the CPU idle, as while a GPU computes); --step-cpu-ms makes it CPU work instead (a step that
competes with the workers for the cores). --read-ms, --decode-ms, --augment-ms set each stage's cost
(a remedy applied: a stage made cheaper), --own-cores K keeps K cores for the training process (its
workers on the rest).

    python benchmarks/workloads/stages_known.py [--workers N] [--step-cpu-ms 20] [--decode-ms 0]
"""
import argparse
import json
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

TIMERS: dict = {}  # stage -> [wall_s, cpu_s, calls], this process's
_flushed = [0.0]


def timed(stage):
    def wrap(fn):
        def run(*args):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*args)
            finally:
                cell = TIMERS.setdefault(stage, [0.0, 0.0, 0])
                cell[0] += time.perf_counter() - t
                cell[1] += time.thread_time() - c
                cell[2] += 1
                _flush()
        return run
    return wrap


def _flush():
    out = os.environ.get("STAGES_TIMERS_DIR")
    now = time.perf_counter()
    if not out or now - _flushed[0] < 1.0:
        return
    _flushed[0] = now
    path = os.path.join(out, f"stages-{os.getpid()}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(TIMERS, fh)
    os.replace(path + ".tmp", path)


def spin(seconds):
    """Pure-Python CPU work for `seconds` of this thread's CPU time."""
    t = time.thread_time()
    x = 0
    while time.thread_time() - t < seconds:
        for i in range(200):
            x += i * i
    return x


COST_S = {"read": 0.003, "decode": 0.002, "augment": 0.001}  # set by the flags


@timed("read")
def read_record(i):
    time.sleep(COST_S["read"])
    return i


@timed("decode")
def decode_record(raw):
    t, x = time.thread_time(), 0  # (each stage spins in its own lines: a profile names the stage itself)
    while time.thread_time() - t < COST_S["decode"]:
        for i in range(200):
            x += i * i
    return torch.full((64,), float(raw % 7))


@timed("augment")
def augment_sample(x):
    t, y = time.thread_time(), 0
    while time.thread_time() - t < COST_S["augment"]:
        for i in range(200):
            y += i * i
    return x * 2


class Staged(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        return augment_sample(decode_record(read_record(i)))


@timed("step")
def train_step(x, step_cpu_s):
    if step_cpu_s:
        spin(step_cpu_s)
    else:
        time.sleep(0.005)
    return x.sum()


def own_cores(k):
    """Keep k cores for this process; its loader workers go to the rest (a worker_init_fn)."""
    allowed = sorted(os.sched_getaffinity(0))
    if k <= 0 or k >= len(allowed):
        return None
    os.sched_setaffinity(0, set(allowed[:k]))
    rest = set(allowed[k:])
    return lambda worker_id: os.sched_setaffinity(0, rest)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--step-cpu-ms", type=float, default=0.0)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--read-ms", type=float, default=3.0)
    ap.add_argument("--decode-ms", type=float, default=2.0)
    ap.add_argument("--augment-ms", type=float, default=1.0)
    ap.add_argument("--own-cores", type=int, default=0)
    args = ap.parse_args()
    COST_S.update(read=args.read_ms / 1000, decode=args.decode_ms / 1000, augment=args.augment_ms / 1000)
    torch.set_num_threads(1)
    loader = DataLoader(Staged(), batch_size=8, num_workers=args.workers, worker_init_fn=own_cores(args.own_cores))
    for _ in range(args.epochs):
        for x in loader:
            train_step(x, args.step_cpu_ms / 1000)


if __name__ == "__main__":
    main()
