"""Encoder-processor-decoder network with a history policy (paper Sec. 3-4).

The three models of the paper differ only in what the processor, and everything
downstream of it that reads the previous embedding, receives as history at
step t:

  * ``full``  (baseline,    Eq. 2): h(t-1) itself;
  * ``none``  (ForgetNet,   Eq. 3): nothing -- zeros in place of h(t-1);
  * ``gated`` (G-ForgetNet, Eq. 4-5): g(t) * h(t-1), g(t) = sigmoid(MLP([x(t), h(t-1)])).

In dm-clrs's ``nets.Net`` the previous embedding enters in three places: the
processor input ``z = [node_fts, hidden]``, the Triplet-GMPNN update-gate
residual ``ret * gate + hidden * (1 - gate)`` and the decoder input
``[node_fts, hidden, nxt_hidden]``.  The history is computed once per step
(`_history`); `NetConfig.history_scope` says which of the three receive it
(`scoped_history`), the others the raw h(t-1).  With the default scope, all
three, ForgetNet's net is exactly independent of h(t-1) (tested: perturbing it
changes nothing and its gradient is zero).  `NetConfig.decoder_input='processed'`
decodes from h(t) alone, as the paper's text says (`decoder_node_input`): no decoder
then reads h(t-1), under any scope.

Everything the paper does not change is dm-clrs's own: encoders, decoders,
the Triplet-GMPNN processor, soft hint re-prediction and the output/hint
losses.  As in Ibarz et al. (2022) there is no teacher forcing: after the
first step the encoder always receives the previous step's (soft) predicted
hints, in training and at evaluation.
"""

from __future__ import annotations

import functools
from typing import Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import chex
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from clrs._src import decoders
from clrs._src import encoders
from clrs._src import losses as clrs_losses
from clrs._src import probing
from clrs._src import processors
from clrs._src import specs

from nar_markov.config.netconfig import NetConfig


_Stage = specs.Stage
_Location = specs.Location
_Type = specs.Type

# dm-clrs's sinkhorn settings: 25 steps when hints are fed back, 50 when outputs
# are scored (nets.Net._msg_passing_step and BaselineModel._predict).
SINKHORN_TEMPERATURE = 0.1
SINKHORN_STEPS_HINTS = 25
SINKHORN_STEPS_OUTPUTS = 50
_EPS = 1e-12


class NetOutput(NamedTuple):
  """What one forward pass over a batch of trajectories returns.

  Per-step arrays have a leading axis of nb_mp_steps = T - 1: step i reads
  hint i (ground truth at i = 0, the previous prediction after) and predicts
  hint i + 1.
  """
  output_preds: Dict[str, chex.Array]
  hint_preds: Dict[str, chex.Array]     # name -> [T-1, B, ...] logits
  gate_sum: chex.Array                  # [T-1, B]: sum_i ||g_i(t)||_2 (0 unless gated)
  history_norm: chex.Array              # [T-1, B]: mean_i ||history_i||_2 / sqrt(d)


def nb_dims_of(feedback) -> Dict[str, int]:
  """The last-axis size of every input, hint and output of a feedback, by name.

  What dm-clrs's decoders are built with (they read the categorical features' sizes).
  """
  dims = {}
  for dp in list(feedback.features.inputs) + list(feedback.features.hints) + list(
      feedback.outputs):
    dims[dp.name] = dp.data.shape[-1]
  return dims


def safe_norm(x: chex.Array) -> chex.Array:
  """||x||_2 over the last axis, with gradient 0 (not NaN) where x is exactly 0.

  The same value as jnp.linalg.norm and, where x is not 0, the same gradient.  The gate
  penalty's norm: a strong penalty drives the gate's sigmoid to exactly 0 in float32,
  where jnp.linalg.norm's gradient x / ||x|| is 0/0, a NaN.
  """
  sq = jnp.sum(x * x, axis=-1)
  nonzero = sq > 0
  return jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, sq, 1.0)), 0.0)


