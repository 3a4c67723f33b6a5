"""Tiny training scripts written the way people write them; sleep-bound so
that their verdicts are unambiguous on a shared 2-core machine."""

TORCH_LOOP = '''
import argparse
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __init__(self, n, load_ms):
        self.n, self.load_s = n, load_ms / 1000

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.load_s:
            time.sleep(self.load_s)
        return torch.full((4,), float(i)), i % 2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--load-ms", type=float, default={load_ms})
    parser.add_argument("--step-ms", type=float, default={step_ms})
    parser.add_argument("--workers", type=int, default={workers})
    parser.add_argument("--epochs", type=int, default={epochs})
    parser.add_argument("--context", default=None)
    args = parser.parse_args()
    train = DataLoader(Samples({n}, args.load_ms), batch_size={batch_size}, shuffle=True,
                       num_workers=args.workers, multiprocessing_context=args.context)
    val = DataLoader(Samples(8, 0), batch_size=4)
    for epoch in range(args.epochs):
        for x, y in train:
            time.sleep(args.step_ms / 1000)
        for x, y in val:
            pass
        print(f"epoch {{epoch}} done", flush=True)


if __name__ == "__main__":
    main()
'''


def torch_loop(load_ms=0.0, step_ms=0.0, workers=0, epochs=3, n=200, batch_size=2):
    return TORCH_LOOP.format(load_ms=load_ms, step_ms=step_ms, workers=workers, epochs=epochs, n=n,
                             batch_size=batch_size)
