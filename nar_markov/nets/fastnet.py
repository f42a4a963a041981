"""The same network as `model.Net`, computed with less work (what `NetConfig.impl='auto'` runs).

`FastNet` has `Net`'s parameters (same names and shapes, so a checkpoint of either runs
in the other; `learner.Learner` creates them with `Net`, so a seed gives the same initial
parameters under both) and computes the same function up to float round-off
(tests/test_fastnet.py: losses, gradients and predictions against `Net` on all 30
CLRS-30 algorithms, so on every CLRS feature type).  The work it removes -- low-rank
edge features folded into the next matrix, inputs encoded and outputs decoded once,
pointer decoders and the message MLP with hand-written VJPs (`vjps`), remat with chosen saves,
finished steps skipped, only what the output decoders read carried through the scan --
is measured in docs/running.md; the named scopes (encode, process, decode, ...) are
what benchmarks/profile_step.py attributes time by.  Only the Triplet-MPNN processors
(dm-clrs's triplet_gmpnn and triplet_mpnn) have a fast path; `NetConfig(impl='reference')`
runs dm-clrs's modules as they are.
"""

from __future__ import annotations

import functools
from typing import Dict, List, NamedTuple, Optional, Tuple

import chex
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from clrs._src import decoders
from clrs._src import encoders
from clrs._src import probing
from clrs._src import specs

from nar_markov.config import clrs30
from nar_markov.config.netconfig import FAST_PROCESSORS, NetConfig
from nar_markov.nets import model as model_lib
from nar_markov.nets import vjps

_Stage = specs.Stage
_Location = specs.Location
_Type = specs.Type
_POINTERS = (_Type.POINTER, _Type.PERMUTATION_POINTER)


# -- parameters of an hk.Linear without calling it on a big input ----------------


def linear_params(linear: hk.Linear, input_size: int
                  ) -> Tuple[chex.Array, chex.Array]:
  """(w, b) of `linear` for inputs of width `input_size`, without calling it on a real input.

  The module is called on an empty batch, which creates its parameters exactly as a real
  call would (same names, shapes, initialisers, rng draws) and costs nothing.
  """
  linear(jnp.zeros((0, input_size), jnp.float32))
  params = linear.params_dict()
  return params[f"{linear.module_name}/w"], params[f"{linear.module_name}/b"]


class EdgeFts(NamedTuple):
  """edge_fts = x @ w + b, without the [B, N, N, H] tensor."""
  x: Optional[chex.Array]   # [B, N, N, D]; None when no edge feature exists
  w: Optional[chex.Array]   # [D, H]
  b: chex.Array             # [H]
  shape: Tuple[int, int, int]  # (B, N, N)

  def project(self, w2: chex.Array, b2: Optional[chex.Array] = None) -> chex.Array:
    """edge_fts @ w2 (+ b2), [B, N, N, K], without forming edge_fts."""
    bias = self.b @ w2
    if b2 is not None:
      bias = bias + b2
    if self.x is None:
      return jnp.broadcast_to(bias, self.shape + bias.shape)
    m = self.w @ w2
    return vjps.on_rows(lambda x: jnp.dot(x, m), self.x) + bias


def _edge_terms(encs, dp) -> List[Tuple[chex.Array, chex.Array, chex.Array]]:
  """(x, w, b) terms that dm-clrs's accum_edge_fts adds for one (preprocessed) dp."""
  enc = encs[dp.name]
  if dp.location == _Location.NODE and dp.type_ in _POINTERS:
    return [(dp.data[..., None], *linear_params(enc[0], 1))]
  if dp.location != _Location.EDGE:
    return []
  if dp.type_ == _Type.POINTER:
    # mean over one node axis of Linear(one_hot[..., None]) = Linear of the mean.
    return [(jnp.mean(dp.data, axis=1)[..., None], *linear_params(enc[0], 1)),
            (jnp.mean(dp.data, axis=2)[..., None], *linear_params(enc[1], 1))]
  if dp.type_ == _Type.CATEGORICAL:
    return [(dp.data, *linear_params(enc[0], dp.data.shape[-1]))]
  return [(dp.data[..., None], *linear_params(enc[0], 1))]


class Encoded(NamedTuple):
  """The encoders' accumulated features (`encode`), the edge features as low-rank terms.

  node_fts [B, N, H], graph_fts [B, H], adj_mat [B, N, N], and edge_terms: the (x, w, b)
  terms whose x @ w + b sum to dm-clrs's edge_fts (`edge_fts_of`).
  """
  node_fts: chex.Array
  graph_fts: chex.Array
  adj_mat: chex.Array
  edge_terms: Tuple[Tuple[chex.Array, chex.Array, chex.Array], ...]


