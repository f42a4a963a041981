"""K seeds per job (run_experiment's K-seed mode, SEEDS_PER_JOB in the sweep):
the same per-seed results as separate runs, resume, divergence, bad input,
and how the sweep packs runs into K-seed jobs.
"""

import json
import os
import pathlib
import pickle

import gin
import jax
import numpy as np
import optax
import pytest

from launch import jobs as jobs_lib
from launch import sweep
from launch import sweep_spec
from nar_markov.config import netconfig
from nar_markov.data import batching
from nar_markov.data import preprocessing
from nar_markov.data import train_stream
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib
from nar_markov.store import runs as runs_lib
from nar_markov.store import state_files
from nar_markov.store import util
from nar_markov.training import experiment

import conftest
import flat

# insertion_sort: its permutation pointers draw Gumbel noise from the step rng
# in training, so a wrong per-seed rng would show; a gated model so that the
# gate penalty (lambda) is in the losses too.
ALG, MODEL, LAM = "insertion_sort", "gforget", 0.05
# impl='reference': dm-clrs's modules, whose round-off in the batched kernels
# happens not to flip any argmax of this near-chance net, so scores compare
# exactly; the fast net's vmapped step is checked against its plain step below.
TINY = dict(model=MODEL, lambda_gate=LAM, hidden_size=8, nb_triplet_fts=4, batch_size=4,
            impl="reference", processor="triplet_mpnn",  # gin/base.gin's, for the sweeps
            train_lengths=(4, 5), train_steps=12, eval_every_steps=6, log_every_steps=3,
            checkpoint_every_steps=3, val_max_samples=8, test_max_samples=8)
SEEDS = [0, 1, 2]
# Timing and environment fields differ between any two runs.
UNCOMPARED = {"wall_time_s", "train_time_s", "eval_time_s", "steps_per_s", "versions"}


@pytest.fixture(autouse=True)
def _cache(monkeypatch, data_cache_dir):
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))
  # Bindings left by an earlier gin parse would apply to run_experiment's
  # unpassed arguments (and its gin_config field): start each test without.
  gin.clear_config()


@pytest.fixture(scope="module")
def separate(tmp_path_factory, data_cache_dir):
  """The reference: each seed of SEEDS trained by its own run_experiment call."""
  old = os.environ.get("NAR_MARKOV_CACHE")
  os.environ["NAR_MARKOV_CACHE"] = str(data_cache_dir)
  try:
    root = tmp_path_factory.mktemp("separate")
    gin.clear_config()
    with conftest.reused_learners():
      return {s: flat.run_one(algorithm=ALG, seed=s, results_dir=str(root), **TINY)
              for s in SEEDS}
  finally:
    if old is None:
      del os.environ["NAR_MARKOV_CACHE"]
    else:
      os.environ["NAR_MARKOV_CACHE"] = old


