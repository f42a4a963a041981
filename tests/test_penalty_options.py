"""G-ForgetNet's penalty strength options (GatePenalty) and the selection rules, on tiny runs."""

import dataclasses

import numpy as np
import pytest

from nar_markov.config import components
from nar_markov.config import calibration_records
from nar_markov.config.netconfig import NetConfig
from nar_markov.config import runspec
from nar_markov.store import definitions

import flat

TINY = dict(hidden_size=8, nb_triplet_fts=4, batch_size=4, train_lengths=(4,),
            train_steps=20, eval_every_steps=5, log_every_steps=1,
            checkpoint_every_steps=10, val_max_samples=8, test_max_samples=4)


# The module's runs of one net and optimizer share one learner (conftest.reused_learners).
pytestmark = pytest.mark.usefixtures("reuse_learners")


@pytest.fixture(autouse=True)
def _cache(monkeypatch, data_cache_dir):
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))


def _gforget(tmp_path, **penalty):
  return flat.run_one(algorithm="bfs", seed=0, model="gforget_options",
                      results_dir=str(tmp_path), history="gated",
                      penalty=components.GatePenalty(0.5, start_step=8, **penalty), **TINY)


def _lambda_per_step(result):
  train = result["curves"]["train"]
  with np.errstate(invalid="ignore", divide="ignore"):
    ratio = np.asarray(train["gate_penalty"]) / np.asarray(train["gate_term"])
  return dict(zip(train["step"], ratio))


def test_ramp_scale_and_adaptive_lambda(tmp_path):
  """lambda_scale multiplies lambda; the ramp rises linearly from the start step; the
  adaptive lambda is lambda_scale * L / G of the logged losses since its last update."""
  ramp = _gforget(tmp_path / "ramp", lambda_scale=2.0, ramp_steps=4)
  lam = _lambda_per_step(ramp)  # curves log step s's loss (0-based step s - 1)
  assert ramp["lambda_gate"] == pytest.approx(1.0)
  assert ramp["settings"]["lambda_scale"] == 2.0 and ramp["settings"]["ramp_steps"] == 4
  assert ramp["lambda_calibration"]["lambda_unscaled"] == 0.5
  assert [lam[s] for s in (8, 9, 10, 11, 12, 13, 20)] == pytest.approx(
      [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0], rel=1e-5)

  adaptive = _gforget(tmp_path / "adaptive", adaptive_every_steps=4, adaptive_max_scale=1e6)
  lam = _lambda_per_step(adaptive)
  train = adaptive["curves"]["train"]
  updates = adaptive["lambda_updates"]
  assert [u[0] for u in updates] == [12, 16, 20]
  for step, value, big_l, big_g in updates:
    window = [i for i, s in enumerate(train["step"]) if step - 4 < s <= step]
    assert big_l == pytest.approx(np.mean([train["output_loss"][i] + train["hint_loss"][i]
                                           for i in window]), rel=1e-6)
    assert big_g == pytest.approx(np.mean([train["gate_term"][i] for i in window]), rel=1e-6)
    assert value == pytest.approx(big_l / big_g)
  assert [lam[s] for s in (9, 12)] == pytest.approx([0.5, 0.5], rel=1e-5)
  assert lam[13] == pytest.approx(updates[0][1], rel=1e-5)
  assert lam[17] == pytest.approx(updates[1][1], rel=1e-5)


GATE_HIDDEN = 8


