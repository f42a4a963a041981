"""The λ heuristic: both readings, the search, calibration records, and G-ForgetNet reading λ from them."""

import json
import math
import pathlib

import gin
import numpy as np
import pytest

from nar_markov.config import components
from nar_markov.config import gin_files as config
from nar_markov.config import calibration_records
from nar_markov.config import lambda_heuristic
from nar_markov.config import runspec
from nar_markov.store import runs
from nar_markov.tools import replay
from nar_markov.training import calibrate
from nar_markov.training import experiment

import flat

TINY = dict(hidden_size=16, nb_triplet_fts=4, batch_size=8, train_lengths=(4, 7),
            eval_every_steps=10, log_every_steps=2, checkpoint_every_steps=10,
            val_max_samples=16, test_max_samples=8)
STEPS = 20  # calibration step 12, window 1 (0.6 and 0.05 of 20)


@pytest.fixture(autouse=True)
def _no_bindings_leak():
  """These tests bind LambdaHeuristic (e.g. reading='constant'); later tests of the
  process read its defaults."""
  yield
  gin.clear_config()


@pytest.fixture
def cache(monkeypatch, data_cache_dir):
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))
  config.parse_gin([], [])  # gin cleared: run_experiment's own defaults


# -- the heuristic's arithmetic ---------------------------------------------------


def test_steps_scale_with_the_schedule():
  h = lambda_heuristic.LambdaHeuristic()
  assert (h.calibration_step(10_000), h.window_steps(10_000)) == (6000, 500)
  assert (h.calibration_step(1500), h.window_steps(1500)) == (900, 75)
  assert h.penalty_start(10_000) == 6000
  assert lambda_heuristic.LambdaHeuristic(reading="constant").penalty_start(10_000) == 0
  with pytest.raises(ValueError, match="reading must be one of"):
    lambda_heuristic.LambdaHeuristic(reading="linear")
  with pytest.raises(ValueError, match="band"):
    lambda_heuristic.LambdaHeuristic(band=(0.6, 0.4))


def test_measure_reads_the_window_before_the_step():
  result = {"steps": 30, "curves": {
      "train": {"step": [10, 20, 30], "output_loss": [1.0, 2.0, 9.0],
                "hint_loss": [1.0, 2.0, 9.0], "gate_term": [5.0, 8.0, 9.0],
                "gate_penalty": [0.0, 4.0, 9.0]},
      "val": {"step": [0, 20, 30], "hidden_norm": [0.5, 0.25, 0.1]}}}
  m = lambda_heuristic.measure(result, end_step=20, window_steps=10)
  assert (m["L"], m["G"], m["P"]) == (4.0, 8.0, 4.0)
  assert m["share"] == pytest.approx(0.5) and m["gate_norm"] == 0.25
  assert lambda_heuristic.share_with(m["L"] / m["G"], m) == pytest.approx(0.5)
  with pytest.raises(lambda_heuristic.CalibrationError, match="no training-curve entries"):
    lambda_heuristic.measure(result, end_step=50, window_steps=5)


# -- the constant reading's search on a synthetic share(λ) ----------------------------


def _logistic(center, slope=1.0, top=1.0):
  return lambda lam: top / (1 + math.exp(-slope * (math.log(lam) - math.log(center))))


@pytest.mark.parametrize("center, lambda0", [(3.0, 0.01), (3.0, 1e4), (0.2, 0.2 * 1.01)])
def test_search_brackets_and_converges(center, lambda0):
  share = _logistic(center, slope=0.8)
  trials, chosen, in_band = lambda_heuristic.search(
      lambda i, lam: {"share": share(lam)}, lambda0, (0.4, 0.6), max_trials=10)
  assert in_band and 0.4 <= chosen["share"] <= 0.6
  assert chosen is trials[-1] and len(trials) <= 10
  lams = [t["lambda"] for t in trials]
  assert len(set(lams)) == len(lams)  # never the same λ twice
  assert [t["trial"] for t in trials] == list(range(len(trials)))


