"""The fast path (nar_markov.nets.fastnet) computes the reference net's function.

The fast net's correctness guard: on tiny configs, `NetConfig(impl='fast')` and
`impl='reference'` (dm-clrs's modules as they are) give the same losses,
gradients, predictions and hint statistics with the same parameters, on every
CLRS-30 algorithm (and so on every (location, type) of CLRS feature the
decoders and encoders handle differently).
"""

import functools

import clrs
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nar_markov.config import clrs30

from nar_markov.config import netconfig
from nar_markov.data import batching
from nar_markov.data import preprocessing
from nar_markov.data import train_stream
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib
from nar_markov.nets import vjps

import float64

HIDDEN = 8

# Every CLRS-30 algorithm: the fast net is the default for all thirty, and a
# change to it touches every one, so each is checked against the reference.
# Among them, the kinds whose path differs:
# bfs: node pointer + masks; floyd_warshall: edge pointer/scalar/mask, node
# mask_one; dfs: node categorical, graph scalar; lcs_length: edge
# categorical; binary_search: graph pointer output; segments_intersect:
# graph mask output; naive_string_matcher: 20 nodes, long trajectories;
# insertion_sort and the other sorts: permutation-pointer outputs (Gumbel
# noise in training, the same on both sides here: conftest's
# `same_gumbel_noise`).
# Outputs that read e_t (edge features, node pointers) carry the last step's
# edge features and triplet messages through the scan, the others do not:
# bridges (edge mask output), articulation_points (node mask output) and
# kmp_matcher (graph mask hints) add a long-trajectory graph algorithm of
# each kind and the second string matcher.
ALGORITHMS = list(clrs30.ALGORITHMS)


@functools.lru_cache(maxsize=None)
def _batch(algorithm, extra_steps=2, batch_size=3):
  """(spec, a padded train batch): drawn once per process and arguments (both
  processors' comparisons read the same batch; nothing writes to it)."""
  nb_nodes = clrs30.MIN_STRING_MATCHER_NODES + 3 if "matcher" in algorithm else 5
  sampler, _ = clrs.build_sampler(algorithm, num_samples=-1, length=nb_nodes,
                                  seed=0, **train_stream.train_sampler_kwargs(algorithm))
  feedback = preprocessing.preprocess_feedback(algorithm, sampler.next(batch_size),
                                               np.random.RandomState(0))
  T = feedback.features.hints[0].data.shape[0]
  return preprocessing.get_spec(algorithm), batching.pad_time(feedback, T + extra_steps)


def _losses_grads_preds(models, params, feedback, lambda_gate):
  """{impl: (losses, gradients, predictions, extras)} of each model at `params`."""
  key = jax.random.PRNGKey(1)
  results = {}
  for impl, m in models.items():
    def total(p, m=m):
      losses = m.loss(p, feedback, lambda_gate, 0, key)
      return losses.total, losses
    # Jitted, as the learner runs it (op by op, each of ~600 ops compiles alone).
    grads, losses = jax.jit(jax.grad(total, has_aux=True))(params)
    results[impl] = (losses, grads) + tuple(m.eval_batch(params, feedback, 0, True))
  return results


def _models(spec, feedback, history="gated", processor="triplet_gmpnn",
            decoder_input="dmclrs"):
  out = {}
  for impl in ("reference", "fast"):
    config = netconfig.NetConfig(hidden_size=HIDDEN, nb_triplet_fts=4,
                                 history=history, processor=processor, impl=impl,
                                 decoder_input=decoder_input)
    out[impl] = learner.Learner([spec], [model_lib.nb_dims_of(feedback)], config,
                            learner.make_optimizer(1e-3, 10, 1.0))
  return out


def _assert_finite(tree):
  """assert_allclose takes NaN for equal to NaN: a comparison of two NaNs passes."""
  for leaf in jax.tree_util.tree_leaves(tree):
    leaf = np.asarray(leaf)
    if np.issubdtype(leaf.dtype, np.floating):
      assert np.all(np.isfinite(leaf)), "NaN or inf in a compared value"


def _assert_trees_close(a, b, rtol):
  leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  assert len(leaves_a) == len(leaves_b)
  # In numpy: jnp would compile a max and an abs for every new leaf shape.
  scale = max(float(np.max(np.abs(np.asarray(x)))) for x in leaves_a)
  for x, y in zip(leaves_a, leaves_b):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol,
                               atol=rtol * scale)


