"""Markov at test time (`evaluate --markov`): the tested checkpoint scored as trained and with
h(t-1) zeroed in every consumer, its gate norm on the split scored, and the record it writes."""

import dataclasses
import json

import numpy as np
import pytest

from nar_markov.markov import rule
from nar_markov.probes import evaluate
from nar_markov.probes import measures
from nar_markov.store import params_io
from nar_markov.store import runs

import flat

ALGORITHM = "bfs"
SAMPLES = 8
TESTED_STEP = 50


@pytest.fixture(autouse=True)
def _cache(monkeypatch, data_cache_dir):
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))


def _net(history, cache_dir, hidden=8):
  from nar_markov.config import netconfig
  from nar_markov.data import preprocessing
  from nar_markov.data import splits
  from nar_markov.nets import learner
  from nar_markov.nets import model as model_lib

  val = splits.load_split(ALGORITHM, "val", cache_dir=str(cache_dir))
  config = netconfig.NetConfig(hidden_size=hidden, nb_triplet_fts=4, history=history)
  return learner.Learner([preprocessing.get_spec(ALGORITHM)], [model_lib.nb_dims_of(val)], config,
                         learner.make_optimizer(1e-3, 10, 1.0), algorithms=[ALGORITHM])


def _params(net, cache_dir, seed=5):
  """Initial parameters, perturbed: no initialisation evaluate could redo by itself."""
  from nar_markov.data import batching
  from nar_markov.data import splits

  val = splits.load_split(ALGORITHM, "val", cache_dir=str(cache_dir))
  params, _ = net.init_state(seed, [next(iter(batching.eval_batches(val, 8)))[0].features])
  rng = np.random.RandomState(seed)
  return {m: {k: np.asarray(v) * (1 + 0.5 * rng.standard_normal(np.shape(v))).astype(v.dtype)
              for k, v in p.items()} for m, p in params.items()}


def _test_split(cache_dir):
  from nar_markov.data import splits
  return splits.load_split(ALGORITHM, "test", cache_dir=str(cache_dir))


def _saved_run(root, model, net, params, cache_dir, step=TESTED_STEP):
  """A run folder as train.py leaves one: params.npz of the tested `step`, and result.json
  whose test_score is that checkpoint's on the first SAMPLES test samples."""
  from nar_markov.nets import learner

  score = learner.evaluate_split(net, params, _test_split(cache_dir), 0, SAMPLES,
                                 with_hints=False, max_samples=SAMPLES)["score"]
  run_dir = runs.run_dir(root, model, ALGORITHM, 5)
  params_io.save_params(run_dir / runs.PARAMS_NAME, params, dataclasses.asdict(net.config),
                        {"algorithm": ALGORITHM, "model": model, "seed": 5, "step": step,
                         "test_score": score})
  (run_dir / runs.RESULT_NAME).write_text(json.dumps(
      {"schema": runs.RESULT_SCHEMA, "model": model, "algorithm": ALGORITHM, "seed": 5,
       "status": "done", "test_score": score, "val_best_step": TESTED_STEP,
       "selection": {"rule": "first_best",
                     "first_best": {"step": TESTED_STEP, "test_score": score}},
       "settings": {"test_max_samples": SAMPLES}}))
  return run_dir


def _measure(net, params, cache_dir, split="test"):
  from nar_markov.data import splits
  zeroed = evaluate.build_model([ALGORITHM], rule.zeroed_config(
      dataclasses.asdict(net.config)), cache_dir=str(cache_dir))
  feedback = splits.load_split(ALGORITHM, split, cache_dir=str(cache_dir))
  return measures.markov_measure(net, zeroed, params, feedback, 0, SAMPLES, SAMPLES)


def test_the_rule_and_its_boundaries():
  """Written before any run was measured (docs/design.md): strict bounds, both signs of the
  score change, and no scope but the one that gates every consumer."""
  ok = dict(scope="processor_decoder", delta=0.0, changed=0.0, gate_norm=0.0)
  assert rule.markov_in_effect(**ok)
  for key, bad, good in (("delta", 0.01, 0.0099), ("delta", -0.01, -0.0099),
                         ("changed", 0.01, 0.0099), ("gate_norm", 0.1, 0.0999)):
    assert not rule.markov_in_effect(**dict(ok, **{key: bad})), (key, bad)
    assert rule.markov_in_effect(**dict(ok, **{key: good})), (key, good)
  for scope in ("processor", "processor_input"):
    assert not rule.markov_in_effect(**dict(ok, scope=scope))


