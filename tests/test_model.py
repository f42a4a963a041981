"""What the paper claims about its three models, in code (Sec. 3-4, Eq. 2-6)."""

import clrs
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nar_markov.config import netconfig
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib

HIDDEN = 16
NB_NODES = 5
BATCH = 4


@pytest.fixture(scope="module")
def bfs_batch():
  sampler, spec = clrs.build_sampler("bfs", num_samples=-1, length=NB_NODES, seed=0)
  feedback = sampler.next(BATCH)
  return spec, feedback


def _model(spec, feedback, history, gate_bias_init=0.0, impl="auto", **net):
  config = netconfig.NetConfig(hidden_size=HIDDEN, history=history,
                               nb_triplet_fts=4, gate_bias_init=gate_bias_init,
                               impl=impl, **net)
  m = learner.Learner([spec], [model_lib.nb_dims_of(feedback)], config,
                  learner.make_optimizer(1e-3, 100, 1.0))
  params = m.init(jax.random.PRNGKey(0), [feedback.features])
  return m, params


def _history_probe(m, params, feedback, lambda_gate=0.0):
  """Loss and outputs as functions of the h(t-1) fed to every step."""
  nb_steps = feedback.features.hints[0].data.shape[0] - 1

  def run(hidden):
    out = m.apply(params, feedback.features, 0, False, hidden_override=hidden)
    return model_lib.compute_losses(feedback, out, lambda_gate).total, out

  shape = (nb_steps, BATCH, NB_NODES, HIDDEN)
  h_a = jax.random.normal(jax.random.PRNGKey(1), shape)
  h_b = 10.0 * jax.random.normal(jax.random.PRNGKey(2), shape)
  return run, h_a, h_b


def _assert_independent_of_history(run, h_a, h_b):
  """`run` (a _history_probe) gives the same loss and predictions for two h(t-1), and a zero
  gradient with respect to it; returns the outputs at `h_a`."""
  (loss_a, out_a), (loss_b, out_b) = run(h_a), run(h_b)
  assert float(loss_a) == float(loss_b)
  for preds in ("output_preds", "hint_preds"):
    for name in getattr(out_a, preds):
      np.testing.assert_array_equal(getattr(out_a, preds)[name], getattr(out_b, preds)[name])
  grad = jax.grad(lambda h: run(h)[0])(h_a)
  assert float(jnp.max(jnp.abs(grad))) == 0.0
  return out_a


def test_forgetnet_ignores_history(bfs_batch):
  """Eq. 3: ForgetNet's predictions and losses do not depend on h(t-1)."""
  spec, feedback = bfs_batch
  m, params = _model(spec, feedback, "none")
  out_a = _assert_independent_of_history(*_history_probe(m, params, feedback))
  np.testing.assert_array_equal(out_a.history_norm, 0.0)


def test_baseline_uses_history(bfs_batch):
  """Eq. 2: the baseline's predictions change with h(t-1), with non-zero gradient."""
  spec, feedback = bfs_batch
  m, params = _model(spec, feedback, "full")
  run, h_a, h_b = _history_probe(m, params, feedback)
  loss_a, out_a = run(h_a)
  loss_b, out_b = run(h_b)
  assert abs(float(loss_a) - float(loss_b)) > 1e-4
  assert not np.allclose(out_a.hint_preds["pi_h"], out_b.hint_preds["pi_h"])
  grad = jax.grad(lambda h: run(h)[0])(h_a)
  assert float(jnp.max(jnp.abs(grad))) > 1e-6


def test_gated_history_reaches_the_net(bfs_batch):
  spec, feedback = bfs_batch
  m, params = _model(spec, feedback, "gated")
  run, h_a, h_b = _history_probe(m, params, feedback)
  grad = jax.grad(lambda h: run(h)[0])(h_a)
  assert float(jnp.max(jnp.abs(grad))) > 1e-6


