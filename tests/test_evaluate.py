"""A trained model kept on disk (params_io) and scored again (evaluate): the saved model
is the model, so its score is the in-process score."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from nar_markov.store import params_io

import flat

ALGORITHM = "bfs"
TINY_NET = dict(hidden_size=8, nb_triplet_fts=4, history="gated")
SAMPLES = 4


@pytest.fixture(autouse=True)
def _cache(monkeypatch, data_cache_dir):
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))


# --- params_io: numpy only --------------------------------------------------------------


def _fake_params():
  return {
      "net/~_construct_encoders_decoders/algo_0_pos_enc_linear": {
          "w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3, np.float32)},
      "net/history_gate/linear_1": {"w": np.full((2, 2), 0.5, np.float64)},
  }


def test_params_round_trip_exactly(tmp_path):
  path = tmp_path / "run" / "params.npz"
  meta = {"algorithm": ALGORITHM, "seed": 3, "val_best": np.float32(0.75),
          "nb_dims": {"pos": np.int64(1)}, "diverged_step": None, "nan": float("nan")}
  params_io.save_params(path, _fake_params(), {"hidden_size": 8, "history": "gated"}, meta)
  params, net_config, meta_back = params_io.load_params(path)
  assert net_config == {"hidden_size": 8, "history": "gated"}
  assert meta_back == {"algorithm": ALGORITHM, "seed": 3, "val_best": 0.75,
                       "nb_dims": {"pos": 1}, "diverged_step": None, "nan": None}
  expected = _fake_params()
  assert params.keys() == expected.keys()
  for module in expected:
    assert params[module].keys() == expected[module].keys()
    for name, value in expected[module].items():
      assert params[module][name].dtype == value.dtype
      np.testing.assert_array_equal(params[module][name], value)
  with np.load(path, allow_pickle=False) as npz:  # keyed by haiku path, readable by anyone
    assert "net/history_gate/linear_1/w" in npz.files
  # Overwritten atomically: no temp file left next to it.
  params_io.save_params(path, _fake_params(), {}, {})
  assert [p.name for p in path.parent.iterdir()] == ["params.npz"]


def test_loading_refuses_pickle_and_foreign_files(tmp_path):
  evil = tmp_path / "evil.npz"
  np.savez(evil, **{params_io.HEADER_KEY: np.array(json.dumps({"format": params_io.FORMAT,
                                                                  "net_config": {},
                                                                  "meta": {}})),
                    "net/linear/w": np.array([{"would": "unpickle"}], dtype=object)})
  with pytest.raises(ValueError, match="allow_pickle"):
    params_io.load_params(evil)
  foreign = tmp_path / "foreign.npz"
  np.savez(foreign, w=np.ones(2))
  with pytest.raises(ValueError, match="not a nar_markov params file"):
    params_io.load_params(foreign)
  with pytest.raises(TypeError, match="object array"):
    params_io.save_params(tmp_path / "x.npz", {"m": {"w": np.array([None], dtype=object)}},
                          {}, {})
  with pytest.raises(ValueError, match="cannot be stored"):
    params_io.save_params(tmp_path / "x.npz", {"m": {"a/b": np.ones(1)}}, {}, {})
  assert not (tmp_path / "x.npz").exists()


def test_params_io_imports_no_jax():
  code = ("import sys, nar_markov.store.params_io; "
          "bad = [m for m in ('jax', 'haiku', 'clrs') if m in sys.modules]; assert not bad, bad")
  subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --- evaluate: the saved model scores what the in-process model scores -------------------


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory, data_cache_dir):
  """A freshly initialised tiny G-ForgetNet on bfs, saved as a run folder would be."""
  from nar_markov.config import netconfig
  from nar_markov.data import batching
  from nar_markov.data import preprocessing
  from nar_markov.data import splits
  from nar_markov.nets import learner
  from nar_markov.nets import model as model_lib

  val = splits.load_split(ALGORITHM, "val", cache_dir=str(data_cache_dir))
  nb_dims = model_lib.nb_dims_of(val)
  config = netconfig.NetConfig(**TINY_NET)
  net = learner.Learner([preprocessing.get_spec(ALGORITHM)], [nb_dims], config,
                    learner.make_optimizer(1e-3, 10, 1.0))
  init_batch = next(iter(batching.eval_batches(val, 8)))[0]
  params, _ = net.init_state(5, [init_batch.features])
  # Perturbed so that they are no initialisation evaluate could redo by itself.
  rng = np.random.RandomState(0)
  params = {m: {k: np.asarray(v) * (1 + 0.5 * rng.standard_normal(np.shape(v))).astype(v.dtype)
                for k, v in p.items()} for m, p in params.items()}
  run_dir = tmp_path_factory.mktemp("run") / "gforget" / ALGORITHM / "seed5"
  params_io.save_params(run_dir / "params.npz", params, dataclasses.asdict(config),
                        {"algorithm": ALGORITHM, "model": "gforget", "seed": 5, "step": 0})
  (run_dir / "result.json").write_text(json.dumps(
      {"schema": "nar_markov.result/1", "model": "gforget", "algorithm": ALGORITHM,
       "seed": 5, "test_score": None}))
  return run_dir, net, params


def test_saved_model_scores_as_in_process(saved_run, data_cache_dir):
  from nar_markov.data import batching
  from nar_markov.data import splits
  from nar_markov.nets import learner
  from nar_markov.probes import evaluate

  run_dir, net, params = saved_run
  test = splits.load_split(ALGORITHM, "test", cache_dir=str(data_cache_dir))
  expected = learner.evaluate_split(net, params, test, 0, SAMPLES, with_hints=False,
                                  max_samples=SAMPLES)
  lines = []
  out = evaluate.evaluate_run(
      run_dir, evaluate.Target(split="test", max_samples=SAMPLES, batch_size=SAMPLES),
      log=lines.append)
  [entry] = out["scores"]
  assert (entry["source"], entry["nb_nodes"], entry["num_samples"]) == ("test", 64, SAMPLES)
  assert entry["score"] == expected["score"] and entry["scores"] == expected["scores"]
  assert lines == [f"bfs test nodes=64 samples={SAMPLES} score={expected['score']:.4f}"]
  assert (out["model"], out["seed"]) == ("gforget", 5)
  # The check can fail: other parameters (the unperturbed initialisation) score otherwise.
  init_batch = next(iter(batching.eval_batches(test, SAMPLES)))[0]
  other, _ = net.init_state(5, [init_batch.features])
  assert learner.evaluate_split(net, other, test, 0, SAMPLES, with_hints=False,
                              max_samples=SAMPLES)["score"] != expected["score"]
  # The loaded net is the saved one: same config, same parameter tree.
  loaded_net = evaluate.build_model([ALGORITHM], dataclasses.asdict(net.config))
  assert loaded_net.config == net.config


def test_cli_scores_fresh_graphs_of_other_sizes(saved_run, tmp_path, capsys):
  from nar_markov.nets import learner
  from nar_markov.probes import evaluate

  run_dir, net, params = saved_run
  out_json = tmp_path / "scores.json"
  assert evaluate.main([str(run_dir), "--nodes", "5,9", "--max-samples", str(SAMPLES),
                        "--batch-size", str(SAMPLES), "--json", str(out_json)]) == 0
  printed = capsys.readouterr().out.strip().splitlines()
  assert [line.split(" score=")[0] for line in printed[-2:]] == [
      f"bfs sampled nodes=5 samples={SAMPLES}", f"bfs sampled nodes=9 samples={SAMPLES}"]
  scores = json.loads(out_json.read_text())["scores"]
  for entry, n in zip(scores, (5, 9)):
    graphs = evaluate.sample_graphs(ALGORITHM, n, SAMPLES, evaluate.DEFAULT_SAMPLE_SEED)
    expected = learner.evaluate_split(net, params, graphs, 0, SAMPLES, with_hints=False)
    assert (entry["nb_nodes"], entry["seed"]) == (n, evaluate.DEFAULT_SAMPLE_SEED)
    assert entry["score"] == expected["score"] and entry["num_samples"] == SAMPLES


def test_a_trained_runs_kept_parameters_reproduce_its_test_score(tmp_path):
  """train.py saves `<run>/params.npz` (state['best_params']); scoring it again gives the
  run's own test_score: the kept model is the tested one."""
  from nar_markov.probes import evaluate

  result = flat.run_one(
      algorithm=ALGORITHM, seed=0, model="gforget", results_dir=str(tmp_path),
      train_steps=20, hidden_size=16, nb_triplet_fts=4, batch_size=8, train_lengths=(4, 7),
      eval_every_steps=10, log_every_steps=5, checkpoint_every_steps=100,
      val_max_samples=16, test_max_samples=8, lambda_gate=0.01)
  run_dir = tmp_path / "gforget" / ALGORITHM / "seed0"
  _, _, meta = params_io.load_params(run_dir / "params.npz")
  assert meta["algorithm"] == ALGORITHM and meta["seed"] == 0
  out = evaluate.evaluate_run(run_dir, evaluate.Target(split="test", max_samples=8))
  assert out["scores"][0]["score"] == result["test_score"]


