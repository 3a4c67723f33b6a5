"""Ray Train scripts the Ray tests run, written as Ray's docs write them: a
TorchTrainer of 2 CPU workers (DDP on gloo), the DataLoader built inside the
training function from a --workers flag passed through train_loop_config, and
prepare_data_loader adding the DistributedSampler. Every sample waits on
"storage" (sleep-bound, so verdicts do not depend on the machine's speed).

With --report PATH each rank writes PATH.<rank>: its per-epoch digests of the
batches' bytes, the final weights' digest, and how long its training loop took."""

TRAIN_RAY = '''
import argparse, hashlib, json, os, time

import ray
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
import ray.train
import ray.train.torch
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer

p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=0)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--samples", type=int, default=1024)
p.add_argument("--fetch-ms", type=float, default=4.0)
p.add_argument("--report", default="")
p.add_argument("--address", default=None)
args = p.parse_args()


class Remote(Dataset):
    """Every sample waits on remote storage."""

    def __init__(self, n, fetch_s):
        self.n, self.fetch_s = n, fetch_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.fetch_s)
        return torch.full((16,), float(i % 7)), i % 4


def train_func(config):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = ray.train.torch.prepare_model(nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Remote(config["samples"], config["fetch_ms"] / 1000)
    loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=config["workers"])
    loader = ray.train.torch.prepare_data_loader(loader)
    rank = ray.train.get_context().get_world_rank()
    digests, started = [], time.monotonic()
    for epoch in range(config["epochs"]):
        loader.sampler.set_epoch(epoch)
        seen = hashlib.sha256()
        for x, y in loader:
            seen.update(x.numpy().tobytes() + y.numpy().tobytes())
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        digests.append(seen.hexdigest()[:16])
    if config["report"]:
        weights = b"".join(t.detach().numpy().tobytes() for t in model.parameters())
        with open(f"{config['report']}.{rank}", "w") as fh:
            json.dump({"epochs": digests, "weights": hashlib.sha256(weights).hexdigest()[:16],
                       "loop_s": time.monotonic() - started, "pid": os.getpid()}, fh)


if __name__ == "__main__":
    ray.init(address=args.address, num_cpus=None if args.address else 4, include_dashboard=False)
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"workers": args.workers, "epochs": args.epochs, "samples": args.samples,
                           "fetch_ms": args.fetch_ms, "report": args.report},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
    )
    trainer.fit()
'''


TRAIN_RAY_DATA = '''
import argparse, time

import numpy as np
import ray
import torch
from torch import nn
import ray.train
import ray.train.torch
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--rows", type=int, default=2048)
p.add_argument("--prefetch", type=int, default=1)
args = p.parse_args()


def read(batch):
    time.sleep(0.002 * len(batch["id"]))  # each row waits on remote storage
    return {"x": np.repeat(batch["id"][:, None] % 7, 16, axis=1).astype("float32"), "y": batch["id"] % 4}


def train_func(config):
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    shard = ray.train.get_dataset_shard("train")
    for epoch in range(config["epochs"]):
        for batch in shard.iter_torch_batches(batch_size=16, prefetch_batches=config["prefetch"]):
            opt.zero_grad()
            nn.functional.cross_entropy(model(batch["x"]), batch["y"]).backward()
            opt.step()


if __name__ == "__main__":
    ray.init(num_cpus=4, include_dashboard=False)
    data = ray.data.range(args.rows).map_batches(read, batch_size=16)
    trainer = TorchTrainer(train_func, train_loop_config={"epochs": args.epochs, "prefetch": args.prefetch},
                           datasets={"train": data}, scaling_config=ScalingConfig(num_workers=2, use_gpu=False))
    trainer.fit()
'''