def test_search_gives_up_cleanly_with_the_closest_trial():
  # The gate shuts faster than λ grows: the share never exceeds 0.3.
  share = _logistic(1.0, slope=1.0, top=0.3)
  trials, chosen, in_band = lambda_heuristic.search(
      lambda i, lam: {"share": share(lam)}, 1e-3, (0.4, 0.6), max_trials=5)
  assert not in_band and len(trials) == 5
  assert chosen["share"] == max(t["share"] for t in trials)
  assert lambda_heuristic.propose_next([{"lambda": 1.0, "share": 0.5}], (0.4, 0.6)) is None


def _hump(peak_lambda, top, width=1.0):
  return lambda lam: top * math.exp(-0.5 * ((math.log(lam) - math.log(peak_lambda)) / width) ** 2)


@pytest.mark.parametrize("lambda0", [0.1, 1e-4, 0.01])
def test_search_climbs_to_the_peak_when_the_share_falls_with_lambda(lambda0):
  """The gate shuts faster than λ grows past λ = 0.01: the share peaks at 0.3 there,
  below the band. From either side (or on the peak) the search finds the peak within
  the trials; growing λ from the right side would only have lowered the share."""
  share = _hump(0.01, 0.3)
  trials, chosen, in_band = lambda_heuristic.search(
      lambda i, lam: {"share": share(lam)}, lambda0, (0.4, 0.6), max_trials=8)
  assert not in_band and chosen["share"] == max(t["share"] for t in trials)
  assert chosen["share"] > 0.29 and len(trials) <= 6
  assert max(t["lambda"] for t in trials) <= max(lambda0, 0.01) * 10
  lams = [t["lambda"] for t in trials]
  assert len(set(lams)) == len(lams)


def test_search_reaches_the_band_on_the_near_side_of_a_high_peak():
  share = _hump(0.01, 0.9, width=1.5)
  trials, chosen, in_band = lambda_heuristic.search(
      lambda i, lam: {"share": share(lam)}, 1.0, (0.4, 0.6), max_trials=8)
  assert in_band and 0.4 <= chosen["share"] <= 0.6 and chosen is trials[-1]


def test_search_bisects_when_the_secant_step_would_leave_the_bracket():
  trials = [{"lambda": 1.0, "share": 0.1}, {"lambda": 100.0, "share": 0.99999}]
  nxt = lambda_heuristic.propose_next(trials, (0.4, 0.6))
  assert 1.0 < nxt < 100.0


# -- records and the calibration procedure, with a stand-in for training ------------


class FakeTraining:
  """experiment.run_experiment's contract for calibrate.py, without a net: the
  penalty's share over the window is a logistic function of λ, result.json
  is written in the run folder and read back when it exists; returned as
  run_experiment returns it, {algorithm: {seed: result}}."""

  def __init__(self, fail_at_call=None):
    self.trained = []
    self.penalties = []
    self.fail_at_call = fail_at_call

  def __call__(self, *, algorithm, seed, results_dir, penalty, protocol,
               save_final_state=False, model="calibrate", **_):
    assert penalty.start_step == 0  # the calibration's runs: lambda from step 0
    lambda_gate, train_steps = penalty.lambda_gate, protocol.train_steps
    out = runs.run_dir(results_dir, model, algorithm, seed)
    path = out / runs.RESULT_NAME
    if path.exists():
      return {algorithm: {seed: json.loads(path.read_text())}}
    if self.fail_at_call is not None and len(self.trained) == self.fail_at_call:
      raise RuntimeError("killed")
    self.trained.append((seed, lambda_gate))
    self.penalties.append(penalty)
    big_l, big_g = 2.0 + seed, 4.0 / math.sqrt(1 + 3 * lambda_gate)  # the gate shuts as λ grows
    steps = list(range(2, train_steps + 1, 2))
    result = {"steps": train_steps, "status": "done", "lambda_gate": lambda_gate,
              "curves": {"train": {
                  "step": steps, "output_loss": [big_l / 2] * len(steps),
                  "hint_loss": [big_l / 2] * len(steps), "gate_term": [big_g] * len(steps),
                  "gate_penalty": [lambda_gate * big_g] * len(steps)},
                  "val": {"step": [train_steps], "hidden_norm": [0.1]}}}
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    if save_final_state:
      (out / runs.FINAL_STATE_NAME).write_bytes(b"state")
    return {algorithm: {seed: result}}


