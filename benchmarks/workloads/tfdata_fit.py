"""A tf.data pipeline trained with model.fit: each element's decode waits on
storage (4 ms, a remote read) and does a little numpy work, inside a
tf.numpy_function mapped with num_parallel_calls=2. The default thread pool
(as many threads as cores) caps the waiting; a private thread pool past the
core count lifts the cap, which AUTOTUNE does not find."""
import time

import numpy as np
import tensorflow as tf


def decode(index):
    time.sleep(0.004)  # the read
    rng = np.random.default_rng(int(index))
    image = rng.random((64, 64), dtype=np.float32)
    image = (image - image.mean()) / (image.std() + 1e-6)  # a little decoding work
    features = np.sort(image, axis=1)[::8, ::8].ravel()
    return features, np.float32(index % 2)


def load(index):
    x, y = tf.numpy_function(decode, [index], (tf.float32, tf.float32))
    return tf.ensure_shape(x, (64,)), tf.ensure_shape(y, ())


def main():
    ds = tf.data.Dataset.range(20000)
    ds = ds.shuffle(2048)
    ds = ds.map(load, num_parallel_calls=2)
    ds = ds.batch(32)
    ds = ds.prefetch(1)
    model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(128, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    model.fit(ds, epochs=50, verbose=0)


if __name__ == "__main__":
    main()
