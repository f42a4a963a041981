"""CLRS-30's names, train sizes, trajectory lengths, validation modes, data cache; no clrs import.

The launcher, ``--status``, ``--dry-run`` and the analysis need these facts but not jax,
haiku, clrs or TensorFlow; nar_markov.data (which samples with clrs) and the fast net
(`trajectory_bound`) take them from here, and tests/test_data.py checks them against clrs 2.0.3.
"""

from __future__ import annotations

import functools
import json
import pathlib
from typing import Any, Dict, Optional, Sequence, Tuple

import gin

# Hint-trajectory lengths per algorithm and size, measured on dm-clrs's samplers
# (package data): `trajectory_bound`, nar_markov.data.batching's time buckets, the launcher's
# cost estimate.
TRAJECTORY_LENGTHS_FILE = pathlib.Path(__file__).resolve().parent / "clrs30_trajectory_lengths.json"

# clrs.specs.CLRS_30_ALGS, in its order.
ALGORITHMS: Tuple[str, ...] = (
    "articulation_points", "activity_selector", "bellman_ford", "bfs", "binary_search",
    "bridges", "bubble_sort", "dag_shortest_paths", "dfs", "dijkstra",
    "find_maximum_subarray_kadane", "floyd_warshall", "graham_scan", "heapsort",
    "insertion_sort", "jarvis_march", "kmp_matcher", "lcs_length", "matrix_chain_order",
    "minimum", "mst_kruskal", "mst_prim", "naive_string_matcher", "optimal_bst",
    "quickselect", "quicksort", "segments_intersect", "strongly_connected_components",
    "task_scheduling", "topological_sort")
TRAIN_LENGTHS: Tuple[int, ...] = (4, 7, 11, 13, 16)
STRING_MATCHERS = ("naive_string_matcher", "kmp_matcher")
# run.py's --length_needle default: needle length uniform in 1..8 (train only).
TRAIN_LENGTH_NEEDLE = -8
MIN_STRING_MATCHER_NODES = 2 * abs(TRAIN_LENGTH_NEEDLE) + 1
# How validation samples are drawn (nar_markov.data.validation_pool.ValidationPool): 'resample' as
# run.py (fresh draws with replacement at every evaluation), 'fixed' the same each time.
VALIDATION_MODES = ("resample", "fixed")


def check_algorithm(name: str) -> str:
  """Checks that `name` is one of the 30 CLRS-30 algorithms.

  Returns:
    `name`.

  Raises:
    ValueError: an unknown name; the message lists the valid ones.
  """
  if name not in ALGORITHMS:
    raise ValueError(f"unknown algorithm {name!r}; valid CLRS-30 algorithms: "
                     + ", ".join(ALGORITHMS))
  return name


def train_lengths(algorithm: str,
                  lengths: Sequence[int] = TRAIN_LENGTHS) -> Tuple[int, ...]:
  """The train sizes (numbers of nodes) of `algorithm`, as dm-clrs run.py trains it.

  A string matcher trains at one size, (max(lengths) * 5) // 4; any other algorithm at
  `lengths`.

  Args:
    algorithm: a CLRS-30 algorithm.
    lengths: the train sizes asked for.

  Returns:
    The sizes, as ints.

  Raises:
    ValueError: an unknown algorithm, or a string matcher whose one size would be below
      `MIN_STRING_MATCHER_NODES` (its needles of up to 8 characters crash dm-clrs there).
  """
  if check_algorithm(algorithm) in STRING_MATCHERS:
    nb_nodes = (max(lengths) * 5) // 4
    if nb_nodes < MIN_STRING_MATCHER_NODES:
      # The needle (up to 8 characters, run.py) sits in a haystack of n - m
      # characters at rng.choice(n - 2m): n <= 16 crashes inside dm-clrs.
      raise ValueError(
          f"{algorithm} would train at (max(train_lengths) * 5) // 4 = "
          f"{nb_nodes} nodes, but needs >= {MIN_STRING_MATCHER_NODES} "
          f"(needles of up to {abs(TRAIN_LENGTH_NEEDLE)} characters)")
    return (nb_nodes,)
  return tuple(int(n) for n in lengths)


@functools.lru_cache(maxsize=None)
def trajectory_lengths() -> Dict[str, Any]:
  """The measured hint-trajectory lengths per algorithm (`TRAJECTORY_LENGTHS_FILE`, read once)."""
  return json.loads(TRAJECTORY_LENGTHS_FILE.read_text())["algorithms"]


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
  """The most hint steps a trajectory of `algorithm` at `nb_nodes` nodes can have, where known.

  Known for a `T_BOUND` algorithm at a measured train size: the measured maximum there,
  which reaches the bound.

  Returns:
    The number of steps, or None.

  Raises:
    ValueError: an unknown algorithm.
  """
  algorithm = check_algorithm(algorithm)
  if algorithm not in T_BOUND:
    return None
  measured = trajectory_lengths()[algorithm]["train_T"].get(str(int(nb_nodes)))
  return None if measured is None else int(measured)


@gin.configurable
def cache_dir(path: Optional[str] = None) -> Optional[str]:
  """The data cache directory as gin binds it (`cache_dir.path = '/scratch/...'`); None: unbound."""
  return path
