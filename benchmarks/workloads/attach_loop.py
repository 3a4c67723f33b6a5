"""A training loop to attach to (benchmarks/attach_cost.py): it writes its own stopwatch (the loop's wait
inside next() and its wall time since it began, and its batches) to --clock every 0.2 s, so the
window feedprof attach reads can be checked against it, and the loop's rate before, while and after
it is read. --mode io: storage waits (4 ms a sample); decode: CPU work in the workers; stuck: a
worker deadlocks on a lock at sample 40."""
import argparse, json, os, threading, time
import torch
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=0)
p.add_argument("--mode", default="io")  # io: storage waits; decode: CPU work; stuck: a worker deadlocks
p.add_argument("--clock", required=True)
p.add_argument("--seconds", type=float, default=120)
args = p.parse_args()
LOCK = threading.Lock()


def read_from_storage(i):
    time.sleep(0.004)  # a remote read
    return i


def decode(i):
    acc = 0
    for k in range(20000):  # a JPEG decode's worth of CPU
        acc += (k * i) & 7
    return acc


class Samples(Dataset):
    def __len__(self):
        return 10 ** 6

    def __getitem__(self, i):
        if args.mode == "stuck" and i == 40:
            LOCK.acquire()
            LOCK.acquire()  # never released: this worker waits here for ever
        value = decode(i) if args.mode == "decode" else read_from_storage(i)
        return torch.tensor([value], dtype=torch.float32)


loader = DataLoader(Samples(), batch_size=8, num_workers=args.workers)
start = time.perf_counter()
wait = 0.0
batches = 0
last = 0.0
it = iter(loader)
while time.perf_counter() - start < args.seconds:
    t0 = time.perf_counter()
    batch = next(it)
    wait += time.perf_counter() - t0
    batches += 1
    time.sleep(0.002)  # the step: a GPU's, the host waits
    now = time.perf_counter()
    if now - last >= 0.2:
        last = now
        with open(args.clock, "a") as fh:
            fh.write(json.dumps({"t": time.time(), "wait_s": wait, "wall_s": now - start, "batches": batches}) + "\n")