SETTINGS = dict(algorithm="bfs", train_steps=1000, batch_size=32, hidden_size=128,
                learning_rate=1.5e-3, grad_clip_max_norm=1.0, schedule_steps=1000,
                train_lengths=[4, 7, 11, 13, 16], processor="triplet_gmpnn",
                nb_triplet_fts=8, gate_mlp_layers=2, gate_bias_init=0.0)


@pytest.fixture
def fake(monkeypatch):
  config.parse_gin([], [])
  fake = FakeTraining()
  monkeypatch.setattr(experiment, "run_experiment", fake)
  monkeypatch.setattr(runspec, "settings_of", lambda alg, exp: dict(SETTINGS, algorithm=alg))
  return fake


def test_schedule_reading_makes_the_penalty_half_at_the_switch(tmp_path, fake):
  h = lambda_heuristic.LambdaHeuristic(seeds=(0, 1, 2))
  record = calibrate.calibrate_algorithm("bfs", tmp_path, h)
  assert [s for s, _ in fake.trained] == [0, 1, 2]
  assert all(lam == 0.0 for _, lam in fake.trained)  # λ = 0 runs only: no search
  lambdas = [s["lambda"] for s in record["seeds"]]
  assert lambdas == [s["at_lambda0"]["L"] / s["at_lambda0"]["G"] for s in record["seeds"]]
  assert record["lambda"] == sorted(lambdas)[1]  # the median
  # By construction: the median seed's penalty is exactly half of its loss.
  assert record["seeds"][1]["share_at_switch"] == pytest.approx(0.5)
  assert (record["calibration_step"], record["window_steps"]) == (600, 50)
  path = calibration_records.record_path(tmp_path, "schedule", "bfs")
  assert json.loads(path.read_text()) == record
  lam, info = calibration_records.load_lambda(tmp_path, "bfs", h, dict(SETTINGS))
  assert lam == record["lambda"] and info["source"] == "calibration record"
  # A second call reads it back: nothing trained again.
  calibrate.calibrate_algorithm("bfs", tmp_path, h)
  assert len(fake.trained) == 3


def test_constant_reading_searches_and_records_every_trial(tmp_path, fake):
  h = lambda_heuristic.LambdaHeuristic(reading="constant", seeds=(0,))
  record = calibrate.calibrate_algorithm("bfs", tmp_path, h)
  seed = record["seeds"][0]
  assert seed["in_band"] and record["status"] == "done"
  assert 0.4 <= seed["share_reached"] <= 0.6
  assert [t["lambda"] for t in seed["trials"]] == [lam for _, lam in fake.trained[1:]]
  for t in seed["trials"]:
    assert {"lambda", "L", "G", "P", "share", "gate_norm", "steps", "run_dir"} <= set(t)
  assert record["lambda"] == seed["lambda"] == seed["trials"][-1]["lambda"]


def test_constant_search_resumes_where_it_was_killed(tmp_path, fake, monkeypatch):
  h = lambda_heuristic.LambdaHeuristic(reading="constant", seeds=(0,))
  killed = FakeTraining(fail_at_call=3)  # λ = 0 run, trials 0 and 1, then killed
  monkeypatch.setattr(experiment, "run_experiment", killed)
  with pytest.raises(RuntimeError, match="killed"):
    calibrate.calibrate_algorithm("bfs", tmp_path, h)
  assert not calibration_records.record_path(tmp_path, "constant", "bfs").exists()
  resumed = FakeTraining()
  monkeypatch.setattr(experiment, "run_experiment", resumed)
  record = calibrate.calibrate_algorithm("bfs", tmp_path, h)
  # Only the trials not finished before the kill are trained.
  assert resumed.trained == [(0, t["lambda"]) for t in record["seeds"][0]["trials"][2:]]
  fresh = tmp_path / "fresh"
  monkeypatch.setattr(experiment, "run_experiment", FakeTraining())
  assert calibrate.calibrate_algorithm("bfs", fresh, h)["lambda"] == record["lambda"]


