"""Loading code that computes with numpy's BLAS: three small dense matrix products a sample
(spectrogram, whitening or graph-feature code does this). numpy's OpenBLAS starts a pool as
large as the machine in every DataLoader worker; torch holds its own intra-op pool to one
thread in workers, nothing holds numpy's. The step is light (a GPU-shaped wait)."""
import argparse
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Features(Dataset):
    def __init__(self, n, size):
        rng = np.random.default_rng(0)
        self.n = n
        self.m = rng.standard_normal((size, size)).astype(np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.m * (1 + i % 7)
        for _ in range(3):
            x = x @ self.m
            x /= np.abs(x).max()
        for _ in range(3):  # and elementwise work (numpy runs it in one thread)
            x = np.tanh(x) * 0.5 + np.sqrt(np.abs(x))
        return torch.from_numpy(x[:8, :8].copy()), i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--size", type=int, default=160)
    ap.add_argument("--step-ms", type=float, default=2.0)
    args = ap.parse_args()
    loader = DataLoader(Features(args.samples, args.size), batch_size=16, shuffle=True, num_workers=args.workers)
    for epoch in range(args.epochs):
        t0, n = time.perf_counter(), 0
        for x, y in loader:
            time.sleep(args.step_ms / 1000)  # the step on the GPU: the host waits
            n += 1
        print(f"epoch {epoch}: {n / (time.perf_counter() - t0):.1f} batches/s", flush=True)


if __name__ == "__main__":
    main()
