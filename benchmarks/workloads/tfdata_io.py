"""A tf.data pipeline whose map waits 4 ms per element on "the network"
(a py_function that sleeps, as a remote read would), in a custom loop. The
default threadpool caps it at about as many calls as cores; AUTOTUNE does not
find the private threadpool that lifts the cap."""
import time

import tensorflow as tf


def read(i):
    time.sleep(0.004)
    return tf.cast(i, tf.float32)


def load(i):
    x = tf.py_function(read, [i], tf.float32)
    return tf.reshape(x, ()) * tf.ones((32,))


def main():
    dataset = tf.data.Dataset.range(8192).map(load, num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(1)
    model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam()

    @tf.function
    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    for epoch in range(50):
        for batch in dataset:
            train_step(batch)


if __name__ == "__main__":
    main()
