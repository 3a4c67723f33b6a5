"""I/O-bound remote reads: every sample waits 4 ms on "the network" and
costs almost no CPU. Best: many more workers than CPUs."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 50000

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((64,), float(i % 7)), i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Remote(), batch_size=16, shuffle=True, num_workers=args.workers)
    for epoch in range(100):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
