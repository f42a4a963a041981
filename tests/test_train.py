"""The training protocol: learning, exact resume, divergence, bad input."""

import json

import jax
import numpy as np
import pytest

from nar_markov.config import components
from nar_markov.config import runspec
from nar_markov.nets import model as model_lib
from nar_markov.store import runs
from nar_markov.store import state_files

import flat

# One learner per (algorithm, shapes, net, optimizer) for the module's runs: the
# resume test's five runs trace and compile their steps once (conftest.reused_learners;
# the poisoned compute_losses below is part of its key).
pytestmark = pytest.mark.usefixtures("reuse_learners")

TINY = dict(hidden_size=16, nb_triplet_fts=4, batch_size=8, train_lengths=(4, 7),
            eval_every_steps=25, log_every_steps=5, checkpoint_every_steps=5,
            val_max_samples=16, test_max_samples=8)


@pytest.fixture(autouse=True)
def _cache(monkeypatch, data_cache_dir):
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))


@pytest.mark.parametrize("model", ["baseline", "forget", "gforget"])
def test_tiny_run_improves_validation(tmp_path, model):
  result = flat.run_one(algorithm="bfs", seed=0, model=model,
                        results_dir=str(tmp_path), train_steps=100,
                        learning_rate=3e-3, lambda_gate=0.01, **TINY)
  val = result["curves"]["val"]
  assert val["step"][0] == 0 and val["step"][-1] == 100
  assert result["status"] == "done" and result["steps"] == 100
  assert result["val_best"] > val["score"][0] + 0.1, val["score"]
  assert 0.0 <= result["test_score"] <= 1.0
  on_disk = json.loads((tmp_path / model / "bfs" / "seed0" / "result.json").read_text())
  assert on_disk["schema"] == runs.RESULT_SCHEMA
  assert on_disk["history"] == components.PAPER_LABELS[model][0]
  assert (tmp_path / model / "bfs" / "seed0" / "config.gin").exists()
  assert not (tmp_path / model / "bfs" / "seed0" / "checkpoint.npz").exists()
  curves = on_disk["curves"]
  assert len(curves["train"]["loss"]) == len(curves["train"]["step"]) == 20
  assert len(curves["val"]["hidden_norm"]) == len(val["step"])
  assert all(len(l) >= 1 for l in curves["hint_step_loss"]["loss"])
  if model == "forget":
    assert max(curves["val"]["hidden_norm"]) == 0.0
  else:
    assert min(curves["val"]["hidden_norm"][1:]) > 0.0
  if model == "gforget":
    assert min(curves["train"]["gate_term"]) > 0.0
    # The default reading of the lambda heuristic ('schedule'): no penalty
    # before 0.6 of the schedule, lambda * G from there on.
    assert result["penalty_start_step"] == 60
    assert result["lambda_calibration"]["source"] == "bound by hand"
    steps = np.array(curves["train"]["step"])
    expected = np.where(steps > 60, 0.01 * np.array(curves["train"]["gate_term"]), 0.0)
    np.testing.assert_allclose(curves["train"]["gate_penalty"], expected, rtol=1e-4)


def _params(path):
  return state_files.read_state(path)["params"]


def test_resume_is_exact(tmp_path):
  """Interrupted at 10 and resumed == uninterrupted, within 1e-6."""
  common = dict(algorithm="insertion_sort", seed=3, model="gforget", train_steps=20,
                lambda_gate=0.05, **TINY)
  a, b = tmp_path / "a", tmp_path / "b"
  ckpt = lambda root: root / "gforget" / "insertion_sort" / "seed3" / "checkpoint.npz"
  assert flat.run_one(results_dir=str(a), stop_after_steps=10,
                      **common)["status"] == "interrupted"
  flat.run_one(results_dir=str(a), stop_after_steps=5, **common)
  flat.run_one(results_dir=str(b), stop_after_steps=15, **common)
  pa, pb = _params(ckpt(a)), _params(ckpt(b))
  for x, y in zip(jax.tree_util.tree_leaves(pa), jax.tree_util.tree_leaves(pb)):
    np.testing.assert_allclose(x, y, atol=1e-6, rtol=0)
  ra = flat.run_one(results_dir=str(a), **common)
  rb = flat.run_one(results_dir=str(b), **common)
  assert ra["steps"] == rb["steps"] == 20
  np.testing.assert_allclose(ra["curves"]["train"]["loss"], rb["curves"]["train"]["loss"],
                             rtol=1e-6)
  assert ra["test_score"] == rb["test_score"]


