"""One processor for many algorithms (paper App. "Multi-task experiments"), in the one loop.

Single-task is multi-task with a list of one (dm-clrs run.py); the multi-task rule is
run.py's: one clipped Adam update per algorithm per step, other algorithms' modules untouched.
"""

import json
import re

import gin
import jax
import numpy as np
import optax
import pytest

from nar_markov.config import gin_files as config_lib
from nar_markov.config import netconfig
from nar_markov.config import runspec
from nar_markov.data import batching
from nar_markov.data import preprocessing
from nar_markov.data import train_stream
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib
from nar_markov.store import runs as runs_lib
from nar_markov.store import state_files
from nar_markov.store import util
from nar_markov.training import devices
from nar_markov.training import experiment

import conftest
import flat

# The module's runs of one net and optimizer share one learner (conftest.reused_learners;
# the poisoned compute_losses below is part of its key; evaluate_split, which a test
# replaces, is no traced code).
# The module fixture `runs` trains three 24-step runs of 3 algorithms inside the first test
# that asks for it (48 s quiet, the timeout counting it): under a loaded CI it passed the
# 300 s per-test limit (2026-12-02, six errors at setup), so the module has 600 s.
pytestmark = [pytest.mark.usefixtures("reuse_learners"), pytest.mark.timeout(600)]

ALGORITHMS = ("naive_string_matcher", "bfs", "insertion_sort")
LAMBDAS = {"naive_string_matcher": 0.01, "bfs": 0.05, "insertion_sort": 0.0}
# The string matcher trains at (16 * 5) // 4 = 20 nodes; a shared [4, 7] would
# give it 8 nodes, too few for run.py's needle of up to 8 characters.
LENGTHS = {"naive_string_matcher": [16], "bfs": [4, 7], "insertion_sort": [4, 7]}
STEPS = 24
TINY = dict(algorithm=ALGORITHMS, seed=1, model="gforget_multitask",
            train_steps=STEPS, lambda_gate=LAMBDAS, train_lengths=LENGTHS,
            hidden_size=16, nb_triplet_fts=4, batch_size=8, learning_rate=3e-3,
            eval_every_steps=12, log_every_steps=2, checkpoint_every_steps=6,
            val_max_samples=8, test_max_samples=8,
            # The same val samples at every evaluation, so that the hint loss
            # curve below compares like with like.
            validation_mode="fixed")
ONE = dict(hidden_size=8, nb_triplet_fts=4, batch_size=4, train_lengths=[4, 7],
           train_steps=6, eval_every_steps=3, log_every_steps=1, checkpoint_every_steps=3,
           val_max_samples=4, test_max_samples=4)


@pytest.fixture(autouse=True)
def _cache(monkeypatch, data_cache_dir):
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))


def _load(path):
  return state_files.read_state(path)


def _job_ckpt(root, model, seed):
  return runs_lib.multitask_job_dir(root, model, seed) / runs_lib.CHECKPOINT_NAME


def _adam_count(opt_leaves):
  """Adam's update count in a checkpoint's optimizer-state leaves: clip (no
  leaves), scale_by_adam (count, mu..., nu...), scale_by_schedule (count)."""
  adam, schedule = int(opt_leaves[0]), int(opt_leaves[-1])
  assert adam == schedule
  return adam


def _seed_1(results):
  """{algorithm: result} of TINY's seed (1), from run_experiment's {algorithm: {seed: result}}."""
  assert all(list(by_seed) == [1] for by_seed in results.values()), results
  return {a: by_seed[1] for a, by_seed in results.items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_cache_dir):
  """Run a: stopped at step 10, then resumed to the end; run b: in one go."""
  a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
  ckpt = _job_ckpt(a, "gforget_multitask", 1)
  with pytest.MonkeyPatch.context() as mp, conftest.reused_learners():
    mp.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))
    stopped = _seed_1(flat.run(results_dir=str(a), stop_after_steps=10, **TINY))
    at_10 = _load(ckpt)
    results_a = _seed_1(flat.run(results_dir=str(a), **TINY))
    results_b = _seed_1(flat.run(results_dir=str(b), **TINY))
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
    for name in preprocessing.get_spec(alg):
      assert any(m.startswith(f"algo_{k}_{name}_") for m in per_algorithm), (alg, name)
  # bfs's pointer decoder exists for bfs (index 1) only.
  assert "algo_1_pi_dec_linear" in per_algorithm
  assert not any(m.startswith(("algo_0_pi_", "algo_2_pi_")) for m in per_algorithm)


