"""analysis.verdict: the rule written before the runs, applied per algorithm (no jax); its
Markov column from each run's markov.json (the tested checkpoint with its history zeroed)."""

import json
import pathlib

import pandas as pd
import pytest

from analysis import verdict
from nar_markov.store import runs

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _markov(delta=0.0, changed=0.0, gate=0.05, step=50, score=None):
  return {"schema": runs.MARKOV_SCHEMA, "delta": delta, "predictions_changed": changed,
          "gate_norm": gate, "step": step, "test_score": score}


def _run(model, seed, score, norm=0.05, scope=None, algorithm="binary_search", markov=None,
         status="done"):
  gin = "NetConfig.history = 'gated'\n"
  if scope:
    gin += f"NetConfig.history_scope = '{scope}'\n"
  return {"schema": runs.RESULT_SCHEMA, "model": model, "algorithm": algorithm, "seed": seed,
          "status": status, "test_score": score, "steps": 100, "train_steps": 100,
          "val_best_step": 50, "gin_config": gin, "markov": markov,
          "curves": {"val": {"step": [0, 50], "hidden_norm": [0.7, norm]}}}


def _row(runs_):
  frame = verdict.verdict_frame(runs_)
  assert len(frame) == 1
  return frame.iloc[0]


def test_beats_needs_the_mean_and_two_of_three_seeds():
  forget = [_run("forget", s, x) for s, x in enumerate([0.70, 0.60, 0.80])]
  # Above on seeds 0 and 1, far below on seed 2: the mean is below, so not a win.
  row = _row(forget + [_run("gforget", s, x) for s, x in enumerate([0.71, 0.61, 0.50])])
  assert row.beats == "no" and row.seeds_above == 2 and row.paired_diff < 0
  # Above on one seed only, mean above: still not a win.
  row = _row(forget + [_run("gforget", s, x) for s, x in enumerate([0.95, 0.55, 0.75])])
  assert row.beats == "no" and row.seeds_above == 1 and row.paired_diff > 0
  row = _row(forget + [_run("gforget", s, x) for s, x in enumerate([0.90, 0.65, 0.75])])
  assert row.beats == "yes" and row.seeds_above == 2


def test_fewer_than_three_paired_seeds_is_not_called():
  runs_ = [_run("forget", 0, 0.5), _run("gforget", 0, 0.9), _run("gforget", 1, 0.9)]
  row = _row(runs_)
  assert row.beats == "not called (1 paired seed)"
  assert row.gforget_seeds == "0,1" and row.forget_seeds == "0"


def test_markov_is_the_measurement_at_test_not_the_validation_norm():
  """The column reads each seed's markov.json, never the validation gate norm: a closed gate
  at validation with an open one at test is not Markov, and the other way round it is; a
  run without a record is not measured; every seed must be measured and Markov."""
  forget = [_run("forget", s, 0.5) for s in range(3)]

  def markov(*records, norm=0.05, scope=None):
    return _row(forget + [_run("gforget", s, 0.9, norm=norm, scope=scope, markov=m)
                          for s, m in enumerate(records)]).markov

  closed, open_ = _markov(gate=0.05), _markov(gate=0.5)
  assert markov(closed, closed, closed, norm=0.9) == "yes"
  assert markov(open_, closed, closed, norm=0.05) == "no"
  assert markov(closed, _markov(delta=-0.02), closed) == "no"
  assert markov(closed, _markov(changed=0.2), closed) == "no"   # the score kept, answers not
  assert markov(None, None, None) == "not measured (no parameters here)"
  assert markov(closed, closed, None) == (
      "not called (seed 2 not measured: no parameters here)")
  assert markov(closed, open_, None) == "no"
  assert markov(closed, closed, closed, scope="processor") == "no (scope processor)"
  row = _row(forget + [_run("gforget", s, 0.9, markov=m)
                       for s, m in enumerate([_markov(delta=-0.02, changed=0.1, gate=0.3),
                                              _markov(delta=0.0, changed=0.3, gate=0.5),
                                              None])])
  assert row.markov_seeds == "0,1"
  assert (row.markov_delta, row.markov_changed, row.markov_gate_norm) == pytest.approx(
      (-1.0, 20.0, 0.4))