def assert_same_result(got, want, rtol=1e-4, later_rtol=1e-2):
  """Equal result dicts but for timings: numbers within tolerances, the rest exactly.

  Not bit-equal: XLA's batched (vmapped) kernels sum in another order, and Adam
  amplifies that round-off step by step (its update is ~lr * sign(gradient), which
  round-off flips for a near-zero gradient).  So the first log window of each
  train curve and the step-0 validation (before any update) are held to `rtol`,
  every later window and validation to `later_rtol`.  Measured (seed 2 here,
  Intel Xeon with AVX-512): loss windows off by 4e-8, 1e-5, 1e-5, 7e-4 and
  output_loss up to 1.1e-3; validation hidden_norm 3.4e-3 at step 6 and 1.3e-2 at
  step 12 (a norm of ~0.03 that a few flipped Adam steps move), so hidden_norm
  after step 0 is held to HIDDEN_NORM_RTOL.  On an AMD EPYC the same seeds stayed
  within 2e-5.  A wrong seed, rng, batch or padding is off by > 1e-2 from the
  first window on (an rng offset by one step: 11 %).  Test scores are a count of
  exact predictions: the same round-off flips the argmax of a few near-tied
  pointer logits of this untrained tiny net (seen: 2 of 512, 0.0039; on another
  CPU a validation score 1 of 40 off, 0.025), so scores agree within SCORE_ATOL.
  """
  assert set(got) == set(want)
  for key in sorted(set(want) - UNCOMPARED):
    if key in ("test_score", "test_scores", "selection", "val_best"):
      _assert_close(got[key], want[key], 0.0, path=key, atol=SCORE_ATOL)
    elif key == "curves":
      assert set(got[key]) == set(want[key]), key
      for part, curve in want[key].items():
        assert set(got[key][part]) == set(curve), (key, part)
        for k, w in curve.items():
          g, path = got[key][part][k], f"{key}.{part}.{k}"
          if part == "val" and k == "score":
            _assert_close(g, w, 0.0, path=path, atol=SCORE_ATOL)
            continue
          late = HIDDEN_NORM_RTOL if (part, k) == ("val", "hidden_norm") else later_rtol
          assert isinstance(g, list) and len(g) == len(w), path
          _assert_close(g[:1], w[:1], rtol, path=path)
          _assert_close(g[1:], w[1:], late, path=path + "[1:]")
    else:
      _assert_close(got[key], want[key], rtol, path=key)


# A few flipped predictions of a test or validation split (see assert_same_result).
SCORE_ATOL = 0.05
# Validation hidden_norm after the first update (see assert_same_result).
HIDDEN_NORM_RTOL = 5e-2


def _assert_close(got, want, rtol, path, atol=1e-7):
  if isinstance(want, dict):
    assert isinstance(got, dict) and set(got) == set(want), path
    for k in want:
      _assert_close(got[k], want[k], rtol, f"{path}.{k}", atol)
  elif isinstance(want, (list, tuple)):
    assert isinstance(got, (list, tuple)) and len(got) == len(want), path
    for i, (g, w) in enumerate(zip(got, want)):
      _assert_close(g, w, rtol, f"{path}[{i}]", atol)
  elif isinstance(want, float) and not isinstance(want, bool):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=path)
  else:
    assert got == want, (path, got, want)


def _on_disk(root, seed):
  return json.loads((runs_lib.run_dir(root, MODEL, ALG, seed) / runs_lib.RESULT_NAME).read_text())


@pytest.mark.usefixtures("reuse_learners")
def test_k_seeds_in_one_job_equal_separate_runs(tmp_path, separate):
  # Through the sweep's entry point (gin), so the job path is what is tested.
  params = flat.gin_params(**{k: v for k, v in TINY.items() if k != "model"})
  paths = experiment.run_from_gin(
      ["gin/gforget.gin"], params, algorithms=[ALG], seeds=SEEDS, results_dir=str(tmp_path))
  assert paths == [str(runs_lib.run_dir(tmp_path, MODEL, ALG, s) / "result.json") for s in SEEDS]
  for s in SEEDS:
    got = _on_disk(tmp_path, s)
    assert got["status"] == "done" and got["steps"] == 12 and got["seed"] == s
    assert not (runs_lib.run_dir(tmp_path, MODEL, ALG, s) / "checkpoint.npz").exists()
    want = dict(separate[s], gin_config=got["gin_config"])  # gin vs kwargs
    assert_same_result(got, want)
  # The comparison has teeth: the seeds' runs differ from each other.
  losses = [separate[s]["curves"]["train"]["loss"] for s in SEEDS]
  assert not np.allclose(losses[0], losses[1], rtol=1e-3)
  assert not np.allclose(losses[1], losses[2], rtol=1e-3)


