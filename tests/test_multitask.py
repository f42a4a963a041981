"""One processor for many algorithms (paper App. "Multi-task experiments")."""

import json
import pathlib
import pickle
import re

import gin
import jax
import numpy as np
import pytest

from nar_markov import config as config_lib
from nar_markov import data
from nar_markov import devices
from nar_markov import model as model_lib
from nar_markov import multitask
from nar_markov import train

ALGORITHMS = ("naive_string_matcher", "bfs", "insertion_sort")
LAMBDAS = {"naive_string_matcher": 0.01, "bfs": 0.05, "insertion_sort": 0.0}
# The string matcher trains at (16 * 5) // 4 = 20 nodes; a shared [4, 7] would
# give it 8 nodes, too few for run.py's needle of up to 8 characters.
LENGTHS = {"naive_string_matcher": [16], "bfs": [4, 7], "insertion_sort": [4, 7]}
STEPS = 24
TINY = dict(algorithms=ALGORITHMS, seed=1, model="gforget_multitask",
            train_steps=STEPS, lambda_gate=LAMBDAS, train_lengths=LENGTHS,
            hidden_size=16, nb_triplet_fts=4, batch_size=8, learning_rate=3e-3,
            eval_every_steps=12, log_every_steps=2, checkpoint_every_steps=6,
            val_max_samples=8, test_max_samples=8, progress=False,
            # The same val samples at every evaluation, so that the hint loss
            # curve below compares like with like.
            validation_mode="fixed")


@pytest.fixture(autouse=True)
def _cache(monkeypatch, data_cache_dir):
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))


def _load(path):
  with open(path, "rb") as f:
    return pickle.load(f)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_cache_dir):
  """Run a: stopped at step 10, then resumed to the end; run b: in one go."""
  a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
  ckpt = multitask.job_dir(a, "gforget_multitask", 1) / train.CHECKPOINT_NAME
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))
    stopped = multitask.run_multitask_experiment(results_dir=str(a),
                                                 stop_after_steps=10, **TINY)
    at_10 = _load(ckpt)
    results_a = multitask.run_multitask_experiment(results_dir=str(a), **TINY)
    results_b = multitask.run_multitask_experiment(results_dir=str(b), **TINY)
  return dict(a=a, b=b, stopped=stopped, at_10=at_10, results_a=results_a,
              results_b=results_b, ckpt=ckpt)


def test_one_processor_per_algorithm_encoders_and_decoders(runs):
  params = runs["at_10"]["params"]
  algo_of = {m: re.search(r"/algo_(\d+)_", m) for m in params}
  shared = sorted({m.split("/")[1] for m, k in algo_of.items() if k is None})
  # Exactly one processor (and one G-ForgetNet gate), not one per algorithm.
  assert shared == ["mpnn_aggr_clrs_processor", "~_history"], shared
  assert [m for m in params if m.startswith("net/~_history/")] == [
      "net/~_history/history_gate/linear_0", "net/~_history/history_gate/linear_1"]
  per_algorithm = {m.split("/")[-1]: int(k.group(1))
                   for m, k in algo_of.items() if k is not None}
  assert set(per_algorithm.values()) == {0, 1, 2}
  for k, alg in enumerate(ALGORITHMS):
    for name in data.get_spec(alg):
      assert any(m.startswith(f"algo_{k}_{name}_") for m in per_algorithm), (alg, name)
  # bfs's pointer decoder exists for bfs (index 1) only.
  assert "algo_1_pi_dec_linear" in per_algorithm
  assert not any(m.startswith(("algo_0_pi_", "algo_2_pi_")) for m in per_algorithm)


def test_each_stream_keeps_its_own_lengths_in_the_run(runs):
  stopped, at_10 = runs["stopped"], runs["at_10"]
  assert stopped == {alg: {"status": "interrupted", "steps": 10} for alg in ALGORITHMS}
  assert at_10["step"] == 10 and at_10["algorithms"] == list(ALGORITHMS)
  streams = {s["algorithm"]: s for s in at_10["streams"]}
  assert streams["naive_string_matcher"]["lengths"] == [20]
  assert streams["bfs"]["lengths"] == [4, 7]
  assert streams["insertion_sort"]["lengths"] == [4, 7]
  # One batch of every algorithm per step.
  assert [s["batches_drawn"] for s in at_10["streams"]] == [10, 10, 10]