def test_paper_columns_come_from_the_paper_table():
  row = _row([_run("forget", 0, 0.5), _run("gforget", 0, 0.9)])
  # binary_search in the paper's Table 1: ForgetNet 74.41 +- 2.11, G-ForgetNet 85.96 +- 1.59.
  assert (row.paper_forget, row.paper_gforget, row.paper_gforget_sd) == (74.41, 85.96, 1.59)
  assert abs(row.delta_sigma - (90.0 - 85.96) / 1.59) < 1e-9
  md = verdict.to_markdown(verdict.verdict_frame(
      [_run("forget", 0, 0.5), _run("gforget", 0, 0.9, markov=_markov(-0.005, 0.004, 0.05))]))
  assert ("| binary_search | — | 50.00 (0) | 90.00 (0) | no baseline runs | — "
          "| 62.79 → 74.41 (+11.62) | — | not called (1 paired seed) | +40.00 (1 of 1) "
          "| 74.41 → 85.96 (+11.55) | — | no baseline runs | — | 62.79 → 85.96 (+23.17) | — "
          "| —, -11.6, +2.5 | —, —, — | 0.050 | -0.50, 0.4 %, 0.050 (0) | yes |") in md


# --- the paper's first claim: ForgetNet above the baseline ---------------------------------


def _three(forget, base, gated=(0.9, 0.9, 0.9), algorithm="binary_search"):
  """A row of ForgetNet, G-ForgetNet and the baseline, seeds 0.. of each list."""
  return _row([_run(m, s, x, algorithm=algorithm)
               for m, xs in (("forget", forget), ("gforget", gated), ("baseline", base))
               for s, x in enumerate(xs)])


@pytest.mark.parametrize("algorithm,forget,base,beats,as_in_paper", [
    # binary_search: the paper's F - B is +11.62. F - B per seed +5, +5, -4 (mean +2): F
    # wins; -5, -5, +4 (mean -2): the baseline wins; +1, +1, -30: F above on 2 seeds with its
    # mean below, the baseline above on 1: neither.
    ("binary_search", [0.70, 0.60, 0.80], [0.65, 0.55, 0.84], "yes", "yes"),
    ("binary_search", [0.70, 0.60, 0.80], [0.75, 0.65, 0.76], "no: the baseline beats it",
     "no"),
    ("binary_search", [0.71, 0.61, 0.50], [0.70, 0.60, 0.80], "no: neither", "no"),
    # kadane: the paper's +0.90 is within both σ (1.42, 1.70): neither is as in the paper,
    # and so is ForgetNet above.
    ("find_maximum_subarray_kadane", [0.71, 0.61, 0.50], [0.70, 0.60, 0.80], "no: neither",
     "yes"),
    ("find_maximum_subarray_kadane", [0.70, 0.60, 0.80], [0.65, 0.55, 0.84], "yes", "yes"),
    ("find_maximum_subarray_kadane", [0.70, 0.60, 0.80], [0.75, 0.65, 0.76],
     "no: the baseline beats it", "no"),
    # naive_string_matcher: the paper's F - B is -18.10, outside its σ.
    ("naive_string_matcher", [0.70, 0.60, 0.80], [0.75, 0.65, 0.76],
     "no: the baseline beats it", "yes"),
    ("naive_string_matcher", [0.71, 0.61, 0.50], [0.70, 0.60, 0.80], "no: neither", "no"),
])
def test_forget_beats_the_baseline_by_the_rule_written_before(algorithm, forget, base, beats,
                                                               as_in_paper):
  row = _three(forget, base, algorithm=algorithm)
  assert row.forget_beats_baseline == beats and row.fb_as_in_paper == as_in_paper
  assert row.fb_paired_seeds == 3


def test_forget_and_baseline_paired_figures_and_sigma_by_hand():
  row = _three([0.70, 0.60, 0.80], [0.65, 0.55, 0.90])
  # F - B per seed: +5, +5, -10 points -> mean 0.0: not above, so not a win though 2 of 3.
  assert row.fb_paired_diff == pytest.approx(0.0) and row.fb_seeds_above == 2
  assert row.forget_beats_baseline == "no: neither"
  row = _three([0.70, 0.60, 0.80], [0.65, 0.55, 0.84])
  # +5, +5, -4 -> +2: ForgetNet beats the baseline.
  assert row.fb_paired_diff == pytest.approx(2.0) and row.forget_beats_baseline == "yes"
  # The baseline's mean 68.0 = (65 + 55 + 84) / 3 against the paper's 62.79 ± 4.31;
  # ForgetNet's 70.0 against 74.41 ± 2.11.
  assert row.baseline_mean == pytest.approx(68.0)
  assert row.baseline_delta_sigma == pytest.approx((68.0 - 62.79) / 4.31)
  assert row.forget_delta_sigma == pytest.approx((70.0 - 74.41) / 2.11)
  assert row.paper_baseline == 62.79 and row.paper_fb_diff == pytest.approx(74.41 - 62.79)