def _largest_difference(a, b):
  return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
             for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def _gradients(models, params, feedback, lambda_gate):
  """{impl: gradients of the total loss at `params`} (the key _losses_grads_preds uses)."""
  out = {}
  for impl, m in models.items():
    def total(p, m=m):
      return m.loss(p, feedback, lambda_gate, 0, jax.random.PRNGKey(1)).total
    out[impl] = jax.jit(jax.grad(total))(params)
  return out


def _float32_gradients_differ_at_a_tie(models, params, feedback, lambda_gate):
  """Where the two impls' float32 gradients differ beyond the tolerance: in float64
  (tests/float64.py) they must agree to float64 round-off, and in float32 at
  parameters moved off this point (each times 1 + 1e-4 N(0, 1)) within the tolerance.

  A max aggregation (MPNN's messages, the triplets) sends its gradient to one
  argument; where two arguments are within float32 rounding of each other, the
  order of the float32 sums (which XLA's CPU code on another machine picks)
  decides which, and the gradients differ by a whole argument's share while the
  losses agree.  optimal_bst's batch on Triplet-MPNN at hidden 8 has such a tie:
  the float32 gradients 0.014 apart, 2e-6 apart at the moved parameters, 1e-15
  apart in float64.  A fast net that loses float32 precision fails the second test."""
  with float64.float64_nets():
    params64 = jax.tree_util.tree_map(lambda p: np.asarray(p, np.float64), params)
    grads64 = _gradients(models, params64, feedback, lambda_gate)
  _assert_finite(grads64)
  scale = max(float(np.max(np.abs(x))) for x in jax.tree_util.tree_leaves(grads64["reference"]))
  gap64 = _largest_difference(grads64["reference"], grads64["fast"])
  assert gap64 <= 1e-9 * scale, f"the impls' float64 gradients differ by {gap64:.3g}"
  rng = np.random.RandomState(0)
  moved = jax.tree_util.tree_map(
      lambda p: (np.asarray(p) * (1 + 1e-4 * rng.randn(*np.shape(p)))).astype(p.dtype),
      params)
  grads32 = _gradients(models, moved, feedback, lambda_gate)
  _assert_trees_close(grads32["reference"], grads32["fast"], rtol=1e-4)


# Every processor with a fast path: run.py's Triplet-GMPNN here, the others (the
# paper's Eq. 2 net without the update gate, Triplet-MPNN) in
# test_fastnet_other_processors.py, a file of its own so that pytest-xdist's
# `--dist loadfile` can run the two halves on two workers.
@pytest.mark.usefixtures("quick_compile")
@pytest.mark.parametrize("processor", netconfig.FAST_PROCESSORS[:1])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_fast_equals_reference(algorithm, processor):
  check_fast_equals_reference(algorithm, processor)