@pytest.fixture(scope="module")
def mixed_lengths():
  """bfs trajectories of different lengths in one batch."""
  import clrs
  sampler, spec = clrs.build_sampler("bfs", num_samples=-1, length=6, seed=0)
  feedback = sampler.next(6)
  assert len(set(np.asarray(feedback.features.lengths).tolist())) > 1
  return spec, feedback


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_gate_penalty_masks_each_trajectory_by_its_own_length(mixed_lengths, impl):
  """Eq. 6 derived by hand with a gate that differs by step, sample and node, over a batch of
  trajectories of different lengths. The gate reads h(t-1) only (the rows of its first layer
  that read x(t) zeroed) and h(t-1) is fed (hidden_override), so
  g(t) = sigmoid(relu(h(t-1) W1 + b1) W2 + b2) is computed here in numpy; G is the mean, over
  each sample's own steps t < length - 1, of sum_i ||g_i(t)||. A mask by the batch's longest
  trajectory averages other steps in and gives another number (checked below)."""
  import jax
  from nar_markov.nets import learner
  from nar_markov.nets import model as model_lib

  spec, feedback = mixed_lengths
  config = NetConfig(hidden_size=GATE_HIDDEN, nb_triplet_fts=4, history="gated", impl=impl)
  net = learner.Learner([spec], [model_lib.nb_dims_of(feedback)], config,
                        learner.make_optimizer(1e-3, 10, 1.0))
  params = {m: {k: np.array(v) for k, v in p.items()}
            for m, p in jax.device_get(net.init(jax.random.PRNGKey(0),
                                                [feedback.features])).items()}
  first = next(m for m in params if m.endswith("history_gate/linear_0"))
  last = next(m for m in params if m.endswith("history_gate/linear_1"))
  params[first]["w"][:GATE_HIDDEN] = 0.0          # [x(t), h(t-1)]: x(t)'s rows
  lengths = np.asarray(feedback.features.lengths).astype(int)
  nb_steps = feedback.features.hints[0].data.shape[0] - 1
  batch, nodes = feedback.features.inputs[0].data.shape[:2]
  h = np.random.RandomState(0).standard_normal(
      (nb_steps, batch, nodes, GATE_HIDDEN)).astype(np.float32)

  lam = 0.3
  losses = model_lib.compute_losses(
      feedback, net.apply(params, feedback.features, 0, False,
                          hidden_override=jax.numpy.asarray(h)), lam)

  hidden = np.maximum(h @ params[first]["w"][GATE_HIDDEN:] + params[first]["b"], 0.0)
  g = 1.0 / (1.0 + np.exp(-(hidden @ params[last]["w"] + params[last]["b"])))
  per_step = np.sqrt(np.sum(g.astype(np.float64) ** 2, axis=-1)).sum(axis=-1)  # [T-1, B]
  own = [per_step[t, b] for b in range(batch) for t in range(lengths[b] - 1)]
  expected = np.mean(own)
  assert float(losses.gate_term) == pytest.approx(expected, rel=1e-5)
  assert float(losses.gate_penalty) == pytest.approx(lam * expected, rel=1e-5)
  assert float(losses.total) == pytest.approx(
      float(losses.output + losses.hint) + lam * expected, rel=1e-5)
  # The gate is not constant and the lengths differ: the longest trajectory's mask would
  # give another G, so the test can tell the two apart.
  assert np.std(per_step) > 1e-2 * np.mean(per_step)
  longest = np.mean(per_step[:lengths.max() - 1])
  assert abs(longest - expected) > 1e-3 * expected


def test_adaptive_lambda_is_capped(tmp_path):
  result = _gforget(tmp_path, adaptive_every_steps=4, adaptive_max_scale=1.0)
  assert all(u[1] <= 0.5 + 1e-12 for u in result["lambda_updates"])


def test_selection_rules_reported_side_by_side(tmp_path):
  result = _gforget(tmp_path)
  sel = result["selection"]
  assert sel["rule"] == "first_best"
  assert sel["first_best"] == {"step": result["val_best_step"],
                               "test_score": result["test_score"]}
  assert sel["final"]["step"] == 20
  val = result["curves"]["val"]
  at_best = [s for s, v in zip(val["step"], val["score"]) if v >= result["val_best"]]
  assert sel["last_best"]["step"] == at_best[-1]
  for rule in ("last_best", "final"):
    assert sel[rule]["test_score"] is not None
    if sel[rule]["step"] == sel["first_best"]["step"]:
      assert sel[rule]["test_score"] == result["test_score"]


# Other values that the Protocol's checks take (multiples of the eval and log cadences).
_OTHER = {"test_every_steps": 100, "checkpoint_every_steps": 1000, "log_every_steps": 20}


def _changed(value, field=None):
  """Another valid value of a setting with default `value`."""
  if field in _OTHER:
    return _OTHER[field]
  if isinstance(value, bool):
    return not value
  if value is None:
    return 7
  if isinstance(value, (int, float)):
    return value * 2 + 2
  if isinstance(value, (tuple, list)):
    return [int(v) + 1 for v in value]
  return {"resample": "fixed", "processor_decoder": "processor", "auto": "fast",
          "xavier_on_scalars": "default", "triplet_gmpnn": "mpnn", "gated": "none",
          "per_algorithm": "summed", "dmclrs": "processed"}[value]


# The fields that change no number of a run: how often it checkpoints (a multiple of the
# log cadence: test_train.py), the diagnostic test curve (test_train.py), where XLA
# places a step's scratch (the same bits: test_learner.py), and for a single-task run the
# multi-task update rule.
CHANGE_NO_NUMBER = {"checkpoint_every_steps", "test_every_steps", "multitask_update",
                    "xla_heap_mib"}
