"""A plain PyTorch loop as most are written: torch's intra-op threads left at
their default (one per core), an MLP step of ~35 ms on 2 idle cores, an I/O-bound dataset
(every sample waits 2 ms on storage, no CPU), batches of 16, written with
num_workers=0. Loading and the step take about as long each, so anything that
slows the step beside another busy process shows in the rate
(benchmarks/overhead.py --cli). Best: several workers."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 20000

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.full((256,), float(i % 7)), i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=100)
    args = ap.parse_args()
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Remote(), batch_size=16, shuffle=True, num_workers=args.workers)
    for _ in range(args.epochs):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x.repeat(32, 1)), y.repeat(32)).backward()
            opt.step()


if __name__ == "__main__":
    main()