def test_forget_and_baseline_with_fewer_than_three_seeds_is_reported_not_called():
  row = _three([0.70, 0.60, 0.80], [0.50, 0.40])
  assert row.forget_beats_baseline == "not called (2 paired seeds)"
  assert row.fb_as_in_paper == "—"
  assert row.fb_paired_diff == pytest.approx(20.0) and row.fb_seeds_above == 2
  assert row.baseline_seeds == "0,1"
  row = _three([0.70, 0.60, 0.80], [])
  assert row.forget_beats_baseline == "no baseline runs" and row.fb_as_in_paper == "—"


# --- the command line: what it reads from a results tree ---------------------------------


def _write(root, rel, run, markov=None):
  folder = root / rel
  folder.mkdir(parents=True)
  (folder / runs.RESULT_NAME).write_text(json.dumps({k: v for k, v in run.items()
                                                     if k != "markov"}))
  if markov is not None:
    (folder / runs.MARKOV_NAME).write_text(json.dumps(dict(markov,
                                                           test_score=run["test_score"])))


def _main(tmp_path, capsys, *roots):
  code = verdict.main(["--results", *map(str, roots), "--out", str(tmp_path / "out")])
  out, err = capsys.readouterr()
  if code:
    return code, err
  return code, pd.read_csv(tmp_path / "out" / "verdict.csv").to_dict("records")


def _tree(root, gates=(0.05, 0.05, 0.05)):
  for s, (f, g, b) in enumerate([(0.60, 0.80, 0.55), (0.70, 0.75, 0.60), (0.65, 0.90, 0.70)]):
    _write(root, f"forget/binary_search/seed{s}", _run("forget", s, f))
    _write(root, f"baseline/binary_search/seed{s}", _run("baseline", s, b))
    _write(root, f"gforget/binary_search/seed{s}", _run("gforget", s, g),
           markov=_markov(gate=gates[s]))


def test_cli_drops_calibration_runs(tmp_path, capsys):
  """A λ calibration run is no result: neither by its label nor by its place (_calibration/),
  even where it has a model label of the arm compared."""
  _tree(tmp_path / "r")
  _write(tmp_path / "r", "_calibration/runs/lambda0/gforget/binary_search/seed3",
         _run("gforget", 3, 0.10))
  _write(tmp_path / "r", "_calibration/runs/lambda0/calibrate/binary_search/seed0",
         _run("calibrate", 0, 0.10))
  _write(tmp_path / "r", "_calibration/runs/lambda0/baseline/binary_search/seed0",
         _run("baseline", 0, 0.99))
  code, (row,) = _main(tmp_path, capsys, tmp_path / "r")
  assert code == 0
  assert row["gforget_seeds"] == "0,1,2" and row["gforget_mean"] == pytest.approx(81.6666667)
  # ForgetNet 60, 70, 65 over the baseline's 55, 60, 70: +5, +10, -5 -> +3.33, 2 of 3.
  assert row["baseline_seeds"] == "0,1,2" and row["baseline_mean"] == pytest.approx(61.6666667)
  assert row["fb_paired_diff"] == pytest.approx(10.0 / 3) and row["fb_seeds_above"] == 2
  assert row["forget_beats_baseline"] == "yes" and row["fb_as_in_paper"] == "yes"
  assert "| 61.67 ± 7.64 (0,1,2) |" in (tmp_path / "out" / "verdict.md").read_text()


def test_cli_counts_a_diverged_run_with_its_score_and_drops_one_without(tmp_path, capsys):
  """As results.py decides for every table: a run that diverged after its best validation
  keeps that checkpoint's test score; one without a score has nothing to count."""
  _tree(tmp_path / "r")
  _write(tmp_path / "r", "gforget/binary_search/seed3",
         _run("gforget", 3, 0.40, status="diverged"))
  _write(tmp_path / "r", "gforget/binary_search/seed4",
         _run("gforget", 4, None, status="diverged"))
  code, (row,) = _main(tmp_path, capsys, tmp_path / "r")
  assert code == 0 and row["gforget_seeds"] == "0,1,2,3"
  assert row["gforget_mean"] == pytest.approx((80 + 75 + 90 + 40) / 4)
  # Seed 3 is measured by nobody: the arm is not called Markov.
  assert row["markov"] == "not called (seed 3 not measured: no parameters here)"


