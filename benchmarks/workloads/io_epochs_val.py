"""I/O-bound training over several epochs with a validation pass after each:
4 ms per sample of storage wait, shuffled from torch's global RNG, written with
num_workers=0 for both loaders. Epoch boundaries and validation are part of the
run's time, as they are of a real job's."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((64,), float(i % 7)), i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--samples", type=int, default=6400)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(Remote(args.samples), batch_size=16, shuffle=True, num_workers=args.workers)
    val = DataLoader(Remote(args.samples // 8), batch_size=64, num_workers=0)
    for epoch in range(args.epochs):
        model.train()
        for x, y in train:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            time.sleep(0.003)
        model.eval()
        with torch.no_grad():
            loss = sum(nn.functional.cross_entropy(model(x), y).item() for x, y in val)
        print(f"epoch {epoch}: val loss {loss:.3f}", flush=True)


if __name__ == "__main__":
    main()