def test_zeroing_is_forgetnets_forward_pass_on_the_same_weights(data_cache_dir):
  """The zeroed net of a G-ForgetNet is ForgetNet's forward pass (Eq. 3) on its weights: the
  same predictions as a ForgetNet built by hand and given the weights without the gate (the
  gate goes unused). The baseline's own predictions change when its history is zeroed."""
  from nar_markov.nets import learner

  test = _test_split(data_cache_dir)
  for history in ("gated", "full"):
    net = _net(history, data_cache_dir)
    params = _params(net, data_cache_dir)
    by_hand = learner.Learner(net.specs, net.nb_dims,
                              dataclasses.replace(net.config, history="none"), net.optimizer,
                              algorithms=net.algorithms)
    no_gate = {m: p for m, p in params.items() if "history_gate" not in m}
    assert (len(no_gate) < len(params)) == (history == "gated")
    expected, truth = measures.output_predictions(by_hand, no_gate, test, 0, SAMPLES, SAMPLES)
    m = _measure(net, params, data_cache_dir)
    assert m["score_history_zeroed"] == measures.score_predictions(expected, truth)["score"]
    trained, _ = measures.output_predictions(net, params, test, 0, SAMPLES, SAMPLES)
    assert m["score"] == learner.evaluate_split(net, params, test, 0, SAMPLES, False,
                                                SAMPLES)["score"]
    changed = np.mean(trained["pi"].data != expected["pi"].data)
    assert m["predictions_changed"] == pytest.approx(changed)
    if history == "full":  # what the baseline's history does to its outputs
      assert changed > 0.05 and m["delta"] != 0.0 and m["gate_norm"] > 0.0


def test_gate_norm_is_at_the_checkpoint_on_the_split_asked_for(data_cache_dir):
  """The gate norm is ||g * h(t-1)||/sqrt(d) over nodes, averaged over the steps
  1 <= t < length - 1 of each trajectory, then over samples -- from the net's per-step norm on
  the split scored, masked here by hand; another split, or other parameters, read otherwise."""
  import jax
  from nar_markov.data import batching
  from nar_markov.data import splits

  net = _net("gated", data_cache_dir)
  params = _params(net, data_cache_dir)

  def by_hand(split, params):
    feedback, _ = batching.at_most(
        splits.load_split(ALGORITHM, split, cache_dir=str(data_cache_dir)), SAMPLES)
    per_step = np.asarray(jax.device_get(net.apply(params, feedback.features, 0, True,
                                                   collect_hints=False).history_norm))
    lengths = np.asarray(feedback.features.lengths)
    return np.mean([np.mean(per_step[1:int(n) - 1, b]) for b, n in enumerate(lengths)])

  test_norm = _measure(net, params, data_cache_dir)["gate_norm"]
  assert test_norm == pytest.approx(by_hand("test", params), rel=1e-5)
  val_norm = _measure(net, params, data_cache_dir, split="val")["gate_norm"]
  assert val_norm == pytest.approx(by_hand("val", params), rel=1e-5)
  assert abs(val_norm - test_norm) > 1e-3
  other = _params(net, data_cache_dir, seed=6)
  assert _measure(net, other, data_cache_dir)["gate_norm"] == pytest.approx(
      by_hand("test", other), rel=1e-5)
  assert abs(by_hand("test", other) - test_norm) > 1e-3


def test_a_forgetnet_run_is_unchanged_by_zeroing(tmp_path, capsys):
  """A trained ForgetNet run, measured from its folder: by construction the same score and
  every prediction the same, gate norm 0; the record (markov.json) says so and that the score
  is the run's recorded test_score."""
  result = flat.run_one(algorithm=ALGORITHM, seed=0, model="forget", results_dir=str(tmp_path),
                        train_steps=4, hidden_size=8, nb_triplet_fts=4, batch_size=4,
                        train_lengths=(4,), eval_every_steps=2, log_every_steps=2,
                        checkpoint_every_steps=100, val_max_samples=8, test_max_samples=SAMPLES)
  run_dir = runs.run_dir(tmp_path, "forget", ALGORITHM, 0)
  assert evaluate.main([str(run_dir), "--markov", "--max-samples", str(SAMPLES)]) == 0
  assert f"wrote {run_dir / runs.MARKOV_NAME}" in capsys.readouterr().out
  record = runs.read_markov(run_dir)
  assert record["score"] == record["score_history_zeroed"] == result["test_score"]
  assert record["reproduces_test_score"] and record["step"] == result["val_best_step"]
  assert record["delta"] == 0.0 and record["predictions_changed"] == 0.0
  assert record["gate_norm"] == 0.0 and record["markov_in_effect"]
  assert (record["source"], record["nb_nodes"], record["num_samples"]) == ("test", 64, SAMPLES)
  assert record["history_scope"] == "processor_decoder" and record["history"] == "none"