def test_test_curve_and_checkpoint_cadence_change_no_number(tmp_path):
  """Protocol.test_every_steps records the test score of the parameters at those
  evaluations (curves["test"]) and nothing else moves; nor does another checkpoint
  cadence: the run with both is the run without, field for field (neither is a
  setting that done-ness compares).  At the best-validation step the curve's score is
  the run's test_score (the same parameters), which a wrong step or stale parameters
  would break."""
  common = dict(algorithm="bfs", seed=1, model="forget", train_steps=50,
                learning_rate=3e-3, **dict(TINY, eval_every_steps=5))
  plain = flat.run_one(results_dir=str(tmp_path / "plain"), **common)
  traced = flat.run_one(results_dir=str(tmp_path / "traced"), test_every_steps=5,
                        **dict(common, checkpoint_every_steps=15))
  curve = traced["curves"].pop("test")
  assert curve["step"] == list(range(0, 55, 5))
  assert "test" not in plain["curves"]
  for key in ("test_score", "val_best", "val_best_step", "curves", "settings"):
    assert traced[key] == plain[key], key
  at_best = curve["score"][curve["step"].index(traced["val_best_step"])]
  assert at_best == traced["test_score"]
  assert len(set(curve["score"])) > 1, curve  # it follows the training


def test_the_checkpoint_cadence_must_be_a_multiple_of_the_log_cadence():
  """A checkpoint flushes the losses logged so far: at a step that is no log step it
  would cut the train curve's windows (and an adaptive lambda measured on them) where
  a run checkpointed at another cadence does not."""
  with pytest.raises(ValueError, match="multiple of log_every_steps"):
    components.Protocol(log_every_steps=5, checkpoint_every_steps=3)
  assert components.Protocol(log_every_steps=5, checkpoint_every_steps=15)


def test_test_every_steps_must_be_a_multiple_of_eval_every_steps():
  with pytest.raises(ValueError, match="multiple of eval_every_steps"):
    components.Protocol(eval_every_steps=50, test_every_steps=75)
  with pytest.raises(ValueError, match="multiple of eval_every_steps"):
    components.Protocol(test_every_steps=0)


def test_non_finite_loss_ends_as_diverged(tmp_path, monkeypatch):
  real = model_lib.compute_losses

  def poisoned(feedback, out, lambda_gate):
    losses = real(feedback, out, lambda_gate)
    return losses._replace(total=losses.total * np.nan)

  monkeypatch.setattr(model_lib, "compute_losses", poisoned)
  result = flat.run_one(algorithm="bfs", seed=0, model="baseline",
                        results_dir=str(tmp_path), train_steps=20, **TINY)
  assert result["status"] == "diverged"
  assert result["diverged_step"] == 1 and result["steps"] == 1
  # Still tested, on its best validation parameters (step 0's here), as run.py
  # never drops a seed; the analysis counts it with its status.
  assert result["val_best_step"] == 0 and 0.0 <= result["test_score"] <= 1.0
  on_disk = json.loads((tmp_path / "baseline" / "bfs" / "seed0" / "result.json").read_text())
  assert on_disk["status"] == "diverged"
  assert on_disk["test_score"] == result["test_score"]


@pytest.mark.parametrize("kwargs, match", [
    (dict(algorithm="bogo_sort", model="baseline"), "bfs"),
    (dict(algorithm="bfs", model="Trans former"), "must be a label"),
    (dict(algorithm="bfs", model="forget", history="full"), "is the paper's 'forget'"),
    (dict(algorithm="bfs", model="baseline", hidden_size=0), "hidden_size must be > 0"),
    (dict(algorithm="bfs", model="gforget", lambda_gate={"dfs": 1.0}), "calibration"),
    (dict(algorithm="bfs", model="gforget", lambda_gate=-1.0), "lambda_gate"),
])
def test_bad_input_is_one_clear_error(tmp_path, kwargs, match):
  with pytest.raises(ValueError, match=match):
    flat.run_one(seed=0, results_dir=str(tmp_path), **kwargs)
  assert not any(tmp_path.iterdir())


def test_lambda_resolution():
  settings = {"schedule_steps": 1000}
  penalty = components.GatePenalty
  lam, start, info = runspec.resolve_lambda(penalty({"bfs": 0.5}), "bfs", settings=settings)
  assert (lam, start, info["source"], info["reading"]) == (0.5, 600, "gin table", "schedule")
  lam, start, info = runspec.resolve_lambda(penalty(0.5), "bfs", settings=settings)
  assert (lam, start, info["source"]) == (0.5, 600, "bound by hand")
  # No penalty (baseline, ForgetNet, the penalty ablation): lambda is not used.
  assert runspec.resolve_lambda(None, "bfs") == (0.0, 0, None)
  # A start step (the calibration's runs): the lambda it is given, from there.
  assert runspec.resolve_lambda(penalty(0.5, start_step=0), "bfs")[:2] == (0.5, 0)
  with pytest.raises(ValueError, match="give lambda_gate too"):
    penalty(None, start_step=0)


def test_gforget_without_a_record_or_lambda_is_refused(tmp_path):
  with pytest.raises(ValueError, match="no λ calibration record for 'bfs'"):
    flat.run_one(algorithm="bfs", seed=0, model="gforget",
                 results_dir=str(tmp_path))
  assert not any(tmp_path.iterdir())
