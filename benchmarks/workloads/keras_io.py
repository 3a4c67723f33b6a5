"""Keras 3 PyDataset with remote reads: every batch waits 10 ms on "the
network" and costs little CPU, with the PyDataset's default workers=1. Best:
many thread workers."""
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402


class RemoteBatches(keras.utils.PyDataset):
    def __init__(self, n_batches, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.n_batches, self.batch_size = n_batches, batch_size

    def __len__(self):
        return self.n_batches

    def __getitem__(self, index):
        time.sleep(0.01)
        x = np.random.rand(self.batch_size, 32).astype("float32")
        return x, x[:, :1]


def main():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(RemoteBatches(2000, 32), epochs=50, verbose=0)


if __name__ == "__main__":
    main()
