"""What conftest's `quick_compile` fixture changes: dm-clrs's Sinkhorn loop, for tests that
compare two of our programs with each other.

XLA at -O0 (`xla_backend_optimization_level=0`) was tried too and dropped: it cut a
comparison's compile CPU time by ~40 %, but moved optimal_bst's Triplet-MPNN gradients by up
to 1.5 % (CI, 2026-12-02) and gave NaN in a float64 training step (insertion_sort)."""

import jax
import jax.numpy as jnp

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