def check_fast_equals_reference(algorithm, processor, decoder_input="dmclrs"):
  """The same parameters, initial values, losses, gradients, predictions and hint
  statistics from both impls (the fixture `quick_compile` active, and with it
  `same_gumbel_noise`)."""
  spec, feedback = _batch(algorithm)
  models = _models(spec, feedback, processor=processor, decoder_input=decoder_input)
  params = models["reference"].init(jax.random.PRNGKey(0), [feedback.features])
  fast_params = models["fast"].init(jax.random.PRNGKey(0), [feedback.features])
  # Same parameters, and the same initial values for a seed.
  assert (jax.tree_util.tree_structure(params) ==
          jax.tree_util.tree_structure(fast_params))
  for x, y in zip(jax.tree_util.tree_leaves(params),
                  jax.tree_util.tree_leaves(fast_params)):
    np.testing.assert_array_equal(x, y)

  lambda_gate = 0.1
  results = _losses_grads_preds(models, params, feedback, lambda_gate)
  _assert_finite(results)
  ref, fast = results["reference"], results["fast"]
  for field in ("total", "output", "hint", "gate_term"):
    np.testing.assert_allclose(float(getattr(fast[0], field)),
                               float(getattr(ref[0], field)), rtol=1e-5,
                               err_msg=field)
  try:
    _assert_trees_close(ref[1], fast[1], rtol=1e-4)
  except AssertionError:
    _float32_gradients_differ_at_a_tie(models, params, feedback, lambda_gate)
  for name in ref[2]:
    np.testing.assert_allclose(np.asarray(fast[2][name].data),
                               np.asarray(ref[2][name].data), atol=1e-5)
  np.testing.assert_allclose(fast[3]["hint_per_step"], ref[3]["hint_per_step"],
                             rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(fast[3]["history_norm"], ref[3]["history_norm"],
                             rtol=1e-5)


# NetConfig.decoder_input='processed' (decoders read h(t) alone, [B, N, H]): one
# algorithm per decoder path that reads h_t -- bfs node pointer and masks,
# floyd_warshall edge pointer/scalar/mask, insertion_sort permutation pointer,
# find_maximum_subarray_kadane graph scalar hints and node mask_one outputs.  The decoders
# read h_t the same way on either processor: bfs on both, the others on triplet_mpnn (the
# default processor; each case is ~30 s of compiling).
@pytest.mark.usefixtures("quick_compile")
@pytest.mark.parametrize("algorithm, processor", [
    ("bfs", "triplet_gmpnn"), ("bfs", "triplet_mpnn"), ("floyd_warshall", "triplet_mpnn"),
    ("insertion_sort", "triplet_mpnn"), ("find_maximum_subarray_kadane", "triplet_mpnn")])
def test_fast_equals_reference_decoding_from_h_t_alone(algorithm, processor):
  check_fast_equals_reference(algorithm, processor, decoder_input="processed")


@pytest.mark.usefixtures("quick_compile")
def test_fast_permutation_outputs_at_evaluation():
  """insertion_sort's permutation output: Gumbel noise differs in training by
  design (drawn once after the scan); evaluation draws none and agrees."""
  spec, feedback = _batch("insertion_sort")
  models = _models(spec, feedback, history="full")
  params = models["reference"].init(jax.random.PRNGKey(0), [feedback.features])
  ref = models["reference"].eval_batch(params, feedback, 0, True)
  fast = models["fast"].eval_batch(params, feedback, 0, True)
  for name in ref[0]:
    np.testing.assert_allclose(np.asarray(fast[0][name].data),
                               np.asarray(ref[0][name].data), atol=1e-5)
  np.testing.assert_allclose(fast[1]["hint_per_step"], ref[1]["hint_per_step"],
                             rtol=1e-4, atol=1e-6)


@pytest.mark.usefixtures("quick_compile")
def test_time_padding_and_skipped_steps_change_nothing():
  """Steps after every trajectory has ended are skipped: padding the time axis
  by 0 or 6 steps gives the same loss and gradients."""
  spec, short = _batch("bfs", extra_steps=0)
  _, long = _batch("bfs", extra_steps=6)
  m = _models(spec, short, history="full")["fast"]
  params = m.init(jax.random.PRNGKey(0), [short.features])
  key = jax.random.PRNGKey(1)
  grads = {}
  for name, fb in [("short", short), ("long", long)]:
    # Jitted, as the learner runs it (op by op, each op compiles alone).
    grads[name] = jax.jit(jax.grad(lambda p, fb=fb: m.loss(p, fb, 0.0, 0, key).total))(params)
  _assert_trees_close(grads["short"], grads["long"], rtol=1e-6)
  # The skip only drops work: an explicit bound above the batch's max is the same.
  loss = jax.jit(lambda p, max_length: m.loss(p, long, 0.0, 0, key, max_length=max_length).total)
  loss_a = loss(params, None)
  loss_b = loss(params, jnp.int32(40))
  np.testing.assert_allclose(float(loss_a), float(loss_b), rtol=1e-6)


@pytest.mark.usefixtures("quick_compile")
@pytest.mark.parametrize("algorithm", ["dijkstra", "binary_search"])
def test_scan_stops_at_the_trajectory_bound_exactly(algorithm):
  """With the algorithm named, the fast net scans no further than its
  trajectory bound: the same numbers as scanning the whole time bucket (to
  float32's rounding: the two are XLA programs with different loop trip counts,
  which XLA may fuse differently; a CI run on another CPU saw one gradient of 8
  differ by 1 ulp), and the reference net's function."""
  stream = train_stream.TrainStream(algorithm, seed=0, batch_size=3, lengths=(7,))
  feedback = next(stream)
  T = feedback.features.hints[0].data.shape[0]
  assert T - 1 > clrs30.trajectory_bound(algorithm, 7)   # padded past the bound
  models = _models(stream.spec, feedback, history="full")
  models["bounded"] = learner.Learner(
      [stream.spec], [model_lib.nb_dims_of(feedback)], models["fast"].config,
      models["fast"].optimizer, algorithms=[algorithm])
  params = models["reference"].init(jax.random.PRNGKey(0), [feedback.features])
  results = _losses_grads_preds(models, params, feedback, lambda_gate=0.0)
  _assert_finite(results)
  _assert_trees_close(results["fast"], results["bounded"], rtol=1e-6)
  np.testing.assert_allclose(float(results["bounded"][0].total),
                             float(results["reference"][0].total), rtol=1e-5)
  _assert_trees_close(results["reference"][1], results["bounded"][1], rtol=1e-4)


def _assert_vjp_is_autodiff(fused, naive, args, g):
  """`fused` (custom VJP) and `naive` agree in value and in their VJP of g."""
  out, vjp = jax.vjp(fused, *args)
  out_ref, vjp_ref = jax.vjp(naive, *args)
  np.testing.assert_allclose(out, out_ref, rtol=1e-6, atol=1e-6)
  for got, want in zip(vjp(g), vjp_ref(g)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_edge_pointer_logits_vjp_matches_autodiff():
  """The fused edge-pointer head's hand-written VJP is the autodiff of
  dm-clrs's expression, ties (0.5 each) included."""
  rng = np.random.RandomState(0)
  pred = jnp.asarray(rng.randn(2, 3, 3, 4).astype(np.float32))
  pred_2 = jnp.asarray(rng.randn(2, 3, 4).astype(np.float32))
  pred_2 = pred_2.at[0, 1].set(pred[0, 0, 0])     # exact ties
  w = jnp.asarray(rng.randn(4, 1).astype(np.float32))
  b = jnp.asarray([0.3], np.float32)
  g = jnp.asarray(rng.randn(2, 3, 3, 3).astype(np.float32))

  def naive(pred, pred_2, w, b):
    p_m = jnp.maximum(jnp.expand_dims(pred, -2),
                      jnp.expand_dims(jnp.expand_dims(pred_2, -3), -3))
    return jnp.squeeze(p_m @ w + b, -1)

  _assert_vjp_is_autodiff(vjps.edge_pointer_logits, naive, (pred, pred_2, w, b), g)


def test_fast_exists_for_the_triplet_mpnn_processors_only():
  with pytest.raises(ValueError, match="impl='fast' exists for"):
    netconfig.NetConfig(processor="mpnn", impl="fast")
  assert not netconfig.NetConfig(processor="mpnn").fast
  assert netconfig.NetConfig().fast
  assert netconfig.NetConfig(processor="triplet_mpnn").fast


def test_node_pointer_logits_vjp_matches_autodiff():
  """Same for the node-pointer head (dm-clrs transposes p_e, then Linear)."""
  rng = np.random.RandomState(1)
  p_1 = jnp.asarray(rng.randn(2, 3, 4).astype(np.float32))
  p_e = jnp.asarray(rng.randn(2, 3, 3, 4).astype(np.float32))
  p_e = p_e.at[0, 2, 1].set(p_1[0, 1])            # exact ties
  w = jnp.asarray(rng.randn(4, 1).astype(np.float32))
  b = jnp.asarray([-0.2], np.float32)
  g = jnp.asarray(rng.randn(2, 3, 3).astype(np.float32))

  def naive(p_1, p_e, w, b):
    p_m = jnp.maximum(jnp.expand_dims(p_1, -2), jnp.transpose(p_e, (0, 2, 1, 3)))
    return jnp.squeeze(p_m @ w + b, -1)

  _assert_vjp_is_autodiff(vjps.node_pointer_logits, naive, (p_1, p_e, w, b), g)


def test_message_mlp_max_vjp_matches_autodiff():
  """The processor's message MLP + max over senders (hand-written VJP) is
  autodiff of dm-clrs's MLP([H, H]) then jnp.max, ties and relu(0) included."""
  rng = np.random.RandomState(2)
  pre = rng.randn(2, 3, 4, 5).astype(np.float32)
  pre[0, :, 1, 0] = 0.0                                # relu'(0)
  w1 = rng.randn(5, 5).astype(np.float32)
  b1 = rng.randn(5).astype(np.float32)
  w2 = rng.randn(5, 5).astype(np.float32)
  b2 = rng.randn(5).astype(np.float32)
  pre[1, 2, 3] = pre[1, 0, 3]                          # two senders tie exactly
  pre = jnp.asarray(pre)
  g = jnp.asarray(rng.randn(2, 4, 5).astype(np.float32))

  def naive(pre, w1, b1, w2, b2):
    h1 = jax.nn.relu(jax.nn.relu(pre) @ w1 + b1)
    return jnp.max(h1 @ w2 + b2, axis=1)

  out = vjps.message_mlp_max(pre, w1, b1, w2, b2)
  hits = (naive(pre, w1, b1, w2, b2)[1, 3] ==
          (jax.nn.relu(jax.nn.relu(pre[1, 0, 3]) @ w1 + b1) @ w2 + b2))
  assert bool(jnp.any(hits)), "the tie must be at the max to be tested"
  _assert_vjp_is_autodiff(vjps.message_mlp_max, naive, (pre, w1, b1, w2, b2), g)
  assert out.shape == (2, 4, 5)
