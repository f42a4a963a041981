"""Our training is dm-clrs's training: from the same parameters, on the same
batches, our baseline (history='full', the fast net) and dm-clrs 2.0.3's
`BaselineModel` with run.py's settings take the same optimizer steps."""

import tempfile

import clrs
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nar_markov.config import netconfig
from nar_markov.data import train_stream
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib

import float64

HIDDEN = 16
NB_TRIPLET_FTS = 4
BATCH = 4
NB_NODES = 4
STEPS = 20
LEARNING_RATE = 1.5e-3  # run.py's and the paper's
GRAD_CLIP_MAX_NORM = 1.0
# dm-clrs's BaselineModel keeps the learning rate constant; ours decays it on a
# cosine over `train_steps`.  Over a horizon this long the cosine is 1 to
# float64 precision for STEPS steps, so what is compared is the rest of our
# optimizer (global-norm clipping, then Adam, then the step) against dm-clrs's.
CONSTANT_LR_HORIZON = 10**9
# Largest |ours - dm-clrs| allowed in any parameter after any step (parameters
# are O(1)).  Adam scales a gradient g by 1 / (|g| + 1e-8): where the gradient
# is zero up to round-off (the bias of a pointer decoder's last Linear, which
# the softmax does not see) it moves by up to lr * round-off / 1e-8.  In float32
# that is up to a full +-lr step per step, which is why the test runs in
# float64, where it is ~1e-12 per step.  Anything computed differently (a float32
# segment, another loss weight, the paper's 10,000-step cosine) moves
# parameters by 1e-7 or more within STEPS steps.
ATOL = 1e-9

# Each algorithm stands for a kind of feature whose path differs in the fast
# net: node pointers (bfs), permutation pointers with Gumbel noise in training
# (insertion_sort), edge pointers (floyd_warshall; no CLRS-30 algorithm has
# both permutation and edge pointers), an output that reads no edge features
# or triplet messages, so that none are carried through the scan (graham_scan's
# node mask).
COVERS = {
    "bfs": (clrs.Location.NODE, clrs.Type.POINTER),
    "insertion_sort": (clrs.Location.NODE, clrs.Type.PERMUTATION_POINTER),
    "floyd_warshall": (clrs.Location.EDGE, clrs.Type.POINTER),
    "graham_scan": (clrs.Location.NODE, clrs.Type.MASK),
}


@pytest.fixture
def float64_same_noise(same_gumbel_noise):  # pylint: disable=unused-argument,redefined-outer-name
  """float64 with no float32 cast inside (tests/float64.py), and the same Gumbel
  noise on both sides (conftest's `same_gumbel_noise`: one fixed key for every
  noisy decoders.log_sinkhorn, so the noisy training path is still compared)."""
  with float64.float64_nets():
    yield


def _dm_clrs_model(spec, feedback, processor) -> clrs.models.BaselineModel:
  """dm-clrs examples/run.py's BaselineModel (encoded_decoded hints, no teacher
  forcing, soft hint re-prediction) on `processor`, at the test's size."""
  return clrs.models.BaselineModel(
      spec=[spec], dummy_trajectory=[feedback],
      processor_factory=clrs.get_processor_factory(
          processor, use_ln=True, nb_triplet_fts=NB_TRIPLET_FTS),
      hidden_dim=HIDDEN, encode_hints=True, decode_hints=True,
      encoder_init="xavier_on_scalars", use_lstm=False,
      learning_rate=LEARNING_RATE, grad_clip_max_norm=GRAD_CLIP_MAX_NORM,
      checkpoint_path=tempfile.mkdtemp(), freeze_processor=False,
      dropout_prob=0.0, hint_teacher_forcing=0.0, hint_repred_mode="soft",
      nb_msg_passing_steps=1)


def _flat(params):
  return {f"{module}/{name}": np.asarray(value)
          for module, names in params.items() for name, value in names.items()}


def _largest_difference(ours, theirs):
  ours, theirs = _flat(ours), _flat(theirs)
  assert ours.keys() == theirs.keys()
  diffs = {k: float(np.max(np.abs(ours[k] - theirs[k]))) for k in theirs}
  name = max(diffs, key=diffs.get)
  return diffs[name], name


# run.py's processor (Triplet-GMPNN, with the update gate) and the paper's Eq. 2
# (Triplet-MPNN, without it): both have a fast path.
@pytest.mark.parametrize("processor", netconfig.FAST_PROCESSORS)
@pytest.mark.parametrize("algorithm", sorted(COVERS))
def test_training_is_dm_clrs_training(algorithm, processor, float64_same_noise):
  if jax.local_device_count() != 1:
    pytest.skip("dm-clrs's BaselineModel pmaps over more than one device")
  stream = train_stream.TrainStream(algorithm, seed=0, batch_size=BATCH,
                                    lengths=(NB_NODES,))
  assert COVERS[algorithm] in [(loc, t) for _, loc, t in stream.spec.values()]
  batches = [next(stream) for _ in range(STEPS)]

  config = netconfig.NetConfig(hidden_size=HIDDEN, history="full",
                               processor=processor, nb_triplet_fts=NB_TRIPLET_FTS)
  assert config.fast  # the default impl is what trains the paper's runs
  ours = learner.Learner([stream.spec], [model_lib.nb_dims_of(batches[0])], config,
                     learner.make_optimizer(LEARNING_RATE, CONSTANT_LR_HORIZON,
                                          GRAD_CLIP_MAX_NORM))
  theirs = _dm_clrs_model(stream.spec, batches[0], processor)

  params = jax.tree_util.tree_map(
      lambda p: jnp.asarray(p, jnp.float64),
      ours.init(jax.random.PRNGKey(0), [batches[0].features]))
  opt_state = ours.optimizer.init(params)
  # What BaselineModel.init sets, from our parameters (copies: both steps
  # donate their inputs).
  theirs.params = jax.tree_util.tree_map(jnp.copy, params)
  theirs.opt_state = theirs.opt.init(theirs.params)
  theirs.opt_state_skeleton = theirs.opt.init(jnp.zeros(1))

  largest = (0.0, None, None)
  for step, feedback in enumerate(batches):
    rng_key = ours.step_key(0, step)
    params, opt_state, losses = ours.train_step(params, opt_state, feedback,
                                                0.0, 0, rng_key)
    their_loss = theirs.feedback(rng_key, feedback)
    # Both report the loss at the parameters before the step.
    np.testing.assert_allclose(float(losses.total), float(their_loss),
                               rtol=1e-10, err_msg=f"step {step}")
    diff, name = _largest_difference(params, theirs.params)
    assert diff <= ATOL, (f"{algorithm}: after step {step}, |ours - dm-clrs| "
                          f"= {diff:.3g} in {name}")
    largest = max(largest, (diff, step, name))
  print(f"{algorithm}: largest |ours - dm-clrs| over {STEPS} steps "
        f"{largest[0]:.3g} (step {largest[1]}, {largest[2]})")
