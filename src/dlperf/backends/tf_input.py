"""TensorFlow's input pipeline: ``tf.data``, with TensorFlow's own ops throughout.

- image files: ``list of files -> shuffle -> map(read_file, decode_jpeg|decode_png, flip
  on odd indices, normalise) -> batch -> prefetch``;
- raw records: ``FixedLengthRecordDataset`` per shard, interleaved over the shards, then a
  shuffle buffer of 8 batches and ``decode_raw``: the record-format way of tf.data (shards
  read in order, samples shuffled in a buffer), where the DataLoader reads samples at
  random;
- memory: ``from_tensor_slices`` of the decoded arrays.

``loader_workers`` is the parallel map's ``num_parallel_calls`` (threads of tf.data's
private pool; 0: one element at a time in the iterator's own thread), ``prefetch`` the
``prefetch`` buffer in batches (0: none; the automatic prefetch injection is turned off so
that 0 means 0), ``autotune`` makes both ``tf.data.AUTOTUNE``. tf.data's threads live in
the training process; TensorFlow offers no affinity for them, but a thread inherits the
CPUs of the thread that starts it, so each epoch's iterator is started with the loader's
CPUs (every CPU the launcher may use) while the training threads keep theirs.

Batches are TensorFlow tensors (NHWC images, int32 targets), fed to the training step's
``tf.function`` directly: no numpy round trip. The stages run inside TensorFlow's
runtime, so a batch's preparation time is not broken down (``Batch.prep`` is None); the
loader-alone run gives its throughput.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from dlperf.inputs import datasets
from dlperf.inputs.pipeline import Batch, InputPipeline, Source, loader_cpus


def _normalise(spec: datasets.DataSpec, x: tf.Tensor, i: tf.Tensor) -> tf.Tensor:
    """``datasets.prepare`` in TensorFlow ops: flip odd indices, scale, channels last."""
    if spec.kind != "image":
        return x
    x = tf.cond(i % 2 == 1, lambda: tf.image.flip_left_right(x), lambda: x)
    return (tf.cast(x, tf.float32) / 255.0 - datasets.MEAN) / datasets.STD


def _delay(seconds: float):
    def wait(x):
        time.sleep(seconds)
        return x

    return lambda x: tf.py_function(wait, [x], x.dtype)


class TFDataPipeline(InputPipeline):
    def __init__(self, source: Source, batch_size: int, seed: int, device: str):
        super().__init__(source)
        self.batch_size = batch_size
        self.cpus = loader_cpus()
        o, spec = source.options, source.spec
        auto = tf.data.AUTOTUNE
        par = auto if o.autotune else (o.loader_workers or None)
        labels = tf.constant(source.labels.astype(np.int32))
        ds = self._elements(source, seed, par)

        def finish(i, x):
            x = tf.reshape(x, spec.shape)
            if o.sample_delay_s:
                x = _delay(o.sample_delay_s)(x)
            return _normalise(spec, x, i), tf.gather(labels, i)

        ds = ds.map(finish, num_parallel_calls=par, deterministic=False)
        ds = ds.batch(batch_size, drop_remainder=True)
        depth = auto if o.autotune else o.prefetch
        if device == "gpu" and o.prefetch:
            ds = ds.apply(tf.data.experimental.prefetch_to_device("/GPU:0", o.prefetch))
        elif depth:
            ds = ds.prefetch(depth)
        opts = tf.data.Options()
        opts.experimental_optimization.inject_prefetch = bool(o.autotune)
        opts.autotune.enabled = True
        opts.threading.private_threadpool_size = max(1, o.loader_workers)
        opts.threading.max_intra_op_parallelism = 1
        opts.deterministic = False
        self.ds = ds.with_options(opts)
        self.prefetch_in_force = -1 if o.autotune else o.prefetch  # -1: AUTOTUNE

    def _elements(self, source: Source, seed: int, par) -> tf.data.Dataset:
        """(index, uint8/float/int sample) pairs, shuffled every epoch."""
        spec, n = source.spec, source.spec.samples
        if source.arrays is not None:
            ds = tf.data.Dataset.from_tensor_slices((tf.range(n), source.arrays[0]))
            return ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
        if spec.format in ("jpeg", "png"):
            files = [str(source.dir / datasets.file_name(spec, i)) for i in range(n)]
            ds = tf.data.Dataset.from_tensor_slices((tf.range(n), files))
            ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
            decode = tf.io.decode_jpeg if spec.format == "jpeg" else tf.io.decode_png
            channels = spec.shape[2]
            return ds.map(lambda i, f: (i, decode(tf.io.read_file(f), channels=channels)),
                          num_parallel_calls=par, deterministic=False)
        shards = [str(p) for p in datasets.files(spec, source.dir)]
        starts = list(range(0, n, datasets.SHARD))
        dtype = tf.as_dtype(spec.dtype)

        def records(path, start):
            ds = tf.data.FixedLengthRecordDataset(path, spec.record_bytes)
            return ds.enumerate().map(lambda k, r: (tf.cast(tf.cast(start, tf.int64) + k,
                                                            tf.int32),
                                                    tf.io.decode_raw(r, dtype)))

        ds = tf.data.Dataset.from_tensor_slices((shards, starts)).shuffle(len(shards), seed=seed)
        ds = ds.interleave(records, cycle_length=max(1, len(shards)),
                           num_parallel_calls=par, deterministic=False)
        # a shuffle buffer of a few batches, as record pipelines use (a buffer of the whole
        # data set would read it all before the first batch of every epoch)
        return ds.shuffle(min(n, 8 * self.batch_size), seed=seed, reshuffle_each_iteration=True)

    def epoch(self) -> Iterator[Batch]:
        # tf.data starts its threads with the iterator; a thread inherits the CPUs of the
        # thread that starts it, so the iterator is started with the loader's CPUs (the
        # training threads, started before, keep theirs)
        own = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.cpus)
        try:
            it = iter(self.ds)
            first = next(it, None)
        finally:
            os.sched_setaffinity(0, own)
        if first is None:
            return
        yield Batch(*first, None)
        for x, y in it:
            yield Batch(x, y, None)


def build_pipeline(source: Source, batch_size: int, seed: int, device: str) -> TFDataPipeline:
    return TFDataPipeline(source, batch_size, seed, device)