@pytest.mark.parametrize("reading", ["schedule", "constant"])
def test_continuation_names_the_state_step_and_lambda_of_the_prefix(tmp_path, reading, capsys):
  """Which saved state a run continues from, and with what it was trained: schedule,
  the λ = 0 run's, only for a run whose penalty starts at the switch; constant, the
  chosen trial's, only for a run penalised from step 0 with the record's λ."""
  state = tmp_path / "state.npz"
  state.write_bytes(b"")
  lam, step = 0.25, 12
  entry = {"seed": 0, "lambda": lam, "final_state": str(state), "chosen_state": str(state)}
  record = {"schema": calibration_records.RECORD_SCHEMA, "algorithm": "insertion_sort",
            "reading": reading, "lambda": lam, "calibration_step": step, "settings": {},
            "seeds": [entry]}
  path = tmp_path / "record.json"
  path.write_text(json.dumps(record))
  info = {"record": str(path), "reading": reading, "calibration_step": step}
  start = step if reading == "schedule" else 0
  got = calibration_records.continuation(info, 0, lam=lam, penalty_start=start)
  assert got == calibration_records.Continuation(
      state, step, 0.0 if reading == "schedule" else lam)
  assert calibration_records.continuation(info, 0, lam=lam, penalty_start=step - start) is None
  assert calibration_records.continuation(info, 1, lam=lam, penalty_start=start) is None
  if reading == "constant":  # another seed's λ is the median: its trial is not this run
    path.write_text(json.dumps(dict(record, seeds=[dict(entry, **{"lambda": 2 * lam})])))
    assert calibration_records.continuation(info, 0, lam=lam, penalty_start=start) is None
    path.write_text(json.dumps(record))
  state.unlink()
  assert calibration_records.continuation(info, 0, lam=lam, penalty_start=start) is None
  assert "is not there" in capsys.readouterr().err  # said, not silent
  path.unlink()  # the record the run's λ came from, gone: one clear error, not a TypeError
  with pytest.raises(lambda_heuristic.CalibrationError, match="is gone"):
    calibration_records.continuation(info, 0, lam=lam, penalty_start=start)


def test_a_moved_results_folder_still_continues_from_its_calibration_state(tmp_path):
  """The record names its states by the absolute paths calibrate.py wrote; copied with its
  `_calibration/` to another folder, the run finds them there (was: silently from step 0)."""
  old, new = tmp_path / "old", tmp_path / "new"
  rel = pathlib.Path("_calibration/runs/lambda0/calibrate/bfs/seed0/final_state.npz")
  record = {"schema": calibration_records.RECORD_SCHEMA, "algorithm": "bfs",
            "reading": "schedule", "lambda": 0.5, "calibration_step": 12, "settings": {},
            "seeds": [{"seed": 0, "lambda": 0.5, "final_state": str(old / rel)}]}
  path = new / "_calibration" / "schedule" / "bfs.json"
  path.parent.mkdir(parents=True)
  path.write_text(json.dumps(record))
  (new / rel).parent.mkdir(parents=True)
  (new / rel).write_bytes(b"")
  info = {"record": "_calibration/schedule/bfs.json", "reading": "schedule",
          "calibration_step": 12}
  got = calibration_records.continuation(info, 0, lam=0.5, penalty_start=12, results_dir=new)
  assert got == calibration_records.Continuation(new / rel, 12, 0.0)
  (old / rel).parent.mkdir(parents=True)
  (old / rel).write_bytes(b"")  # where it was recorded, when there: that one
  assert calibration_records.continuation(
      info, 0, lam=0.5, penalty_start=12, results_dir=new).state == old / rel


