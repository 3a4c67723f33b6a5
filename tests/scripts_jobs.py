"""Multi-process training scripts, written the way their frameworks' docs write
them, sleep-bound so that verdicts are unambiguous on a shared 2-core machine."""

DDP = '''
import gc
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Remote(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep({load_s})  # a read from remote storage
        return torch.full((16,), float(i % 7)), i % 4


def main():
    {init}
    torch.set_num_threads(1)
    model = DDP(nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ds = Remote()
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=0)
    for epoch in range(50):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            {fault}
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    # (gloo's abort at exit under load: see SLURM_DDP in tests/scripts_jobs.py)
    dist.barrier()
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''

TORCHRUN_INIT = 'dist.init_process_group("gloo")'
MPI_INIT = '''os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=int(os.environ["OMPI_COMM_WORLD_RANK"]),
                            world_size=int(os.environ["OMPI_COMM_WORLD_SIZE"]))'''


def ddp(load_s=0.003, init=TORCHRUN_INIT, fault="pass"):
    return DDP.format(load_s=load_s, init=init, fault=fault)


DATA_PARALLEL = '''
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.006)
        return torch.full((16,), float(i % 7)), i % 4


if __name__ == "__main__":
    torch.set_num_threads(1)
    model = nn.DataParallel(nn.Linear(16, 4))  # every visible GPU; on a CPU, the module itself
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(Remote(), batch_size=8, shuffle=True)
    for epoch in range(50):
        for x, y in train:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
'''

MIRRORED = '''
import time

import numpy as np
import tensorflow as tf


def read(i):
    time.sleep(0.004)  # a read from remote storage
    return np.float32(i % 7)


def load(i):
    x = tf.numpy_function(read, [i], tf.float32)
    return tf.reshape(x, ()) * tf.ones((16,)), tf.cast(i % 4, tf.int32)


strategy = tf.distribute.MirroredStrategy()
ds = tf.data.Dataset.range(100000).map(load, num_parallel_calls=2).batch(16).prefetch(1)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
{fit}
'''

FIT = "model.fit(ds, epochs=1, verbose=0)"
CUSTOM_LOOP = '''
dist_ds = strategy.experimental_distribute_dataset(ds)
opt = tf.keras.optimizers.SGD()


@tf.function
def step(x, y):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    strategy.run(replica_step, args=(x, y))


for x, y in dist_ds:
    step(x, y)
'''


def mirrored(custom_loop=False):
    return MIRRORED.replace("{fit}", CUSTOM_LOOP if custom_loop else FIT)


MULTI_WORKER = '''
import time

import numpy as np
import tensorflow as tf


def read(i):
    time.sleep(0.003)  # a read from remote storage
    return np.float32(i % 7)


def load(i):
    x = tf.numpy_function(read, [i], tf.float32)
    return tf.reshape(x, ()) * tf.ones((8,))


strategy = tf.distribute.MultiWorkerMirroredStrategy()
ds = tf.data.Dataset.range(100000).map(load, num_parallel_calls=2).batch(16).prefetch(1)
dist_ds = strategy.experimental_distribute_dataset(ds)
with strategy.scope():
    w = tf.Variable(tf.ones((8, 2)))


@tf.function
def step(x):
    def replica(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        grad = tf.distribute.get_replica_context().all_reduce("mean", tape.gradient(loss, w))
        w.assign_sub(0.001 * grad)
    strategy.run(replica, args=(x,))


for x in dist_ds:
    step(x)
'''

# Two MultiWorkerMirroredStrategy workers on this machine, each with its own TF_CONFIG.
START_TWO_WORKERS = '''#!/bin/bash
cluster='"cluster": {"worker": ["localhost:'$1'", "localhost:'$2'"]}'
for i in 0 1; do
    TF_CONFIG='{'"$cluster"', "task": {"type": "worker", "index": '$i'}}' python3 "$(dirname "$0")/worker.py" &
done
wait
'''


# A DDP job as a Slurm user writes it: launched by srun (a task per rank, the rank read from
# Slurm's variables) or by torchrun (its own), seeded, every sample waiting on storage, the
# script's own --workers 0; each rank writes what it saw (per-epoch digests of the samples,
# the weights) to REPORT.<rank>.
SLURM_DDP = '''
import argparse, gc, hashlib, json, os, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

p = argparse.ArgumentParser()
p.add_argument("--report", default="")
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--samples", type=int, default=1600)
p.add_argument("--fetch-ms", type=float, default=4.0)
p.add_argument("--workers", type=int, default=0)
args = p.parse_args()
if "RANK" not in os.environ:  # a task of srun: Slurm's variables
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("DDP_PORT", "29533"))
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.set_num_threads(1)


class Storage(Dataset):
    def __len__(self):
        return args.samples

    def __getitem__(self, i):
        time.sleep(args.fetch_ms / 1000)  # a read from remote storage
        return torch.full((8,), float(i) / args.samples), i


torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
sampler = DistributedSampler(Storage(), shuffle=True, seed=3)
loader = DataLoader(Storage(), batch_size=8, sampler=sampler, num_workers=args.workers)
digests = []
t0 = time.time()
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    h = hashlib.sha256()
    for x, idx in loader:
        h.update(idx.numpy().tobytes())
        loss = (model(x) - 1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    digests.append(h.hexdigest()[:16])
w = hashlib.sha256(model.module.weight.detach().numpy().tobytes()).hexdigest()[:16]
if args.report:
    with open(f"{args.report}.{rank}", "w") as fh:
        json.dump({"epochs": digests, "weights": w, "train_s": time.time() - t0}, fh)
# torch 2.13's gloo can abort a rank at exit when the machine is busy (SIGABRT: "terminate called
# without an active exception"; 2 of 15 runs of SLURM_DDP beside 2 busy cores): every collective
# done and the DDP model gone before the group is destroyed, 0 of 30
dist.barrier()
del model, opt
gc.collect()
dist.destroy_process_group()
'''
