"""Training scripts whose loading computes with numpy's BLAS (record/pools.py's NOTE): each worker runs
an OpenBLAS pool of its own, as numpy does on a machine with more than one core. The step waits
(a GPU-shaped step: the host idles while the device computes). Seeded: --report writes what the
loop saw (per-epoch digests of the indices and of the batches' bytes) for a run under feedprof to
be compared with the run as written."""

NUMPY_POOLS = '''
import argparse, hashlib, json, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--report", default="")
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--samples", type=int, default=512)
p.add_argument("--workers", type=int, default=2)
p.add_argument("--step-ms", type=float, default=2.0)
args = p.parse_args()


class Features(Dataset):
    def __init__(self, n):
        self.n = n
        self.m = np.random.default_rng(0).standard_normal((160, 160)).astype(np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.m * (1 + i % 7)
        for _ in range(3):  # three small dense products: spectrogram or whitening code does this
            x = x @ self.m
            x /= np.abs(x).max()
        for _ in range(3):  # and elementwise work (numpy runs it in one thread)
            x = np.tanh(x) * 0.5 + np.sqrt(np.abs(x))
        return torch.from_numpy(x[:4, :4].copy()), i


torch.manual_seed(0)
loader = DataLoader(Features(args.samples), batch_size=16, shuffle=True, num_workers=args.workers)
epochs = []
for epoch in range(args.epochs):
    order, data = [], hashlib.sha256()
    for x, idx in loader:
        time.sleep(args.step_ms / 1000)
        order += idx.tolist()
        data.update(x.numpy().tobytes())
    epochs.append({"order": hashlib.sha256(str(order).encode()).hexdigest(), "data": data.hexdigest(),
                   "n": len(order)})
if args.report:
    with open(args.report, "w") as fh:
        json.dump({"epochs": epochs, "next_rand": torch.rand(1).item()}, fh)
'''
