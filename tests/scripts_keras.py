"""Keras and tf.data training scripts written the way people write them
(sleep-bound loading, so verdicts are unambiguous)."""

PYDATASET = '''
import argparse
import os
import time

import numpy as np
import keras


class RemoteBatches(keras.utils.PyDataset):
    def __init__(self, n_batches, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.n_batches, self.batch_size = n_batches, batch_size

    def __len__(self):
        return self.n_batches

    def __getitem__(self, index):
        time.sleep({load_s})  # one remote read per batch
        x = np.random.rand(self.batch_size, 8).astype("float32")
        return x, x[:, :1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(RemoteBatches({n_batches}, 16), epochs=args.epochs, verbose=0)
'''

TFDATA_LOOP = '''
import time

import tensorflow as tf


def read(i):
    time.sleep(0.004)  # a remote read; sleeping releases the GIL
    return tf.cast(i, tf.float32)


def load(i):
    x = tf.py_function(read, [i], tf.float32)
    return tf.reshape(x, ()) * tf.ones((8,))


dataset = tf.data.Dataset.range(2048).map(load, num_parallel_calls=2).batch(16)
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(0.01)


@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x) ** 2)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))


for epoch in range(50):
    for batch in dataset:
        train_step(batch)
'''

TFDATA_FIT = '''
import time

import numpy as np
import tensorflow as tf
import keras


def read(x):
    time.sleep(0.003)
    return x


def load(i):
    x = tf.py_function(read, [tf.cast(i, tf.float32) * tf.ones((8,))], tf.float32)
    x.set_shape((8,))
    return x, x[:1]


dataset = tf.data.Dataset.range(1024).map(load).batch(16)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(dataset, epochs=20, verbose=0)
'''

TFDATA_FIT_STEP_LOG = '''
import sys
import time

import numpy as np
import tensorflow as tf

if sys.argv[3] == "tf_keras":
    import tf_keras as keras
else:
    import keras


def decode(i):
    time.sleep(0.006)  # a remote read per element; sleeping releases the GIL
    return np.full((8,), float(i), dtype=np.float32)


def load(i):
    x = tf.numpy_function(decode, [i], tf.float32)
    x.set_shape((8,))
    return x, x[:1]


class StepLog(keras.callbacks.Callback):
    """The script's own step clock: no feedprof code, the machine-wide perf_counter."""

    def on_train_begin(self, logs=None):
        self.fh = open(sys.argv[1], "w")

    def on_train_batch_end(self, batch, logs=None):  # batch: the last step this call ends
        self.fh.write(f"{time.perf_counter()} {batch}\\n")
        self.fh.flush()


dataset = tf.data.Dataset.range(4096).shuffle(256)
dataset = dataset.map(load, num_parallel_calls=2).batch(16).prefetch(1).repeat()
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse", steps_per_execution=int(sys.argv[2]))
model.fit(dataset, epochs=3, steps_per_epoch=256, verbose=0, callbacks=[StepLog()])
'''

TFDATA_FIT_EACH_EPOCH = '''
import time

import numpy as np
import tensorflow as tf
import keras


def decode(i):
    time.sleep(0.003)
    return np.full((8,), float(i), dtype=np.float32)


def load(i):
    x = tf.numpy_function(decode, [i], tf.float32)
    x.set_shape((8,))
    return x, x[:1]


train = tf.data.Dataset.range(480).map(load, num_parallel_calls=2).batch(16).prefetch(1)
val = tf.data.Dataset.range(64).map(load).batch(16)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
for epoch in range(10):  # one fit per epoch, each with its validation
    model.fit(train, validation_data=val, epochs=1, verbose=0)
'''

# keras-io's shape: the pipeline built in one function (a chain over several lines), fitted in another.
TFDATA_BUILT_APART = '''
import time

import tensorflow as tf
import keras


def read(x):
    time.sleep(0.004)
    return x


def encode_single_sample(i):
    x = tf.py_function(read, [tf.cast(i, tf.float32) * tf.ones((8,))], tf.float32)
    x.set_shape((8,))
    return {"image": x, "label": x[:1]}


def to_pair(d):
    return d["image"], d["label"]


def make_dataset(n, batch_size):
    dataset = tf.data.Dataset.range(n)
    dataset = (
        dataset.map(encode_single_sample, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size)
        .map(to_pair)
        .prefetch(buffer_size=tf.data.AUTOTUNE)
    )
    return dataset


def train(train_dataset):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(
        train_dataset,
        epochs=20,
        verbose=0,
    )


if __name__ == "__main__":
    train(make_dataset(1024, 16))
'''

TF_KERAS_SEQUENCE = '''
import sys
import time

import numpy as np
import tf_keras as keras


class Files(keras.utils.Sequence):
    def __len__(self):
        return 40

    def __getitem__(self, index):
        time.sleep(0.005)
        x = np.random.rand(16, 8).astype("float32")
        return x, x[:, :1]


workers = int(sys.argv[1]) if len(sys.argv) > 1 else 1
model = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(Files(), epochs=20, verbose=0, workers=workers)
'''

CALLBACK = '''
import time

import numpy as np
import keras
import feedprof.keras


class Slow(keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def __len__(self):
        return 40

    def __getitem__(self, index):
        time.sleep(0.01)
        x = np.random.rand(16, 8).astype("float32")
        return x, x[:, :1]


model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
profile = feedprof.keras.ProfileCallback(interval_s=0.1, warmup_batches=2)
model.fit(Slow(), epochs=3, verbose=0, callbacks=[profile])
summary = profile.summary()
print("WAIT", summary.data_wait_fraction)
print("RATE", summary.batches_per_s)
profile.save("{out}")
'''


def pydataset(load_s=0.01, n_batches=200):
    return PYDATASET.format(load_s=load_s, n_batches=n_batches)
