"""analysis.processor_call: docs/design.md's "Which processor" rule, on made-up seeds and on
the committed runs."""

import math

import pytest

from analysis import processor_call as pc

PAPER = {"find_maximum_subarray_kadane": (63.67, 1.70), "binary_search": (62.79, 4.31),
         "insertion_sort": (70.62, 8.26), "activity_selector": (93.02, 1.62)}
KADANE, BINARY = "find_maximum_subarray_kadane", "binary_search"
INSERTION = "insertion_sort"


def _scores(cells):
  return {(alg, proc): dict(enumerate(values)) for (alg, proc), values in cells.items()}


def test_the_processor_that_lands_on_more_is_called():
  frame = pc.algorithm_rows(_scores({
      (KADANE, "triplet_gmpnn"): [83.0, 84.0, 85.0], (KADANE, "triplet_mpnn"): [64.0, 65.0, 63.0],
      (BINARY, "triplet_gmpnn"): [95.0, 60.0, 85.0], (BINARY, "triplet_mpnn"): [60.0, 61.0, 66.0],
  }), PAPER)
  chosen, how = pc.call(frame)
  assert chosen == "triplet_mpnn"
  assert "lands on 2 of 2, the other on 0" in how
  # binary_search's seeds overlap: Welch p > 0.1 there, and the call rests on it
  assert "provisional" in how and "binary_search" in how and "not provisional" not in how
  row = frame[(frame.algorithm == KADANE) & (frame.processor == "triplet_mpnn")].iloc[0]
  assert row.lands is True and row.delta_sigma == pytest.approx((64.0 - 63.67) / 1.70)
  assert row.welch_mpnn_minus_gmpnn == pytest.approx(64.0 - 84.0) and row.welch_p < 0.01


def test_a_tie_goes_to_the_smaller_mean_distance_and_incomplete_algorithms_do_not_count():
  frame = pc.algorithm_rows(_scores({
      (KADANE, "triplet_gmpnn"): [70.0, 71.0, 72.0], (KADANE, "triplet_mpnn"): [75.0, 76.0, 77.0],
      (BINARY, "triplet_gmpnn"): [80.0, 81.0, 82.0], (BINARY, "triplet_mpnn"): [80.0, 81.0, 83.0],
      (INSERTION, "triplet_gmpnn"): [70.0], (INSERTION, "triplet_mpnn"): [70.0, 71.0, 72.0],
  }), PAPER)
  chosen, how = pc.call(frame)
  # mean |delta/sigma|: gmpnn (4.3 + 4.2) / 2 against mpnn (7.3 + 4.3) / 2
  assert chosen == "triplet_gmpnn" and "both land on 0 of 2" in how
  assert INSERTION not in how.split(";")[0].split(", on ")[1]
  assert frame[(frame.algorithm == INSERTION)
               & (frame.processor == "triplet_gmpnn")].lands.item() is None


def test_no_call_before_kadane_and_binary_search_are_complete():
  frame = pc.algorithm_rows(_scores({
      (BINARY, "triplet_gmpnn"): [75.6, 91.3, 72.2], (BINARY, "triplet_mpnn"): [88.8, 87.6, 88.4],
      (KADANE, "triplet_gmpnn"): [82.0, 85.2, 83.9], (KADANE, "triplet_mpnn"): [73.8, 75.7],
  }), PAPER)
  chosen, how = pc.call(frame)
  assert chosen is None and how.startswith("no call") and how.endswith(KADANE)


def test_no_call_without_three_seeds_of_both():
  frame = pc.algorithm_rows(_scores({(KADANE, "triplet_mpnn"): [74.0, 75.0]}), PAPER)
  assert pc.call(frame) == (None, pc.call(frame)[1]) and "no call" in pc.call(frame)[1]
  assert math.isnan(frame[frame.processor == "triplet_gmpnn"].welch_p.iloc[0])


def _run(path, seed, processor, steps=10_000):
  return {"model": "baseline", "algorithm": KADANE, "seed": seed, "status": "done",
          "test_score": 0.7, "path": path, "train_steps": steps,
          "settings": {"processor": processor, "train_steps": steps}}


def test_runs_of_two_protocols_are_refused_and_a_duplicate_seed_too():
  with pytest.raises(ValueError, match="differ in protocol apart from the processor"):
    pc.baseline_scores([_run("a", 0, "triplet_mpnn"), _run("b", 1, "triplet_gmpnn", 2000)])
  with pytest.raises(ValueError, match="two baseline runs of find_maximum_subarray_kadane seed 0"):
    pc.baseline_scores([_run("a", 0, "triplet_mpnn"), _run("b", 0, "triplet_mpnn")])
  assert pc.baseline_scores([_run("a", 0, "triplet_mpnn"), _run("b", 0, "triplet_gmpnn")]) == {
      (KADANE, "triplet_mpnn"): {0: 70.0}, (KADANE, "triplet_gmpnn"): {0: 70.0}}


def test_the_command_on_the_committed_runs(tmp_path, capsys):
  roots = ["results/full_decisive", "results/full_insertion_sort",
           "results/full_activity_selector", "results/processor"]
  assert pc.main(["--results", *roots, "--out", str(tmp_path)]) == 0
  text = (tmp_path / "call.md").read_text()
  assert text.strip() in capsys.readouterr().out
  # triplet_gmpnn's committed 3-seed baselines (issue 72's figures)
  for alg, mean in [("find_maximum_subarray_kadane", "83.71"), ("binary_search", "79.67"),
                    ("insertion_sort", "89.37"), ("activity_selector", "96.07")]:
    assert f"| {alg} | triplet_gmpnn | 0,1,2 | {mean} ±" in text
  assert (tmp_path / "call.csv").is_file()
  assert pc.main(["--results", str(tmp_path / "absent"), "--out", str(tmp_path)]) == 2
