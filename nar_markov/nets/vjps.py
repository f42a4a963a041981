"""Hand-written VJPs of the fast net's three hot spots, and the row-matrix helper they share.

Each function computes the same value as dm-clrs's expression it replaces, and its
backward pass is autodiff's, written out so XLA:CPU runs plain matrix products and
fused reductions instead of materialised indicators and transposes
(tests/test_fastnet.py checks each VJP against autodiff; the measured gains are in
docs/running.md).  `REMAT_SAVES` names what `FastNet`'s per-step remat keeps.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name


def on_rows(f, x: chex.Array) -> chex.Array:
  """`f` (a Linear, a product) applied to `x` as a [rows, features] matrix: the value f(x).

  On a [B, N, N, D] input the weight gradient of a product contracts three axes, a
  dot_general that XLA:CPU runs outside YNNPACK, its fast matrix library; on the 2-D view
  it is one plain product.
  """
  y = f(x.reshape(-1, x.shape[-1]))
  return y.reshape(x.shape[:-1] + y.shape[-1:])


@jax.custom_vjp
def message_mlp_max(pre, w1, b1, w2, b2):
  """The max over senders of MLP([H, H])(relu(pre)): [B, N, N, H] -> [B, N, H].

  The forward is dm-clrs's expression.  The backward is autodiff's, written out so that
  XLA sees four plain matrix products over the [B * N * N, H] rows (autodiff of jnp.max
  builds the [B, N, N, H] indicator with a select and then transposes the masked
  cotangent for the weight gradient, which on CPU costs more than the products).  Ties in
  the max share the cotangent equally, as jnp.max's VJP does; relu'(0) is 0, as
  jax.nn.relu's.  The number of tied senders is counted in the forward pass as an integer
  sum over the bool indicator and kept (`REMAT_SAVES`): the backward's cotangent is then
  one select; a count of ones is exact either way, so the bits are jnp.max's.

  Args:
    pre: the messages, indexed [b, sender j, receiver i, h].
    w1, b1, w2, b2: the MLP's two Linears ([H, H], [H] each).
  """
  return _message_mlp_max_fwd(pre, w1, b1, w2, b2)[0]


# What the per-step remat keeps instead of recomputing: the message MLP's activations,
# whose recomputation costs more than storing them.
REMAT_SAVES = ("message_h1", "message_hit", "message_ties", "message_max")


def _message_mlp_max_fwd(pre, w1, b1, w2, b2):
  h1 = jax.nn.relu(jnp.dot(jax.nn.relu(pre), w1) + b1)
  out = jnp.dot(h1, w2) + b2
  m = jnp.max(out, axis=1)
  hit = out == m[:, None]                 # where the max is: bool [B, N, N, H]
  ties = jnp.sum(hit, axis=1, dtype=jnp.int32)   # senders at the max: [B, N, H]
  h1 = checkpoint_name(h1, "message_h1")
  hit = checkpoint_name(hit, "message_hit")
  ties = checkpoint_name(ties, "message_ties")
  m = checkpoint_name(m, "message_max")
  return m, (pre, w1, w2, h1, hit, ties)


def _message_mlp_max_bwd(res, g):
  pre, w1, w2, h1, hit, ties = res
  hidden = h1.shape[-1]
  d_out = jnp.where(hit, (g / ties.astype(g.dtype))[:, None], 0.0)
  d_h1 = jnp.dot(d_out, w2.T) * (h1 > 0)
  d_w2 = jnp.dot(h1.reshape(-1, hidden).T, d_out.reshape(-1, hidden))
  d_w1 = jnp.dot(jax.nn.relu(pre).reshape(-1, pre.shape[-1]).T,
                 d_h1.reshape(-1, hidden))
  d_pre = jnp.dot(d_h1, w1.T) * (pre > 0)
  return (d_pre, d_w1, jnp.sum(d_h1, axis=(0, 1, 2)), d_w2,
          jnp.sum(g, axis=(0, 1)))


message_mlp_max.defvjp(_message_mlp_max_fwd, _message_mlp_max_bwd)


# -- pointer decoders ------------------------------------------------------------


@jax.custom_vjp
def edge_pointer_logits(pred, pred_2, w, b):
  """dm-clrs's edge-pointer head, Linear(max(pred_ij, pred_2_k)) -> [B, N, N, N].

  pred: [B, N, N, H]; pred_2: [B, N, H]; w: [H, 1]; b: [1].  The
  [B, N, N, N, H] maximum is reduced as it is produced (XLA fuses the
  broadcast, max and product into the reduction), never stored.
  """
  p_m = jnp.maximum(pred[:, :, :, None, :], pred_2[:, None, None, :, :])
  return jnp.sum(p_m * w[:, 0], axis=-1) + b[0]


def _edge_pointer_fwd(pred, pred_2, w, b):
  return edge_pointer_logits(pred, pred_2, w, b), (pred, pred_2, w)


def _edge_pointer_bwd(res, g):
  pred, pred_2, w = res
  a = pred[:, :, :, None, :]
  c = pred_2[:, None, None, :, :]
  to_a = _to_larger(a, c)
  gw = g[..., None] * w[:, 0]
  d_pred = jnp.sum(gw * to_a, axis=3)
  d_pred_2 = jnp.sum(gw * (1.0 - to_a), axis=(1, 2))
  d_w = jnp.sum(g[..., None] * jnp.maximum(a, c), axis=(0, 1, 2, 3))[:, None]
  d_b = jnp.sum(g)[None]
  return d_pred, d_pred_2, d_w, d_b


edge_pointer_logits.defvjp(_edge_pointer_fwd, _edge_pointer_bwd)


def _to_larger(a, c):
  """d max(a, c) / da as jnp.maximum defines it: 1, or 0.5 each on a tie."""
  return jnp.where(a > c, 1.0, jnp.where(a == c, 0.5, 0.0))


@jax.custom_vjp
def node_pointer_logits(p_1, p_e, w, b):
  """dm-clrs's node-pointer head, Linear(max(p_1_i, p_e_ji)) -> [B, N, N].

  p_1: [B, N, H]; p_e: [B, N, N, H] indexed [b, j, i]; w: [H, 1]; b: [1].
  dm-clrs transposes p_e to [b, i, j] and materialises the maximum before a
  Linear to one unit; here the reduction reads p_e where it lies and only
  the [B, N, N] logits are transposed.
  """
  # The reduction over H as a product with w: XLA:CPU then runs the max and
  # the product apart instead of one slower fused YNNPACK reduction (docs/running.md).
  out = on_rows(lambda x: jnp.dot(x, w),
                jnp.maximum(p_1[:, None, :, :], p_e))[..., 0] + b[0]
  return jnp.swapaxes(out, 1, 2)


def _node_pointer_fwd(p_1, p_e, w, b):
  return node_pointer_logits(p_1, p_e, w, b), (p_1, p_e, w)


def _node_pointer_bwd(res, g):
  p_1, p_e, w = res
  a = p_1[:, None, :, :]
  to_1 = _to_larger(a, p_e)
  gw = jnp.swapaxes(g, 1, 2)[..., None] * w[:, 0]      # [b, j, i, H]
  d_p1 = jnp.sum(gw * to_1, axis=1)
  d_pe = gw * (1.0 - to_1)
  d_w = jnp.sum(jnp.swapaxes(g, 1, 2)[..., None] * jnp.maximum(a, p_e),
                axis=(0, 1, 2))[:, None]
  d_b = jnp.sum(g)[None]
  return d_p1, d_pe, d_w, d_b


node_pointer_logits.defvjp(_node_pointer_fwd, _node_pointer_bwd)
