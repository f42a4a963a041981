"""The train stream: run.py's multi-sampler of one algorithm, exactly resumable.

As dm-clrs 2.0.3's `clrs/examples/run.py` samples training data: one on-the-fly sampler
per train length with run.py's kwargs (`train_sampler_kwargs`), batches preprocessed as
run.py does and padded to `batching.time_bucket`; `TrainStream.state_dict` captures the
stream for exact resume; `stream_seed` keys each algorithm's data in a multi-task job.
"""

from __future__ import annotations

import inspect
import zlib
from typing import Any, Dict, Sequence

import clrs
from clrs._src import samplers as clrs_samplers
import numpy as np

from nar_markov.config import clrs30
from nar_markov.data import batching
from nar_markov.data import preprocessing

# run.py: "Choose a lower connection probability for the above algorithms,
# otherwise trajectories are very long".
_HALF_P_ALGOS = ("articulation_points", "bridges", "mst_kruskal",
                 "bipartite_matching")


def train_sampler_kwargs(algorithm: str) -> Dict[str, Any]:
  """run.py's train sampler kwargs for `algorithm`, restricted to those its sampler accepts.

  p: the connection probabilities 0.1, 0.2, ..., 0.9, halved for articulation_points,
  bridges, mst_kruskal and bipartite_matching; length_needle:
  `clrs30.TRAIN_LENGTH_NEEDLE`.  (clrs.build_sampler drops the others too, but with a
  warning per sampler.)
  """
  p = tuple([0.1 + 0.1 * i for i in range(9)])
  if algorithm in _HALF_P_ALGOS:
    p = tuple(np.array(p) / 2)
  kwargs = dict(p=p, length_needle=clrs30.TRAIN_LENGTH_NEEDLE)
  # clrs.build_sampler drops the rest too, but logs a warning per sampler.
  accepted = inspect.signature(
      clrs_samplers.SAMPLERS[algorithm]._sample_data).parameters  # pylint: disable=protected-access
  return {k: v for k, v in kwargs.items() if k in accepted}


class TrainStream:
  """Endless train batches of one algorithm, exactly resumable (`state_dict`).

  Cycles the train lengths batch by batch (4, 7, 11, 13, 16, 4, ...), each length with its
  own on-the-fly sampler, their seeds drawn in order from `RandomState(seed)`, which then
  draws every batch's random `pos`.  Batches are preprocessed as run.py does and their
  hints zero-padded to `batching.time_bucket(algorithm, nb_nodes, T)`.  Building the
  stream samples 1,000 trajectories per length (clrs's track_max_steps estimate, which
  also advances the samplers as in run.py).

  Args:
    algorithm: a CLRS-30 name.
    seed: the stream's seed.
    batch_size: samples per batch.
    lengths: the configured train lengths; the stream's own, `self.lengths`, are
      `clrs30.train_lengths(algorithm, lengths)` (the string matchers' rule).

  Raises:
    ValueError: an unknown algorithm, or lengths `clrs30.train_lengths` refuses.
  """

  def __init__(self, algorithm: str, seed: int, batch_size: int = 32,
               lengths: Sequence[int] = clrs30.TRAIN_LENGTHS):
    self.algorithm = clrs30.check_algorithm(algorithm)
    self.seed = int(seed)
    self.batch_size = int(batch_size)
    self.lengths = clrs30.train_lengths(algorithm, lengths)
    self.spec = preprocessing.get_spec(algorithm)
    self._rng = np.random.RandomState(self.seed)
    kwargs = train_sampler_kwargs(algorithm)
    self._samplers = []
    for nb_nodes in self.lengths:
      sampler, _ = clrs.build_sampler(
          algorithm, seed=self._rng.randint(2**32), num_samples=-1,
          length=nb_nodes, **kwargs)
      self._samplers.append(sampler)
    self._next = 0  # index into self.lengths of the next batch
    self.batches_drawn = 0

  @property
  def next_nb_nodes(self) -> int:
    """The graph size of the next batch."""
    return self.lengths[self._next]

  def __iter__(self) -> "TrainStream":
    return self

  def __next__(self) -> clrs.Feedback:
    nb_nodes = self.lengths[self._next]
    feedback = self._samplers[self._next].next(self.batch_size)
    feedback = preprocessing.preprocess_feedback(self.algorithm, feedback, self._rng)
    feedback = batching.pad_time(feedback, batching.time_bucket(
        self.algorithm, nb_nodes, batching.hint_time(feedback)))
    self._next = (self._next + 1) % len(self.lengths)
    self.batches_drawn += 1
    return feedback

  def state_dict(self) -> Dict[str, Any]:
    """Everything that determines the next batches, picklable (`load_state_dict`).

    The stream's settings, its place in the cycle, the batches drawn, and the rng states
    of the stream and of each sampler with the sampler's running max_steps.
    """
    return {
        "algorithm": self.algorithm, "seed": self.seed,
        "batch_size": self.batch_size, "lengths": list(self.lengths),
        "next": self._next, "batches_drawn": self.batches_drawn,
        "rng": self._rng.get_state(),
        # clrs pads on-the-fly batches to the longest trajectory seen so far.
        "samplers": [{"rng": s._rng.get_state(), "max_steps": s.max_steps}  # pylint: disable=protected-access
                     for s in self._samplers],
    }

  def load_state_dict(self, state: Dict[str, Any]) -> None:
    """Restores a `state_dict`: the stream then gives the batches the saved one would.

    The seed is not compared (the rng states restored carry it).

    Raises:
      ValueError: the state is of another algorithm, batch size or lengths.
    """
    mine = (self.algorithm, self.batch_size, list(self.lengths))
    theirs = (state["algorithm"], state["batch_size"], list(state["lengths"]))
    if mine != theirs:
      raise ValueError(f"stream state is for (algorithm, batch_size, lengths) "
                       f"{theirs}, this stream is {mine}")
    self._next = int(state["next"])
    self.batches_drawn = int(state["batches_drawn"])
    self._rng.set_state(state["rng"])
    for sampler, s in zip(self._samplers, state["samplers"]):
      sampler._rng.set_state(s["rng"])  # pylint: disable=protected-access
      sampler.max_steps = s["max_steps"]


def stream_seed(seed: int, algorithm: str, algorithms: Sequence[str]) -> int:
  """The seed of `algorithm`'s train stream and validation pool in a job of `algorithms`.

  Returns:
    For one algorithm, `seed` itself.  For several, a seed drawn from
    SeedSequence([seed, crc32(algorithm)]): stable across processes (unlike hash()),
    different for algorithms with the same sampler (bfs and dfs: the same graphs), and
    independent of the list's order.  (run.py draws its per-algorithm sampler seeds from
    one RandomState in list order.)

  Raises:
    ValueError: several algorithms, and `algorithm` is not a CLRS-30 name.
  """
  if len(algorithms) == 1:
    return int(seed)
  entropy = [int(seed), zlib.crc32(clrs30.check_algorithm(algorithm).encode())]
  return int(np.random.SeedSequence(entropy).generate_state(1)[0])
