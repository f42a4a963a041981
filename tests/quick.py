"""What conftest's `quick_compile` fixture changes: XLA's compile-time options and
dm-clrs's Sinkhorn loop, for tests that compare two of our programs with each other."""

import jax
import jax.numpy as jnp

# XLA's compile-time options for float32 tests that compare two of our programs with
# each other within a tolerance (never with a golden number): LLVM at -O0 and without
# its expensive passes compiles a fast-vs-reference comparison in about 60 % of the
# CPU time (bfs on triplet_mpnn, cold: 36.6 s -> 23.1 s).  Not for float64: there a
# training step of test_dmclrs_training (insertion_sort) compiled so gave NaN.  The
# comparisons check that what they compare is finite (NaN equals NaN in assert_allclose).
QUICK_COMPILE = {"xla_backend_optimization_level": 0,
                 "xla_llvm_disable_expensive_passes": True}


def log_sinkhorn_rolled(x, steps, temperature, zero_diagonal, noise_rng_key):
  """dm-clrs's `decoders.log_sinkhorn` with its Python loop of `steps` row and
  column log-softmaxes as one `lax.fori_loop`: the same operations in the same
  order.  Unrolled (50 steps for an output), XLA's fusion copies the chain into
  ~40,000 ops and one evaluation step of a sort compiles for 35-45 s."""
  assert x.ndim >= 2 and x.shape[-1] == x.shape[-2]
  if noise_rng_key is not None:
    noise = -jnp.log(-jnp.log(jax.random.uniform(noise_rng_key, x.shape) + 1e-12) + 1e-12)
    x = x + noise
  x /= temperature
  if zero_diagonal:
    x = x - 1e6 * jnp.eye(x.shape[-1])
  def step(_, x):
    x = jax.nn.log_softmax(x, axis=-1)
    return jax.nn.log_softmax(x, axis=-2)
  return jax.lax.fori_loop(0, steps, step, x)