@pytest.mark.usefixtures("reuse_learners")
def test_k_seed_resume_and_skip(tmp_path, separate):
  """Killed after 6 steps (checkpoints at 3 and 6), resumed in K mode: the
  same results; a seed already done is skipped, not retrained.  (6: a log
  and eval step, so the curves have the windows of an uninterrupted run.)"""
  first = flat.run(algorithm=ALG, seed=[1, 2], results_dir=str(tmp_path),
                   stop_after_steps=6, **TINY)
  assert first == {ALG: {s: {"status": "interrupted", "steps": 6} for s in (1, 2)}}
  for s in (1, 2):
    assert state_files.read_state(runs_lib.run_dir(tmp_path, MODEL, ALG, s)
                                  / "checkpoint.npz")["step"] == 6
  # Seed 0 done already (its separate run's result, with these settings): its
  # result.json is returned as it is.
  d0 = runs_lib.run_dir(tmp_path, MODEL, ALG, 0)
  d0.mkdir(parents=True)
  done = json.loads(json.dumps(util.jsonable(dict(separate[0], marker=1))))
  (d0 / "result.json").write_text(json.dumps(done))
  conftest.write_run_files(d0)  # done: replayable and re-scorable (nar_markov.store.runs)
  results = flat.run(algorithm=ALG, seed=[0, 1, 2], results_dir=str(tmp_path),
                     **TINY)[ALG]
  assert list(results) == [0, 1, 2] and results[0] == done
  for s in (1, 2):
    assert_same_result(results[s], separate[s])


@pytest.mark.usefixtures("reuse_learners")
def test_checkpoints_at_different_steps_train_group_by_group(tmp_path, separate):
  # Seed 2 ran alone for 3 steps; seeds 0 and 1 have not started.
  flat.run(algorithm=ALG, seed=2, results_dir=str(tmp_path), stop_after_steps=3, **TINY)
  results = flat.run(algorithm=ALG, seed=SEEDS, results_dir=str(tmp_path), **TINY)[ALG]
  assert list(results) == SEEDS
  for s, got in results.items():
    assert_same_result(got, separate[s])


def test_a_diverged_seed_ends_alone(tmp_path, separate, monkeypatch):
  """Seed 1's parameters start as NaN: it ends 'diverged' at step 1, as a
  separate run would, and seeds 0 and 2 train on to the same results."""
  real_init_state = learner.Learner.init_state

  def init_state(self, seed, features_list):
    params, opt_state = real_init_state(self, seed, features_list)
    if seed == 1:
      params = jax.tree_util.tree_map(lambda x: x * np.nan, params)
    return params, opt_state

  monkeypatch.setattr(learner.Learner, "init_state", init_state)
  results = flat.run(algorithm=ALG, seed=SEEDS, results_dir=str(tmp_path), **TINY)[ALG]
  assert results[1]["status"] == "diverged"
  assert results[1]["diverged_step"] == 1 and results[1]["steps"] == 1
  assert results[1]["test_score"] is not None  # tested on its best (step 0) parameters
  assert _on_disk(tmp_path, 1)["status"] == "diverged"
  for s in (0, 2):
    assert_same_result(results[s], separate[s])


