"""A DistributedDataParallel job on 2 ranks (launched by torchrun, gloo on the
CPU): every sample waits 3 ms on storage and costs little CPU, each rank reads
its own shard (DistributedSampler) with the script's num_workers=0. The job
steps as fast as its slowest rank (gradients are averaged every step). Best:
many workers per rank, fewer than a single process would want, since two
ranks' workers share the 2 cores.

    torchrun --nproc-per-node 2 benchmarks/workloads/ddp_io.py [--epochs 6]
"""
import argparse
import gc
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

LAUNCH = ("torchrun", "--nproc-per-node", "2")  # how benchmarks/tune_vs_grid.py starts it


class RemoteRecords(Dataset):
    def __init__(self, n, read_s=0.003):
        self.n, self.read_s = n, read_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.read_s)
        return torch.full((16,), float(i % 7)), i % 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=6)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    model = DistributedDataParallel(nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = RemoteRecords(4000)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=0)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        if dist.get_rank() == 0:
            print(f"epoch {epoch} done", flush=True)
    # (gloo's abort at exit under load: see SLURM_DDP in tests/scripts_jobs.py)
    dist.barrier()
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
