"""A seed's typed state and its checkpoint file (nar_markov/state/checkpoint.py): the dict on disk
keeps the keys every checkpoint of the one loop has had, so checkpoints resume across
versions both ways; older ones read as today's; another format is refused and kept."""

import numpy as np
import pytest

from nar_markov.state import checkpoint
from nar_markov.store import runs
from nar_markov.store import state_files

# The keys a checkpoint of the one loop has always held (what an older version reads).
ON_DISK = {"format", "algorithms", "step", "best_val", "best_step", "best_params", "best_scores",
           "curves", "train_time_s", "eval_time_s", "diverged_step", "test_results",
           "last_best_step", "last_best_params", "definitions", "lambda_now", "lambda_updates",
           "params", "opt_state", "streams"}


def _state() -> checkpoint.SeedState:
  state = checkpoint.SeedState.new(["bfs"], [{"algorithm": "bfs", "seed": 0}])
  state.step, state.train_time_s = 20, 1.5
  state.curves[0]["val"]["step"].append(20)
  state.curves[0]["val"]["score"].append(0.5)
  params = {"w": np.arange(3.0)}
  state.selection.observe(20, [0.5], lambda: params)
  state.lambdas.now[0] = 0.25
  state.lambdas.updates[0].append([20, 0.25, 1.0, 4.0])
  return state


def test_a_state_round_trips_through_its_checkpoint_file(tmp_path):
  state = _state()
  path = tmp_path / runs.CHECKPOINT_NAME
  checkpoint.save(path, state, {"w": np.ones(2)}, [np.zeros(1)], [{"next": 3}])
  on_disk = state_files.read_state(path)
  assert set(on_disk) == ON_DISK
  back = checkpoint.SeedState.from_state(on_disk)
  np.testing.assert_array_equal(back.selection.best_params["w"], np.arange(3.0))
  back.selection.best_params = back.selection.last_best_params = None
  state.selection.best_params = state.selection.last_best_params = None
  assert back == state


def test_an_older_checkpoint_reads_as_todays():
  """Written before λ adapted (no lambda_now/lambda_updates) and before the last-at-best
  rule was kept: no adaptation, and the last best from the curves."""
  state = _state().to_state({}, [], [])
  for key in ("lambda_now", "lambda_updates", "last_best_step", "last_best_params"):
    del state[key]
  back = checkpoint.SeedState.from_state(state)
  assert back.lambdas.now == [None] and back.lambdas.updates == [[]]
  assert back.selection.last_best_step == 20  # the best is the last validation


def test_a_checkpoint_of_another_format_is_refused_and_kept(tmp_path):
  state = dict(_state().to_state({}, [], []), format=1)
  with pytest.raises(ValueError, match="format 1"):
    checkpoint.check_resume(state, tmp_path / runs.CHECKPOINT_NAME, state["definitions"])


def test_status_calls_a_checkpoint_of_another_format_other(tmp_path):
  """What --status and the sweep say of a checkpoint (state_files.check_checkpoint) agrees
  with what the trainer does (check_resume refuses another format): `other`, not `resume`."""
  state = _state()
  checkpoint.save(tmp_path / runs.CHECKPOINT_NAME, state, {}, [], [])
  assert state_files.check_checkpoint(tmp_path, state.definitions).state == "resume"
  state_files.write_state(tmp_path / runs.CHECKPOINT_NAME,
                          dict(state.to_state({}, [], []), format=1))
  verdict = state_files.check_checkpoint(tmp_path, state.definitions)
  assert verdict.state == "other" and "format 1" in verdict.detail


def test_status_and_trainer_agree_on_a_checkpoint_without_definitions(tmp_path):
  """A checkpoint that records no settings (older): resumed, with a warning, up to the run's
  train_steps; past them the trainer refuses it, and --status calls it `other` (it said
  `resume`, when each made its own check)."""
  expected = [{"algorithm": "bfs", "seed": 0, "settings": {"train_steps": 20}}]
  state = dict(_state().to_state({}, [], []), definitions=None)
  path = tmp_path / runs.CHECKPOINT_NAME
  state_files.write_state(path, state)
  checkpoint.check_resume(state, path, expected)  # step 20 of 20: resumes
  assert state_files.check_checkpoint(tmp_path, expected).state == "resume"
  expected[0]["settings"]["train_steps"] = 10
  with pytest.raises(ValueError, match="at step 20, this run has train_steps=10; the "
                                       "checkpoint is kept"):
    checkpoint.check_resume(state, path, expected)
  verdict = state_files.check_checkpoint(tmp_path, expected)
  assert verdict.state == "other" and "train_steps=10" in verdict.detail