class HistoryGate(hk.Module):
  """Eq. 5: g(t) = sigmoid(MLP([x(t), h(t-1)])), the same shape as h(t-1).

  Args:
    hidden_size: the width of every Linear (and of g).
    nb_layers: the number of Linears, relu between them.
    bias_init: the last Linear's bias at initialisation.
    name: the haiku module name.
  """

  def __init__(self, hidden_size: int, nb_layers: int, bias_init: float,
               name: str = "history_gate"):
    super().__init__(name=name)
    self._hidden_size = hidden_size
    self._nb_layers = nb_layers
    self._bias_init = bias_init

  def __call__(self, node_fts: chex.Array, hidden: chex.Array) -> chex.Array:
    x = jnp.concatenate([node_fts, hidden], axis=-1)
    for layer in range(self._nb_layers - 1):
      x = jax.nn.relu(hk.Linear(self._hidden_size, name=f"linear_{layer}")(x))
    logits = hk.Linear(self._hidden_size,
                       b_init=hk.initializers.Constant(self._bias_init),
                       name=f"linear_{self._nb_layers - 1}")(x)
    return jax.nn.sigmoid(logits)


class ScopedHistory(NamedTuple):
  """What each consumer of h(t-1) sees at one step (NetConfig.history_scope)."""
  processor: chex.Array   # the processor input z = [x(t), processor]
  residual: chex.Array    # the processor's update residual (1 - u) * residual
  decoder: chex.Array     # the decoder input [x(t), decoder, h(t)] (unread under
                          # NetConfig.decoder_input='processed')
  gate: Optional[chex.Array]  # g(t), G-ForgetNet only

  def stats(self) -> Tuple[chex.Array, chex.Array]:
    """The step's (gate_sum, history_norm), [B] each.

    gate_sum: sum_i ||g_i(t)|| over the nodes i (Eq. 6's term; 0 without a gate).
    history_norm: mean_i ||history_i|| / sqrt(d) of what the processor input receives.
    """
    batch_size, _, hidden_size = self.processor.shape
    if self.gate is None:
      gate_sum = jnp.zeros((batch_size,))
    else:
      gate_sum = jnp.sum(safe_norm(self.gate), axis=-1)
    history_norm = jnp.mean(jnp.linalg.norm(self.processor, axis=-1),
                            axis=-1) / np.sqrt(hidden_size)
    return gate_sum, history_norm


def scoped_history(scope: str, history: chex.Array, hidden: chex.Array,
                   gate: Optional[chex.Array]) -> ScopedHistory:
  """What each consumer of h(t-1) sees: the history where `scope` applies it, else h(t-1).

  Args:
    scope: NetConfig.history_scope: 'processor_input' (the processor input only),
      'processor' (and its update residual) or 'processor_decoder' (and the decoder).
    history: the policy's history (h(t-1), zeros, or g(t) * h(t-1)).
    hidden: h(t-1).
    gate: g(t), or None without a gate.
  """
  residual = hidden if scope == "processor_input" else history
  decoder = history if scope == "processor_decoder" else hidden
  return ScopedHistory(history, residual, decoder, gate)


def decoder_node_input(decoder_input: str, node_fts: chex.Array, history: chex.Array,
                       nxt_hidden: chex.Array) -> chex.Array:
  """The node embeddings the decoders read; dm-clrs's decoders take their input width from it.

  Args:
    decoder_input: NetConfig.decoder_input: 'dmclrs', dm-clrs's [x(t), history, h(t)]
      ([B, N, 3H]); 'processed', h(t) alone ([B, N, H]).
    node_fts: x(t).
    history: what the scope lets the decoder see of h(t-1).
    nxt_hidden: h(t).

  Raises:
    ValueError: a decoder_input without a branch here.
  """
  if decoder_input == "dmclrs":
    return jnp.concatenate([node_fts, history, nxt_hidden], axis=-1)
  if decoder_input == "processed":
    return nxt_hidden
  raise ValueError(f"NetConfig.decoder_input {decoder_input!r} has no branch in "
                   "nar_markov/nets/model.py decoder_node_input")