def test_vmapped_step_equals_single_steps_on_time_padded_batches():
  """The step itself: K = 2 in one vmapped call, one batch padded by 3 extra
  time steps, equals each seed's `Learner.train_step` on its own batch.

  With plain SGD: Adam's first update is ~lr * sign(gradient), which round-off
  flips for a near-zero gradient; SGD's is the gradient itself."""
  spec = preprocessing.get_spec("bfs")
  batches = [next(train_stream.TrainStream("bfs", seed=s, batch_size=4, lengths=(5,)))
             for s in (0, 1)]
  T = batches[1].features.hints[0].data.shape[0]
  stacked, max_length = learner.stack_batches([batches[0], batching.pad_time(batches[1], T + 3)])
  assert stacked.features.hints[0].data.shape[:2] == (2, T + 3)
  assert max_length == max(int(b.features.lengths.max()) for b in batches)
  config = netconfig.NetConfig(hidden_size=8, history="full", nb_triplet_fts=4)
  optimizer = optax.sgd(1.0)
  net = learner.Learner([spec], [model_lib.nb_dims_of(batches[0])], config, optimizer)
  params = [net.init(jax.random.PRNGKey(s), [batches[0].features]) for s in (0, 1)]
  opt = [optimizer.init(p) for p in params]
  keys = [jax.random.fold_in(jax.random.PRNGKey(s + 1), 7) for s in (0, 1)]
  np.testing.assert_array_equal(net.step_keys([0, 1], 7), np.stack(keys))
  for s in (0, 1):
    np.testing.assert_array_equal(net.step_key(s, 7), keys[s])
  vstep = learner.make_vmapped_train_step(net)
  p0 = jax.device_get(params)  # (the steps donate their inputs)
  vp, _, vl = jax.device_get(vstep(learner.stack_trees(params), learner.stack_trees(opt),
                                   stacked, np.float32(0.0), np.stack(keys), max_length))
  for i in (0, 1):
    p, _, l = jax.device_get(net.train_step(params[i], opt[i], batches[i],
                                            np.float32(0.0), 0, keys[i]))
    for name in ("total", "output", "hint"):
      np.testing.assert_allclose(getattr(vl, name)[i], getattr(l, name), rtol=1e-5)
    # The updates (= -gradients), to 1e-5 of the largest.
    got = [a - b for a, b in zip(jax.tree_util.tree_leaves(learner.tree_index(vp, i)),
                                 jax.tree_util.tree_leaves(p0[i]))]
    want = [a - b for a, b in zip(jax.tree_util.tree_leaves(p),
                                  jax.tree_util.tree_leaves(p0[i]))]
    scale = max(float(np.max(np.abs(w))) for w in want)
    assert scale > 0
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("seed, match", [
    ([], "empty sequence"), ([0, 0], "distinct"), ([0, -1], "ints >= 0"),
    ([0, 1.5], "ints >= 0"), (True, "ints >= 0")])
def test_bad_seeds_are_one_clear_error(tmp_path, seed, match):
  with pytest.raises(ValueError, match=match):
    flat.run(algorithm=ALG, seed=seed, results_dir=str(tmp_path), **TINY)
  assert not any(tmp_path.iterdir())


# -- the sweep -------------------------------------------------------------------

SMOKE = ["--gin", "gin/baseline.gin", "--gin", "gin/smoke.gin"]


def test_job_groups_pack_up_to_k_seeds_of_one_algorithm(tmp_path):
  runs = sweep_spec.expand_runs(["gin/forget.gin", "gin/smoke.gin"],
                             ["ALGORITHMS=['bfs','dfs']", "SEEDS=[0,1,2,3,4]",
                              "SEEDS_PER_JOB=2"], str(tmp_path))
  assert {r.seeds_per_job for r in runs} == {2}
  todo = [r for r in runs if (r.algorithm, r.seed) != ("bfs", 1)]  # bfs/seed1 done
  groups = sweep_spec.job_groups(todo)
  assert [(g[0].algorithm, [r.seed for r in g]) for g in groups] == [
      ("bfs", [0, 2]), ("bfs", [3, 4]), ("dfs", [0, 1]), ("dfs", [2, 3]), ("dfs", [4])]
  job, kwargs = sweep_spec.job_call(groups[-1])
  assert job == sweep_spec.Job(experiment.run_from_gin)
  assert kwargs == dict(
      gin_files=list(runs[0].gin_files), gin_params=list(runs[0].gin_params),
      algorithms=["dfs"], seeds=[4], results_dir=str(tmp_path.resolve()), multitask=False)
  assert sweep_spec.job_call(groups[0])[1]["seeds"] == [0, 2]
  # The default (gin/base.gin: SEEDS_PER_JOB = 1): one job per run.
  runs1 = sweep_spec.expand_runs(["gin/forget.gin", "gin/smoke.gin"], ["SEEDS=[0,1]"],
                              str(tmp_path))
  assert [len(g) for g in sweep_spec.job_groups(runs1)] == [1, 1, 1, 1]
  assert sweep_spec.job_call(sweep_spec.job_groups(runs1)[0])[1]["seeds"] == [0]


