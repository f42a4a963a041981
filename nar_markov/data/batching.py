"""The shape of a CLRS-30 feedback and the batches cut from it.

Sizes (`nb_nodes_of`, `nb_samples_of`, `hint_time`); the hint time axis a train batch is
padded to (`time_bucket`, `pad_time`), so that a jitted step compiles a few shapes, not one
per batch; samples taken out (`take`, `take_samples`, `at_most`) and put together
(`concat_samples`); a split's fixed-size evaluation batches (`eval_batches`).
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence, Tuple

import clrs
import numpy as np

from nar_markov.config import clrs30


def hint_time(feedback: clrs.Feedback) -> int:
  return int(feedback.features.hints[0].data.shape[0])


def nb_nodes_of(feedback: clrs.Feedback) -> int:
  pos, = [dp for dp in feedback.features.inputs if dp.name == "pos"]
  return int(pos.data.shape[1])


def nb_samples_of(feedback: clrs.Feedback) -> int:
  return int(feedback.features.lengths.shape[0])


def time_bucket(algorithm: str, nb_nodes: int, T: int) -> int:
  """Hint time length to pad a train batch of max length `T` to.

  With m the measured max T of (algorithm, nb_nodes): m + max(2, m // 4) if
  `T` fits; else (and for sizes that were not measured) `T` rounded up to a
  multiple of 2**(bit_length(T) - 4) (T <= 15 not rounded; 147 -> 160).
  One shape per train size is one compilation per size: the headroom is
  there because dm-clrs's running max sometimes exceeds the measured max.
  Padding costs the fast net (nar_markov.nets.fastnet) next to nothing -- it
  skips every step after the batch's longest trajectory, and scans no
  further than `clrs30.trajectory_bound` -- whereas `impl='reference'` runs
  them (a multiple-of-8 rule cost it 1.8x per step on bfs at 11 nodes).
  A `clrs30.T_BOUND` algorithm's `T` past its bound is an error: the fast net
  would not run those steps.
  """
  measured = clrs30.trajectory_lengths()[clrs30.check_algorithm(algorithm)][
      "train_T"].get(str(int(nb_nodes)))
  T = max(1, int(T))
  limit = clrs30.trajectory_bound(algorithm, nb_nodes)
  if limit is not None and T > limit:
    raise ValueError(f"{algorithm} at {nb_nodes} nodes: a batch of {T} hint steps "
                     f"(a trajectory that long), past its bound {clrs30.T_BOUND[algorithm]} "
                     f"= {limit}")
  if measured is not None:
    bucket = int(measured) + max(2, int(measured) // 4)
    if T <= bucket:
      return bucket
  granule = 1 << max(0, T.bit_length() - 4)
  return -(-T // granule) * granule


def pad_time(feedback: clrs.Feedback, T: int) -> clrs.Feedback:
  """Zero-pad the hint time axis to `T` steps; inputs, outputs, lengths kept."""
  cur = hint_time(feedback)
  if T < cur:
    raise ValueError(f"cannot pad hints of {cur} steps to {T}")
  if T == cur:
    return feedback
  hints = tuple(
      clrs.DataPoint(h.name, h.location, h.type_, np.concatenate(
          [h.data, np.zeros((T - cur,) + h.data.shape[1:], h.data.dtype)]))
      for h in feedback.features.hints)
  return feedback._replace(features=feedback.features._replace(hints=hints))


def take(feedback: clrs.Feedback, idx) -> clrs.Feedback:
  """Samples `idx` (a slice or index array) of a feedback; hints on axis 1."""
  def dps(points, axis):
    return tuple(clrs.DataPoint(p.name, p.location, p.type_,
                                p.data[idx] if axis == 0 else p.data[:, idx])
                 for p in points)
  features = feedback.features
  return clrs.Feedback(
      clrs.Features(dps(features.inputs, 0), dps(features.hints, 1),
                    features.lengths[idx]),
      dps(feedback.outputs, 0))


def take_samples(feedback: clrs.Feedback, n: int) -> clrs.Feedback:
  """The first `n` samples of a split (views, no copy)."""
  return take(feedback, slice(0, int(n)))


def at_most(feedback: clrs.Feedback, max_samples: Optional[int]
            ) -> Tuple[clrs.Feedback, int]:
  """(the split's first `max_samples` samples, their count); None: the whole split."""
  n = nb_samples_of(feedback)
  if max_samples is None:
    return feedback, n
  n = min(n, int(max_samples))
  return take_samples(feedback, n), n


def eval_batches(feedback: clrs.Feedback, batch_size: int
                 ) -> Iterator[Tuple[clrs.Feedback, int]]:
  """(batch, n_valid) pairs of exactly `batch_size` samples covering a split.

  The last batch is filled up by repeating samples from the start of the split
  (cyclically, so also when the split is smaller than `batch_size`); only its
  first `n_valid` samples are to be scored. Hints keep the split's full time
  axis, so every batch has the same shape.
  """
  n = nb_samples_of(feedback)
  batch_size = int(batch_size)
  if batch_size <= 0:
    raise ValueError(f"batch_size must be > 0, got {batch_size}")
  for start in range(0, n, batch_size):
    n_valid = min(batch_size, n - start)
    if n_valid == batch_size:
      yield take(feedback, slice(start, start + batch_size)), n_valid
    else:
      idx = np.arange(start, start + batch_size) % n
      yield take(feedback, idx), n_valid


def concat_samples(feedbacks: Sequence[clrs.Feedback]) -> clrs.Feedback:
  """Batches of one split with the same hint time axis, as one feedback."""
  def cat(points, axis):
    return tuple(clrs.DataPoint(p[0].name, p[0].location, p[0].type_,
                                np.concatenate([x.data for x in p], axis=axis))
                 for p in zip(*points))
  features = [fb.features for fb in feedbacks]
  return clrs.Feedback(
      clrs.Features(cat([f.inputs for f in features], 0),
                    cat([f.hints for f in features], 1),
                    np.concatenate([f.lengths for f in features])),
      list(cat([fb.outputs for fb in feedbacks], 0)))