def _process_with_residual(processor, seen: ScopedHistory, node_fts, edge_fts, graph_fts,
                           adj_mat, **kwargs):
  """dm-clrs's processor on z = [x(t), seen.processor], with `seen.residual` in its
  update residual ret * u + residual * (1 - u).

  dm-clrs's processor takes one `hidden` for both; it runs as it is, and where the
  residual differs (scope 'processor_input') the difference is added:
  out + (residual - hidden) * (1 - u), with u = sigmoid(gate3(.)) intercepted --
  gate3 is the last Linear a gated dm-clrs processor calls.
  """
  hidden = seen.processor
  if seen.residual is hidden or not getattr(processor, "gated", False):
    return processor(node_fts, edge_fts, graph_fts, adj_mat, hidden, **kwargs)
  linear_outputs = []

  def record(next_f, args, kwargs_, context):
    out = next_f(*args, **kwargs_)
    if isinstance(context.module, hk.Linear) and context.method_name == "__call__":
      linear_outputs.append(out)
    return out

  with hk.intercept_methods(record):
    out, tri_msgs = processor(node_fts, edge_fts, graph_fts, adj_mat, hidden, **kwargs)
  update_gate = jax.nn.sigmoid(linear_outputs[-1])
  return out + (seen.residual - hidden) * (1.0 - update_gate), tri_msgs


