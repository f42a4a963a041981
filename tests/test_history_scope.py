"""Where the history policy applies (NetConfig.history_scope), against dm-clrs edited by hand.

dm-clrs's net reads h(t-1) in the processor input z, the Triplet-GMPNN update
residual and the decoder input.  Each scope is checked against dm-clrs's own
`nets.Net` and `processors.PGN`, run as they are except for the one edit the
scope stands for, on the same parameters (ours, including the gate MLP's).
"""

import clrs
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from clrs._src import encoders
from clrs._src import nets
from clrs._src import processors

from nar_markov.config import netconfig
from nar_markov.data import train_stream
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib

HIDDEN = 8
NB_NODES = 5
BATCH = 3



@pytest.fixture(scope="module")
def batch():
  stream = train_stream.TrainStream("insertion_sort", seed=0, batch_size=BATCH, lengths=(NB_NODES,))
  return stream.spec, next(stream)


def _model(spec, feedback, history, scope, impl):
  config = netconfig.NetConfig(hidden_size=HIDDEN, nb_triplet_fts=4, history=history,
                               history_scope=scope, impl=impl)
  return learner.Learner([spec], [model_lib.nb_dims_of(feedback)], config,
                     learner.make_optimizer(1e-3, 10, 1.0))


class _GatedZ:
  """`jnp` as dm-clrs's processors module sees it, except that the processor input
  z = concatenate([node_fts, hidden]) takes `gated` in place of `raw`: the hand edit
  of scope 'processor_input' (the update residual keeps `raw`)."""

  def __init__(self, raw, gated):
    self.raw, self.gated = raw, gated

  def __getattr__(self, name):
    return getattr(jnp, name)

  def concatenate(self, arrays, axis=0):
    arrays = list(arrays)
    if len(arrays) == 2 and arrays[1] is self.raw:
      arrays[1] = self.gated
    return jnp.concatenate(arrays, axis=axis)


def _gate(node_fts, hidden):
  # Named after the dm-clrs method it is called from: ours are copied there.
  return model_lib.HistoryGate(HIDDEN, 2, 0.0)(node_fts, hidden)


def _edited_dm_clrs(spec, feedback, history, scope, monkeypatch):
  """dm-clrs's nets.Net with the history policy applied where `scope` says, by hand."""
  policy = {"gated": _gate, "none": lambda node_fts, h: jnp.zeros_like(h)}[history]

  def history_of(node_fts, hidden):
    out = policy(node_fts, hidden)
    return out if history == "none" else out * hidden

  factory = processors.get_processor_factory("triplet_gmpnn", use_ln=True, nb_triplet_fts=4)

  def edited_factory(out_size):
    inner = factory(out_size)

    def call(node_fts, edge_fts, graph_fts, adj_mat, hidden, **kwargs):
      if scope == "processor_decoder":  # the history arrives as `hidden` already
        return inner(node_fts, edge_fts, graph_fts, adj_mat, hidden, **kwargs)
      gated = history_of(node_fts, hidden)
      if scope == "processor":
        return inner(node_fts, edge_fts, graph_fts, adj_mat, gated, **kwargs)
      with monkeypatch.context() as m:
        m.setattr(processors, "jnp", _GatedZ(hidden, gated))
        return inner(node_fts, edge_fts, graph_fts, adj_mat, hidden, **kwargs)

    call.inf_bias = inner.inf_bias
    call.inf_bias_edge = inner.inf_bias_edge
    return call

  original_step = nets.Net._one_step_pred  # pylint: disable=protected-access

  def one_step_all_consumers(self, inputs, hints, hidden, batch_size, nb_nodes, *args,
                             **kwargs):
    # scope 'processor_decoder': h(t-1) replaced by the history before dm-clrs reads
    # it anywhere; the gate reads x(t), the encoded node features, as in Eq. 5.
    node_fts = jnp.zeros((batch_size, nb_nodes, HIDDEN))
    for dp in list(inputs) + list(hints):
      dp = encoders.preprocess(dp, nb_nodes)
      node_fts = encoders.accum_node_fts(args[2][dp.name], dp, node_fts)
    return original_step(self, inputs, hints, history_of(node_fts, hidden), batch_size,
                         nb_nodes, *args, **kwargs)

  if scope == "processor_decoder":
    monkeypatch.setattr(nets.Net, "_one_step_pred", one_step_all_consumers)

  def forward(features):
    net = nets.Net([spec], HIDDEN, True, True, edited_factory, False, "xavier_on_scalars",
                   0.0, 0.0, "soft", [model_lib.nb_dims_of(feedback)], 1)
    return net([features], repred=True, algorithm_index=0, return_hints=True,
               return_all_outputs=False)

  return hk.transform(forward)