def test_the_job_pickles_calls_its_function_and_resubmits_the_same_call(monkeypatch, tmp_path):
  seen = []
  pickled = pickle.dumps(sweep_spec.Job(experiment.run_from_gin))
  monkeypatch.setattr(experiment, "run_from_gin",
                      lambda gin_files, gin_params, **kwargs: seen.append(
                          (gin_files, gin_params, kwargs))
                      or ["x", "y"])
  # Pickled by name: the job's process calls what experiment.run_from_gin is there.
  job = pickle.loads(pickled)
  # A real gin file and results folder: the job reads its gin (GPU check, compilation
  # cache) before it calls the function.
  gin_file = str(pathlib.Path(__file__).resolve().parents[1] / "gin/forget.gin")
  results = str(tmp_path / "r")
  kwargs = dict(gin_files=[gin_file], gin_params=["SEEDS_PER_JOB=2"],
                algorithms=["bfs"], seeds=[3, 5], results_dir=results, multitask=False)
  assert job(kwargs) == ["x", "y"]
  assert seen == [([gin_file], ["SEEDS_PER_JOB=2"], dict(
      algorithms=["bfs"], seeds=[3, 5], results_dir=results, multitask=False))]
  delayed = job.checkpoint(kwargs)
  assert delayed.function is job and delayed.args == (kwargs,)


def test_dry_run_lists_the_k_seed_jobs(write_result, tmp_path, fake_slurm, capsys):
  results = tmp_path / "results"
  write_result(results, "baseline", "bfs", 1)
  rc = sweep.main(SMOKE + ["--gin_param", "SEEDS=[0,1,2]", "--gin_param", "SEEDS_PER_JOB=2",
                           "--results", str(results), "--dry-run", "--list"])
  out = capsys.readouterr().out
  assert rc == 0, out
  lines = out.splitlines()
  assert lines[0].endswith("5 runs to submit, 1 already done")
  assert lines[2].startswith("slurm resources per job (up to 2 seeds): ")
  start = next(i for i, l in enumerate(lines) if l.split()[:1] == ["submit"])
  assert [l.split()[:2] for l in lines[start:start + 6]] == [
      ["submit", "baseline/bfs/seed0"], ["skip", "(done)"], ["submit", "baseline/bfs/seed2"],
      ["submit", "baseline/insertion_sort/seed0"], ["submit", "baseline/insertion_sort/seed1"],
      ["submit", "baseline/insertion_sort/seed2"]]
  assert lines[start + 6] == ("3 jobs of up to 2 seeds (SEEDS_PER_JOB=2), each seed-group "
                              "trained in one process:")
  assert [l.split() for l in lines[start + 7:start + 10]] == [
      ["job", "1", "baseline/bfs", "seeds", "0,2"],
      ["job", "2", "baseline/insertion_sort", "seeds", "0,1"],
      ["job", "3", "baseline/insertion_sort", "seeds", "2"]]
  assert lines[-1] == "dry run: nothing submitted"
  assert not list(fake_slurm["calls"].iterdir())


