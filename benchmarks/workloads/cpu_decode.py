"""CPU-bound decode: every sample costs ~2 ms of pure CPU work in the loader
(standing in for JPEG decoding and augmentation). Best: as many workers as
there are CPUs, not more."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Decoded(Dataset):
    def __len__(self):
        return 20000

    def __getitem__(self, i):
        acc = 0
        for k in range(30000):  # ~2 ms of interpreter work per sample
            acc += (k * i) & 7
        return torch.full((3, 16, 16), float(acc % 5)), i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(768, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Decoded(), batch_size=8, shuffle=True, num_workers=args.workers)
    for epoch in range(100):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