class Net(hk.Module):
  """dm-clrs's encode-process-decode net with one history policy (NetConfig.history).

  One processor is shared by all algorithms in `specs_` (single-task: one spec); encoders
  and decoders are per algorithm, named ``algo_<k>_<feature>`` exactly as dm-clrs names
  them.

  Args:
    specs_: the algorithms' specs (`preprocessing.get_spec`), in algorithm_index order.
    nb_dims: per spec, each feature's last-axis size (`nb_dims_of`).
    config: the NetConfig.
    name: the haiku module name.

  Raises:
    ValueError: not one nb_dims mapping per spec.
  """

  def __init__(self, specs_: Sequence[specs.Spec],
               nb_dims: Sequence[Mapping[str, int]], config: NetConfig,
               name: str = "net"):
    super().__init__(name=name)
    if len(specs_) != len(nb_dims):
      raise ValueError("need one nb_dims mapping per spec")
    self._specs = list(specs_)
    self._nb_dims = list(nb_dims)
    self._config = config

  # -- modules -------------------------------------------------------------

  def _construct_encoders_decoders(self, algorithm_index: int):
    """Per-algorithm encoders and decoders, under dm-clrs's parameter names."""
    cfg = self._config
    spec = self._specs[algorithm_index]
    encs, decs = {}, {}
    for name, (stage, loc, t) in spec.items():
      if stage in (_Stage.INPUT, _Stage.HINT):  # encoded-and-decoded hints
        encs[name] = encoders.construct_encoders(
            stage, loc, t, hidden_dim=cfg.hidden_size, init=cfg.encoder_init,
            name=f"algo_{algorithm_index}_{name}")
      if stage in (_Stage.OUTPUT, _Stage.HINT):
        decs[name] = decoders.construct_decoders(
            loc, t, hidden_dim=cfg.hidden_size,
            nb_dims=self._nb_dims[algorithm_index][name],
            name=f"algo_{algorithm_index}_{name}")
    return encs, decs

  # -- one step ------------------------------------------------------------

  def _encode(self, encs, dps, batch_size, nb_nodes):
    h = self._config.hidden_size
    node_fts = jnp.zeros((batch_size, nb_nodes, h))
    edge_fts = jnp.zeros((batch_size, nb_nodes, nb_nodes, h))
    graph_fts = jnp.zeros((batch_size, h))
    adj_mat = jnp.repeat(jnp.eye(nb_nodes)[None], batch_size, axis=0)
    for dp in dps:
      dp = encoders.preprocess(dp, nb_nodes)
      adj_mat = encoders.accum_adj_mat(dp, adj_mat)
      encoder = encs[dp.name]
      edge_fts = encoders.accum_edge_fts(encoder, dp, edge_fts)
      node_fts = encoders.accum_node_fts(encoder, dp, node_fts)
      graph_fts = encoders.accum_graph_fts(encoder, dp, graph_fts)
    return node_fts, edge_fts, graph_fts, adj_mat

  def _history(self, node_fts, hidden) -> "ScopedHistory":
    """What the processor input, its update residual and the decoders see of h(t-1).

    One branch per name of netconfig.HISTORY_POLICIES; ValueError for a name without one
    (never another policy's net)."""
    cfg = self._config
    gate = None
    if cfg.history == "full":
      history = hidden                         # Eq. 2: z = [x(t), h(t-1)]
    elif cfg.history == "none":
      history = jnp.zeros_like(hidden)         # Eq. 3: h(t-1) removed
    elif cfg.history == "gated":
      gate = HistoryGate(cfg.hidden_size, cfg.gate_mlp_layers,
                         cfg.gate_bias_init)(node_fts, hidden)   # Eq. 5
      history = gate * hidden                  # Eq. 4: z = [x(t), g * h(t-1)]
    else:  # a name in netconfig.HISTORY_POLICIES without its branch here
      raise ValueError(f"NetConfig.history {cfg.history!r} has no branch in "
                       "nar_markov/nets/model.py Net._history (a new history policy is its "
                       "netconfig.HISTORY_POLICIES entry plus its branch here)")
    return scoped_history(cfg.history_scope, history, hidden, gate)

  def _one_step(self, inputs, cur_hints, hidden, spec, encs, decs, processor,
                batch_size, nb_nodes, repred):
    # ENCODE
    node_fts, edge_fts, graph_fts, adj_mat = self._encode(
        encs, list(inputs) + list(cur_hints), batch_size, nb_nodes)
    # HISTORY (the only place where the three models differ)
    seen = self._history(node_fts, hidden)
    # PROCESS
    nxt_hidden, nxt_edge = _process_with_residual(
        processor, seen, node_fts, edge_fts, graph_fts, adj_mat,
        batch_size=batch_size, nb_nodes=nb_nodes)
    for _ in range(self._config.nb_msg_passing_steps - 1):
      nxt_hidden, nxt_edge = processor(
          node_fts, edge_fts, graph_fts, adj_mat, nxt_hidden,
          batch_size=batch_size, nb_nodes=nb_nodes)
    # DECODE: dm-clrs feeds [node_fts, h(t-1), h(t)] to the decoders; in the
    # default scope h(t-1) is replaced by the history, so ForgetNet's decoders
    # never see it either ('processed': h(t) alone).
    h_t = decoder_node_input(self._config.decoder_input, node_fts, seen.decoder,
                             nxt_hidden)
    e_t = edge_fts if nxt_edge is None else jnp.concatenate(
        [edge_fts, nxt_edge], axis=-1)
    hint_preds, output_preds = decoders.decode_fts(
        decoders=decs, spec=spec, h_t=h_t, adj_mat=adj_mat, edge_fts=e_t,
        graph_fts=graph_fts, inf_bias=processor.inf_bias,
        inf_bias_edge=processor.inf_bias_edge, repred=repred)
    gate_sum, history_norm = seen.stats()
    return nxt_hidden, output_preds, hint_preds, gate_sum, history_norm

  # -- whole trajectory ----------------------------------------------------

  def __call__(self, features, algorithm_index: int, repred: bool,
               hidden_override: Optional[chex.Array] = None,
               max_length: Optional[chex.Array] = None,
               collect_hints: bool = True) -> NetOutput:
    """Runs all T-1 steps of a batch of (time-padded) trajectories.

    Args:
      features: clrs.Features; hints are [T, B, ...], lengths [B].
      algorithm_index: which spec (static).
      repred: True at evaluation (dm-clrs's flag; only decoders read it).
      hidden_override: tests only -- if given ([T-1, B, N, H]), the h(t-1)
        fed to step t is replaced by it, to probe what the policy lets
        through.
      max_length, collect_hints: the fast net's (`fastnet.FastNet`); unused here: every
        step runs and every hint prediction is returned.

    Returns:
      The `NetOutput`; the outputs are each trajectory's last step's.

    Raises:
      ValueError: a NetConfig.history without a branch here.
    """
    cfg = self._config
    spec = self._specs[algorithm_index]
    encs, decs = self._construct_encoders_decoders(algorithm_index)
    processor = processors.get_processor_factory(
        cfg.processor, use_ln=cfg.use_ln,
        nb_triplet_fts=cfg.nb_triplet_fts)(cfg.hidden_size)

    inputs = features.inputs
    hints = features.hints
    lengths = features.lengths
    batch_size, nb_nodes = inputs[0].data.shape[:2]
    nb_mp_steps = max(1, hints[0].data.shape[0] - 1)

    step = functools.partial(
        self._one_step, inputs, spec=spec, encs=encs, decs=decs,
        processor=processor, batch_size=batch_size, nb_nodes=nb_nodes,
        repred=repred)

    # Step 0 reads the ground-truth initial hints (the algorithm's state
    # before it starts); h(0) = 0.
    first_hints = [
        probing.DataPoint(name=h.name, location=h.location, type_=h.type_,
                          data=jnp.asarray(h.data)[0]) for h in hints]
    hidden0 = jnp.zeros((batch_size, nb_nodes, cfg.hidden_size))
    if hidden_override is not None:
      hidden0 = hidden_override[0]
    hidden, output_preds, hint_preds, gate_sum, history_norm = step(
        first_hints, hidden0)

    def scan_fn(carry, i):
      hidden, prev_hint_preds, prev_output_preds = carry
      if hidden_override is not None:
        hidden = hidden_override[i]
      # No teacher forcing: feed back the soft re-prediction of the previous
      # step's hints (dm-clrs hint_repred_mode='soft').
      decoded = decoders.postprocess(
          spec, prev_hint_preds, sinkhorn_temperature=SINKHORN_TEMPERATURE,
          sinkhorn_steps=SINKHORN_STEPS_HINTS, hard=False)
      cur_hints = [decoded[h.name] for h in hints]
      nxt_hidden, cand_outputs, nxt_hint_preds, g_sum, h_norm = step(
          cur_hints, hidden)
      # Outputs freeze once a trajectory is done (dm-clrs semantics), which
      # is what makes time padding harmless.
      output_preds = {}
      for name, cand in cand_outputs.items():
        not_done = running_mask(lengths, i, cand)
        output_preds[name] = not_done * cand + (1.0 - not_done) * prev_output_preds[name]
      return (nxt_hidden, nxt_hint_preds, output_preds), (nxt_hint_preds, g_sum, h_norm)

    if nb_mp_steps > 1:
      (_, _, output_preds), (rest_hints, rest_gate, rest_norm) = hk.scan(
          scan_fn, (hidden, hint_preds, output_preds),
          jnp.arange(1, nb_mp_steps), length=nb_mp_steps - 1)
      all_hint_preds = {k: jnp.concatenate([hint_preds[k][None], rest_hints[k]])
                        for k in hint_preds}
      gate_sum = jnp.concatenate([gate_sum[None], rest_gate])
      history_norm = jnp.concatenate([history_norm[None], rest_norm])
    else:
      all_hint_preds = {k: v[None] for k, v in hint_preds.items()}
      gate_sum = gate_sum[None]
      history_norm = history_norm[None]
    return NetOutput(output_preds, all_hint_preds, gate_sum, history_norm)