def test_cli_without_runs_to_compare_is_exit_2(tmp_path, capsys):
  (tmp_path / "empty").mkdir()
  code, err = _main(tmp_path, capsys, tmp_path / "empty")
  assert code == 2 and "no algorithm with both ForgetNet and gforget" in err
  _write(tmp_path / "forget_only", "forget/binary_search/seed0", _run("forget", 0, 0.6))
  assert _main(tmp_path, capsys, tmp_path / "forget_only")[0] == 2
  code, err = _main(tmp_path, capsys, tmp_path / "nowhere")
  assert code == 2 and err.startswith("verdict: error:") and "nowhere" in err
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("gate,markov", [(0.1, "no"), (0.0999, "yes")])
def test_cli_gate_norm_threshold_is_strict(tmp_path, capsys, gate, markov):
  """0.1 is the bound (docs/design.md): a gate norm of exactly 0.1 at test is not Markov."""
  _tree(tmp_path / "r", gates=(0.05, gate, 0.05))
  code, (row,) = _main(tmp_path, capsys, tmp_path / "r")
  assert code == 0 and row["markov"] == markov


def test_cli_refuses_a_record_of_another_checkpoint(tmp_path, capsys):
  """markov.json measured another checkpoint than the one the run tested (the run was
  trained again): one line, exit 2, not a silent verdict."""
  _tree(tmp_path / "r")
  stale = tmp_path / "r" / "gforget/binary_search/seed1" / runs.MARKOV_NAME
  stale.write_text(json.dumps(dict(json.loads(stale.read_text()), step=80)))
  code, err = _main(tmp_path, capsys, tmp_path / "r")
  assert code == 2 and "measured step 80" in err and "measure it again" in err
  assert len(err.strip().splitlines()) == 1


# --- the headline (G-ForgetNet above the baseline) and how sure each call is --------------


def test_markdown_columns_are_in_the_readme_order_and_say_which_claim():
  """The README orders the models baseline, ForgetNet, G-ForgetNet: so do the seeds and the
  Δ/σ columns (was G, F, B), and every call column names the claim it answers."""
  md = verdict.to_markdown(verdict.verdict_frame(
      [_run(m, s, x) for m, xs in (("forget", (0.7, 0.6, 0.8)), ("gforget", (0.9, 0.9, 0.9)),
                                   ("baseline", (0.65, 0.55, 0.84)))
       for s, x in enumerate(xs)]))
  header = md.splitlines()[0]
  order = ["baseline (seeds)", "ForgetNet (seeds)", "G-ForgetNet (seeds)",
           "F beats B here? (first claim", "G beats F here? (second claim",
           "G beats B here? (headline", "Δ/σ to the paper: B, F, G (distance to the paper's "
           "mean, not a significance test)", "our std over seeds: B, F, G"]
  at = [header.index(c) for c in order]
  assert at == sorted(at)
  row = md.splitlines()[2]
  # baseline 68.00 (62.79 ± 4.31), ForgetNet 70.00 (74.41 ± 2.11), G 90.00 (85.96 ± 1.59)
  assert "| +1.2, -2.1, +2.5 | 14.73, 10.00, 0.00 |" in row


@pytest.mark.parametrize("gated,beats,as_in_paper", [
    ((0.70, 0.60, 0.90), "yes", "yes"),                       # +5, +5, +6 over the baseline
    ((0.60, 0.50, 0.80), "no: the baseline beats it", "no"),  # -5, -5, -4
    ((0.66, 0.56, 0.50), "no: neither", "no"),                # +1, +1, -34
])
def test_gforget_beats_the_baseline_by_the_same_rule(gated, beats, as_in_paper):
  row = _three([0.70, 0.60, 0.80], [0.65, 0.55, 0.84], gated=gated)
  assert row.gforget_beats_baseline == beats and row.gb_as_in_paper == as_in_paper
  assert row.paper_gb_diff == pytest.approx(85.96 - 62.79) and row.gb_paired_seeds == 3