_COMPONENTS = {"Protocol": components.Protocol, "NetConfig": NetConfig,
               "GatePenalty": components.GatePenalty}


def _definition(model, algorithms, protocol, net, penalty):
  task = runspec.make_tasks(model, algorithms, penalty, None, protocol, net)[0]  # pylint: disable=protected-access
  return task.definition


@pytest.mark.parametrize("owner,field", [
    (owner, f.name) for owner, cls in _COMPONENTS.items() for f in dataclasses.fields(cls)])
def test_a_change_of_every_field_is_seen_by_done_ness(owner, field):
  """Done-ness compares a run's definition (definitions.definition_mismatch): a change of each
  field of the three components is seen in it, single- and multi-task -- found from the
  components themselves, so a field added to one is covered -- except the fields that
  change no number."""
  base = {"Protocol": components.Protocol(), "NetConfig": NetConfig(history="gated"),
          "GatePenalty": components.GatePenalty(0.1)}
  default = getattr(base[owner], field)
  changed = dict(base, **{owner: dataclasses.replace(base[owner],
                                                   **{field: _changed(default, field)})})
  for model, algorithms in (("mynet", ["bfs"]), ("mynet_multitask", ["bfs", "dfs"])):
    if model.endswith("_multitask") and field == "start_step":
      continue  # multi-task penalties are on from step 0 (runspec.make_tasks)
    a, b = (_definition(model, algorithms, c["Protocol"], c["NetConfig"], c["GatePenalty"])
            for c in (base, changed))
    seen = definitions.definition_mismatch(a, b)
    if field in CHANGE_NO_NUMBER and not (field == "multitask_update" and
                                          model.endswith("_multitask")):
      assert not seen, (model, seen)
    else:
      assert seen, (model, field)


def test_settings_of_a_default_run_are_what_results_always_recorded():
  """A run with every default has the settings results have recorded from the start,
  so results and checkpoints written before a setting existed stay valid."""
  s = runspec.run_settings("bfs", components.Protocol(), NetConfig(),
                           penalty=components.GatePenalty(0.1))
  assert sorted(s) == sorted(("algorithm",) + runspec.ALWAYS_RECORDED)


def test_a_smoke_result_is_not_done_for_a_full_split(tmp_path):
  """A result tested on 4 samples is refused, not skipped, when the whole split is asked for."""
  flat.run_one(algorithm="bfs", seed=0, model="forget", results_dir=str(tmp_path), **TINY)
  with pytest.raises(ValueError, match="test_max_samples"):
    flat.run_one(algorithm="bfs", seed=0, model="forget", results_dir=str(tmp_path),
                 **dict(TINY, test_max_samples=None))


def test_constant_reading_continues_only_with_the_records_constant_lambda(tmp_path):
  record = {"schema": calibration_records.RECORD_SCHEMA, "algorithm": "bfs", "lambda": 0.5,
            "reading": "constant", "settings": {}, "calibration_step": 12,
            "seeds": [{"seed": 0, "lambda": 0.5, "chosen_state": str(tmp_path / "s.npz")}]}
  path = tmp_path / "rec.json"
  calibration_records.atomic_write_json(path, record)
  (tmp_path / "s.npz").write_bytes(b"")
  info = {"reading": "constant", "calibration_step": 12, "record": str(path)}
  go = lambda **kw: calibration_records.continuation(info, 0, penalty_start=0, **kw)
  assert go(lam=0.5) is not None
  assert go(lam=1.0) is None                       # lambda_scale 2
  assert go(lam=0.5, lambda_constant=False) is None  # a ramp or adaptation from step 0


def test_records_and_lambda0_runs_are_kept_apart_per_scope(tmp_path):
  default = calibration_records.record_path(tmp_path, "schedule", "bfs")
  scoped = calibration_records.record_path(tmp_path, "schedule", "bfs", "processor_input")
  assert default == tmp_path / "_calibration" / "schedule" / "bfs.json"
  assert scoped != default and "processor_input" in str(scoped)
  assert (calibration_records.lambda0_results_dir(tmp_path, "processor")
          != calibration_records.lambda0_results_dir(tmp_path))


def test_bad_penalty_options_are_one_clear_error():
  with pytest.raises(ValueError, match="lambda_scale"):
    components.GatePenalty(0.1, lambda_scale=0)
  with pytest.raises(ValueError, match="ramp_steps"):
    components.GatePenalty(0.1, ramp_steps=-1)
  with pytest.raises(ValueError, match="adaptive_every_steps"):
    components.GatePenalty(0.1, adaptive_every_steps=0)
