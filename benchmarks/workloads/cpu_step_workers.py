"""A CPU-heavy step beside CPU-heavy workers: an MLP step computed by torch's intra-op threads (left
at their default, one per core) while the loader's workers decode on the CPU (~2 ms of interpreter
work a sample), written with 2 workers. On 2 cores the step's threads and the workers take each
other's cores: the question is whether a thread or core setting (torch.set_num_threads, cores of
its own) helps, and by how much."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Decoded(Dataset):
    def __len__(self):
        return 20000

    def __getitem__(self, i):
        acc = 0
        for k in range(20000):  # ~1.5 ms of interpreter work a sample
            acc += (k * i) & 7
        return torch.full((256,), float(acc % 5)), i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=100)
    args = ap.parse_args()
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Decoded(), batch_size=8, shuffle=True, num_workers=args.workers)
    for _ in range(args.epochs):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x.repeat(16, 1)), y.repeat(16)).backward()
            opt.step()


if __name__ == "__main__":
    main()