def test_one_update_per_algorithm_per_step(runs):
  """run.py: 10 steps of 3 algorithms are 30 Adam updates, one batch of each per step."""
  stopped, at_10 = runs["stopped"], runs["at_10"]
  assert stopped == {alg: {"status": "interrupted", "steps": 10} for alg in ALGORITHMS}
  assert at_10["step"] == 10 and at_10["algorithms"] == list(ALGORITHMS)
  assert _adam_count(at_10["opt_state"]) == 30
  streams = {s["algorithm"]: s for s in at_10["streams"]}
  assert streams["naive_string_matcher"]["lengths"] == [20]
  assert streams["bfs"]["lengths"] == [4, 7]
  assert streams["insertion_sort"]["lengths"] == [4, 7]
  assert [s["batches_drawn"] for s in at_10["streams"]] == [10, 10, 10]


def test_summed_update_is_one_update_per_step(tmp_path):
  flat.run(algorithm=["minimum", "bfs"], seed=0, model="forget_multitask",
                       results_dir=str(tmp_path), multitask_update="summed",
                       stop_after_steps=4, **ONE)
  state = _load(_job_ckpt(tmp_path, "forget_multitask", 0))
  assert state["step"] == 4 and _adam_count(state["opt_state"]) == 4
  assert state["definitions"][0]["settings"]["multitask_update"] == "summed"


def test_an_update_leaves_the_other_algorithms_modules_untouched():
  """dm-clrs filter_null_grads: bfs's update moves the processor and bfs's own
  encoders/decoders; minimum's, and their Adam moments, keep their values."""
  algorithms = ["minimum", "bfs"]
  streams = [train_stream.TrainStream(a, seed=0, batch_size=4, lengths=(4,)) for a in algorithms]
  batches = [next(s) for s in streams]
  config = netconfig.NetConfig(hidden_size=8, history="none", nb_triplet_fts=4)
  net = learner.Learner([s.spec for s in streams], [model_lib.nb_dims_of(b) for b in batches],
                    config, learner.make_optimizer(1e-2, 10, 1.0))
  params, opt = net.init_state(0, [b.features for b in batches])
  # One update of minimum first, so that its Adam moments are not zero.
  params, opt, _ = net.train_step(params, opt, batches[0], np.float32(0), 0,
                                  net.step_key(0, 0))
  before_p, before_o = jax.device_get((params, opt))
  params, opt, _ = net.train_step(params, opt, batches[1], np.float32(0), 1,
                                  net.step_key(0, 1))
  after_p, after_o = jax.device_get((params, opt))
  moved = {m: any(not np.array_equal(before_p[m][k], after_p[m][k]) for k in after_p[m])
           for m in after_p}
  assert moved and all(moved[m] == ("algo_0_" not in m) for m in moved
                       if "algo_" in m or "processor" in m), moved
  assert any(v for m, v in moved.items() if "processor" in m)
  adam = [s for s in before_o if isinstance(s, optax.ScaleByAdamState)][0]
  adam_after = [s for s in after_o if isinstance(s, optax.ScaleByAdamState)][0]
  for m in after_p:
    if "algo_0_" in m:
      for k in after_p[m]:
        np.testing.assert_array_equal(adam.mu[m][k], adam_after.mu[m][k])
        np.testing.assert_array_equal(adam.nu[m][k], adam_after.nu[m][k])
  assert int(adam_after.count) == int(adam.count) + 1  # global, as in dm-clrs


def test_single_task_is_multi_task_with_a_list_of_one(tmp_path):
  """The same numbers: curves, best step, test score (one loop)."""
  single = flat.run_one(algorithm="bfs", seed=2, model="forget",
                        results_dir=str(tmp_path), **ONE)
  multi = flat.run(algorithm=["bfs"], seed=[2], model="forget_multitask",
                   results_dir=str(tmp_path), **ONE)["bfs"][2]
  assert single["curves"] == multi["curves"]
  for key in ("test_score", "test_scores", "val_best", "val_best_step", "steps", "settings"):
    if key == "settings":
      assert {k: v for k, v in multi[key].items() if not k.startswith("multitask")} == \
          single[key]
    else:
      assert single[key] == multi[key], key
  assert multi["multitask_algorithms"] == ["bfs"]
  assert multi["multitask_update"] == "per_algorithm"
  assert "multitask_algorithms" not in single


def test_every_algorithm_learns_and_gets_its_result(runs):
  results, root = runs["results_a"], runs["a"]
  assert list(results) == list(ALGORITHMS)
  mean_val = None
  for alg, r in results.items():
    path = runs_lib.run_dir(root, "gforget_multitask", alg, 1) / runs_lib.RESULT_NAME
    on_disk = json.loads(path.read_text())
    assert on_disk["schema"] == runs_lib.RESULT_SCHEMA
    assert (on_disk["model"], on_disk["history"], on_disk["algorithm"]) == (
        "gforget_multitask", "gated", alg)
    assert on_disk["status"] == "done" and on_disk["steps"] == STEPS
    assert on_disk["multitask_algorithms"] == list(ALGORITHMS)
    # As a single-task run records them: the string matcher's rule applied.
    assert on_disk["train_lengths"] == ([20] if alg == "naive_string_matcher" else LENGTHS[alg])
    assert on_disk["lambda_gate"] == LAMBDAS[alg]
    assert on_disk["device"] == devices.describe_backend()
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


