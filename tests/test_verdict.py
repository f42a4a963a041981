"""analysis.verdict: the rule written before the runs, applied per algorithm (no jax)."""

from analysis import verdict


def _run(model, seed, score, norm=0.05, scope=None, algorithm="binary_search"):
  gin = "NetConfig.history = 'gated'\n"
  if scope:
    gin += f"NetConfig.history_scope = '{scope}'\n"
  return {"model": model, "algorithm": algorithm, "seed": seed, "test_score": score,
          "gin_config": gin, "curves": {"val": {"step": [0, 50], "hidden_norm": [0.7, norm]}}}


def _row(runs):
  frame = verdict.verdict_frame(runs)
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
  runs = [_run("forget", 0, 0.5), _run("gforget", 0, 0.9), _run("gforget", 1, 0.9)]
  row = _row(runs)
  assert row.beats == "not called (1 paired seed)"
  assert row.gforget_seeds == "0,1" and row.forget_seeds == "0"


def test_markov_needs_the_full_scope_and_a_closed_gate():
  forget = [_run("forget", 0, 0.5)]
  assert _row(forget + [_run("gforget", 0, 0.9, norm=0.05)]).markov
  assert not _row(forget + [_run("gforget", 0, 0.9, norm=0.15)]).markov
  assert not _row(forget + [_run("gforget", 0, 0.9, norm=0.05, scope="processor")]).markov


def test_paper_columns_come_from_the_paper_table():
  row = _row([_run("forget", 0, 0.5), _run("gforget", 0, 0.9)])
  # binary_search in the paper's Table 1: ForgetNet 74.41 +- 2.11, G-ForgetNet 85.96 +- 1.59.
  assert (row.paper_forget, row.paper_gforget, row.paper_gforget_sd) == (74.41, 85.96, 1.59)
  assert abs(row.delta_sigma - (90.0 - 85.96) / 1.59) < 1e-9
  md = verdict.to_markdown(verdict.verdict_frame([_run("forget", 0, 0.5), _run("gforget", 0, 0.9)]))
  assert "| 74.41 → 85.96 (+11.55) | not called (1 paired seed) | +2.5 | 0.050 | yes |" in md
