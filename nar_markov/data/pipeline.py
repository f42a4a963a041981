"""CLRS-30 data: the train stream, run.py's validation pool, the official val/test splits, a cache.

Everything follows dm-clrs 2.0.3 (`clrs/examples/run.py`, `clrs/_src/dataset.py`):
`TrainStream` is run.py's multi-sampler with its stream state capturable for exact
resume; `ValidationPool` is run.py's validation (training settings at the largest
train size, resampled at each evaluation); `load_split` is the official builder's
val/test draw, cached losslessly under `<cache_dir>/clrs-<version>/`; `time_bucket`
bounds the hint time axis so a jitted step compiles a few shapes, not one per batch.
The departures from run.py and why, the cache's format and the CLI: docs/formats.md.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import inspect
import json
import os
import pathlib
import sys
import tempfile
import time
import warnings
import zlib
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

if __name__ == "__main__":  # before clrs imports tensorflow: no start-up banners
  from nar_markov import quiet  # pylint: disable=g-import-not-at-top
  quiet.setup()

import clrs
from clrs._src import samplers as clrs_samplers
import numpy as np

from nar_markov import quiet
from nar_markov.config import clrs30

# CLRS-30's names and train sizes live in nar_markov.config.clrs30 (no clrs import there).
SPLITS = ("train", "val", "test")

# examples/run.py PRED_AS_INPUT_ALGOS: pred_h is constant along these
# trajectories, so it is an input, not a hint.
PRED_AS_INPUT_ALGOS = frozenset([
    "binary_search", "minimum", "find_maximum_subarray",
    "find_maximum_subarray_kadane", "matrix_chain_order", "lcs_length",
    "optimal_bst", "activity_selector", "task_scheduling",
    "naive_string_matcher", "kmp_matcher", "jarvis_march"])
# run.py: "Choose a lower connection probability for the above algorithms,
# otherwise trajectories are very long".
_HALF_P_ALGOS = ("articulation_points", "bridges", "mst_kruskal",
                 "bipartite_matching")
# The string matchers are validated at their training size (module docstring).
_STRING_MATCHER_VAL_LENGTH = 20

_CACHE_FORMAT = 1
_CACHE_ENV = "NAR_MARKOV_CACHE"


check_algorithm = clrs30.check_algorithm


def _check_split(split: str, allowed: Sequence[str] = ("val", "test")) -> str:
  if split not in allowed:
    raise ValueError(f"unknown split {split!r}; valid: {', '.join(allowed)}")
  return split


def get_spec(algorithm: str) -> clrs.Spec:
  """The algorithm's spec after run.py's preprocessing (pred, permutations)."""
  spec = clrs.SPECS[check_algorithm(algorithm)]
  if algorithm in PRED_AS_INPUT_ALGOS:
    spec, _ = clrs.process_pred_as_input(spec, iter(()))
  spec, _ = clrs.process_permutations(spec, iter(()), True)
  return spec


def preprocess_feedback(algorithm: str, feedback: clrs.Feedback,
               rng: Optional[np.random.RandomState] = None) -> clrs.Feedback:
  """run.py's make_sampler preprocessing of one batch (random pos iff rng).

  clrs's generator wrappers run on a one-batch iterator: identical numerics,
  and the only state (`rng`) stays with the caller. Random pos replaces the
  `pos` DataPoint's data in place, as clrs does.
  """
  spec = clrs.SPECS[algorithm]
  it = iter((feedback,))
  if rng is not None:
    it = clrs.process_random_pos(it, rng)
  if algorithm in PRED_AS_INPUT_ALGOS:
    spec, it = clrs.process_pred_as_input(spec, it)
  feedback = next(it)
  features = feedback.features
  return feedback._replace(
      features=features._replace(inputs=_permutations(features.inputs),
                                 hints=_permutations(features.hints)),
      outputs=list(_permutations(feedback.outputs)))  # clrs: outputs stay a list


def _np_one_hot(index, nb_nodes: int) -> np.ndarray:
  """jax.nn.one_hot in numpy (an out-of-range index gives a zero row)."""
  return (np.asarray(index)[..., None] == np.arange(nb_nodes)).astype(np.float32)


def _cyclic_predecessor_and_first(pointers: np.ndarray):
  """clrs probing.predecessor_to_cyclic_predecessor_and_first, in numpy.

  clrs's runs jnp ops eagerly (jnp.vectorize over the leading axes): an XLA
  compilation per new shape, 50 in a 200-step insertion_sort run. Same
  operations, same arrays (tests/test_data.py checks it against clrs batch
  for batch).
  """
  nb_nodes = pointers.shape[-1]
  perms = np.zeros(pointers.shape + (nb_nodes,), np.float32)
  masks = np.zeros(pointers.shape, np.float32)
  for idx in np.ndindex(*pointers.shape[:-1]):
    one_hot = _np_one_hot(pointers[idx], nb_nodes)
    # The last node is the one no other node points to; the first points to itself.
    last = one_hot.sum(-2).argmin()
    first = one_hot.diagonal().argmax()
    mask = _np_one_hot(first, nb_nodes)
    one_hot += mask[..., None] * _np_one_hot(last, nb_nodes)
    one_hot -= mask[..., None] * mask
    perms[idx], masks[idx] = one_hot, mask
  return perms, masks


def _permutations(probes) -> Tuple[clrs.DataPoint, ...]:
  """clrs samplers._preprocess_permutations(probes, enforce_permutations=True)."""
  out = []
  for x in probes:
    if x.type_ != clrs.Type.SHOULD_BE_PERMUTATION:
      out.append(x)
      continue
    data, mask = _cyclic_predecessor_and_first(np.asarray(x.data))
    out.append(clrs.DataPoint(name=x.name, location=x.location,
                              type_=clrs.Type.PERMUTATION_POINTER, data=data))
    out.append(clrs.DataPoint(name=x.name + "_mask", location=x.location,
                              type_=clrs.Type.MASK_ONE, data=mask))
  return tuple(out)


# --------------------------------------------------------------------------
# Shapes.

def _hint_time(feedback: clrs.Feedback) -> int:
  return int(feedback.features.hints[0].data.shape[0])


def nb_nodes_of(feedback: clrs.Feedback) -> int:
  pos, = [dp for dp in feedback.features.inputs if dp.name == "pos"]
  return int(pos.data.shape[1])


def nb_samples_of(feedback: clrs.Feedback) -> int:
  return int(feedback.features.lengths.shape[0])


@functools.lru_cache(maxsize=None)
def _trajectory_lengths() -> Dict[str, Any]:
  return json.loads(clrs30.TRAJECTORY_LENGTHS_FILE.read_text())["algorithms"]


# Algorithms whose hint-trajectory length at n nodes has an upper bound (a
# Python expression in n) that the measured max of every train size reaches
# (clrs30_trajectory_lengths.json; tests/test_data.py checks both).
T_BOUND = {
    "insertion_sort": "n", "minimum": "n", "find_maximum_subarray_kadane": "n",
    "floyd_warshall": "n", "matrix_chain_order": "n - 1",
    "activity_selector": "n + 1", "task_scheduling": "n + 1", "dijkstra": "n + 1",
    "mst_prim": "n + 1", "optimal_bst": "n + 1", "dfs": "3 * n",
    "dag_shortest_paths": "3 * n + 1", "strongly_connected_components": "6 * n",
    "bubble_sort": "n * (n - 1) // 2 + 1", "binary_search": "ceil(log2(n)) + 1",
    "segments_intersect": "5",
}


def trajectory_bound(algorithm: str, nb_nodes: int) -> Optional[int]:
  """The most hint steps a trajectory of `algorithm` at `nb_nodes` can have, where
  known (a `T_BOUND` algorithm at a measured train size); else None."""
  algorithm = check_algorithm(algorithm)
  if algorithm not in T_BOUND:
    return None
  measured = _trajectory_lengths()[algorithm]["train_T"].get(str(int(nb_nodes)))
  return None if measured is None else int(measured)


def time_bucket(algorithm: str, nb_nodes: int, T: int) -> int:
  """Hint time length to pad a train batch of max length `T` to.

  With m the measured max T of (algorithm, nb_nodes): m + max(2, m // 4) if
  `T` fits; else (and for sizes that were not measured) `T` rounded up to a
  multiple of 2**(bit_length(T) - 4) (T <= 15 not rounded; 147 -> 160).
  One shape per train size is one compilation per size: the headroom is
  there because dm-clrs's running max sometimes exceeds the measured max.
  Padding costs the fast net (nar_markov.nets.fastnet) next to nothing -- it
  skips every step after the batch's longest trajectory, and scans no
  further than `trajectory_bound` -- whereas `impl='reference'` runs
  them (a multiple-of-8 rule cost it 1.8x per step on bfs at 11 nodes).
  A `T_BOUND` algorithm's `T` past its bound is an error: the fast net
  would not run those steps.
  """
  measured = _trajectory_lengths()[check_algorithm(algorithm)][
      "train_T"].get(str(int(nb_nodes)))
  T = max(1, int(T))
  limit = trajectory_bound(algorithm, nb_nodes)
  if limit is not None and T > limit:
    raise ValueError(f"{algorithm} at {nb_nodes} nodes: a batch of {T} hint steps "
                     f"(a trajectory that long), past its bound {T_BOUND[algorithm]} "
                     f"= {limit}")
  if measured is not None:
    bucket = int(measured) + max(2, int(measured) // 4)
    if T <= bucket:
      return bucket
  granule = 1 << max(0, T.bit_length() - 4)
  return -(-T // granule) * granule


def pad_time(feedback: clrs.Feedback, T: int) -> clrs.Feedback:
  """Zero-pad the hint time axis to `T` steps; inputs, outputs, lengths kept."""
  cur = _hint_time(feedback)
  if T < cur:
    raise ValueError(f"cannot pad hints of {cur} steps to {T}")
  if T == cur:
    return feedback
  hints = tuple(
      clrs.DataPoint(h.name, h.location, h.type_, np.concatenate(
          [h.data, np.zeros((T - cur,) + h.data.shape[1:], h.data.dtype)]))
      for h in feedback.features.hints)
  return feedback._replace(features=feedback.features._replace(hints=hints))


def _take(feedback: clrs.Feedback, idx) -> clrs.Feedback:
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
  return _take(feedback, slice(0, int(n)))


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
      yield _take(feedback, slice(start, start + batch_size)), n_valid
    else:
      idx = np.arange(start, start + batch_size) % n
      yield _take(feedback, idx), n_valid


# --------------------------------------------------------------------------
# Train.

train_lengths = clrs30.train_lengths


def train_sampler_kwargs(algorithm: str) -> Dict[str, Any]:
  """run.py's sampler kwargs, restricted to those the sampler accepts."""
  p = tuple([0.1 + 0.1 * i for i in range(9)])
  if algorithm in _HALF_P_ALGOS:
    p = tuple(np.array(p) / 2)
  kwargs = dict(p=p, length_needle=clrs30.TRAIN_LENGTH_NEEDLE)
  # clrs.build_sampler drops the rest too, but logs a warning per sampler.
  accepted = inspect.signature(
      clrs_samplers.SAMPLERS[algorithm]._sample_data).parameters  # pylint: disable=protected-access
  return {k: v for k, v in kwargs.items() if k in accepted}


class TrainStream:
  """Endless train batches of one algorithm, exactly resumable.

  Cycles the train lengths batch by batch (4, 7, 11, 13, 16, 4, ...); each
  batch's hints are zero-padded to `time_bucket(algorithm, nb_nodes, T)`.
  Building the stream samples 1,000 trajectories per length (clrs's
  track_max_steps estimate, which also advances the samplers as in run.py).
  """

  def __init__(self, algorithm: str, seed: int, batch_size: int = 32,
               lengths: Sequence[int] = clrs30.TRAIN_LENGTHS):
    self.algorithm = check_algorithm(algorithm)
    self.seed = int(seed)
    self.batch_size = int(batch_size)
    self.lengths = train_lengths(algorithm, lengths)
    self.spec = get_spec(algorithm)
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
    return self.lengths[self._next]

  def __iter__(self) -> "TrainStream":
    return self

  def __next__(self) -> clrs.Feedback:
    nb_nodes = self.lengths[self._next]
    feedback = self._samplers[self._next].next(self.batch_size)
    feedback = preprocess_feedback(self.algorithm, feedback, self._rng)
    feedback = pad_time(feedback, time_bucket(self.algorithm, nb_nodes,
                                              _hint_time(feedback)))
    self._next = (self._next + 1) % len(self.lengths)
    self.batches_drawn += 1
    return feedback

  def state_dict(self) -> Dict[str, Any]:
    """Everything that determines the next batches (picklable)."""
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
  """Seed of `algorithm`'s train stream and validation pool in a job of `algorithms`.

  One algorithm: the run's seed (single-task runs).  Several: keyed by name
  (crc32 is stable across processes, unlike hash()), so that algorithms with
  the same sampler (bfs and dfs: the same graphs) get different data, and
  the data do not depend on the order of the list.  run.py draws its
  per-algorithm sampler seeds from one RandomState in list order instead.
  """
  if len(algorithms) == 1:
    return int(seed)
  entropy = [int(seed), zlib.crc32(check_algorithm(algorithm).encode())]
  return int(np.random.SeedSequence(entropy).generate_state(1)[0])


# --------------------------------------------------------------------------
# Validation, as run.py validates.

_VAL_BATCH_SIZE = 32  # run.py's val_args batch_size


def validation_sampler_seed(algorithm: str, seed: int,
                            lengths: Sequence[int] = clrs30.TRAIN_LENGTHS) -> int:
  """run.py's val sampler seed: the `randint` after the train samplers'.

  run.py's create_samplers draws, from one `RandomState(seed)`, one seed per
  train sampler and then one for the val sampler (as `TrainStream` does for
  the train samplers).
  """
  rng = np.random.RandomState(int(seed))
  for _ in train_lengths(algorithm, lengths):
    rng.randint(2**32)
  return int(rng.randint(2**32))


class ValidationPool:
  """run.py's validation data of one run (module docstring, "Validation").

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
    self.algorithm = check_algorithm(algorithm)
    self.mode = mode
    self.nb_nodes = max(train_lengths(algorithm, lengths))
    multiplier = clrs.CLRS_30_ALGS_SETTINGS[algorithm]["num_samples_multiplier"]
    self.num_samples = 2 * clrs.CLRS30["val"]["num_samples"] * multiplier
    self.seed = validation_sampler_seed(algorithm, seed, lengths)
    sampler, _ = clrs.build_sampler(
        algorithm, seed=self.seed, num_samples=self.num_samples,
        length=self.nb_nodes, **train_sampler_kwargs(algorithm))
    self._pool = sampler.next(None)  # the whole pre-generated dataset
    self._fixed = None

  def _subsample(self, idx) -> clrs.Feedback:
    return _take(self._pool, np.asarray(idx))  # np.take semantics: copies

  def draw(self, key: int) -> clrs.Feedback:
    if self.mode == "fixed":
      if self._fixed is None:
        rng = np.random.RandomState([self.seed, 0])
        self._fixed = preprocess_feedback(
            self.algorithm, self._subsample(np.arange(self.num_samples)), rng)
      return self._fixed
    rng = np.random.RandomState([self.seed, int(key)])
    batches = []
    for _ in range(-(-self.num_samples // _VAL_BATCH_SIZE)):
      idx = rng.choice(self.num_samples, (_VAL_BATCH_SIZE,), replace=True)
      batches.append(preprocess_feedback(self.algorithm, self._subsample(idx), rng))
    return concat_samples(batches)


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


# --------------------------------------------------------------------------
# Val / test.

def split_settings(algorithm: str, split: str) -> Dict[str, int]:
  """seed, num_samples and length of the official draw of a val/test split."""
  check_algorithm(algorithm)
  _check_split(split)
  official = clrs.CLRS30[split]
  length = official["length"]
  if split == "val" and algorithm in clrs30.STRING_MATCHERS:
    length = _STRING_MATCHER_VAL_LENGTH
  multiplier = clrs.CLRS_30_ALGS_SETTINGS[algorithm]["num_samples_multiplier"]
  return {"seed": official["seed"], "length": length,
          "num_samples": official["num_samples"] * multiplier}


def generate_raw_split(algorithm: str, split: str) -> clrs.Feedback:
  """The dataset builder's full draw, no preprocessing, no cache."""
  settings = split_settings(algorithm, split)
  sampler, _ = clrs.build_sampler(
      algorithm, seed=settings["seed"], num_samples=settings["num_samples"],
      length=settings["length"])
  return sampler.next(None)


cache_dir = clrs30.cache_dir


def resolve_cache_dir(path: Optional[str] = None) -> pathlib.Path:
  """argument > $NAR_MARKOV_CACHE > gin `cache_dir.path` > ~/.cache/nar_markov."""
  for candidate in (path, os.environ.get(_CACHE_ENV), cache_dir()):
    if candidate:
      return pathlib.Path(candidate).expanduser()
  return pathlib.Path("~/.cache/nar_markov").expanduser()


def cache_path(algorithm: str, split: str,
               cache_dir: Optional[str] = None) -> pathlib.Path:  # pylint: disable=redefined-outer-name
  return (resolve_cache_dir(cache_dir) / f"clrs-{clrs.__version__}" /
          f"{check_algorithm(algorithm)}_{_check_split(split)}.npz")


def load_split(algorithm: str, split: str, cache_dir: Optional[str] = None,  # pylint: disable=redefined-outer-name
               preprocess: bool = True) -> clrs.Feedback:
  """A whole val/test split (cached); `preprocess=False`: the raw draw."""
  feedback, _ = load_raw_split(algorithm, split, cache_dir)
  if preprocess:
    feedback = preprocess_feedback(algorithm, feedback)
  return feedback


def load_raw_split(algorithm: str, split: str,
                   cache_dir: Optional[str] = None  # pylint: disable=redefined-outer-name
                   ) -> Tuple[clrs.Feedback, str]:
  """(raw draw, 'cached' | 'generated'); regenerates a bad cache file."""
  path = cache_path(algorithm, split, cache_dir)
  expected = _cache_meta(algorithm, split)
  if path.exists():
    try:
      return _read_cache(path, expected), "cached"
    except Exception as e:  # pylint: disable=broad-except
      # Any unreadable file (truncated zip, bad checksum, other settings) is
      # rebuilt; a silently wrong test split would be far worse.
      warnings.warn(f"nar_markov cache file {path} is unusable ({e!r}); "
                    "regenerating it", RuntimeWarning, stacklevel=2)
  feedback = generate_raw_split(algorithm, split)
  _write_cache(path, feedback, expected)
  return feedback, "generated"


# --------------------------------------------------------------------------
# Cache codec.

def _cache_meta(algorithm: str, split: str) -> Dict[str, Any]:
  return {"format": _CACHE_FORMAT, "clrs": clrs.__version__,
          "algorithm": algorithm, "split": split,
          "settings": split_settings(algorithm, split)}


def _narrowest(x: np.ndarray) -> np.ndarray:
  """`x` in the smallest dtype from which it comes back bit for bit."""
  if x.dtype.kind not in "fiub" or x.size == 0:
    return x
  same_size_uint = np.dtype(f"u{x.dtype.itemsize}")
  for candidate in (np.uint8, np.int8, np.uint16, np.int16, np.int32,
                    np.float32):
    if np.dtype(candidate).itemsize >= x.dtype.itemsize:
      continue
    with np.errstate(invalid="ignore", over="ignore"):
      y = x.astype(candidate)
      back = y.astype(x.dtype)
    if np.array_equal(back.view(same_size_uint), x.view(same_size_uint)):
      return y
  return x


def _digest(arrays: Dict[str, np.ndarray], meta_json: str) -> str:
  h = hashlib.sha256(meta_json.encode())
  for key in sorted(arrays):
    a = np.ascontiguousarray(arrays[key])
    h.update(f"{key}|{a.dtype.str}|{a.shape}|".encode())
    h.update(a.data)
  return h.hexdigest()


def _valid_steps(lengths: np.ndarray, T: int) -> np.ndarray:
  return np.arange(T)[:, None] < np.asarray(lengths)[None, :]  # [T, B]


def _encode(feedback: clrs.Feedback, meta: Dict[str, Any]
            ) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
  features = feedback.features
  T = _hint_time(feedback)
  valid = _valid_steps(features.lengths, T)
  arrays = {"lengths": _narrowest(np.asarray(features.lengths))}
  meta = dict(meta, T=T, lengths_dtype=str(features.lengths.dtype))
  for stage, points in (("input", features.inputs), ("output", feedback.outputs),
                        ("hint", features.hints)):
    entries = []
    for dp in points:
      x = np.asarray(dp.data)
      packed = False
      if stage == "hint":
        # Drop the zero padding after each trajectory's end (most of a
        # 2,048-sample split); kept only if nothing but zeros is dropped.
        steps = x[valid]
        if np.count_nonzero(steps) == np.count_nonzero(x):
          x, packed = steps, True
      arrays[f"{stage}_{dp.name}"] = _narrowest(x)
      entries.append({"name": dp.name, "location": dp.location,
                      "type": dp.type_, "dtype": str(dp.data.dtype),
                      "packed": packed})
    meta[stage] = entries
  return arrays, meta


def _decode(arrays: Dict[str, np.ndarray], meta: Dict[str, Any]
            ) -> clrs.Feedback:
  lengths = arrays["lengths"].astype(meta["lengths_dtype"])
  valid = _valid_steps(lengths, meta["T"])
  out = {}
  for stage in ("input", "output", "hint"):
    points = []
    for e in meta[stage]:
      y = arrays[f"{stage}_{e['name']}"]
      if e["packed"]:
        x = np.zeros(valid.shape + y.shape[1:], e["dtype"])
        x[valid] = y
      else:
        x = y.astype(e["dtype"])
      points.append(clrs.DataPoint(e["name"], e["location"], e["type"], x))
    out[stage] = tuple(points)
  return clrs.Feedback(clrs.Features(out["input"], out["hint"], lengths),
                       out["output"])


def _write_cache(path: pathlib.Path, feedback: clrs.Feedback,
                 meta: Dict[str, Any]) -> None:
  arrays, meta = _encode(feedback, meta)
  meta_json = json.dumps(meta, sort_keys=True)
  digest = _digest(arrays, meta_json)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".",
                             suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      np.savez(f, __meta__=np.array(meta_json), __sha256__=np.array(digest),
               **arrays)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)  # readers see the old file or the whole new one
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def _read_cache(path: pathlib.Path, expected: Dict[str, Any]) -> clrs.Feedback:
  with np.load(path, allow_pickle=False) as z:
    meta_json = str(z["__meta__"])
    stored_digest = str(z["__sha256__"])
    arrays = {k: z[k] for k in z.files if not k.startswith("__")}
  if _digest(arrays, meta_json) != stored_digest:
    raise ValueError("checksum mismatch")
  meta = json.loads(meta_json)
  for key, value in expected.items():
    if meta.get(key) != value:
      raise ValueError(f"cache {key}={meta.get(key)!r}, expected {value!r}")
  return _decode(arrays, meta)


