"""A long single-epoch pretraining run on remote storage: every sample waits 4 ms
on "the network" (no CPU), the step is small, and the run is one pass over the
data, so no epoch boundary ever comes. Seeded, written with num_workers=0.
Best: many workers; an offline tune's trials never see the run's end."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((64,), float(i % 7)), i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=40000)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Shards(args.samples), batch_size=16, shuffle=True, num_workers=args.workers)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        time.sleep(0.003)  # the rest of the step (an accelerator's, on a GPU machine)


if __name__ == "__main__":
    main()