def encode(encs, dps, start: Encoded, nb_nodes: int) -> Encoded:
  """dm-clrs's encoders.accum_* over `dps`, added to `start`; edges kept as low-rank terms."""
  node_fts, graph_fts, adj_mat = start.node_fts, start.graph_fts, start.adj_mat
  terms = list(start.edge_terms)
  for dp in dps:
    dp = encoders.preprocess(dp, nb_nodes)
    adj_mat = encoders.accum_adj_mat(dp, adj_mat)
    terms += _edge_terms(encs, dp)
    node_fts = encoders.accum_node_fts(encs[dp.name], dp, node_fts)
    graph_fts = encoders.accum_graph_fts(encs[dp.name], dp, graph_fts)
  return Encoded(node_fts, graph_fts, adj_mat, tuple(terms))


def edge_fts_of(terms, batch_size: int, nb_nodes: int, hidden: int) -> EdgeFts:
  """The low-rank edge terms as one `EdgeFts`: x and w concatenated, the b summed.

  Without terms: x = w = None and b zeros of width `hidden`.
  """
  shape = (batch_size, nb_nodes, nb_nodes)
  if not terms:
    return EdgeFts(None, None, jnp.zeros((hidden,), jnp.float32), shape)
  x = jnp.concatenate([t[0] for t in terms], axis=-1)
  w = jnp.concatenate([t[1] for t in terms], axis=0)
  b = functools.reduce(lambda a, c: a + c, [t[2] for t in terms])
  return EdgeFts(x, w, b, shape)


# -- Triplet-GMPNN on low-rank edges ---------------------------------------------


class TripletMPNN(hk.Module):
  """dm-clrs's triplet_gmpnn and triplet_mpnn processors, on low-rank edge features.

  MPNN(use_triplets=True, gated=`gated`, msgs_mlp_sizes=[H, H]) with the same submodules
  (linear, linear_1, ..., mlp, layer_norm, and the update gate's three Linears last where
  `gated`), so the parameters are dm-clrs's; the products with edge_fts and the message
  MLP's backward are computed otherwise.

  Args:
    out_size: H, the hidden width.
    nb_triplet_fts: the triplet features' width.
    use_ln: a LayerNorm on the output.
    gated: dm-clrs's update gate (triplet_gmpnn).
    name: the haiku module name.
  """

  def __init__(self, out_size: int, nb_triplet_fts: int, use_ln: bool, gated: bool,
               name: str = "mpnn_aggr_clrs_processor"):
    super().__init__(name=name)
    self.out_size = out_size
    self.nb_triplet_fts = nb_triplet_fts
    self.use_ln = use_ln
    self.gated = gated

  def __call__(self, node_fts, edges: EdgeFts, graph_fts, hidden, residual=None):
    """One step on z = [node_fts, hidden]: (h(t) [B, N, H], tri_msgs [B, N, N, H]).

    `residual` (default `hidden`): what the update gate keeps, ret * u + residual * (1 - u)
    (NetConfig.history_scope); unused without the gate.
    """
    h = self.out_size
    edge_width = edges.b.shape[0]
    residual = hidden if residual is None else residual
    z = jnp.concatenate([node_fts, hidden], axis=-1)
    m_1, m_2, m_e, m_g = (hk.Linear(h) for _ in range(4))
    o1, o2 = hk.Linear(h), hk.Linear(h)
    msg_1 = vjps.on_rows(m_1, z)
    msg_2 = vjps.on_rows(m_2, z)
    msg_e = edges.project(*linear_params(m_e, edge_width))
    msg_g = m_g(graph_fts)

    # Triplet messages (Dudzik and Velickovic 2022), as processors.get_triplet_msgs.
    f = self.nb_triplet_fts
    t_1, t_2, t_3, t_e_1, t_e_2, t_e_3, t_g = (hk.Linear(f) for _ in range(7))
    with jax.named_scope("triplet"):
      tri_1, tri_2, tri_3 = (vjps.on_rows(t, z) for t in (t_1, t_2, t_3))
      tri_e_1 = edges.project(*linear_params(t_e_1, edge_width))
      tri_e_2 = edges.project(*linear_params(t_e_2, edge_width))
      tri_e_3 = edges.project(*linear_params(t_e_3, edge_width))
      tri_g = t_g(graph_fts)
      # dm-clrs adds all seven terms into a [B, N, N, N, F] tensor and takes
      # the max over its axis 1 (i).  Four of the terms do not depend on i, so
      # they are added after the max, on a tensor N times smaller: same value, up to float
      # round-off from the order of additions.
      tri_max = jnp.max(jnp.expand_dims(jnp.expand_dims(tri_1, 2) + tri_e_1, 3) +
                        jnp.expand_dims(tri_e_2, 2), axis=1)          # (B, j, k, F)
      tri_max = (tri_max + jnp.expand_dims(tri_2, 2) + jnp.expand_dims(tri_3, 1) +
                 tri_e_3 + jnp.expand_dims(tri_g, (1, 2)))
      o3 = hk.Linear(h)
      tri_msgs = jax.nn.relu(vjps.on_rows(o3, tri_max))   # (B, N, N, H)

    msgs = (jnp.expand_dims(msg_1, axis=1) + jnp.expand_dims(msg_2, axis=2) +
            msg_e + jnp.expand_dims(msg_g, axis=(1, 2)))
    # dm-clrs: hk.nets.MLP([h, h])(relu(msgs)), then the max over senders
    # (triplet_gmpnn is dm-clrs's MPNN subclass of PGN: it replaces adj_mat
    # by all ones, so the max runs over every sender).  Same parameters; the
    # MLP and the max are one function with a hand-written VJP.
    mlp = hk.nets.MLP([h, h])
    (w1, b1), (w2, b2) = (linear_params(l, h) for l in mlp.layers)
    with jax.named_scope("message_mlp"):
      msgs = vjps.message_mlp_max(msgs, w1, b1, w2, b2)
    ret = jax.nn.relu(vjps.on_rows(o1, z) + vjps.on_rows(o2, msgs))
    if self.use_ln:
      ret = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)(ret)
    if not self.gated:
      return ret, tri_msgs
    gate1, gate2 = hk.Linear(h), hk.Linear(h)
    gate3 = hk.Linear(h, b_init=hk.initializers.Constant(-3))
    gate = jax.nn.sigmoid(vjps.on_rows(gate3, jax.nn.relu(
        vjps.on_rows(gate1, z) + vjps.on_rows(gate2, msgs))))
    ret = ret * gate + residual * (1 - gate)
    return ret, tri_msgs