def test_slurm_submits_one_array_of_k_seed_jobs(tmp_path, fake_slurm, capsys):
  results = tmp_path / "results"
  rc = sweep.main(SMOKE + ["--gin_param", "SEEDS=[0,1,2]", "--gin_param", "SEEDS_PER_JOB=2",
                           "--results", str(results), "--cluster", "slurm"])
  out = capsys.readouterr().out
  assert rc == 0, out
  scripts = sorted(fake_slurm["calls"].glob("script_*.sh"))
  assert len(scripts) == 1 and "#SBATCH --array=0-3%4" in scripts[0].read_text()
  assert "submitted 6 runs in 4 jobs of up to 2 seeds as job array 4242" in out
  assert [l.split(None, 1) for l in out.splitlines()[2:6]] == [
      ["4242_0", "baseline/bfs/seed0, baseline/bfs/seed1"],
      ["4242_1", "baseline/bfs/seed2"],
      ["4242_2", "baseline/insertion_sort/seed0, baseline/insertion_sort/seed1"],
      ["4242_3", "baseline/insertion_sort/seed2"]]
  jobs = jobs_lib.read_manifests(results)[0]["jobs"]
  assert [(j["algorithm"], j["seed"], j["job_id"]) for j in jobs] == [
      ("bfs", 0, "4242_0"), ("bfs", 1, "4242_0"), ("bfs", 2, "4242_1"),
      ("insertion_sort", 0, "4242_2"), ("insertion_sort", 1, "4242_2"),
      ("insertion_sort", 2, "4242_3")]
  # What each array task will call: submitit's pickled (function, args).
  with open(results / "_logs" / "4242_2" / "4242_2_submitted.pkl", "rb") as f:
    delayed = pickle.load(f)
  assert delayed.function == sweep_spec.Job(experiment.run_from_gin)
  (kwargs,) = delayed.args
  assert (kwargs["algorithms"], kwargs["seeds"], kwargs["results_dir"]) == (
      ["insertion_sort"], [0, 1], str(results.resolve()))


def test_debug_cluster_runs_each_k_seed_job_once(write_result, tmp_path, monkeypatch, capsys):
  calls = []

  def fake(gin_files, gin_params, *, algorithms, seeds, results_dir, multitask):
    (algorithm,) = algorithms
    calls.append((algorithm, list(seeds)))
    for s in seeds:
      write_result(results_dir, "baseline", algorithm, s, test_score=0.25 * s)
    return [str(runs_lib.run_dir(results_dir, "baseline", algorithm, s) / "result.json")
            for s in seeds]

  monkeypatch.setattr(experiment, "run_from_gin", fake)
  results = tmp_path / "results"
  write_result(results, "baseline", "bfs", 0)
  rc = sweep.main(SMOKE + ["--gin_param", "SEEDS=[0,1,2]", "--gin_param", "SEEDS_PER_JOB=3",
                           "--cluster", "debug", "--results", str(results)])
  out = capsys.readouterr().out
  assert rc == 0, out
  assert calls == [("bfs", [1, 2]), ("insertion_sort", [0, 1, 2])]
  assert ("[1/2] baseline/bfs/seeds 1,2 (2 seeds in one job): seed1: done "
          "(steps 20, test_score 0.25); seed2: done (steps 20, test_score 0.5)") in out
  assert out.splitlines()[-1] == f"5/5 runs finished, 0 failed; results in {results}"


@pytest.mark.parametrize("extra, message", [
    (SMOKE + ["--gin_param", "SEEDS_PER_JOB=0"], "SEEDS_PER_JOB must be an int >= 1, got 0"),
    (SMOKE + ["--gin_param", "SEEDS_PER_JOB='4'"], "SEEDS_PER_JOB must be an int >= 1"),
    (["--gin", "gin/multitask.gin", "--gin_param", "ALGORITHMS=['bfs','dfs']",
      "--gin_param", "SEEDS_PER_JOB=2"],
     "SEEDS_PER_JOB = 2: several seeds per job is not supported for multi-task sweeps"),
])
def test_bad_seeds_per_job_exits_2(extra, message, tmp_path, capsys):
  results = tmp_path / "results"
  rc = sweep.main(extra + ["--results", str(results), "--cluster", "debug"])
  err = capsys.readouterr().err
  assert rc == 2 and message in err, err
  assert not results.exists()
