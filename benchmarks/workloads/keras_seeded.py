"""A seeded Keras 3 PyDataset script with workers=1 as written: every batch waits on "storage"
(sleep) and always holds the same values; fit shuffles with Python's `random`. With --report it
writes, per epoch, a digest of the weights after it (the batches and their order decide it), the
final weights, and the next draws of `random` and `numpy.random`, so a run under feedprof can be
compared with the run as written (benchmarks/online_keras.py)."""
import argparse
import hashlib
import json
import random
import time

import keras
import numpy as np


class Storage(keras.utils.PyDataset):
    def __init__(self, n, load_s, **kwargs):
        super().__init__(**kwargs)
        self.n, self.load_s = n, load_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.load_s)
        x = np.random.default_rng(i).random((16, 8)).astype("float32")
        return x, x.sum(axis=1, keepdims=True) / 8


def digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


class PerEpoch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.weights = []

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append(digest(self.model.get_weights()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--report", default="")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--load-ms", type=float, default=20.0)
    args = p.parse_args()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    seen = PerEpoch()
    data = Storage(args.batches, args.load_ms / 1000, workers=1)
    model.fit(data, epochs=args.epochs, verbose=0, callbacks=[seen])
    if args.report:
        with open(args.report, "w") as fh:
            json.dump({"epochs": seen.weights, "weights": digest(model.get_weights()),
                       "next_random": random.random(), "next_numpy": float(np.random.random())}, fh)


if __name__ == "__main__":
    main()
