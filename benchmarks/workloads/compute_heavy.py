"""Compute-bound with too many workers: the step is ~30 ms of matrix work,
loading is nearly free, and the script asks for 8 workers anyway. Best: few
or no workers (they only cost memory)."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=args.workers)
    w = torch.randn(512, 512)
    for epoch in range(100):
        for x, y in loader:
            h = torch.randn(256, 512)
            for _ in range(30):
                h = torch.tanh(h @ w)


if __name__ == "__main__":
    main()