def test_every_algorithm_learns_and_gets_its_result(runs):
  results, root = runs["results_a"], runs["a"]
  assert list(results) == list(ALGORITHMS)
  mean_val = None
  for alg, r in results.items():
    path = train.run_dir(root, "gforget_multitask", alg, 1) / train.RESULT_NAME
    on_disk = json.loads(path.read_text())
    assert on_disk["schema"] == train.RESULT_SCHEMA
    assert (on_disk["model"], on_disk["history"], on_disk["algorithm"]) == (
        "gforget_multitask", "gated", alg)
    assert on_disk["status"] == "done" and on_disk["steps"] == STEPS
    assert on_disk["multitask_algorithms"] == list(ALGORITHMS)
    assert on_disk["train_lengths"] == LENGTHS[alg]
    assert on_disk["lambda_gate"] == LAMBDAS[alg]
    assert on_disk["device"] == devices.describe_backend()
    assert 0.0 <= on_disk["test_score"] <= 1.0
    assert (path.parent / "config.gin").exists()
    curves = on_disk["curves"]
    assert curves["val"]["step"] == [0, 12, 24]
    assert len(curves["train"]["step"]) == len(curves["train"]["loss"]) == STEPS // 2
    # The algorithm's own hint loss on its fixed val samples went down.
    hint_loss = [np.mean(l) for l in curves["hint_step_loss"]["loss"]]
    assert hint_loss[-1] < hint_loss[0], (alg, hint_loss)
    # Eq. 6 with this algorithm's lambda, not another's.
    np.testing.assert_allclose(curves["train"]["gate_penalty"],
                               LAMBDAS[alg] * np.array(curves["train"]["gate_term"]),
                               rtol=1e-4, atol=1e-7)
    assert min(curves["train"]["gate_term"]) > 0.0
    scores = np.array(curves["val"]["score"])
    mean_val = scores if mean_val is None else mean_val + scores
  mean_val = mean_val / len(ALGORITHMS)
  # Selection by the MEAN val score; each file reports its score at that step.
  best = int(np.argmax(mean_val))
  for alg, r in results.items():
    assert r["val_best_step"] == r["curves"]["val"]["step"][best]
    assert r["val_best"] == r["curves"]["val"]["score"][best]
    assert r["multitask_val_mean_best"] == pytest.approx(mean_val[best])
  assert results["bfs"]["val_best"] > results["bfs"]["curves"]["val"]["score"][0] + 0.1
  assert not runs["ckpt"].exists()


def test_resume_is_exact(runs):
  """Stopped at 10 and resumed == uninterrupted, within 1e-6."""
  for alg in ALGORITHMS:
    ra, rb = runs["results_a"][alg], runs["results_b"][alg]
    for part, key in [("train", "loss"), ("train", "gate_term"), ("val", "score"),
                      ("val", "hidden_norm")]:
      np.testing.assert_allclose(ra["curves"][part][key], rb["curves"][part][key],
                                 rtol=1e-6, atol=1e-7)
    assert ra["test_score"] == rb["test_score"]
    assert ra["val_best_step"] == rb["val_best_step"]


def test_finished_job_is_not_run_again(runs, tmp_path):
  again = multitask.run_multitask_experiment(results_dir=str(runs["a"]), **TINY)
  assert again == json.loads(json.dumps(train.jsonable(runs["results_a"])))
  other = dict(TINY, algorithms=("bfs", "insertion_sort"))
  with pytest.raises(ValueError, match="other settings.*multitask_algorithms: result "
                     r"\['naive_string_matcher', 'bfs', 'insertion_sort'\], this run "
                     r"\['bfs', 'insertion_sort'\]"):
    multitask.run_multitask_experiment(results_dir=str(runs["a"]), **other)


def test_checkpoint_of_other_algorithms_is_refused(runs, tmp_path):
  ckpt = multitask.job_dir(tmp_path, "gforget_multitask", 1) / train.CHECKPOINT_NAME
  train.atomic_write_bytes(ckpt, pickle.dumps(runs["at_10"]))
  other = dict(TINY, algorithms=("bfs", "insertion_sort"))
  with pytest.raises(ValueError, match="checkpoint .* is for algorithms"):
    multitask.run_multitask_experiment(results_dir=str(tmp_path), **other)