def running_mask(lengths, i, tensor):
  """1.0 where trajectory b still runs at step i + 1 (lengths[b] > i + 1), else 0.0.

  Shaped [B, 1, ...] to broadcast over `tensor` ([B, ...]): where it is 0, a finished
  trajectory keeps its predictions.
  """
  not_done = (lengths > i + 1) * 1.0
  return jnp.reshape(not_done, not_done.shape + (1,) * (tensor.ndim - 1))


def step_mask(lengths: chex.Array, nb_mp_steps: int) -> chex.Array:
  """[nb_mp_steps, B]: 1.0 where step t exists in trajectory b (lengths[b] > t + 1), else 0.0.

  dm-clrs's convention: step t reads hint t and predicts hint t + 1.
  """
  return (lengths[None, :] > jnp.arange(nb_mp_steps)[:, None] + 1).astype(
      jnp.float32)


# -- losses ------------------------------------------------------------------


class Losses(NamedTuple):
  """The losses of one forward pass (`compute_losses`): scalars, except `hint_per_step`."""
  total: chex.Array
  output: chex.Array
  hint: chex.Array
  gate_term: chex.Array        # G = mean over valid (t, b) of sum_i ||g_i(t)||
  gate_penalty: chex.Array     # lambda * G
  hint_per_step: chex.Array    # [T-1]: hint loss of each execution step