def test_finished_job_is_not_run_again(runs):
  again = _seed_1(flat.run(results_dir=str(runs["a"]), **TINY))
  assert again == json.loads(json.dumps(util.jsonable(runs["results_a"])))
  other = dict(TINY, algorithm=("bfs", "insertion_sort"))
  with pytest.raises(ValueError, match="other settings.*multitask_algorithms: result "
                     r"\['naive_string_matcher', 'bfs', 'insertion_sort'\], this run "
                     r"\['bfs', 'insertion_sort'\]"):
    flat.run(results_dir=str(runs["a"]), **other)


def test_checkpoint_of_other_algorithms_is_refused(runs, tmp_path):
  ckpt = _job_ckpt(tmp_path, "gforget_multitask", 1)
  state_files.write_state(ckpt, runs["at_10"])
  other = dict(TINY, algorithm=("bfs", "insertion_sort"))
  with pytest.raises(ValueError, match="checkpoint .* is for algorithms"):
    flat.run(results_dir=str(tmp_path), **other)


def test_settings_never_leak_between_algorithms():
  """dm-clrs run.py gives every algorithm after a string matcher its 20 nodes."""
  algorithms = ["naive_string_matcher", "articulation_points", "bfs"]
  streams = [train_stream.TrainStream(a, seed=train_stream.stream_seed(0, a, algorithms),
                                      batch_size=4,
                                      lengths=runspec.resolve_train_lengths((4, 7, 16), a))
             for a in algorithms]
  batches = {s.algorithm: [next(s) for _ in range(3)] for s in streams}
  nodes = {alg: [batching.nb_nodes_of(b) for b in bs] for alg, bs in batches.items()}
  assert nodes == {"naive_string_matcher": [20, 20, 20],
                   "articulation_points": [4, 7, 16], "bfs": [4, 7, 16]}
  kwargs = {s.algorithm: dict(s._samplers[0]._kwargs) for s in streams}  # pylint: disable=protected-access
  assert kwargs["naive_string_matcher"] == {"length": 20, "length_needle": -8}
  full_p = [0.1 * (i + 1) for i in range(9)]
  np.testing.assert_allclose(kwargs["bfs"].pop("p"), full_p)
  np.testing.assert_allclose(kwargs["articulation_points"].pop("p"),
                             np.array(full_p) / 2)  # run.py halves p for it only
  assert kwargs["bfs"] == kwargs["articulation_points"] == {"length": 4}
  # A stream depends on (seed, algorithm) only, not on its neighbours or order;
  # alone (single-task), an algorithm's stream is seeded with the run's seed.
  assert train_stream.stream_seed(0, "bfs", ["bfs", "dfs"]) == train_stream.stream_seed(
      0, "bfs", ["dfs", "minimum", "bfs"]) != train_stream.stream_seed(0, "dfs", ["bfs", "dfs"])
  assert train_stream.stream_seed(7, "bfs", ["bfs"]) == 7


def test_non_finite_loss_of_one_algorithm_ends_the_job_as_diverged(tmp_path, monkeypatch):
  real = model_lib.compute_losses

  def poisoned(feedback, out, lambda_gate):  # NaN for bfs (output 'pi') only
    losses = real(feedback, out, lambda_gate)
    if any(o.name == "pi" for o in feedback.outputs):
      losses = losses._replace(total=losses.total * np.nan)
    return losses

  monkeypatch.setattr(model_lib, "compute_losses", poisoned)
  results = flat.run(
      algorithm=["minimum", "bfs"], seed=0, model="baseline_multitask",
      results_dir=str(tmp_path), train_steps=4, hidden_size=8, nb_triplet_fts=4,
      batch_size=4, train_lengths=[4], eval_every_steps=2, log_every_steps=1,
      checkpoint_every_steps=1, val_max_samples=4, test_max_samples=4)
  for alg in ("minimum", "bfs"):
    on_disk = json.loads((runs_lib.run_dir(tmp_path, "baseline_multitask", alg, 0)
                          / runs_lib.RESULT_NAME).read_text())
    assert on_disk == json.loads(json.dumps(util.jsonable(results[alg][0])))
    assert on_disk["status"] == "diverged" and on_disk["diverged_step"] == 1
    # Tested on its best (step 0) parameters, as run.py never drops a seed.
    assert on_disk["steps"] == 1 and on_disk["test_score"] is not None
  assert not _job_ckpt(tmp_path, "baseline_multitask", 0).exists()


