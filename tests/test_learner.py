"""Learner's compiled steps: where XLA places their scratch changes no bit (NetConfig.xla_heap_mib)."""

import jax
import numpy as np
import pytest

from nar_markov.config import netconfig
from nar_markov.data import train_stream
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib


def test_compiler_options_split_the_scratch_on_cpu_only():
  assert jax.default_backend() == "cpu"
  assert learner.compiler_options(netconfig.NetConfig(xla_heap_mib=4)) == {
      "xla_multiheap_size_constraint_per_heap": 4 * 2**20}
  assert learner.compiler_options(netconfig.NetConfig(xla_heap_mib=0)) is None
  with pytest.raises(ValueError, match="xla_heap_mib"):
    netconfig.NetConfig(xla_heap_mib=-1)


def test_scratch_in_heaps_gives_the_same_bits():
  """Two train steps and an eval batch, one heap against heaps of 1 MiB, on a
  batch whose step needs several MiB of scratch: the same bits."""
  algorithm = "bfs"
  stream = train_stream.TrainStream(algorithm, seed=0, batch_size=16, lengths=(16,))
  feedback = next(stream)
  nets, outs = {}, {}
  for mib in (0, 1):
    config = netconfig.NetConfig(hidden_size=16, nb_triplet_fts=4, xla_heap_mib=mib)
    nets[mib] = learner.Learner([stream.spec], [model_lib.nb_dims_of(feedback)], config,
                                learner.make_optimizer(1e-3, 10, 1.0),
                                algorithms=[algorithm])
  params, opt_state = nets[0].init_state(0, [feedback.features])
  scratch = nets[1].train_step.lower(params, opt_state, feedback, np.float32(0.0), 0,
                                     nets[1].step_key(0, 0)).compile()
  assert scratch.memory_analysis().temp_size_in_bytes > 2 * 2**20   # split into several
  for mib, net in nets.items():
    p, s = jax.tree_util.tree_map(np.array, (params, opt_state))
    losses = []
    for step in range(2):
      p, s, l = net.train_step(p, s, feedback, np.float32(0.0), 0, net.step_key(0, step))
      losses.append(l)
    outs[mib] = (p, s, losses, net.eval_batch(p, feedback, 0, True))
  for x, y in zip(jax.tree_util.tree_leaves(outs[0]), jax.tree_util.tree_leaves(outs[1])):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_step_whose_scratch_fits_one_heap_stays_cacheable():
  """A step whose scratch fits in one heap keeps XLA's one buffer, so JAX's persistent
  cache can store it (it serialises the executable); split into heaps, it cannot
  (XLA:CPU serialises one scratch buffer only): the cost learner.py's warning filter names."""
  from jax.experimental import serialize_executable  # pylint: disable=g-import-not-at-top
  algorithm = "bfs"
  stream = train_stream.TrainStream(algorithm, seed=0, batch_size=16, lengths=(16,))
  feedback = next(stream)
  compiled = {}
  for mib in (1, 30):
    config = netconfig.NetConfig(hidden_size=16, nb_triplet_fts=4, xla_heap_mib=mib)
    net = learner.Learner([stream.spec], [model_lib.nb_dims_of(feedback)], config,
                          learner.make_optimizer(1e-3, 10, 1.0), algorithms=[algorithm])
    params, opt_state = net.init_state(0, [feedback.features])
    compiled[mib] = net.train_step.lower(params, opt_state, feedback, np.float32(0.0), 0,
                                         net.step_key(0, 0)).compile()
  temp = compiled[30].memory_analysis().temp_size_in_bytes
  assert 2**20 < temp < 30 * 2**20
  serialize_executable.serialize(compiled[30])
  with pytest.raises(Exception, match="Multiple temp buffer allocations"):
    serialize_executable.serialize(compiled[1])