# -- decoders --------------------------------------------------------------------


class DecoderInputs(NamedTuple):
  """What dm-clrs's decode_fts reads, with e_t = [edge_fts, tri_msgs] split."""
  h_t: chex.Array          # [B, N, 3H]; [B, N, H] under decoder_input 'processed'
  edge_x: Optional[chex.Array]   # low-rank part of edge_fts (EdgeFts.x)
  tri_msgs: chex.Array     # [B, N, N, H]
  graph_fts: chex.Array
  adj_mat: chex.Array


def _project_e_t(linears, edges: EdgeFts, tri_msgs) -> List[chex.Array]:
  """[l(concat([edge_fts, tri_msgs], -1)) for l in linears], without the
  concatenation, and with one matrix product over tri_msgs for all of them."""
  if not linears:
    return []
  width = edges.b.shape[0]
  ws, bs = zip(*[linear_params(l, width + tri_msgs.shape[-1]) for l in linears])
  sizes = np.cumsum([w.shape[1] for w in ws])[:-1]
  edge_part = edges.project(jnp.concatenate([w[:width] for w in ws], axis=1),
                            jnp.concatenate(bs))
  w_tri = jnp.concatenate([w[width:] for w in ws], axis=1)
  tri_part = vjps.on_rows(lambda x: jnp.dot(x, w_tri), tri_msgs)
  return jnp.split(edge_part + tri_part, sizes, axis=-1)


def e_t_readers(spec, names) -> List[str]:
  """The features of `names` whose decoders read e_t (through their third Linear).

  Every edge feature and every node pointer.
  """
  return [n for n in names if spec[n][1] == _Location.EDGE or (
      spec[n][1] == _Location.NODE and spec[n][2] in _POINTERS)]


