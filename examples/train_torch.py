"""An input-bound PyTorch training script, written the way people write them.

Each sample is "fetched" from slow storage (a sleep standing in for a network
or disk read) and "decoded" on the CPU, so with the default ``--workers 0``
the model spends most of its time waiting for data. Needs only torch.

    python examples/train_torch.py --epochs 1
    feedprof profile examples/train_torch.py
    feedprof tune examples/train_torch.py
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class RemoteImages(Dataset):
    def __init__(self, n: int, fetch_ms: float, size: int = 32):
        self.n, self.fetch_s, self.size = n, fetch_ms / 1000.0, size

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.fetch_s)  # waiting on storage: costs time, not CPU
        g = torch.Generator().manual_seed(i)
        image = torch.rand(3, self.size, self.size, generator=g)  # "decode"
        return image, i % 10


def make_model():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 10),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--fetch-ms", type=float, default=2.0)
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    train = DataLoader(RemoteImages(args.samples, args.fetch_ms), batch_size=args.batch_size,
                       shuffle=True, num_workers=args.workers)
    val = DataLoader(RemoteImages(args.samples // 8, args.fetch_ms), batch_size=64,
                     num_workers=args.workers)

    for epoch in range(args.epochs):
        model.train()
        t0 = time.perf_counter()
        for x, y in train:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in val:
                correct += (model(x.to(device)).argmax(1) == y.to(device)).sum().item()
        print(f"epoch {epoch}: loss {loss.item():.3f}, val acc {correct / len(val.dataset):.2f}, "
              f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