@pytest.mark.parametrize("content", ["{not json", "[]", '{"schema": "other"}'])
def test_a_corrupt_record_is_a_clear_error_and_is_not_overwritten(tmp_path, fake, content):
  path = calibration_records.record_path(tmp_path, "schedule", "bfs")
  path.parent.mkdir(parents=True)
  path.write_text(content)
  with pytest.raises(lambda_heuristic.CalibrationError, match=str(path)):
    calibrate.calibrate_algorithm("bfs", tmp_path, lambda_heuristic.LambdaHeuristic())
  with pytest.raises(lambda_heuristic.CalibrationError, match="move it aside"):
    calibration_records.load_lambda(tmp_path, "bfs", lambda_heuristic.LambdaHeuristic(), dict(SETTINGS))
  assert path.read_text() == content and not fake.trained


def test_constant_trials_keep_one_lambda_whatever_strength_options_gin_binds(tmp_path, fake):
  """The arm's ramp, adaptation and multiplier are for the runs that read the record;
  a search trial trains with its own λ, constant from step 0."""
  config.parse_gin([], ["GatePenalty.adaptive_every_steps = 4", "GatePenalty.ramp_steps = 3",
                        "GatePenalty.lambda_scale = 2.0"])
  h = lambda_heuristic.LambdaHeuristic(seeds=(0,), reading="constant", max_trials=3)
  calibrate.calibrate_algorithm("bfs", tmp_path, h)
  trials = [p for p in fake.penalties if p.lambda_gate > 0]
  assert trials and all((p.adaptive_every_steps, p.ramp_steps, p.lambda_scale) == (None, 0, 1.0)
                        for p in trials)


def test_a_record_made_with_other_settings_is_refused(tmp_path, fake):
  h = lambda_heuristic.LambdaHeuristic(seeds=(0,))
  calibrate.calibrate_algorithm("bfs", tmp_path, h)
  with pytest.raises(lambda_heuristic.CalibrationError, match="hidden_size: record 128 vs run 64"):
    calibration_records.load_lambda(tmp_path, "bfs", h, dict(SETTINGS, hidden_size=64))
  with pytest.raises(lambda_heuristic.CalibrationError, match="calibration_seeds"):
    calibration_records.load_lambda(tmp_path, "bfs", lambda_heuristic.LambdaHeuristic(seeds=(0, 1)),
                          dict(SETTINGS))


def test_one_calibration_shared_by_processes_each_with_its_seeds(tmp_path, fake):
  """`only_seeds` (the CLI's --seed) trains those seeds' λ = 0 runs and writes no record;
  the calibration of all its seeds then reads them back and trains only the rest."""
  h = lambda_heuristic.LambdaHeuristic(seeds=(0, 1, 2))
  assert calibrate.calibrate_algorithm("bfs", tmp_path, h, only_seeds=[2]) is None
  assert fake.trained == [(2, 0.0)]
  assert not calibration_records.record_path(tmp_path, "schedule", "bfs").exists()
  record = calibrate.calibrate_algorithm("bfs", tmp_path, h)
  assert [s for s, _ in fake.trained] == [2, 0, 1]
  assert [e["seed"] for e in record["seeds"]] == [0, 1, 2]
  one_process = calibrate.calibrate_algorithm("bfs", tmp_path / "other", h)
  assert one_process["lambda"] == record["lambda"]  # as if calibrated in one process
  assert calibrate.calibrate_algorithm("bfs", tmp_path, h, only_seeds=[1]) is None
  assert len(fake.trained) == 6  # the record exists: nothing trained
  with pytest.raises(lambda_heuristic.CalibrationError, match=r"seeds \[5\] are not "
                     r"calibration seeds of bfs \(LambdaHeuristic.seeds = \[0, 1, 2\]\)"):
    calibrate.calibrate_algorithm("bfs", tmp_path / "new", h, only_seeds=[1, 5])