def decode(decs, spec, names, inp: DecoderInputs, edges: EdgeFts,
           repred: bool) -> Dict[str, chex.Array]:
  """dm-clrs's decoders._decode_*_fts for the features in `names`: {name: logits}.

  `repred` (evaluation): no Gumbel noise in the permutation pointers' sinkhorn; in
  training it takes an hk rng key.

  Raises:
    ValueError: a location or type that has no decoder.
  """
  e_t_names = e_t_readers(spec, names)
  e_t_proj = dict(zip(e_t_names, _project_e_t(
      [decs[n][2] for n in e_t_names], edges, inp.tri_msgs)))
  preds = {}
  for name in names:
    dec = decs[name]
    _, loc, t = spec[name]
    h_t = inp.h_t
    if loc == _Location.NODE:
      if t in (_Type.SCALAR, _Type.MASK, _Type.MASK_ONE):
        out = jnp.squeeze(vjps.on_rows(dec[0], h_t), -1)
      elif t == _Type.CATEGORICAL:
        out = vjps.on_rows(dec[0], h_t)
      elif t in _POINTERS:
        p_1 = vjps.on_rows(dec[0], h_t)
        p_2 = vjps.on_rows(dec[1], h_t)
        p_3 = e_t_proj[name]
        p_e = jnp.expand_dims(p_2, -2) + p_3
        out = vjps.node_pointer_logits(p_1, p_e, *linear_params(dec[3], p_1.shape[-1]))
        # The MPNN processors have no inf_bias (PGN, not PGNMask).
        if t == _Type.PERMUTATION_POINTER:
          out = decoders.log_sinkhorn(
              x=out, steps=10, temperature=0.1, zero_diagonal=True,
              noise_rng_key=None if repred else hk.next_rng_key())
      else:
        raise ValueError(f"invalid node type {t}")
    elif loc == _Location.EDGE:
      pred_1 = vjps.on_rows(dec[0], h_t)
      pred_2 = vjps.on_rows(dec[1], h_t)
      pred_e = e_t_proj[name]
      pred = jnp.expand_dims(pred_1, -2) + jnp.expand_dims(pred_2, -3) + pred_e
      if t in (_Type.SCALAR, _Type.MASK, _Type.MASK_ONE):
        out = jnp.squeeze(pred, -1)
      elif t == _Type.CATEGORICAL:
        out = pred
      elif t == _Type.POINTER:
        pred_2 = vjps.on_rows(dec[3], h_t)
        w, b = linear_params(dec[4], pred.shape[-1])
        out = vjps.edge_pointer_logits(pred, pred_2, w, b)
      else:
        raise ValueError(f"invalid edge type {t}")
    elif loc == _Location.GRAPH:
      out = decoders._decode_graph_fts(dec, t, h_t, inp.graph_fts)  # pylint: disable=protected-access
    else:
      raise ValueError(f"invalid location {loc}")
    preds[name] = out
  return preds


# -- the net ---------------------------------------------------------------------


def _pad_steps(x: chex.Array, nb_steps: int) -> chex.Array:
  """x [S, ...] with zeros appended to [nb_steps, ...]."""
  return jnp.pad(x, [(0, nb_steps - x.shape[0])] + [(0, 0)] * (x.ndim - 1))


class _Pass(NamedTuple):
  """What every step of one forward pass shares, built once per call by `FastNet._prepare`."""
  start: Encoded                 # the inputs, encoded once
  spec: specs.Spec
  encs: Dict
  decs: Dict
  processor: "TripletMPNN"
  hint_names: List[str]
  output_names: List[str]
  hints: List[probing.DataPoint]  # [T, B, ...] each
  lengths: chex.Array            # [B]
  max_length: chex.Array
  hidden_override: Optional[chex.Array]
  collect_hints: bool
  reads_e_t: bool                # an output decoder reads e_t's parts
  batch_size: int
  nb_nodes: int
  repred: bool

  def for_outputs(self, dec_in: DecoderInputs) -> DecoderInputs:
    """What the output decoders read of each trajectory's last step, carried through
    the scan: e_t's parts only for edge and node-pointer outputs, adj_mat never
    (the MPNN processors have no inf_bias)."""
    unread = {} if self.reads_e_t else {"edge_x": None, "tri_msgs": None}
    return dec_in._replace(adj_mat=None, **unread)