def test_a_multitask_model_scores_the_algorithm_asked_for(tmp_path, data_cache_dir):
  """Saved with meta['algorithms'] (the algorithm_index order) and nb_dims per algorithm."""
  from nar_markov.config import netconfig
  from nar_markov.data import batching
  from nar_markov.data import preprocessing
  from nar_markov.data import splits
  from nar_markov.nets import learner
  from nar_markov.nets import model as model_lib
  from nar_markov.probes import evaluate

  algorithms = [ALGORITHM, "minimum"]
  vals = [splits.load_split(a, "val", cache_dir=str(data_cache_dir)) for a in algorithms]
  nb_dims = [model_lib.nb_dims_of(v) for v in vals]
  config = netconfig.NetConfig(hidden_size=8, nb_triplet_fts=4, history="none")
  net = learner.Learner([preprocessing.get_spec(a) for a in algorithms], nb_dims, config,
                        learner.make_optimizer(1e-3, 10, 1.0))
  params, _ = net.init_state(
      1, [next(iter(batching.eval_batches(v, 8)))[0].features for v in vals])
  run_dir = tmp_path / "forget_multitask" / ALGORITHM / "seed1"
  params_io.save_params(run_dir / "params.npz", params, dataclasses.asdict(config),
                        {"algorithm": ALGORITHM, "algorithms": algorithms, "nb_dims": nb_dims,
                         "model": "forget_multitask", "seed": 1})
  test = splits.load_split("minimum", "test", cache_dir=str(data_cache_dir))
  expected = learner.evaluate_split(net, params, test, 1, SAMPLES, with_hints=False,
                                  max_samples=SAMPLES)
  out = evaluate.evaluate_run(run_dir, evaluate.Target(max_samples=SAMPLES, batch_size=SAMPLES),
                              algorithm="minimum", log=lambda *_: None)
  assert out["algorithms"] == algorithms and out["algorithm"] == "minimum"
  assert out["scores"][0]["score"] == expected["score"]
  with pytest.raises(ValueError, match="not 'dfs'"):
    evaluate.evaluate_run(run_dir, evaluate.Target(max_samples=SAMPLES), algorithm="dfs")


