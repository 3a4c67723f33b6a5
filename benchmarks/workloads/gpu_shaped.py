"""A GPU-shaped job on a machine without a GPU: the training step waits for
"the accelerator" (a sleep, so the host CPU is idle, as it is while a CUDA
step runs) and loading is CPU-bound decoding in the dataset (~1.5 ms of one
core per sample, pure interpreter work). Written with num_workers=0.
Best: about as many workers as CPUs, never more (each extra worker only
competes for the same cores)."""
import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

STEP_S = 0.005  # the accelerator's step: the host waits, using no CPU


class Encoded(Dataset):
    def __len__(self):
        return 20000

    def __getitem__(self, i):
        acc = 0
        for k in range(22000):  # ~1.5 ms of one core: decoding and augmenting
            acc += (k * i) & 7
        return torch.full((3, 32, 32), float(acc % 7)), i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=50)
    args = ap.parse_args()
    torch.set_num_threads(1)
    loader = DataLoader(Encoded(), batch_size=16, shuffle=True, num_workers=args.workers)
    for _ in range(args.epochs):
        for images, labels in loader:
            time.sleep(STEP_S)  # forward/backward on the accelerator


if __name__ == "__main__":
    main()