@pytest.mark.parametrize("history", ["gated", "none"])
@pytest.mark.parametrize("scope", ["processor_input", "processor", "processor_decoder"])
def test_each_scope_is_dm_clrs_edited_by_hand(batch, history, scope, monkeypatch):
  """Same parameters, same predictions: fast and reference nets against dm-clrs's own
  net and processor with the scope's one edit."""
  spec, feedback = batch
  ref = _model(spec, feedback, history, scope, "reference")
  params = ref.init(jax.random.PRNGKey(0), [feedback.features])
  edited = _edited_dm_clrs(spec, feedback, history, scope, monkeypatch)
  theirs = dict(params)
  for caller in ("~_one_step_pred", "~_msg_passing_step", "~"):
    theirs.update({k.replace("net/~_history/", f"net/{caller}/"): v
                   for k, v in params.items() if "/~_history/" in k})
  their_outputs, their_hints = edited.apply(theirs, None, feedback.features)
  for impl in ("reference", "fast"):
    out = _model(spec, feedback, history, scope, impl).apply(
        params, feedback.features, 0, True)
    for name, theirs in their_outputs.items():
      np.testing.assert_allclose(out.output_preds[name], theirs, atol=2e-5, rtol=2e-5,
                                 err_msg=f"{impl} {name}")
    for step, theirs in enumerate(their_hints):
      for name, value in theirs.items():
        np.testing.assert_allclose(out.hint_preds[name][step], value, atol=2e-5,
                                   rtol=2e-5, err_msg=f"{impl} {name} step {step}")


def test_scopes_differ_where_they_should(batch):
  """The edit is not a no-op: with the gate half open, each scope predicts differently."""
  spec, feedback = batch
  scopes = ["processor_input", "processor", "processor_decoder"]
  models = {s: _model(spec, feedback, "gated", s, "fast") for s in scopes}
  params = models[scopes[0]].init(jax.random.PRNGKey(0), [feedback.features])
  preds = {s: models[s].apply(params, feedback.features, 0, True).hint_preds for s in scopes}
  for a, b in [(0, 1), (1, 2), (0, 2)]:
    diff = max(float(jnp.max(jnp.abs(preds[scopes[a]][k] - preds[scopes[b]][k])))
               for k in preds[scopes[a]])
    assert diff > 1e-4, (scopes[a], scopes[b])


@pytest.mark.parametrize("scope", ["processor_input", "processor"])
def test_forgetnet_outside_the_scope_sees_history(batch, scope):
  """Scopes narrower than the default leave the raw h(t-1) in the residual or the
  decoder: ForgetNet's predictions then move with it (the default: test_model)."""
  spec, feedback = batch
  m = _model(spec, feedback, "none", scope, "fast")
  params = m.init(jax.random.PRNGKey(0), [feedback.features])
  nb_steps = feedback.features.hints[0].data.shape[0] - 1
  shape = (nb_steps, BATCH, NB_NODES, HIDDEN)
  outs = [m.apply(params, feedback.features, 0, True,
                  hidden_override=jax.random.normal(jax.random.PRNGKey(k), shape))
          for k in (1, 2)]
  assert not np.allclose(outs[0].hint_preds["pred_h"], outs[1].hint_preds["pred_h"])
  # the processor input is still history-free: the recorded history norm is 0
  np.testing.assert_array_equal(outs[0].history_norm, 0.0)


def test_processed_decoders_make_processor_and_processor_decoder_one_net(batch):
  """Under NetConfig.decoder_input='processed' no decoder reads h(t-1): the scopes
  'processor' and 'processor_decoder' differ in nothing else, and predict the same."""
  spec, feedback = batch
  scopes = ("processor", "processor_decoder")
  models = {s: learner.Learner(
      [spec], [model_lib.nb_dims_of(feedback)],
      netconfig.NetConfig(hidden_size=HIDDEN, nb_triplet_fts=4, history="gated",
                          history_scope=s, impl="fast", decoder_input="processed"),
      learner.make_optimizer(1e-3, 10, 1.0)) for s in scopes}
  params = models[scopes[0]].init(jax.random.PRNGKey(0), [feedback.features])
  a, b = (models[s].apply(params, feedback.features, 0, True) for s in scopes)
  for name in a.hint_preds:
    np.testing.assert_array_equal(a.hint_preds[name], b.hint_preds[name])
  for name in a.output_preds:
    np.testing.assert_array_equal(a.output_preds[name], b.output_preds[name])


def test_unknown_scope_is_one_clear_error():
  with pytest.raises(ValueError, match="history_scope must be one of"):
    netconfig.NetConfig(history_scope="decoder")