def test_hint_accuracy_per_step_is_the_pointer_argmax_match(saved_run, data_cache_dir):
  """--hints: at step t, the share of nodes whose predicted pointer (argmax of the
  model's logits, run as at test time) is the true hint t, over the trajectories that
  reach t -- computed here by hand for bfs's pointer hint pi_h; and the same in one batch
  as in padded batches of 3."""
  import jax
  from nar_markov.data import batching
  from nar_markov.data import splits
  from nar_markov.probes import evaluate
  from nar_markov.probes import measures

  run_dir, net, params = saved_run
  val = batching.take_samples(splits.load_split(ALGORITHM, "val", cache_dir=str(data_cache_dir)),
                              SAMPLES)
  whole = measures.hint_accuracy(net, params, val, 0, SAMPLES)
  batched = measures.hint_accuracy(net, params, val, 0, 3)
  assert set(whole) == {h.name for h in val.features.hints} == {"pi_h", "reach_h"}
  for name in whole:
    assert whole[name]["steps"] == batched[name]["steps"]
    assert whole[name]["samples"] == batched[name]["samples"]
    np.testing.assert_allclose(whole[name]["accuracy"], batched[name]["accuracy"], atol=1e-6)
    np.testing.assert_allclose(whole[name]["overall"], batched[name]["overall"], atol=1e-6)

  logits = jax.device_get(net.apply(params, val.features, 0, True).hint_preds["pi_h"])
  truth = np.asarray([h for h in val.features.hints if h.name == "pi_h"][0].data)
  lengths = np.asarray(val.features.lengths)
  entry = whole["pi_h"]
  assert entry["steps"] == list(range(1, int(lengths.max())))
  for t, acc, n in zip(entry["steps"], entry["accuracy"], entry["samples"]):
    alive = t < lengths
    assert n == int(alive.sum())
    match = np.argmax(logits[t - 1], -1) == truth[t]
    assert acc == pytest.approx(float(match[alive].mean()), abs=1e-6)
  # Not a constant: these perturbed parameters get some pointers right, some wrong.
  assert 0.0 < entry["overall"] < 1.0
  line = evaluate.hint_summary("pi_h", entry)
  assert line.startswith(f"hint pi_h: overall {entry['overall']:.4f}; first step below 0.99: ")


