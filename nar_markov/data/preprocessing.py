"""run.py's preprocessing of CLRS-30 batches: pred as input, permutations, random `pos`.

Follows dm-clrs 2.0.3's `clrs/examples/run.py` (`make_sampler`) batch by batch: `get_spec`
is an algorithm's spec after it, `preprocess_feedback` one batch through it, with the
permutation pointers computed in numpy (no XLA compilation per shape).
"""

from __future__ import annotations

from typing import Optional, Tuple

import clrs
import numpy as np

from nar_markov.config import clrs30

# examples/run.py PRED_AS_INPUT_ALGOS: pred_h is constant along these
# trajectories, so it is an input, not a hint.
PRED_AS_INPUT_ALGOS = frozenset([
    "binary_search", "minimum", "find_maximum_subarray",
    "find_maximum_subarray_kadane", "matrix_chain_order", "lcs_length",
    "optimal_bst", "activity_selector", "task_scheduling",
    "naive_string_matcher", "kmp_matcher", "jarvis_march"])


def get_spec(algorithm: str) -> clrs.Spec:
  """The algorithm's spec after run.py's preprocessing.

  `pred_h` an input for PRED_AS_INPUT_ALGOS; each SHOULD_BE_PERMUTATION probe a
  PERMUTATION_POINTER and a `<name>_mask` MASK_ONE probe.

  Raises:
    ValueError: `algorithm` is not a CLRS-30 name.
  """
  spec = clrs.SPECS[clrs30.check_algorithm(algorithm)]
  if algorithm in PRED_AS_INPUT_ALGOS:
    spec, _ = clrs.process_pred_as_input(spec, iter(()))
  spec, _ = clrs.process_permutations(spec, iter(()), True)
  return spec


def preprocess_feedback(algorithm: str, feedback: clrs.Feedback,
               rng: Optional[np.random.RandomState] = None) -> clrs.Feedback:
  """One batch through run.py's `make_sampler` preprocessing.

  Random `pos` (given `rng`), then for PRED_AS_INPUT_ALGOS `pred_h` as an input, then each
  SHOULD_BE_PERMUTATION input, hint and output as its permutation pointer and a
  `<name>_mask` MASK_ONE probe (computed in numpy).  clrs's generator wrappers run on a
  one-batch iterator: the same numerics as its sampler, and the only state, `rng`, stays
  with the caller.

  Args:
    algorithm: a CLRS-30 name.
    feedback: one raw batch, as a clrs sampler gives it.
    rng: draws the random `pos` (and advances); None: `pos` is kept.

  Returns:
    The preprocessed feedback; its outputs a list, as clrs keeps them.  Random `pos`
    replaces the data of the `pos` DataPoint in place, as clrs does, so `feedback`'s
    `pos` changes too.

  Raises:
    ValueError: an unknown algorithm (`clrs30.check_algorithm`).
  """
  spec = clrs.SPECS[clrs30.check_algorithm(algorithm)]
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
