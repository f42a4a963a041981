"""Both nets in float64, with no float32 cast inside: where float32 cannot tell
two orders of the same sums apart, float64 can."""

import contextlib
from unittest import mock

import clrs
from clrs._src import encoders
from clrs._src import probing
import jax
import jax.numpy as jnp


@contextlib.contextmanager
def float64_nets():
  """float64 (jax's x64), and dm-clrs's encoders.preprocess casting to float64.

  dm-clrs's encoders.preprocess casts each non-pointer feature to float32 before
  encoding it, a no-op in float32 training.  In float64 it puts float32
  roundings inside the net (on the soft hints fed back), where our fast net
  rounds differently grouped sums, so differences of float32 size would hide
  float64 round-off.  Here the cast is to float64 (patched on dm-clrs's module
  function, which both nets call)."""
  preprocess = encoders.preprocess

  def preprocess_float64(dp, nb_nodes):
    out = preprocess(dp, nb_nodes)
    # Pointers are one-hot encoded (exact in any dtype); the rest is dp.data.
    values = out.data if dp.type_ == clrs.Type.POINTER else dp.data
    return probing.DataPoint(name=out.name, location=out.location,
                             type_=out.type_,
                             data=jnp.asarray(values, jnp.float64))

  with mock.patch.object(encoders, "preprocess", preprocess_float64), \
      jax.enable_x64(True):
    yield