def _at_bias_extremes(stats_fn, net, params, module, feedback):
  """stats_fn's answer with `module`'s bias at -100 (its sigmoid shut) and at +100 (open)."""
  def with_bias(value):
    out = {m: dict(p) for m, p in params.items()}
    out[module]["b"] = np.full_like(np.asarray(out[module]["b"]), value)
    return out
  return [stats_fn(net, with_bias(b), feedback, 0, SAMPLES, max_samples=SAMPLES)
          for b in (-100.0, 100.0)]


def test_update_gate_stats_read_the_processors_update_gate(saved_run, data_cache_dir):
  """--update-gate intercepts dm-clrs's gate3 (the processor's last Linear): pushing its
  bias far down closes every u, far up opens every u; other Linears' biases would not."""
  from nar_markov.data import splits
  from nar_markov.probes import measures

  run_dir, net, params = saved_run
  test = splits.load_split(ALGORITHM, "test", cache_dir=str(data_cache_dir))
  stats = measures.update_gate_stats(net, params, test, 0, SAMPLES, max_samples=SAMPLES)
  assert stats["module"].endswith("mpnn_aggr_clrs_processor/linear_16")
  assert 0.0 < stats["mean"] < 1.0 and stats["calls"] > 1
  shut, wide = _at_bias_extremes(measures.update_gate_stats, net, params, stats["module"], test)
  assert shut["mean"] < 1e-6 and shut["share_below_0.1"] == 1.0
  assert wide["mean"] > 1 - 1e-6 and wide["share_above_0.9"] == 1.0


def test_update_gate_on_a_net_without_one_is_one_line(saved_run, tmp_path, capsys):
  """triplet_mpnn has no update gate: --update-gate is refused before any data is built,
  in one line (exit 2), as --history-gate on a model without the gated history is."""
  from nar_markov.probes import evaluate

  run_dir, _, params = saved_run
  _, config, meta = params_io.load_params(run_dir / "params.npz")
  mpnn_dir = tmp_path / "mpnn_seed5"
  params_io.save_params(mpnn_dir / "params.npz", params, dict(config, processor="triplet_mpnn"),
                        meta)
  with pytest.raises(SystemExit) as exit_info:
    evaluate.main([str(mpnn_dir), "--update-gate"])
  assert exit_info.value.code == 2
  (line,) = capsys.readouterr().err.splitlines()
  assert line.startswith("evaluate: error: --update-gate is for triplet_gmpnn") and (
      "'triplet_mpnn'" in line), line