# --------------------------------------------------------------------------
# CLI.

def _describe(feedback: clrs.Feedback) -> str:
  lengths = feedback.features.lengths
  return (f"{nb_samples_of(feedback)} samples of {nb_nodes_of(feedback)} nodes, "
          f"trajectory lengths min {int(lengths.min())} max {int(lengths.max())}"
          f" (hint time axis {_hint_time(feedback)})")


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m nar_markov.data.pipeline",
      description="Inspect CLRS-30 splits / fill the val+test cache.")
  parser.add_argument("--algorithm", help="one of the 30 CLRS-30 algorithms")
  parser.add_argument("--split", choices=SPLITS, default="test")
  parser.add_argument("--all", action="store_true",
                      help="fill the cache (val+test) for all 30 algorithms")
  parser.add_argument("--cache-dir", default=None,
                      help="default: $NAR_MARKOV_CACHE, gin, ~/.cache/nar_markov")
  parser.add_argument("--seed", type=int, default=0, help="train split only")
  quiet.add_flag(parser)
  args = parser.parse_args(argv)

  if args.all:
    print(f"cache: {resolve_cache_dir(args.cache_dir)}", flush=True)
    for i, algorithm in enumerate(clrs30.ALGORITHMS):
      parts = []
      t0 = time.time()
      for split in ("val", "test"):
        t = time.time()
        feedback, how = load_raw_split(algorithm, split, args.cache_dir)
        size_mb = cache_path(algorithm, split, args.cache_dir).stat().st_size / 1e6
        parts.append(f"{split} {nb_samples_of(feedback)}x{nb_nodes_of(feedback)}"
                     f" {how} {time.time() - t:.1f}s {size_mb:.1f}MB")
        del feedback
      print(f"[{i + 1:2d}/{len(clrs30.ALGORITHMS)}] {algorithm}: " + ", ".join(parts)
            + f" ({time.time() - t0:.1f}s)", flush=True)
    return 0

  if args.algorithm is None:
    parser.error("--algorithm or --all is required")
  try:
    check_algorithm(args.algorithm)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2

  if args.split == "train":
    stream = TrainStream(args.algorithm, seed=args.seed)
    print(f"{args.algorithm} train: on-the-fly sampler (seed {args.seed}), "
          f"one batch of {stream.batch_size} per train length:")
    for nb_nodes in stream.lengths:
      feedback = next(stream)
      print(f"  {nb_nodes:3d} nodes: {_describe(feedback)}")
    return 0

  t = time.time()
  feedback, how = load_raw_split(args.algorithm, args.split, args.cache_dir)
  seconds = time.time() - t
  path = cache_path(args.algorithm, args.split, args.cache_dir)
  print(f"{args.algorithm} {args.split}: {_describe(feedback)}")
  print(f"  {how} in {seconds:.2f}s; cache {path} "
        f"({path.stat().st_size / 1e6:.1f} MB)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