def test_the_record_is_of_the_tested_checkpoint_and_split(tmp_path, data_cache_dir, capsys):
  """params.npz of another step than the tested one is refused (one line, exit 2); a score of
  another split or sample count is printed, not recorded."""
  net = _net("gated", data_cache_dir)
  params = _params(net, data_cache_dir)
  run_dir = _saved_run(tmp_path / "a", "gforget", net, params, data_cache_dir)
  assert evaluate.main([str(run_dir), "--markov", "--split", "val",
                        "--max-samples", str(SAMPLES)]) == 0
  assert f"{runs.MARKOV_NAME} not written" in capsys.readouterr().out
  assert runs.read_markov(run_dir) is None
  assert evaluate.main([str(run_dir), "--markov", "--max-samples", str(SAMPLES)]) == 0
  record = runs.read_markov(run_dir)
  assert record["reproduces_test_score"] and record["step"] == TESTED_STEP
  assert record["model"] == "gforget" and record["history"] == "gated"

  later = _saved_run(tmp_path / "b", "gforget", net, params, data_cache_dir, step=100)
  with pytest.raises(SystemExit) as exit_info:
    evaluate.main([str(later), "--markov", "--max-samples", str(SAMPLES)])
  assert exit_info.value.code == 2
  (line,) = capsys.readouterr().err.splitlines()
  assert "params.npz holds step 100, the run tested step 50" in line
  assert runs.read_markov(later) is None


def test_a_replay_measures_the_run_it_replays_and_nothing_else(tmp_path, data_cache_dir,
                                                                capsys):
  """git keeps no params.npz: `--record-for RUN` measures RUN's replay and writes the record
  into RUN, naming the replay, which analysis.verdict then reads as RUN's; a replay that is
  not the run again to the bit (another test_score) is refused in one line, nothing written."""
  from analysis import markov_columns

  net = _net("gated", data_cache_dir)
  params = _params(net, data_cache_dir)
  run_dir = _saved_run(tmp_path / "committed", "gforget", net, params, data_cache_dir)
  (run_dir / runs.PARAMS_NAME).unlink()  # as git leaves a committed run
  replay = _saved_run(tmp_path / "replay", "gforget", net, params, data_cache_dir)
  assert evaluate.main([str(replay), "--markov", "--record-for", str(run_dir),
                        "--max-samples", str(SAMPLES)]) == 0
  assert f"wrote {run_dir / runs.MARKOV_NAME}" in capsys.readouterr().out
  assert runs.read_markov(replay) is None
  run = json.loads((run_dir / runs.RESULT_NAME).read_text())
  record = markov_columns.read_markov(run_dir, run)
  assert record["parameters_from"]["replay"] == str(replay.resolve())
  assert record["reproduces_test_score"] and record["step"] == TESTED_STEP

  # A replay on another CPU kind: the same config, a test_score that differs in the last bits.
  other = _saved_run(tmp_path / "other", "gforget", net, params, data_cache_dir)
  result = json.loads((other / runs.RESULT_NAME).read_text())
  result["test_score"] = np.nextafter(result["test_score"], 2.0)
  (other / runs.RESULT_NAME).write_text(json.dumps(result))
  (run_dir / runs.MARKOV_NAME).unlink()
  with pytest.raises(SystemExit) as exit_info:
    evaluate.main([str(other), "--markov", "--record-for", str(run_dir),
                   "--max-samples", str(SAMPLES)])
  assert exit_info.value.code == 2
  (line,) = capsys.readouterr().err.splitlines()
  assert "the replay is not the run again: test_score" in line
  assert runs.read_markov(run_dir) is None and runs.read_markov(other) is None


def test_record_for_needs_markov(tmp_path, data_cache_dir, capsys):
  net = _net("gated", data_cache_dir)
  run_dir = _saved_run(tmp_path, "gforget", net, _params(net, data_cache_dir), data_cache_dir)
  with pytest.raises(SystemExit) as exit_info:
    evaluate.main([str(run_dir), "--record-for", str(run_dir)])
  assert exit_info.value.code == 2
  assert "--record-for writes a Markov record: it needs --markov" in capsys.readouterr().err
