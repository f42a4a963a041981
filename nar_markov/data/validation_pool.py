"""The validation pool: run.py's validation data of one run.

As dm-clrs 2.0.3's `clrs/examples/run.py` validates: a pool sampled with the training
settings at the largest train size (its sampler seed the `randint` after the train
samplers', `validation_sampler_seed`), from which each evaluation draws its samples
(`ValidationPool.draw`: resampled at each evaluation, or mode 'fixed').
"""

from __future__ import annotations

from typing import Sequence

import clrs
import numpy as np

from nar_markov.config import clrs30
from nar_markov.data import batching
from nar_markov.data import preprocessing
from nar_markov.data import train_stream

_VAL_BATCH_SIZE = 32  # run.py's val_args batch_size


def validation_sampler_seed(algorithm: str, seed: int,
                            lengths: Sequence[int] = clrs30.TRAIN_LENGTHS) -> int:
  """run.py's val sampler seed: the `randint` after the train samplers'.

  run.py's create_samplers draws, from one `RandomState(seed)`, one seed per
  train sampler and then one for the val sampler (as
  `train_stream.TrainStream` does for the train samplers).
  """
  rng = np.random.RandomState(int(seed))
  for _ in clrs30.train_lengths(algorithm, lengths):
    rng.randint(2**32)
  return int(rng.randint(2**32))


class ValidationPool:
  """run.py's validation data of one run (module docstring).

  `draw(key)` returns the samples of one evaluation, preprocessed as run.py
  does (random `pos`, pred as input, permutations): mode 'resample' draws
  `num_samples` of the pool with replacement in batches of 32, each with its
  own random `pos`, from `RandomState([pool seed, key])`; mode 'fixed'
  returns the whole pool with `pos` randomised once (the same every time).
  """

  def __init__(self, algorithm: str, seed: int,
               lengths: Sequence[int] = clrs30.TRAIN_LENGTHS, mode: str = "resample"):
    if mode not in clrs30.VALIDATION_MODES:
      raise ValueError(f"unknown validation mode {mode!r}; valid: {clrs30.VALIDATION_MODES}")
    self.algorithm = clrs30.check_algorithm(algorithm)
    self.mode = mode
    self.nb_nodes = max(clrs30.train_lengths(algorithm, lengths))
    multiplier = clrs.CLRS_30_ALGS_SETTINGS[algorithm]["num_samples_multiplier"]
    self.num_samples = 2 * clrs.CLRS30["val"]["num_samples"] * multiplier
    self.seed = validation_sampler_seed(algorithm, seed, lengths)
    sampler, _ = clrs.build_sampler(
        algorithm, seed=self.seed, num_samples=self.num_samples,
        length=self.nb_nodes, **train_stream.train_sampler_kwargs(algorithm))
    self._pool = sampler.next(None)  # the whole pre-generated dataset
    self._fixed = None

  def _subsample(self, idx) -> clrs.Feedback:
    return batching.take(self._pool, np.asarray(idx))  # np.take semantics: copies

  def draw(self, key: int) -> clrs.Feedback:
    if self.mode == "fixed":
      if self._fixed is None:
        rng = np.random.RandomState([self.seed, 0])
        self._fixed = preprocessing.preprocess_feedback(
            self.algorithm, self._subsample(np.arange(self.num_samples)), rng)
      return self._fixed
    rng = np.random.RandomState([self.seed, int(key)])
    batches = []
    for _ in range(-(-self.num_samples // _VAL_BATCH_SIZE)):
      idx = rng.choice(self.num_samples, (_VAL_BATCH_SIZE,), replace=True)
      batches.append(preprocessing.preprocess_feedback(
          self.algorithm, self._subsample(idx), rng))
    return batching.concat_samples(batches)