def test_gate_in_unit_interval_with_hidden_shape(bfs_batch):
  """Eq. 5: g = sigmoid(MLP([x, h])) lies in (0, 1) with h's shape."""
  import haiku as hk
  gate_fn = hk.transform(lambda x, h: model_lib.HistoryGate(HIDDEN, 2, 0.0)(x, h))
  x = jax.random.normal(jax.random.PRNGKey(0), (BATCH, NB_NODES, HIDDEN))
  h = 5.0 * jax.random.normal(jax.random.PRNGKey(1), (BATCH, NB_NODES, HIDDEN))
  params = gate_fn.init(jax.random.PRNGKey(2), x, h)
  g = gate_fn.apply(params, None, x, h)
  assert g.shape == h.shape
  assert float(g.min()) > 0.0 and float(g.max()) < 1.0


def test_gate_penalty_is_lambda_times_sum_of_gate_norms(bfs_batch):
  """Eq. 6 on a hand-checkable case.

  With the gate's last layer zeroed and its bias b, every gate entry is
  sigmoid(b), so ||g_i|| = sqrt(H) * sigmoid(b) and sum_i ||g_i|| =
  N * sqrt(H) * sigmoid(b) at every step: the penalty is lambda times that.
  """
  spec, feedback = bfs_batch
  bias = 1.5
  m, params = _model(spec, feedback, "gated", gate_bias_init=bias)
  params = {k: ({kk: jnp.zeros_like(vv) if kk == "w" else vv for kk, vv in v.items()}
                if k.endswith("history_gate/linear_1") else v)
            for k, v in params.items()}
  assert any(k.endswith("history_gate/linear_1") for k in params)
  out = m.apply(params, feedback.features, 0, False)
  expected = NB_NODES * np.sqrt(HIDDEN) * (1.0 / (1.0 + np.exp(-bias)))
  lam = 0.25
  losses = model_lib.compute_losses(feedback, out, lam)
  np.testing.assert_allclose(float(losses.gate_term), expected, rtol=1e-5)
  np.testing.assert_allclose(float(losses.gate_penalty), lam * expected, rtol=1e-5)
  np.testing.assert_allclose(float(losses.total),
                             float(losses.output + losses.hint) + lam * expected,
                             rtol=1e-5)
  no_penalty = model_lib.compute_losses(feedback, out, 0.0)
  assert float(no_penalty.gate_penalty) == 0.0
  np.testing.assert_allclose(float(no_penalty.total),
                             float(no_penalty.output + no_penalty.hint), rtol=1e-6)


def test_hint_loss_matches_dm_clrs(bfs_batch):
  """Our summed hint loss is dm-clrs's losses.hint_loss, step for step."""
  from clrs._src import losses as clrs_losses
  spec, feedback = bfs_batch
  m, params = _model(spec, feedback, "full")
  out = m.apply(params, feedback.features, 0, False)
  ours = model_lib.compute_losses(feedback, out, 0.0)
  theirs = 0.0
  for truth in feedback.features.hints:
    preds = [out.hint_preds[truth.name][i] for i in range(out.gate_sum.shape[0])]
    theirs += clrs_losses.hint_loss(truth, preds, feedback.features.lengths, NB_NODES)
  np.testing.assert_allclose(float(ours.hint), float(theirs), rtol=1e-5)


@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_processed_decoders_read_h_t_alone(bfs_batch, impl):
  """NetConfig.decoder_input='processed': the node decoders' first Linears take H inputs
  (h(t)), not dm-clrs's 3H ([x(t), h(t-1), h(t)]), and h(t-1) reaches no decoder.
  ForgetNet with scope 'processor' keeps the raw h(t-1) in the decoder input only
  (test_history_scope): decoding from h(t) alone, it no longer depends on h(t-1), where
  dm-clrs's decoder input makes it move with it."""
  spec, feedback = bfs_batch
  for decoder_input, width in (("dmclrs", 3 * HIDDEN), ("processed", HIDDEN)):
    m, params = _model(spec, feedback, "none", impl=impl, history_scope="processor",
                       decoder_input=decoder_input)
    for name in ("pi_h_dec_linear", "pi_h_dec_linear_1", "reach_h_dec_linear"):
      (w,) = [v["w"] for k, v in params.items() if k.endswith(f"algo_0_{name}")]
      assert w.shape[0] == width, (decoder_input, name, w.shape)
    run, h_a, h_b = _history_probe(m, params, feedback)
    if decoder_input == "dmclrs":
      out_a, out_b = run(h_a)[1], run(h_b)[1]
      assert not np.allclose(out_a.hint_preds["pi_h"], out_b.hint_preds["pi_h"])
      continue
    _assert_independent_of_history(run, h_a, h_b)


