"""Two loaders and short epochs: a train loader (2 ms of waiting per sample)
and a validation loader run after every 40-batch epoch. Worker start-up is a
real share of each epoch, so persistent_workers matters."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Shard(Dataset):
    def __init__(self, n, wait_s):
        self.n, self.wait_s = n, wait_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.wait_s)
        return torch.full((32,), float(i % 3)), i % 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(Shard(640, 0.002), batch_size=16, shuffle=True, num_workers=args.workers)
    val = DataLoader(Shard(64, 0.001), batch_size=32, num_workers=args.workers)
    for epoch in range(200):
        for x, y in train:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        with torch.no_grad():
            for x, y in val:
                model(x)


if __name__ == "__main__":
    main()
