"""A DistributedDataParallel job as a cluster user writes it: one task per rank under
``srun`` (the rank read from Slurm's variables) or torchrun's own ranks; gloo on the CPU;
every sample waits 4 ms on storage and costs little CPU; each rank reads its own shard
(DistributedSampler) with the script's own --workers 0. The job steps as fast as its slowest
rank. Best: several workers per rank (they wait rather than compute).

    srun -n 2 python benchmarks/workloads/ddp_slurm.py --epochs 12
    torchrun --nnodes 2 --node-rank K --nproc-per-node 1 --master-addr 127.0.0.1 \\
        --master-port P benchmarks/workloads/ddp_slurm.py
"""
import argparse
import gc
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

LAUNCH = ("srun", "-n", "2")  # how benchmarks/cluster.py starts it


class RemoteRecords(Dataset):
    def __init__(self, n, read_s=0.004):
        self.n, self.read_s = n, read_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.read_s)
        return torch.full((16,), float(i % 7)), i % 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--samples", type=int, default=1600)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    if "RANK" not in os.environ:  # a task of srun
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29541")
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = RemoteRecords(args.samples)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=args.workers)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    # (gloo's abort at exit under load: see SLURM_DDP in tests/scripts_jobs.py)
    dist.barrier()
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