def test_bad_config_is_one_clear_error():
  with pytest.raises(ValueError, match="history must be one of"):
    netconfig.NetConfig(history="partial")
  with pytest.raises(ValueError,
                     match=r"decoder_input must be one of \('dmclrs', 'processed'\)"):
    netconfig.NetConfig(decoder_input="concat")
  with pytest.raises(ValueError, match="hidden_size must be > 0"):
    netconfig.NetConfig(hidden_size=0)


@pytest.mark.parametrize("impl", ["reference", "fast"])
@pytest.mark.parametrize("algorithm", ["bfs", "insertion_sort"])
def test_baseline_is_dm_clrs_net(algorithm, impl):
  """history='full' is dm-clrs's own Net: same parameter tree, and with the
  same parameters the same test predictions (and, without Gumbel-noised
  permutation decoders, the same training loss: to the last bit with dm-clrs's
  modules, to round-off on the fast path)."""
  import tempfile
  from nar_markov.data import train_stream
  stream = train_stream.TrainStream(algorithm, seed=0, batch_size=BATCH, lengths=(NB_NODES,))
  feedback = next(stream)
  clrs_model = clrs.models.BaselineModel(
      spec=[stream.spec], dummy_trajectory=[feedback],
      processor_factory=clrs.get_processor_factory("triplet_gmpnn", use_ln=True,
                                                   nb_triplet_fts=4),
      hidden_dim=HIDDEN, encode_hints=True, decode_hints=True,
      encoder_init="xavier_on_scalars", use_lstm=False, learning_rate=1e-3,
      grad_clip_max_norm=1.0, checkpoint_path=tempfile.mkdtemp(),
      freeze_processor=False, dropout_prob=0.0, hint_teacher_forcing=0.0,
      hint_repred_mode="soft", nb_msg_passing_steps=1)
  clrs_model.init([feedback.features], 1)
  params = clrs_model.params
  ours, our_params = _model(stream.spec, feedback, "full", impl=impl)
  assert jax.tree_util.tree_structure(our_params) == jax.tree_util.tree_structure(params)
  out = ours.apply(params, feedback.features, 0, True)
  our_preds = model_lib.postprocess_outputs(stream.spec, out.output_preds)
  their_preds, _ = clrs_model.predict(jax.random.PRNGKey(0), feedback.features)
  for name in their_preds:
    np.testing.assert_allclose(np.asarray(our_preds[name].data),
                               np.asarray(their_preds[name].data), atol=1e-5)
  if algorithm == "bfs":
    ours_loss = ours.loss(params, feedback, 0.0, 0, jax.random.PRNGKey(0)).total
    their_loss = clrs_model._loss(params, jax.random.PRNGKey(0), feedback, 0)  # pylint: disable=protected-access
    np.testing.assert_allclose(float(ours_loss), float(their_loss),
                               rtol=1e-6 if impl == "reference" else 1e-5)


def test_gate_norm_has_a_finite_gradient_where_the_gate_is_shut():
  """A strong penalty drives sigmoid(.) to exactly 0 in float32; the norm's
  gradient there must be 0, not NaN (that NaN once ended runs as 'diverged')."""
  g = jnp.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]])
  assert np.allclose(model_lib.safe_norm(g), [0.0, 5.0])
  grad = jax.grad(lambda x: jnp.sum(model_lib.safe_norm(x)))(g)
  assert np.all(np.isfinite(grad))
  np.testing.assert_allclose(grad, [[0, 0, 0], [0.6, 0.8, 0]], rtol=1e-6)
  assert np.isnan(jax.grad(lambda x: jnp.sum(jnp.linalg.norm(x, axis=-1)))(g)).any()