def test_cli_results_naming_a_file_is_a_clear_error(tmp_path, capsys):
  afile = tmp_path / "results.txt"
  afile.write_text("x")
  assert calibrate.main(["--show", "--results", str(afile)]) == 2
  assert "is a file, not a results folder" in capsys.readouterr().err
  assert calibrate.main(["--gin", "gin/gforget.gin", "--algorithm", "bfs", "--seed", "7",
                         "--results", str(tmp_path)]) == 2
  assert "seeds [7] are not calibration seeds of bfs" in capsys.readouterr().err


# -- the real thing, tiny: G-ForgetNet reads λ from the record -------------------------


def _calibrated(tmp_path, reading="schedule", bindings=()):
  config.parse_gin([], ["LambdaHeuristic.seeds = [0]", f"LambdaHeuristic.reading = '{reading}'",
                        "LambdaHeuristic.max_trials = 2", *bindings])
  kwargs = dict(TINY, train_steps=STEPS, model="gforget")
  c = flat.components(**kwargs)
  record = calibrate.calibrate_algorithm("insertion_sort", tmp_path, net=c["net"],
                                         protocol=c["protocol"])
  return record, kwargs


@pytest.mark.usefixtures("reuse_learners")
def test_schedule_reading_end_to_end(tmp_path, cache):
  """No penalty before the switch, then λ from the record; continuing from the
  λ = 0 calibration run is the same training as starting from scratch."""
  record, kwargs = _calibrated(tmp_path)
  res = flat.run_one(algorithm="insertion_sort", seed=0, results_dir=str(tmp_path), **kwargs)
  switch = record["calibration_step"]
  assert switch == 12 and res["penalty_start_step"] == switch
  assert res["lambda_gate"] == record["lambda"] > 0
  info = res["lambda_calibration"]
  assert info["source"] == "calibration record" and info["reading"] == "schedule"
  assert info["continued_from"].endswith(runs.FINAL_STATE_NAME)
  # result.json names the record and the state relative to its results folder.
  for key in ("record", "continued_from"):
    assert not pathlib.Path(info[key]).is_absolute() and (tmp_path / info[key]).exists()
  # The calibration run's config.gin, parsed alone, gives that run (its own label, length
  # and λ over the sweep's gin): it replays from its folder.
  base = calibration_records.lambda0_results_dir(tmp_path) / "calibrate" / "insertion_sort" / "seed0"
  assert replay.check_folder(base).model == "calibrate"
  tr = res["curves"]["train"]
  before = [p for s, p in zip(tr["step"], tr["gate_penalty"]) if s <= switch]
  after = [p for s, p in zip(tr["step"], tr["gate_penalty"]) if s > switch]
  assert before and all(p == 0.0 for p in before)
  assert after and all(p > 0 for p in after)
  # From scratch (no reuse of the calibration's state): the same run.
  config.parse_gin([], ["LambdaHeuristic.seeds = [0]",
                        "LambdaHeuristic.reuse_calibration_prefix = False"])
  other = tmp_path / "scratch"
  rec_path = calibration_records.record_path(other, "schedule", "insertion_sort")
  rec_path.parent.mkdir(parents=True)
  rec_path.write_text(json.dumps(record))
  scratch = flat.run_one(algorithm="insertion_sort", seed=0, results_dir=str(other), **kwargs)
  assert "continued_from" not in scratch["lambda_calibration"]
  np.testing.assert_allclose(scratch["curves"]["train"]["loss"], tr["loss"], rtol=1e-5)
  assert scratch["test_score"] == pytest.approx(res["test_score"], abs=1e-6)