def test_history_gate_stats_measure_what_passes_the_gate(saved_run, data_cache_dir, capsys):
  """--history-gate intercepts G-ForgetNet's HistoryGate: its mean |g * h(t-1)| is the net's
  own gate norm (NetOutput.history_norm, the paper's Fig. 5 quantity); the gate's last bias far
  down shuts it (nothing passes), far up opens it (all of h(t-1) passes)."""
  import jax
  from nar_markov.data import batching
  from nar_markov.data import splits
  from nar_markov.probes import evaluate
  from nar_markov.probes import measures

  run_dir, net, params = saved_run
  test = splits.load_split(ALGORITHM, "test", cache_dir=str(data_cache_dir))
  stats = measures.history_gate_stats(net, params, test, 0, SAMPLES, max_samples=SAMPLES)
  batch = next(iter(batching.eval_batches(batching.at_most(test, SAMPLES)[0], SAMPLES)))[0]
  own = jax.jit(lambda p, f: net.apply(p, f, 0, True, collect_hints=False).history_norm)(
      params, batch.features)
  assert stats["gated_norm"] == pytest.approx(float(np.mean(own)), rel=1e-4)
  assert stats["calls"] == np.shape(own)[0]
  assert 0.0 < stats["gated_norm"] < stats["history_norm"]
  assert 0.0 < stats["gate_norm"] < 1.0
  shares = [stats["top_share"][n] for n in ("1", "2", "4", "8")]
  assert shares == sorted(shares) and shares[-1] == pytest.approx(1.0)  # d = 8 channels
  assert sum(c["share"] for c in stats["top_channels"][:2]) == pytest.approx(shares[1])
  channels = stats["channels"]  # every channel, in channel order
  assert all(len(v) == 8 for v in channels.values())
  assert sum(channels["share"]) == pytest.approx(1.0)
  for c in stats["top_channels"]:
    assert [channels[k][c["channel"]] for k in ("share", "rms_g", "rms_h")] == [
        c["share"], c["rms_g"], c["rms_h"]]
  assert -1.0 <= stats["gate_history_rank"] <= 1.0
  assert measures.rank_correlation([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
  assert measures.rank_correlation([1, 1, 1], [1, 2, 3]) == 0.0

  last = next(m for m in params if "history_gate" in m and m.endswith("linear_1"))
  shut, wide = _at_bias_extremes(measures.history_gate_stats, net, params, last, test)
  assert shut["gated_norm"] < 1e-6 and shut["share_below_0.1"] == 1.0
  assert wide["gate_norm"] == pytest.approx(1.0) and wide["share_above_0.9"] == 1.0
  assert wide["gated_norm"] == pytest.approx(wide["history_norm"], rel=1e-5)
  # Refused, by name, for a model without the gate: in the function and, before any
  # scoring, on the command line.
  from nar_markov.nets import learner
  ungated = learner.Learner(net.specs, net.nb_dims,
                        dataclasses.replace(net.config, history="full"), net.optimizer)
  with pytest.raises(ValueError, match="history-gate is for the gated history"):
    measures.history_gate_stats(ungated, params, test, 0, SAMPLES)
  baseline_dir = run_dir.parent / "baseline_seed5"
  _, config, meta = params_io.load_params(run_dir / "params.npz")
  params_io.save_params(baseline_dir / "params.npz", params, dict(config, history="full"), meta)
  with pytest.raises(SystemExit):
    evaluate.main([str(baseline_dir), "--history-gate"])
  assert "is a 'full' model" in capsys.readouterr().err


# --- what was scored, and how the run was tested ---------------------------------------------


def test_a_truncated_params_file_is_one_line(saved_run, tmp_path, capsys):
  """Was: a zipfile.BadZipFile traceback."""
  from nar_markov.probes import evaluate

  run_dir, _, _ = saved_run
  cut_dir = tmp_path / "gforget" / ALGORITHM / "seed5"
  cut_dir.mkdir(parents=True)
  whole = (run_dir / "params.npz").read_bytes()
  (cut_dir / "params.npz").write_bytes(whole[:len(whole) // 2])
  with pytest.raises(ValueError, match="is not a readable parameters file"):
    params_io.load_params(cut_dir / "params.npz")
  with pytest.raises(SystemExit) as exit_info:
    evaluate.main([str(cut_dir)])
  assert exit_info.value.code == 2
  (line,) = capsys.readouterr().err.splitlines()
  assert line.startswith(f"evaluate: error: {cut_dir / 'params.npz'} is not a readable "
                         "parameters file"), line


def test_evaluate_says_what_it_scored_and_how_the_run_was_tested(saved_run, tmp_path, capsys):
  """Without --max-samples the whole split is scored; a run tested on fewer samples
  (Protocol.test_max_samples) has a test_score that this does not reproduce."""
  from nar_markov.data import batching
  from nar_markov.data import splits
  from nar_markov.probes import evaluate

  run_dir, _, _ = saved_run
  tested = tmp_path / "gforget" / ALGORITHM / "seed5"
  tested.mkdir(parents=True)
  (tested / "params.npz").write_bytes((run_dir / "params.npz").read_bytes())
  (tested / "result.json").write_text(json.dumps(
      {"schema": "nar_markov.result/1", "model": "gforget", "algorithm": ALGORITHM, "seed": 5,
       "test_score": 0.25, "settings": {"test_max_samples": SAMPLES}}))
  whole = batching.nb_samples_of(splits.load_split(ALGORITHM, "test"))
  assert whole > SAMPLES

  assert evaluate.main([str(tested), "--batch-size", str(SAMPLES)]) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[0].startswith(f"{ALGORITHM} test nodes=64 samples={whole} score=")
  assert out[1] == (f"  not the run's test: its test_score 0.25 was on the test split, 64 "
                    f"nodes, {SAMPLES} samples (Protocol.test_max_samples = {SAMPLES}); "
                    f"--max-samples {SAMPLES} scores as it did")

  assert evaluate.main([str(tested), "--max-samples", str(SAMPLES),
                        "--batch-size", str(SAMPLES)]) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[0].startswith(f"{ALGORITHM} test nodes=64 samples={SAMPLES} score=")
  assert out[1] == (f"  as the run's test: the test split, 64 nodes, {SAMPLES} samples "
                    "(its test_score 0.25)")