def compute_losses(feedback, out: NetOutput, lambda_gate) -> Losses:
  """dm-clrs's output and hint losses, plus the gate penalty of Eq. 6.

  dm-clrs averages each hint's loss over the valid (step, sample) entries and sums over
  hints; the gate term is treated alike: its per-step value sum_i ||g_i(t)|| is averaged
  over the valid (t, b), then scaled by `lambda_gate`.

  Args:
    feedback: the batch (the truth: outputs, hints [T, B, ...], lengths).
    out: the net's `NetOutput` on it, with its hint predictions (collect_hints=True).
    lambda_gate: λ (0: no penalty).

  Returns:
    `Losses`: total = output + hint + gate_penalty; hint_per_step [T-1], per step the sum
    over hints of the hint's loss averaged over that step's valid entries.
  """
  nb_nodes = feedback.features.inputs[0].data.shape[1]
  lengths = feedback.features.lengths
  output_loss = 0.0
  for truth in feedback.outputs:
    output_loss += clrs_losses.output_loss(
        truth=truth, pred=out.output_preds[truth.name], nb_nodes=nb_nodes)

  nb_mp_steps = out.gate_sum.shape[0]
  valid = step_mask(lengths, nb_mp_steps)
  hint_loss = 0.0
  hint_per_step = jnp.zeros((nb_mp_steps,))
  for truth in feedback.features.hints:
    loss, mask = clrs_losses._hint_loss(  # pylint: disable=protected-access
        truth_data=truth.data[1:nb_mp_steps + 1], truth_type=truth.type_,
        pred=out.hint_preds[truth.name], nb_nodes=nb_nodes)
    mask = mask * jnp.reshape(valid, valid.shape + (1,) * (loss.ndim - 2))
    axes = tuple(range(1, loss.ndim))
    hint_loss += jnp.sum(loss * mask) / jnp.maximum(jnp.sum(mask), _EPS)
    hint_per_step += jnp.sum(loss * mask, axis=axes) / jnp.maximum(
        jnp.sum(mask, axis=axes), _EPS)

  gate_term = jnp.sum(out.gate_sum * valid) / jnp.maximum(jnp.sum(valid), _EPS)
  gate_penalty = lambda_gate * gate_term          # Eq. 6
  total = output_loss + hint_loss + gate_penalty
  return Losses(total, output_loss, hint_loss, gate_term, gate_penalty,
                hint_per_step)


def postprocess_outputs(spec, output_preds):
  """Hard output predictions for scoring, as dm-clrs's BaselineModel.predict makes them."""
  return decoders.postprocess(
      spec, output_preds, sinkhorn_temperature=SINKHORN_TEMPERATURE,
      sinkhorn_steps=SINKHORN_STEPS_OUTPUTS, hard=True)


def mean_history_norm(out: NetOutput, lengths) -> chex.Array:
  """[B]: the history norm (`NetOutput.history_norm`) averaged over each trajectory's steps.

  Over the steps t >= 1 that exist (`step_mask`); step 0 is excluded, its h(0) = 0 for
  every model.  A trajectory without such a step gets 0.
  """
  nb_mp_steps = out.history_norm.shape[0]
  valid = step_mask(lengths, nb_mp_steps).at[0].set(0.0)
  return jnp.sum(out.history_norm * valid, axis=0) / jnp.maximum(
      jnp.sum(valid, axis=0), 1.0)