def test_settings_never_leak_between_algorithms():
  """dm-clrs run.py gives every algorithm after a string matcher its 20 nodes."""
  algorithms = ["naive_string_matcher", "articulation_points", "bfs"]
  streams = multitask.make_train_streams(algorithms, seed=0, batch_size=4,
                                         train_lengths=(4, 7, 16))
  batches = {s.algorithm: [next(s) for _ in range(3)] for s in streams}
  nodes = {alg: [data.nb_nodes_of(b) for b in bs] for alg, bs in batches.items()}
  assert nodes == {"naive_string_matcher": [20, 20, 20],
                   "articulation_points": [4, 7, 16], "bfs": [4, 7, 16]}
  kwargs = {s.algorithm: dict(s._samplers[0]._kwargs) for s in streams}  # pylint: disable=protected-access
  assert kwargs["naive_string_matcher"] == {"length": 20, "length_needle": -8}
  full_p = [0.1 * (i + 1) for i in range(9)]
  np.testing.assert_allclose(kwargs["bfs"].pop("p"), full_p)
  np.testing.assert_allclose(kwargs["articulation_points"].pop("p"),
                             np.array(full_p) / 2)  # run.py halves p for it only
  assert kwargs["bfs"] == kwargs["articulation_points"] == {"length": 4}
  # A stream depends on (seed, algorithm) only, not on its neighbours or order.
  alone = multitask.make_train_streams(["bfs"], seed=0, batch_size=4,
                                       train_lengths=(4, 7, 16))[0]
  assert alone.seed == streams[2].seed != streams[1].seed
  for x in batches["bfs"]:
    y = next(alone)
    for p, q in zip(jax.tree_util.tree_leaves(y), jax.tree_util.tree_leaves(x)):
      np.testing.assert_array_equal(p, q)


def test_non_finite_loss_of_one_algorithm_ends_the_job_as_diverged(tmp_path, monkeypatch):
  real = model_lib.compute_losses

  def poisoned(feedback, out, lambda_gate):  # NaN for bfs (output 'pi') only
    losses = real(feedback, out, lambda_gate)
    if any(o.name == "pi" for o in feedback.outputs):
      losses = losses._replace(total=losses.total * np.nan)
    return losses

  monkeypatch.setattr(model_lib, "compute_losses", poisoned)
  results = multitask.run_multitask_experiment(
      algorithms=["minimum", "bfs"], seed=0, model="baseline_multitask",
      results_dir=str(tmp_path), train_steps=4, hidden_size=8, nb_triplet_fts=4,
      batch_size=4, train_lengths=[4], eval_every_steps=2, log_every_steps=1,
      checkpoint_every_steps=1, val_max_samples=4, test_max_samples=4,
      progress=False)
  for alg in ("minimum", "bfs"):
    on_disk = json.loads((train.run_dir(tmp_path, "baseline_multitask", alg, 0)
                          / train.RESULT_NAME).read_text())
    assert on_disk == json.loads(json.dumps(train.jsonable(results[alg])))
    assert on_disk["status"] == "diverged" and on_disk["diverged_step"] == 1
    # Tested on its best (step 0) parameters, as run.py never drops a seed.
    assert on_disk["steps"] == 1 and on_disk["test_score"] is not None
  assert not (multitask.job_dir(tmp_path, "baseline_multitask", 0)
              / train.CHECKPOINT_NAME).exists()


@pytest.mark.parametrize("kwargs, match", [
    (dict(algorithms=["bfs", "bogo_sort"]), "unknown algorithm 'bogo_sort'"),
    (dict(algorithms=[]), "algorithms is empty"),
    (dict(algorithms=["bfs", "dfs", "bfs"]), r"duplicate algorithms \['bfs'\]"),
    (dict(algorithms="bfs"), "list of names"),
    (dict(model="forget"), "'forget_multitask'"),
    (dict(model="transformer"), "unknown multi-task model"),
    (dict(model="gforget_multitask", lambda_gate={"bfs": 0.1}), "calibration"),
    (dict(train_lengths={"bfs": [4]}), "no entry for 'dfs'"),
    (dict(algorithms=["kmp_matcher"], train_lengths=[4, 7]), "needs >= 17"),
    (dict(hidden_size=0), "hidden_size must be > 0"),
])
def test_bad_input_is_one_clear_error(tmp_path, kwargs, match):
  args = dict(algorithms=["bfs", "dfs"], seed=0, model="forget_multitask",
              results_dir=str(tmp_path))
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    multitask.run_multitask_experiment(**args)
  assert not any(tmp_path.iterdir())


def _bound_keys(gin_text, configurable):
  return re.findall(rf"^{configurable}\.(\w+)\s*=", gin_text, flags=re.M)


