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
  """run.py's validation sampler seed: the `randint` after the train samplers'.

  run.py's create_samplers draws from one `RandomState(seed)` one seed per train length
  (`clrs30.train_lengths(algorithm, lengths)`: the train samplers', as
  `train_stream.TrainStream` draws them), then this one.
  """
  rng = np.random.RandomState(int(seed))
  for _ in clrs30.train_lengths(algorithm, lengths):
    rng.randint(2**32)
  return int(rng.randint(2**32))


class ValidationPool:
  """run.py's validation data of one run: a pool, and each evaluation's samples from it.

  The pool: `num_samples` = 2 x clrs.CLRS30["val"]["num_samples"] x the algorithm's
  num_samples_multiplier raw trajectories, sampled with the train sampler kwargs at the
  largest train length (`nb_nodes`), the sampler seeded with `validation_sampler_seed`
  (`self.seed`).

  Args:
    algorithm: a CLRS-30 name.
    seed: the run's seed (in a multi-task job, `train_stream.stream_seed`'s).
    lengths: the configured train lengths (`clrs30.train_lengths`).
    mode: 'resample' or 'fixed' (`draw`).

  Raises:
    ValueError: an unknown mode or algorithm.
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
    """The samples of one evaluation, preprocessed as run.py does.

    Args:
      key: the evaluation's key (the training loop passes the step); unused by 'fixed'.

    Returns:
      'resample': ceil(num_samples / 32) batches of 32 samples drawn from the pool with
      replacement, each with its own random `pos`, all from RandomState([seed, key]),
      joined into one feedback (the same key: the same samples).  'fixed': the whole pool
      with `pos` drawn once, from RandomState([seed, 0]): the same object on every call.
    """
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
