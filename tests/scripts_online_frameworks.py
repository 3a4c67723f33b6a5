"""Seeded training scripts for online tuning beyond torch's map-style DataLoader: a Keras 3
PyDataset trained by model.fit, a torch IterableDataset, a tf.data pipeline with AUTOTUNE.
Loading waits on "storage" (sleep), so the verdicts do not depend on the machine's load.
Each writes what the model saw to the JSON file named by --report: per epoch, the batches
in the order the model got them, the weights after it; and the next draws of the random
streams the script and its framework use, so a run under feedprof can be compared with the
run as written."""

KERAS_SEEDED = '''
import argparse, hashlib, json, random, time
import numpy as np
import keras

p = argparse.ArgumentParser()
p.add_argument("--report", required=True)
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--batches", type=int, default=60)
p.add_argument("--load-ms", type=float, default=20.0)
p.add_argument("--workers", type=int, default=1)
p.add_argument("--processes", action="store_true")
p.add_argument("--queue", type=int, default=10)
p.add_argument("--tap", action="store_true")  # record each batch the model trains on (runs eagerly)
args = p.parse_args()
SEEN = []


class Storage(keras.utils.PyDataset):
    """Batch i is read from storage: a wait, then the same values every time it is read."""

    def __init__(self, n, **kwargs):
        super().__init__(**kwargs)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(args.load_ms / 1000)
        x = np.random.default_rng(i).random((16, 8)).astype("float32")
        x[:, 0] = i  # the batch says which it is
        return x, x.sum(axis=1, keepdims=True) / 8


class Tap(keras.layers.Layer):
    """Notes the batch the model trains on (eagerly: every backend hands it concrete values)."""

    def call(self, x, training=None):
        if training and args.tap:
            SEEN.append(int(keras.ops.convert_to_numpy(x)[0, 0]))
        return x


def digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


class PerEpoch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_end(self, epoch, logs=None):
        batches, SEEN[:] = list(SEEN), []
        self.epochs.append({"batches": batches, "weights": digest(self.model.get_weights())})


keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((8,)), Tap(), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", run_eagerly=args.tap)
seen = PerEpoch()
data = Storage(args.batches, workers=args.workers, use_multiprocessing=args.processes, max_queue_size=args.queue)
model.fit(data, epochs=args.epochs, verbose=0, callbacks=[seen])
with open(args.report, "w") as fh:
    json.dump({"epochs": seen.epochs, "weights": digest(model.get_weights()),
               "next_random": random.random(), "next_numpy": float(np.random.random())}, fh)
'''

ITERABLE_SEEDED = '''
import argparse, hashlib, json, os, signal, time
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

p = argparse.ArgumentParser()
p.add_argument("--report", required=True)
p.add_argument("--epochs", type=int, default=8)
p.add_argument("--records", type=int, default=640)
p.add_argument("--batch-size", type=int, default=16)
p.add_argument("--fetch-ms", type=float, default=4.0)
p.add_argument("--workers", type=int, default=0)
p.add_argument("--killed-from", type=int, default=0)  # a worker of so many or more is killed mid-epoch (OOM)
args = p.parse_args()


class Stream(IterableDataset):
    """Records read from storage, sharded by a fixed key: record i goes to worker i % workers."""

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(worker, args.records, workers):
            if args.killed_from and workers >= args.killed_from and i >= args.records // 2:
                os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer ends a worker of too many
            time.sleep(args.fetch_ms / 1000)
            yield torch.full((8,), float(i) / args.records), i


torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loader = DataLoader(Stream(), batch_size=args.batch_size, num_workers=args.workers)
epochs = []
for epoch in range(args.epochs):
    order = []
    for x, i in loader:
        order += i.tolist()
        loss = ((model(x).squeeze(1) - i.float() / args.records) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    epochs.append({"order": hashlib.sha256(repr(order).encode()).hexdigest()[:16],
                   "samples": hashlib.sha256(repr(sorted(order)).encode()).hexdigest()[:16], "n": len(order)})
with open(args.report, "w") as fh:
    json.dump({"epochs": epochs, "weights": [round(v, 6) for v in model.weight.flatten().tolist()],
               "next_rand": torch.rand(1).item()}, fh)
'''

TFDATA_AUTOTUNE = '''
import time
import tensorflow as tf


def read(i):
    time.sleep(0.003)  # a remote read; sleeping releases the GIL
    return tf.cast(i, tf.float32)


def load(i):
    x = tf.py_function(read, [i], tf.float32)
    return tf.reshape(x, ()) * tf.ones((8,))


dataset = (tf.data.Dataset.range(1024).map(load, num_parallel_calls=tf.data.AUTOTUNE)
           .batch(16).prefetch(tf.data.AUTOTUNE))
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(0.01)


@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x) ** 2)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))


for epoch in range(4):
    for batch in dataset:
        train_step(batch)
'''
