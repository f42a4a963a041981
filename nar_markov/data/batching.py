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
  """The length T of the feedback's hint time axis (the leading axis of its hints)."""
  return int(feedback.features.hints[0].data.shape[0])


def nb_nodes_of(feedback: clrs.Feedback) -> int:
  """The number of nodes of the feedback's graphs (axis 1 of its one `pos` input)."""
  pos, = [dp for dp in feedback.features.inputs if dp.name == "pos"]
  return int(pos.data.shape[1])


def nb_samples_of(feedback: clrs.Feedback) -> int:
  """The number of samples (trajectories) in the feedback."""
  return int(feedback.features.lengths.shape[0])


def time_bucket(algorithm: str, nb_nodes: int, T: int) -> int:
  """The hint time length to pad a train batch of hint time length `T` to.

  One padded length per measured train size keeps a jitted step to one compilation per
  size.  Padding costs the fast net (nar_markov.nets.fastnet) next to nothing
  (it skips every step after the batch's longest trajectory); `impl='reference'` computes
  the padded steps.

  Args:
    algorithm: a CLRS-30 name.
    nb_nodes: the batch's graph size.
    T: the batch's hint time length (below 1: 1).

  Returns:
    With m the measured max T of (algorithm, nb_nodes) (`clrs30.trajectory_lengths`,
    "train_T"): m + max(2, m // 4) where `T` is at most that (the headroom: dm-clrs's
    running max sometimes exceeds the measured max).  Otherwise, and for sizes not
    measured, `T` rounded up to a multiple of 2**(bit_length(T) - 4) (T <= 15 not
    rounded; 147 -> 160).

  Raises:
    ValueError: `algorithm` is not a CLRS-30 name, or it has a `clrs30.T_BOUND` and `T`
      is past its `clrs30.trajectory_bound` (the fast net would not run those steps).
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
  """The feedback with its hint time axis zero-padded to `T` steps.

  Inputs, outputs and lengths are kept; a feedback of `T` steps already is returned as it is.

  Raises:
    ValueError: `T` is shorter than the feedback's hint time axis.
  """
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
  """Samples `idx` (a slice or an index array) of a feedback.

  Taken on axis 0 of the inputs, outputs and lengths and on axis 1 of the hints; a slice
  gives views, an index array copies (numpy's indexing).
  """
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
  """The first `n` samples of a feedback (views, no copy)."""
  return take(feedback, slice(0, int(n)))


def at_most(feedback: clrs.Feedback, max_samples: Optional[int]
            ) -> Tuple[clrs.Feedback, int]:
  """The first `max_samples` samples of a feedback, and their count.

  Returns:
    (the feedback and its size) where `max_samples` is None, else (its first
    min(size, max_samples) samples, that count).
  """
  n = nb_samples_of(feedback)
  if max_samples is None:
    return feedback, n
  n = min(n, int(max_samples))
  return take_samples(feedback, n), n


def eval_batches(feedback: clrs.Feedback, batch_size: int
                 ) -> Iterator[Tuple[clrs.Feedback, int]]:
  """Batches of exactly `batch_size` samples that cover a split, in order.

  Yields:
    (batch, n_valid).  The last batch is filled up by repeating samples from the start of
    the split (cyclically, so also where the split is smaller than `batch_size`); only its
    first `n_valid` samples are to be scored.  Hints keep the split's full time axis, so
    every batch has the same shape.

  Raises:
    ValueError: `batch_size` <= 0 (at the first batch asked for).
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
  """Feedbacks of the same features and hint time length joined along the sample axis.

  Features are matched by position (the first feedback's names, locations and types);
  the joined outputs are a list, as clrs keeps them.
  """
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