def test_multitask_gin_mirrors_the_single_task_protocol():
  config_lib.parse_gin(["gin/multitask.gin"], [])
  assert gin.query_parameter("run_multitask_experiment.model") == "forget_multitask"
  assert sorted(gin.query_parameter("%ALGORITHMS")) == sorted(data.ALGORITHMS)
  base = (config_lib.GIN_DIR / "base.gin").read_text()
  mine = (config_lib.GIN_DIR / "multitask.gin").read_text()
  assert re.search(r"^run_multitask_experiment\.algorithms = %ALGORITHMS$", mine, re.M)
  protocol = _bound_keys(base, "run_experiment")
  assert len(protocol) >= 10 and set(protocol) <= set(_bound_keys(mine, "run_multitask_experiment"))
  for key in protocol:
    assert (gin.query_parameter(f"run_multitask_experiment.{key}")
            == gin.query_parameter(f"run_experiment.{key}")), key


class _Killed(Exception):
  pass


def test_run_multitask_from_gin_survives_a_kill_during_testing(tmp_path, monkeypatch):
  """gin/multitask.gin runs; a job killed while testing keeps what it tested."""
  overrides = ["ALGORITHMS=['minimum', 'bfs']"] + [
      f"run_multitask_experiment.{k}={v}" for k, v in [
          ("hidden_size", 8), ("nb_triplet_fts", 4), ("batch_size", 4),
          ("train_lengths", [4]), ("train_steps", 2), ("eval_every_steps", 2),
          ("log_every_steps", 1), ("checkpoint_every_steps", 1),
          ("val_max_samples", 4), ("test_max_samples", 4), ("progress", False)]]
  real = train.evaluate_split
  tested = []

  def evaluate_split(net, params, split, algorithm_index, *args, with_hints, **kwargs):
    if not with_hints:
      tested.append(algorithm_index)
      if algorithm_index == 1 and tested.count(1) == 1:
        raise _Killed()
    return real(net, params, split, algorithm_index, *args, with_hints=with_hints,
                **kwargs)

  monkeypatch.setattr(train, "evaluate_split", evaluate_split)
  with pytest.raises(_Killed):
    multitask.run_multitask_from_gin(["gin/multitask.gin"], overrides, seed=2,
                                     results_dir=str(tmp_path))
  ckpt = _load(multitask.job_dir(tmp_path, "forget_multitask", 2) / train.CHECKPOINT_NAME)
  assert ckpt["step"] == 2 and list(ckpt["test_results"]) == ["minimum"]
  paths = multitask.run_multitask_from_gin(["gin/multitask.gin"], overrides, seed=2,
                                           results_dir=str(tmp_path))
  assert tested == [0, 1, 1]  # minimum is not tested again
  assert paths == [str(tmp_path / "forget_multitask" / alg / "seed2" / "result.json")
                   for alg in ("minimum", "bfs")]
  for path in paths:
    result = json.loads(open(path).read())
    assert result["steps"] == 2 and result["multitask_algorithms"] == ["minimum", "bfs"]
    assert "run_multitask_experiment.model = 'forget_multitask'" in result["gin_config"]
    assert max(result["curves"]["val"]["hidden_norm"]) == 0.0  # ForgetNet, Eq. 3
  assert json.loads(open(paths[0]).read())["test_score"] == ckpt["test_results"]["minimum"]["score"]
  assert not (multitask.job_dir(tmp_path, "forget_multitask", 2) / train.CHECKPOINT_NAME).exists()


def test_cli_as_module_parses_gin_unambiguously(tmp_path, data_cache_dir):
  """`python -m nar_markov.multitask` must not register its configurable twice
  (__main__.* and nar_markov.multitask.*): gin would call every binding ambiguous."""
  import os
  import subprocess
  import sys
  params = ["run_multitask_experiment.algorithms=['bfs']",
            "run_multitask_experiment.hidden_size=8",
            "run_multitask_experiment.nb_triplet_fts=2",
            "run_multitask_experiment.batch_size=4",
            "run_multitask_experiment.train_lengths=[4]",
            "run_multitask_experiment.train_steps=2",
            "run_multitask_experiment.eval_every_steps=2",
            "run_multitask_experiment.val_max_samples=4",
            "run_multitask_experiment.test_max_samples=4"]
  cmd = [sys.executable, "-m", "nar_markov.multitask", "--gin", "gin/multitask.gin",
         "--seed", "0", "--results", str(tmp_path)]
  for p in params:
    cmd += ["--gin_param", p]
  env = dict(os.environ, NAR_MARKOV_CACHE=str(data_cache_dir),
             NAR_MARKOV_JAX_CACHE=str(data_cache_dir / "jax"))
  proc = subprocess.run(cmd, cwd=str(pathlib.Path(__file__).resolve().parents[1]),
                        capture_output=True, text=True, env=env, timeout=900, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert (tmp_path / "forget_multitask" / "bfs" / "seed0" / "result.json").exists()
