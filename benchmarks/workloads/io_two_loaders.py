"""I/O-bound training with a validation loader: every sample waits 6 ms on
storage (a remote read) and costs little CPU; after each 500-batch training
epoch, a validation pass runs through its own loader. Best: many more
training workers than CPUs, though not without limit (each worker's batches
still cross into the main process on 2 cores)."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class StoredImages(Dataset):
    """Records on slow storage: each read waits, then decodes a small image."""

    def __init__(self, n, read_s=0.006):
        self.n, self.read_s = n, read_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.read_s)
        image = torch.full((3, 32, 32), float(i % 255) / 255)
        return image, i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(StoredImages(8000), batch_size=16, shuffle=True, num_workers=args.workers)
    val = DataLoader(StoredImages(256), batch_size=64, num_workers=4)
    for epoch in range(args.epochs):
        model.train()
        for x, y in train:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in val:
                correct += (model(x).argmax(1) == y).sum().item()
        print(f"epoch {epoch}: val acc {correct / len(val.dataset):.3f}", flush=True)


if __name__ == "__main__":
    main()