def test_each_call_has_its_interval_and_p_value_by_hand():
  # G - B per seed +5, +5, +6: mean 5.333, sd 0.5774, se 0.3333; t = 16.0 on 2 dof:
  # p = 0.0038835 (scipy.stats.ttest_rel); 95 % CI 5.333 -+ 4.302653 * 0.3333.
  row = _three([0.70, 0.60, 0.80], [0.65, 0.55, 0.84], gated=(0.70, 0.60, 0.90))
  assert row.gb_paired_diff == pytest.approx(16.0 / 3)
  assert row.gb_p == pytest.approx(0.0038835098, rel=1e-6)
  assert row.gb_ci_low == pytest.approx(16.0 / 3 - 4.302653 / 3, rel=1e-6)
  assert row.gb_ci_high == pytest.approx(16.0 / 3 + 4.302653 / 3, rel=1e-6)
  assert row.gb_reading == "stands"
  # F - B +5, +5, -4 (sd 5.196, t 0.667): a call ("yes") whose p is 0.57 > 0.1 reads
  # "direction only".
  assert row.forget_beats_baseline == "yes" and row.fb_reading == "direction only"
  assert row.fb_p == pytest.approx(0.5735985673, rel=1e-6)
  md = verdict.to_markdown(verdict.verdict_frame(
      [_run(m, s, x) for m, xs in (("forget", (0.7, 0.6, 0.8)), ("gforget", (0.7, 0.6, 0.9)),
                                   ("baseline", (0.65, 0.55, 0.84)))
       for s, x in enumerate(xs)]))
  assert "| yes, direction only | +2.00 [-10.91, +14.91], p 0.57 (2 of 3) |" in md
  assert "| yes, stands | +5.33 [+3.90, +6.77], p 0.0039 (3 of 3) |" in md
  # A call of no winner carries no reading.
  assert _three([0.71, 0.61, 0.50], [0.70, 0.60, 0.80]).fb_reading == ""


def test_the_verdict_of_our_committed_runs_matches_the_hand_computed_p_values():
  """On 3 seeds, kadane's two claims (p 0.011, 0.010) and binary_search's G > F (p 0.045)
  stand; insertion_sort's F > B is a direction only (p 0.36)."""
  frame = pd.read_csv(ROOT / "results" / "verdict" / "verdict.csv").set_index("algorithm")
  kadane = frame.loc["find_maximum_subarray_kadane"]
  assert (kadane.fb_reading, kadane.gf_reading) == ("stands", "stands")
  assert kadane.fb_p == pytest.approx(0.011, abs=1e-3) and kadane.gf_p == pytest.approx(
      0.010, abs=1e-3)
  assert frame.loc["binary_search"].gf_p == pytest.approx(0.045, abs=1e-3)
  assert frame.loc["insertion_sort"].fb_reading == "direction only"
  assert frame.loc["insertion_sort"].fb_p == pytest.approx(0.36, abs=0.01)


def test_cli_an_unknown_arm_is_one_line(tmp_path, capsys):
  _tree(tmp_path / "r")
  code = verdict.main(["--results", str(tmp_path / "r"), "--arm", "gforgett", "--out",
                       str(tmp_path / "out")])
  err = capsys.readouterr().err
  assert code == 2 and err == ("verdict: error: --arm 'gforgett' is not a G-ForgetNet label "
                               "(gforget or gforget_<variant>); under --results: gforget\n")
  assert not (tmp_path / "out").exists()


def test_cli_an_out_that_is_a_file_or_cannot_be_written_is_one_line(tmp_path, capsys,
                                                                     monkeypatch):
  _tree(tmp_path / "r")
  (tmp_path / "file").write_text("x")
  code = verdict.main(["--results", str(tmp_path / "r"), "--out", str(tmp_path / "file")])
  err = capsys.readouterr().err
  assert code == 2 and err == f"verdict: error: --out {tmp_path / 'file'} exists and is not a directory\n"

  def read_only(self, *a, **k):  # what a read-only --out does (root would write anyway)
    raise PermissionError(13, "Permission denied", str(a[0]))
  monkeypatch.setattr(pd.DataFrame, "to_csv", read_only)
  code = verdict.main(["--results", str(tmp_path / "r"), "--out", str(tmp_path / "ro")])
  err = capsys.readouterr().err
  assert code == 2 and err.startswith(f"verdict: error: cannot write --out {tmp_path / 'ro'}: "
                                      "Permission denied")
  assert len(err.splitlines()) == 1