@pytest.mark.usefixtures("reuse_learners")
def test_gforget_and_gforget_adaptive_continue_from_one_schedule_calibration(tmp_path, cache):
  """A calibration made under the adaptive arm's gin (GatePenalty.adaptive_every_steps
  bound: recorded in the λ = 0 run's settings, inert at λ = 0) is the prefix of both
  arms, as its record (which keeps no penalty-strength setting) is theirs."""
  adaptive = "GatePenalty.adaptive_every_steps = 4"
  record, kwargs = _calibrated(tmp_path, bindings=[adaptive])
  base = calibration_records.lambda0_results_dir(tmp_path) / "calibrate" / "insertion_sort" / "seed0"
  assert json.loads((base / "result.json").read_text())["settings"]["adaptive_every_steps"] == 4
  for label, bindings in (("gforget", []), ("gforget_adaptive", [adaptive])):
    config.parse_gin([], ["LambdaHeuristic.seeds = [0]", *bindings])
    res = flat.run_one(algorithm="insertion_sort", seed=0, results_dir=str(tmp_path),
                       **dict(kwargs, model=label, history="gated",
                       penalty=components.GatePenalty(None)))
    assert res["lambda_calibration"]["continued_from"].endswith(runs.FINAL_STATE_NAME)
    assert res["settings"].get("adaptive_every_steps") == (4 if bindings else None)
    assert bool(res.get("lambda_updates")) == bool(bindings)


@pytest.mark.usefixtures("reuse_learners")
def test_constant_reading_end_to_end(tmp_path, cache):
  """A band this tiny run misses at λ0 (its share there is ~0.47): two trials, the
  closest chosen; the run continues from that trial's state, as if from scratch."""
  bindings = ["LambdaHeuristic.seeds = [0]", "LambdaHeuristic.reading = 'constant'",
              "LambdaHeuristic.max_trials = 2", "LambdaHeuristic.band = (0.05, 0.2)"]
  record, kwargs = _calibrated(tmp_path, "constant", bindings[-1:])
  seed = record["seeds"][0]
  assert len(seed["trials"]) == 2 and record["status"] in ("done", "closest")
  for t in seed["trials"]:
    assert pathlib.Path(t["run_dir"], runs.RESULT_NAME).exists()
  config.parse_gin([], bindings)
  res = flat.run_one(algorithm="insertion_sort", seed=0, results_dir=str(tmp_path),
                     **dict(kwargs, model="gforget_constant"))
  assert res["penalty_start_step"] == 0 and res["lambda_gate"] == record["lambda"]
  assert res["lambda_calibration"]["reading"] == "constant"
  assert all(p > 0 for p in res["curves"]["train"]["gate_penalty"])
  # The run continued from the chosen trial's state; the other trials' states are gone.
  chosen = seed["trials"][seed["chosen_trial"]]
  assert chosen["lambda"] == record["lambda"]
  assert (tmp_path / res["lambda_calibration"]["continued_from"]).resolve() == (
      pathlib.Path(seed["chosen_state"]).resolve())
  assert seed["chosen_state"] == chosen["final_state"]
  for t in seed["trials"]:
    assert pathlib.Path(t["final_state"]).exists() == (t is chosen)
  # From scratch (no reuse of the trial's state): the same run.
  config.parse_gin([], bindings + ["LambdaHeuristic.reuse_calibration_prefix = False"])
  other = tmp_path / "scratch"
  rec_path = calibration_records.record_path(other, "constant", "insertion_sort")
  rec_path.parent.mkdir(parents=True)
  rec_path.write_text(json.dumps(record))
  scratch = flat.run_one(algorithm="insertion_sort", seed=0, results_dir=str(other),
                         **dict(kwargs, model="gforget_constant"))
  assert "continued_from" not in scratch["lambda_calibration"]
  np.testing.assert_allclose(scratch["curves"]["train"]["loss"],
                             res["curves"]["train"]["loss"], rtol=1e-5)
  assert scratch["test_score"] == pytest.approx(res["test_score"], abs=1e-6)


def test_a_diverged_trial_counts_as_above_the_band():
  trials = [{"lambda": 1.0, "share": 0.1}, {"lambda": 10.0, "share": None}]
  nxt = lambda_heuristic.propose_next(trials, (0.4, 0.6))
  assert 1.0 < nxt < 10.0
  assert lambda_heuristic.closest_trial(trials, (0.4, 0.6))["lambda"] == 1.0
  with pytest.raises(lambda_heuristic.CalibrationError, match="every search trial diverged"):
    lambda_heuristic.closest_trial([{"lambda": 1.0, "share": None}], (0.4, 0.6))