@pytest.mark.parametrize("kwargs, match", [
    (dict(algorithm=["bfs", "bogo_sort"]), "unknown algorithm 'bogo_sort'"),
    (dict(algorithm=[]), "empty list"),
    (dict(algorithm=["bfs", "dfs", "bfs"]), r"duplicate algorithms \['bfs'\]"),
    (dict(model="forget"), "'forget_multitask'"),
    (dict(model="Forget Net"), "must be a label"),
    (dict(model="gforget_multitask"), "lambda_gate bound by hand"),
    (dict(model="gforget_multitask", lambda_gate={"bfs": 0.1}), "no value for 'dfs'"),
    (dict(train_lengths={"bfs": [4]}), "no entry for 'dfs'"),
    (dict(algorithm=["kmp_matcher", "bfs"], train_lengths=[4, 7]), "needs >= 17"),
    (dict(hidden_size=0), "hidden_size must be > 0"),
    (dict(multitask_update="mean"), "unknown multitask_update 'mean'"),
])
def test_bad_input_is_one_clear_error(tmp_path, kwargs, match):
  args = dict(algorithm=["bfs", "dfs"], seed=0, model="forget_multitask",
              results_dir=str(tmp_path))
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    flat.run(**args)
  assert not any(tmp_path.iterdir())


def test_multitask_gin_is_base_gin_plus_the_label():
  """No hand-copied protocol: multi-task reads base.gin's Protocol and NetConfig."""
  config_lib.parse_gin(["gin/multitask.gin"], [])
  assert gin.query_parameter("run_experiment.model") == "forget_multitask"
  assert gin.query_parameter("%MULTITASK") is True
  assert gin.query_parameter("Protocol.multitask_update") == "per_algorithm"
  mine = (config_lib.GIN_DIR / "multitask.gin").read_text()
  assert set(re.findall(r"^(\w+\.\w+)\s*=", mine, flags=re.M)) == {
      "run_experiment.model", "NetConfig.history", "Protocol.multitask_update"}


class _Killed(Exception):
  pass


def test_a_kill_during_testing_keeps_the_algorithms_tested(tmp_path, monkeypatch):
  params = ["ALGORITHMS=['minimum', 'bfs']"] + [
      f"{flat.gin_key(k)}={v}" for k, v in [
          ("hidden_size", 8), ("nb_triplet_fts", 4), ("batch_size", 4),
          ("train_lengths", [4]), ("train_steps", 2), ("eval_every_steps", 2),
          ("log_every_steps", 1), ("checkpoint_every_steps", 1),
          ("val_max_samples", 4), ("test_max_samples", 4)]]
  real = learner.evaluate_split
  tested = []

  def evaluate_split(net, params, split, algorithm_index, *args, with_hints, **kwargs):
    if not with_hints:
      tested.append(algorithm_index)
      if algorithm_index == 1 and tested.count(1) == 1:
        raise _Killed()
    return real(net, params, split, algorithm_index, *args, with_hints=with_hints,
                **kwargs)

  monkeypatch.setattr(learner, "evaluate_split", evaluate_split)
  job = dict(algorithms=["minimum", "bfs"], seeds=[2], results_dir=str(tmp_path),
             multitask=True)
  with pytest.raises(_Killed):
    experiment.run_from_gin(["gin/multitask.gin"], params, **job)
  ckpt = _load(_job_ckpt(tmp_path, "forget_multitask", 2))
  assert ckpt["step"] == 2 and list(ckpt["test_results"]) == ["minimum"]
  paths = experiment.run_from_gin(["gin/multitask.gin"], params, **job)
  # minimum is not tested again; then each other selection rule at its own step, once
  selection = json.loads(open(paths[0]).read())["selection"]
  other_steps = {selection[rule]["step"] for rule in ("last_best", "final")} - {None,
      selection["first_best"]["step"]}
  assert tested == [0, 1, 1] + [0, 1] * len(other_steps)
  assert paths == [str(tmp_path / "forget_multitask" / alg / "seed2" / "result.json")
                   for alg in ("minimum", "bfs")]
  for path in paths:
    result = json.loads(open(path).read())
    assert result["steps"] == 2 and result["multitask_algorithms"] == ["minimum", "bfs"]
    assert "run_experiment.model = 'forget_multitask'" in result["gin_config"]
    assert max(result["curves"]["val"]["hidden_norm"]) == 0.0  # ForgetNet, Eq. 3
  assert json.loads(open(paths[0]).read())["test_score"] == ckpt["test_results"]["minimum"]["score"]
  assert not _job_ckpt(tmp_path, "forget_multitask", 2).exists()