class FastNet(model_lib.Net):
  """`model.Net` with the work cut (module docstring): the same parameters, the same function.

  Args:
    specs_, nb_dims, config, name: as `model.Net`'s.
    algorithms: the specs' algorithm names, one per spec (optional): the scan then stops
      at each one's `clrs30.trajectory_bound` where it has one.
  """

  def __init__(self, specs_, nb_dims, config: NetConfig,
               algorithms: Optional[List[str]] = None, name: str = "net"):
    super().__init__(specs_, nb_dims, config, name=name)
    self._algorithms = None if algorithms is None else list(algorithms)

  def _step(self, p: _Pass, hint_dps, hidden):
    cfg = self._config
    # ENCODE (inputs were encoded once, into `p.start`)
    with jax.named_scope("encode"):
      enc = encode(p.encs, hint_dps, p.start, p.nb_nodes)
      edges = edge_fts_of(enc.edge_terms, p.batch_size, p.nb_nodes, cfg.hidden_size)
    # HISTORY (the only place where the three models differ)
    with jax.named_scope("history"):
      seen = self._history(enc.node_fts, hidden)
    # PROCESS
    with jax.named_scope("process"):
      nxt_hidden, tri_msgs = p.processor(enc.node_fts, edges, enc.graph_fts,
                                         seen.processor, seen.residual)
      for _ in range(cfg.nb_msg_passing_steps - 1):
        nxt_hidden, tri_msgs = p.processor(enc.node_fts, edges, enc.graph_fts,
                                           nxt_hidden)
    # DECODE hints now; outputs only at each trajectory's last step.
    with jax.named_scope("decode"):
      h_t = model_lib.decoder_node_input(cfg.decoder_input, enc.node_fts, seen.decoder,
                                         nxt_hidden)
      dec_in = DecoderInputs(h_t, edges.x, tri_msgs, enc.graph_fts, enc.adj_mat)
      hint_preds = decode(p.decs, p.spec, p.hint_names, dec_in, edges, p.repred)
    gate_sum, history_norm = seen.stats()
    return nxt_hidden, hint_preds, dec_in, edges, gate_sum, history_norm

  def _prepare(self, features, algorithm_index: int, modules, repred: bool,
               hidden_override: Optional[chex.Array], max_length: Optional[chex.Array],
               collect_hints: bool) -> _Pass:
    """The pass's shared state, with the inputs encoded once."""
    cfg = self._config
    spec = self._specs[algorithm_index]
    encs, decs, processor = modules
    hint_names = [n for n in decs if spec[n][0] == _Stage.HINT]
    output_names = [n for n in decs if spec[n][0] == _Stage.OUTPUT]
    inputs = features.inputs
    batch_size, nb_nodes = inputs[0].data.shape[:2]
    if max_length is None:
      max_length = jnp.max(features.lengths)
    h = cfg.hidden_size
    zero = Encoded(jnp.zeros((batch_size, nb_nodes, h)),
                   jnp.zeros((batch_size, h)),
                   jnp.repeat(jnp.eye(nb_nodes)[None], batch_size, axis=0), ())
    with jax.named_scope("encode"):
      start = encode(encs, inputs, zero, nb_nodes)
    return _Pass(start=start, spec=spec, encs=encs, decs=decs, processor=processor,
                 hint_names=hint_names, output_names=output_names,
                 hints=features.hints, lengths=features.lengths, max_length=max_length,
                 hidden_override=hidden_override, collect_hints=collect_hints,
                 reads_e_t=bool(e_t_readers(spec, output_names)),
                 batch_size=batch_size, nb_nodes=nb_nodes, repred=repred)

  def _scan_step(self, p: _Pass, carry, i):
    """Step i >= 1 of the scan; a no-op once no trajectory of the batch is running."""
    hidden, prev_hint_preds, last_in = carry
    if p.hidden_override is not None:
      hidden = p.hidden_override[i]

    def active(operands):
      hidden, prev_hint_preds, last_in = operands
      # No teacher forcing: soft re-prediction of the previous step's hints.
      with jax.named_scope("feedback"):
        decoded = decoders.postprocess(
            p.spec, prev_hint_preds,
            sinkhorn_temperature=model_lib.SINKHORN_TEMPERATURE,
            sinkhorn_steps=model_lib.SINKHORN_STEPS_HINTS, hard=False)
      cur_hints = [decoded[x.name] for x in p.hints]
      nxt_hidden, nxt_hint_preds, dec_in, _, g_sum, h_norm = self._step(
          p, cur_hints, hidden)
      # A trajectory's outputs are decoded from its last step (dm-clrs
      # keeps the outputs of that step), hence padding is harmless.
      new_last = jax.tree_util.tree_map(
          lambda new, old: jnp.where(
              model_lib.running_mask(p.lengths, i, new) > 0, new, old),
          p.for_outputs(dec_in), last_in)
      per_step = (nxt_hint_preds if p.collect_hints else {}, g_sum, h_norm)
      return (nxt_hidden, nxt_hint_preds, new_last), per_step

    def finished(operands):
      # No trajectory of the batch is still running: nothing read changes.
      hidden, prev_hint_preds, last_in = operands
      per_step = (jax.tree_util.tree_map(jnp.zeros_like, prev_hint_preds)
                  if p.collect_hints else {},
                  jnp.zeros((p.batch_size,)), jnp.zeros((p.batch_size,)))
      return (hidden, prev_hint_preds, last_in), per_step

    return hk.cond(i + 1 < p.max_length, active, finished,
                   (hidden, prev_hint_preds, last_in))

  def __call__(self, features, algorithm_index: int, repred: bool,
               hidden_override: Optional[chex.Array] = None,
               max_length: Optional[chex.Array] = None,
               collect_hints: bool = True) -> model_lib.NetOutput:
    """As `model.Net.__call__`, computed with less work.

    Args:
      features, algorithm_index, repred, hidden_override: as `model.Net.__call__`'s.
      max_length: an upper bound on `features.lengths` (None: their max); the steps that
        no trajectory runs then (i + 1 >= max_length) are skipped.  K-seed training passes
        one, unbatched, for all seeds.
      collect_hints: False: no hint predictions are kept (`NetOutput.hint_preds` is {}).

    Raises:
      ValueError: a processor without a fast path (`FAST_PROCESSORS`).
    """
    cfg = self._config
    if cfg.processor not in FAST_PROCESSORS:
      raise ValueError(f"FastNet implements the {FAST_PROCESSORS} processors "
                       f"only; use NetConfig(impl='reference') for {cfg.processor!r}")
    # Built here, in `Net`'s order: haiku names a module after the method that builds it,
    # and these names are `Net`'s (a checkpoint runs in either).
    encs, decs = self._construct_encoders_decoders(algorithm_index)
    processor = TripletMPNN(cfg.hidden_size, cfg.nb_triplet_fts, cfg.use_ln,
                            gated=cfg.processor == "triplet_gmpnn")
    p = self._prepare(features, algorithm_index, (encs, decs, processor), repred,
                      hidden_override, max_length, collect_hints)
    first_hints = [
        probing.DataPoint(name=x.name, location=x.location, type_=x.type_,
                          data=jnp.asarray(x.data)[0]) for x in p.hints]
    hidden0 = jnp.zeros((p.batch_size, p.nb_nodes, cfg.hidden_size))
    if hidden_override is not None:
      hidden0 = hidden_override[0]
    hidden, hint_preds, last_in, edges, gate_sum, history_norm = self._step(
        p, first_hints, hidden0)
    last_in = p.for_outputs(last_in)

    nb_mp_steps = max(1, p.hints[0].data.shape[0] - 1)
    if nb_mp_steps > 1:
      body = functools.partial(self._scan_step, p)
      if cfg.remat:
        body = hk.remat(body, policy=jax.checkpoint_policies.save_only_these_names(
            *vjps.REMAT_SAVES))
      # Steps past the algorithm's bound on trajectory length are finished
      # ones in every batch: not scanned, their (zero) outputs padded on.  At
      # least two scanned steps: XLA inlines a loop of one, and the inlined
      # step fuses with its neighbours into other float round-off.
      bound = (None if self._algorithms is None else
               clrs30.trajectory_bound(self._algorithms[algorithm_index], p.nb_nodes))
      nb_scanned = nb_mp_steps if bound is None else min(nb_mp_steps, max(3, bound - 1))
      (_, _, last_in), per_step = hk.scan(
          body, (hidden, hint_preds, last_in),
          jnp.arange(1, nb_scanned), length=nb_scanned - 1)
      rest_hints, rest_gate, rest_norm = jax.tree_util.tree_map(
          lambda x: _pad_steps(x, nb_mp_steps - 1), per_step)
      all_hint_preds = ({k: jnp.concatenate([hint_preds[k][None], rest_hints[k]])
                         for k in hint_preds} if collect_hints else {})
      gate_sum = jnp.concatenate([gate_sum[None], rest_gate])
      history_norm = jnp.concatenate([history_norm[None], rest_norm])
    else:
      all_hint_preds = ({k: v[None] for k, v in hint_preds.items()}
                        if collect_hints else {})
      gate_sum = gate_sum[None]
      history_norm = history_norm[None]
    last_edges = edges._replace(x=last_in.edge_x)
    with jax.named_scope("decode"):
      output_preds = decode(p.decs, p.spec, p.output_names, last_in, last_edges,
                            p.repred)
    return model_lib.NetOutput(output_preds, all_hint_preds, gate_sum,
                               history_norm)
