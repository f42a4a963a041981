"""Tests of analysis/: result JSON -> the paper's tables, report and figures. Fast, no jax.

Fixtures: tests/fixtures/analysis/results/ (written by make_fixtures.py there, whose docstring
lists every hand-checkable cell). Golden files: tests/fixtures/analysis/golden/{plain,paper}/;
after an intended change of the output, regenerate them and review the diff:

    NAR_REGEN_GOLDEN=1 python -m pytest tests/test_analysis.py -k golden
"""

import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import warnings

import pandas as pd
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

from analysis import categories
from analysis import extract_paper_results
from analysis import make_tables
from analysis import paper as paper_lib
from analysis import report
from analysis import results as results_lib
from analysis import tables

FIXTURES = ROOT / "tests" / "fixtures" / "analysis"
RESULTS = FIXTURES / "results"
GOLDEN = FIXTURES / "golden"
PAPER_TEX = pathlib.Path("/work/shared/seed/markov_nar_paper.tex")
REGEN = os.environ.get("NAR_REGEN_GOLDEN") == "1"
GOLDEN_FILES = (
  "three_models.tex",
  "summary.tex",
  "penalty_ablation.tex",
  "multitask.tex",
  "tables.tex",
  "seeds.csv",
  "reproduction.csv",
  "reproduction.md",
)
# The LaTeX compile tests need pdflatex with booktabs, colortbl, xcolor and graphicx (Debian:
# texlive-latex-base texlive-latex-recommended); skipped without it, unless
# NAR_REQUIRE_PDFLATEX=1 (CI), where a missing pdflatex fails them.
needs_pdflatex = pytest.mark.skipif(
  shutil.which("pdflatex") is None and os.environ.get("NAR_REQUIRE_PDFLATEX") != "1",
  reason="no pdflatex on this machine (apt-get install texlive-latex-base "
  "texlive-latex-recommended)",
)
CELL = (
  "$%s\\%% \\scriptstyle{{\\light{\\pm%s}}}$"  # the paper's cell, e.g. CELL % ('98.40', '0.21')
)


@pytest.fixture(scope="module")
def loaded():
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", results_lib.ResultWarning)
    runs, long, problems = results_lib.load_results(RESULTS)
  return runs, long, problems, results_lib.aggregate(long)


def cell_of(agg, model, algorithm):
  rows = agg[(agg["model"] == model) & (agg["algorithm"] == algorithm)]
  assert len(rows) <= 1
  return rows.iloc[0] if len(rows) else None


def table_row(tex, algorithm):
  """The LaTeX line of one algorithm in a two-column table (without the trailing & / \\\\)."""
  name = categories.display_name(algorithm)
  [row] = [line.strip() for line in tex.splitlines() if line.strip().startswith(name + " & ")]
  return row.rstrip(" &").rstrip(" \\\\")


# --- categories and the paper's numbers -----------------------------------------------------


def test_every_clrs30_algorithm_has_exactly_one_category():
  assert len(categories.ALGORITHMS) == len(set(categories.ALGORITHMS)) == 30
  listed = [a for algs in categories.CATEGORY_ALGORITHMS.values() for a in algs]
  assert sorted(listed) == sorted(categories.ALGORITHMS)  # each once
  assert sorted(categories.PAPER_ORDER) == sorted(categories.ALGORITHMS)
  assert categories.CATEGORY["find_maximum_subarray_kadane"] == "divide_and_conquer"
  assert categories.CATEGORY["floyd_warshall"] == "graphs"
  assert categories.CATEGORY["quickselect"] == "search"
  assert [len(a) for a in categories.CATEGORY_ALGORITHMS.values()] == [1, 3, 3, 12, 2, 3, 4, 2]


@pytest.mark.parametrize(
  "table, model, row, mean, std",
  [
    ("three_model_comparison", "gforget", "insertion_sort", 98.40, 0.21),
    ("three_model_comparison", "baseline", "floyd_warshall", 53.00, 1.17),
    ("three_model_comparison", "forget", "dfs", 97.12, 1.68),
    ("three_model_comparison", "gforget", "articulation_points", 97.97, 0.58),
    ("main_comparison_full", "gforget", "articulation_points", 97.97, 0.46),  # paper's own typo
    ("main_comparison_full", "triplet_gmpnn", "jarvis_march", 91.01, 1.30),
    ("main_comparison_full", "mpnn", "jarvis_march", 34.86, 12.39),
    ("main_comparison_full", "memnet", "kmp_matcher", 1.81, 0.00),
    ("main_comparison", "triplet_gmpnn", "sorting", 60.38, 5.27),
    ("main_comparison", "pgn", "overall_average", 52.31, None),
    ("main_comparison", "gforget", "above_99", 9, None),
    ("main_comparison", "triplet_gmpnn", "above_97", 5, None),
    ("penalty_ablate", "gforget_nopenalty", "strongly_connected_components", 59.78, 2.80),
    ("multi_table", "forget_multitask", "quickselect", 9.15, 0.57),
    ("multi_table", "baseline_multitask", "kmp_matcher", 51.93, 4.33),
  ],
)
def test_paper_results_match_hand_picked_cells_of_the_paper(table, model, row, mean, std):
  paper = paper_lib.load_paper_results()
  hit = paper[(paper["table"] == table) & (paper["model"] == model) & (paper["row"] == row)]
  assert len(hit) == 1
  assert hit["mean"].item() == mean
  assert math.isnan(hit["std"].item()) if std is None else hit["std"].item() == std
  assert hit["unit"].item() == ("count" if row.startswith("above_") else "percent")


def test_paper_results_cover_every_table_and_algorithm():
  paper = paper_lib.load_paper_results()
  expected_models = {
    "three_model_comparison": {"baseline", "forget", "gforget"},
    "main_comparison": {"memnet", "mpnn", "pgn", "triplet_gmpnn", "gforget"},
    "main_comparison_full": {"memnet", "mpnn", "pgn", "triplet_gmpnn", "gforget"},
    "penalty_ablate": {"baseline", "gforget_nopenalty", "gforget"},
    "multi_table": {"baseline_multitask", "forget_multitask"},
  }
  assert set(paper["table"]) == set(expected_models)
  for table, models in expected_models.items():
    sub = paper[paper["table"] == table]
    assert set(sub["model"]) == models
    for model in models:
      rows = set(sub.loc[sub["model"] == model, "row"])
      if table == "main_comparison":
        assert rows == set(categories.CATEGORY_ALGORITHMS) | {
          "overall_average",
          "above_99",
          "above_97",
          "above_95",
        }
      else:
        assert set(categories.ALGORITHMS) <= rows
  assert len(paper) == 470


def test_categories_and_aggregation_reproduce_the_papers_table2():
  """Our category grouping + averaging of the paper's per-algorithm Table 6 gives its Table 2
  (up to the rounding of rounded numbers)."""
  paper = paper_lib.load_paper_results()
  for model in paper_lib.LITERATURE_MODELS + ("gforget",):
    per_alg = paper_lib.paper_cells(paper, model)
    printed = paper_lib.paper_summary(paper, model)
    for cat, algs in categories.CATEGORY_ALGORITHMS.items():
      mean, std, n = tables.category_stats(per_alg, algs)
      assert n == len(algs)
      assert abs(mean - printed[cat][0]) <= 0.011, (model, cat)
      assert abs(std - printed[cat][1]) <= 0.021, (model, cat)
    overall, _, _ = tables.category_stats(per_alg, categories.ALGORITHMS)
    assert abs(overall - printed["overall_average"][0]) <= 0.006, model
    for t in tables.THRESHOLDS_PCT:
      count = sum(m > t for m, _ in per_alg.values())
      assert count == printed[f"above_{t}"][0], (model, t)


@pytest.mark.skipif(not PAPER_TEX.exists(), reason="paper source not on this machine")
def test_shipped_paper_csv_is_what_the_extractor_gives(capsys):
  extract_paper_results.main(["extract", str(PAPER_TEX)])
  assert capsys.readouterr().out == paper_lib.PAPER_RESULTS_CSV.read_text(encoding="utf-8")


# --- loading and validation -----------------------------------------------------------------


def test_corrupt_partial_and_mistyped_files_are_reported_by_path_and_left_out():
  with pytest.warns(results_lib.ResultWarning) as record:
    runs, problems = results_lib.load_runs(RESULTS)
  assert [p.split(": ", 1)[0] for p in problems] == [
    "forget/bfs/seed0/result.json",
    "forget/floyd_warshall/seed2/result.json",
    "gforget/bfs/seed3/result.json",
  ]
  assert "unreadable JSON" in problems[0]
  assert "missing key 'test_score'" in problems[1]
  assert "'seed' has type str" in problems[2] and "'test_score' has type str" in problems[2]
  assert len(record) == 3
  assert len(runs) == 33
  assert not [r for r in runs if r["path"] in {p.split(": ")[0] for p in problems}]


def test_left_out_files_are_not_counted_as_zero(loaded):
  _, _, _, agg = loaded
  assert cell_of(agg, "forget", "bfs") is None  # only a corrupt file: no cell at all
  forget_fw = cell_of(agg, "forget", "floyd_warshall")  # seed2 partial: 2 seeds, not 3
  assert (forget_fw.n_seeds, forget_fw.mean_pct) == (2, pytest.approx(39.0))
  gforget_bfs = cell_of(agg, "gforget", "bfs")  # seed3 ("0.5" as a string) left out
  assert (gforget_bfs.n_seeds, gforget_bfs.mean_pct) == (3, pytest.approx(99.9))


def _valid():
  return {
    "schema": results_lib.SCHEMA,
    "model": "gforget",
    "algorithm": "bfs",
    "seed": 0,
    "status": "done",
    "test_score": 0.5,
    "steps": 10,
    "train_steps": 10,
  }


@pytest.mark.parametrize(
  "change, reason",
  [
    ({}, None),
    ({"seed": True}, "'seed' has type bool"),
    ({"steps": 10.0}, "'steps' has type float"),
    ({"test_score": 1.5}, "not a fraction"),
    ({"test_score": float("nan")}, "not a fraction"),
    ({"test_score": None}, "status is not diverged"),
    ({"test_score": None, "status": "diverged"}, None),
    ({"status": "running"}, "status"),
    ({"algorithm": "bogosort"}, "not a CLRS-30 algorithm"),
    ({"schema": "other/1"}, "schema"),
  ],
)
def test_validate(change, reason):
  problems = results_lib.validate(dict(_valid(), **change))
  if reason is None:
    assert problems == []
  else:
    assert len(problems) == 1 and reason in problems[0]
  assert results_lib.validate([1]) == ["top level is list, not an object"]
  bare = _valid()
  del bare["train_steps"]
  assert results_lib.validate(bare) == ["missing key 'train_steps'"]


def test_long_format(loaded):
  _, long, _, _ = loaded
  assert list(long.columns) == ["model", "algorithm", "seed", "metric", "value"]
  value = long.set_index(["model", "algorithm", "seed", "metric"])["value"]
  assert value[("gforget", "insertion_sort", 0, "test_score")] == 0.985
  assert value[("gforget", "insertion_sort", 0, "test_score/pi")] == 0.985
  assert math.isnan(value[("baseline", "floyd_warshall", 3, "test_score")])
  assert value[("baseline", "floyd_warshall", 3, "diverged")] == 1.0
  assert value[("baseline", "floyd_warshall", 3, "steps")] == 300.0
  assert value[("baseline", "floyd_warshall", 0, "diverged")] == 0.0


def test_mean_std_seeds_and_diverged_runs(loaded):
  _, _, _, agg = loaded
  c = cell_of(agg, "baseline", "insertion_sort")
  assert (c.mean_pct, c.std_pct, c.n_seeds) == (pytest.approx(72.0), pytest.approx(2.0), 3)
  # seed3 diverged without a score: in n_runs/n_diverged, not in mean/std.
  c = cell_of(agg, "baseline", "floyd_warshall")
  assert (c.mean_pct, c.std_pct) == (pytest.approx(53.0), pytest.approx(1.0))
  assert (c.n_seeds, c.n_runs, c.n_diverged, c.seeds, c.steps, c.train_steps) == (
    3,
    4,
    1,
    "0 1 2 3",
    "300-500",
    "500",
  )
  # seed2 diverged with a score: counted.
  c = cell_of(agg, "gforget", "floyd_warshall")
  assert (c.mean_pct, c.n_seeds, c.n_diverged) == (pytest.approx(56.0), 3, 1)
  c = cell_of(agg, "forget", "floyd_warshall")
  assert c.std_pct == pytest.approx(math.sqrt(2))  # ddof=1 over 38 and 40


def test_single_seed_has_no_std():
  long = pd.DataFrame(
    [
      ("gforget", "bfs", 0, "test_score", 0.5),
      ("gforget", "bfs", 0, "diverged", 0.0),
      ("gforget", "bfs", 0, "steps", 1.0),
      ("gforget", "bfs", 0, "train_steps", 1.0),
    ],
    columns=["model", "algorithm", "seed", "metric", "value"],
  )
  c = results_lib.aggregate(long).iloc[0]
  assert c.mean_pct == 50.0 and math.isnan(c.std_pct)
  assert tables.score_cell(c.mean_pct, c.std_pct) == "$50.00\\%$"


# --- cells, marks and tables ----------------------------------------------------------------


def test_score_cell_copies_the_papers_latex():
  assert tables.score_cell(98.4, 0.21) == CELL % ("98.40", "0.21")
  assert tables.score_cell(98.4, 0.21, mark="bold", highlight=True) == (
    "\\cellcolor{green!30!white} $\\textbf{98.40}\\% \\scriptstyle{{\\light{\\pm0.21}}}$"
  )
  assert tables.score_cell(76.36, 0.43, mark="underline") == (
    "$\\underline{76.36}\\% \\scriptstyle{{\\light{\\pm0.43}}}$"
  )
  assert tables.score_cell(float("nan"), float("nan")) == "—"
  assert tables.score_cell(None, None, paper=98.4) == "— {\\light{\\scriptsize(98.40)}}"
  assert tables.score_cell(39.0, 1.4142, note="2") == (
    CELL % ("39.00", "1.41") + "\\textsuperscript{\\light{[2]}}"
  )


def test_marks_compare_printed_values():
  assert tables.marks([1.0, 2.0, 3.0]) == [None, "underline", "bold"]
  assert tables.marks([3.0, 2.0, 3.0]) == ["bold", "underline", "bold"]
  assert tables.marks([99.004, 99.001]) == ["bold", "bold"]  # both print as 99.00
  assert tables.marks([5.0, None, float("nan")]) == [None, None, None]  # nothing to compare
  assert tables.marks([5.0, None, 4.0]) == ["bold", None, "underline"]


def test_three_models_table_highlight_bold_missing_and_seed_counts(loaded):
  _, _, _, agg = loaded
  tex = tables.comparison_table(
    agg, list(tables.THREE_MODELS), label="three_model_comparison", highlight_vs="baseline"
  )
  green = "\\cellcolor{green!30!white} "
  assert table_row(tex, "insertion_sort") == " & ".join(
    [
      "Insertion Sort",
      CELL % ("72.00", "2.00"),
      green + CELL % ("96.00", "1.00"),
      green + CELL.replace("$%s", "$\\textbf{%s}") % ("99.00", "0.50"),
    ]
  )
  assert table_row(tex, "floyd_warshall") == " & ".join(
    [
      "Floyd-Warshall",
      CELL % ("53.00", "1.00"),
      CELL % ("39.00", "1.41") + "\\textsuperscript{\\light{[2]}}",  # 2 of 3 seeds, worse
      green + CELL.replace("$%s", "$\\textbf{%s}") % ("56.00", "1.00"),
    ]
  )
  assert table_row(tex, "bfs") == " & ".join(
    [
      "BFS",
      CELL % ("99.50", "0.10"),
      "—",
      green + CELL.replace("$%s", "$\\textbf{%s}") % ("99.90", "0.10"),
    ]
  )
  assert table_row(tex, "dfs") == "DFS & — & — & —"
  assert "\\begin{tabular}{lccc|lccc}" in tex
  assert "\\label{tab:three_model_comparison}" in tex
  assert "a grey superscript [n] marks a mean over n of the 3 seeds;" in tex
  assert (
    "Diverged runs: 2, counted in mean and std with the test score of their best-validation "
    "parameters (1 without a test score left out)."
  ) in tex
  body = tex.split("\\midrule\n", 1)[1].split("\\bottomrule")[0]
  assert body.count(" &\n") == 15 and body.count(" \\\\\n") == 15  # 15 algorithms a side
  assert [line.strip().split(" & ")[0] for line in body.splitlines() if line.strip()] == [
    categories.display_name(a)
    for pair in zip(categories.PAPER_ORDER[:15], categories.PAPER_ORDER[15:])
    for a in pair
  ]


def test_summary_category_averages_counts_and_marks(loaded):
  _, _, _, agg = loaded
  values = tables.summary_values(tables.summary_columns(agg, list(tables.THREE_MODELS)))
  (b, f, g) = values["graphs"]  # baseline: bfs 99.50 & floyd 53.00; forget: floyd only
  assert b[0] == pytest.approx(76.25) and b[1] == pytest.approx(0.55) and b[2:] == (2, 12)
  assert f[0] == pytest.approx(39.0) and f[2:] == (1, 12)
  assert g[0] == pytest.approx(77.95) and g[2:] == (2, 12)
  assert values["divide_and_conquer"] == [(None, None, 0, 1)] * 3
  assert [round(v[0], 4) for v in values["overall_average"]] == [74.8333, 67.5, 84.9667]
  # 99.00 (G-ForgetNet insertion sort) is not ">99%".
  assert [v[0] for v in values["above_99"]] == [1, 0, 1]
  assert [v[0] for v in values["above_97"]] == [1, 0, 2]
  assert [v[0] for v in values["above_95"]] == [1, 1, 2]

  tex = tables.summary_table(agg, list(tables.THREE_MODELS))
  lines = [line.strip() for line in tex.splitlines()]
  assert "$>99\\%$ & $\\textbf{1/30}$ & $\\underline{0/30}$ & $\\textbf{1/30}$ \\\\" in lines
  assert "$>97\\%$ & $\\underline{1/30}$ & $0/30$ & $\\textbf{2/30}$ \\\\" in lines
  # An average over k < m algorithms carries [k/m] and is never marked best (was: 84.97
  # [3/30] bold, 74.83 [3/30] underlined).
  assert (
    "Overall Average & $74.83\\%$\\textsuperscript{\\light{[3/30]}} & "
    "$67.50\\%$\\textsuperscript{\\light{[2/30]}} & "
    "$84.97\\%$\\textsuperscript{\\light{[3/30]}} \\\\"
  ) in lines
  assert (
    "Sorting & "
    + CELL % ("72.00", "2.00")
    + "\\textsuperscript{\\light{[1/4]}} & "
    + CELL % ("96.00", "1.00")
    + "\\textsuperscript{\\light{[1/4]}} & "
    + CELL % ("99.00", "0.50")
    + "\\textsuperscript{\\light{[1/4]}} \\\\"
  ) in lines
  with_paper = tables.summary_table(agg, list(tables.THREE_MODELS), paper=paper_lib.load_paper_results())
  overall = next(line.strip() for line in with_paper.splitlines() if "Overall Average" in line)
  # The paper's full averages are compared (its G-ForgetNet 82.89 best), ours [3/30] not.
  assert "$\\textbf{82.89}\\%$" in overall and "$\\underline{78.64}\\%$" in overall
  assert "$84.97\\%$\\textsuperscript{\\light{[3/30]}}" in overall
  assert "never marked as the best or second best" in with_paper
  assert "Div. \\& C. & — & — & — \\\\" in lines
  assert "\\begin{tabular}{lccc}" in tex and "\\label{tab:main_comparison}" in tex


def test_paper_option_puts_the_papers_numbers_next_to_ours(loaded):
  _, _, _, agg = loaded
  paper = paper_lib.load_paper_results()
  tex = tables.comparison_table(
    agg,
    list(tables.THREE_MODELS),
    label="three_model_comparison",
    highlight_vs="baseline",
    paper=paper,
  )
  row = table_row(tex, "insertion_sort").split(" & ")
  assert row[1].endswith(" {\\light{\\scriptsize(70.62)}}")
  assert row[3].endswith(" {\\light{\\scriptsize(98.40)}}")
  assert table_row(tex, "dfs") == (
    "DFS & — {\\light{\\scriptsize(30.33)}} & "
    "— {\\light{\\scriptsize(97.12)}} & "
    "— {\\light{\\scriptsize(74.31)}}"
  )
  summary = tables.summary_table(agg, list(tables.THREE_MODELS), paper=paper)
  header = [line for line in summary.splitlines() if "\\textbf{Algorithm}" in line][0]
  assert header.count("\\textbf{") == 11
  assert "\\textbf{Triplet-GMPNN} & \\textbf{Baseline (paper)}" in header
  assert "\\textbf{G-ForgetNet (ours)}" in header
  # The paper's printed Table 2, not a re-aggregation of its rounded cells (67.94).
  dp = [line for line in summary.splitlines() if line.strip().startswith("DP & ")][0]
  assert dp.strip().split(" & ")[1] == CELL % ("67.95", "2.19")
  counts = [line for line in summary.splitlines() if line.strip().startswith("$>99\\%$")][0]
  assert counts.strip().split(" & ")[1:8] == [
    "$0/30$",
    "$1/30$",
    "$1/30$",
    "$1/30$",
    "$1/30$",
    "$\\underline{2/30}$",
    "$\\textbf{9/30}$",
  ]


def test_reproduction_frame(loaded):
  _, _, _, agg = loaded
  frame = report.reproduction_frame(agg, paper_lib.load_paper_results())
  assert list(frame["model"].unique()) == [
    "baseline",
    "forget",
    "gforget",
    "gforget_nopenalty",
    "baseline_multitask",
    "forget_multitask",
  ]
  assert (frame.groupby("model").size() == 30).all()
  r = frame.set_index(["model", "algorithm"])
  g = r.loc[("gforget", "insertion_sort")]
  assert g.paper_mean_pct == 98.40 and g.delta_pct == pytest.approx(0.60)
  assert not g.within_2sigma  # |0.60| > 2 * 0.21
  assert g.delta_sigma == pytest.approx(0.60 / 0.21)
  assert r.loc[("baseline", "insertion_sort")].within_2sigma  # |1.38| <= 2 * 8.26
  f = r.loc[("forget", "floyd_warshall")]
  assert (f.n_seeds, f.paper_mean_pct, f.within_2sigma) == (2, 38.14, True)
  assert r.loc[("forget_multitask", "insertion_sort")].paper_mean_pct == 93.98
  assert r.loc[("gforget_nopenalty", "insertion_sort")].paper_mean_pct == 87.90
  assert pd.isna(r.loc[("forget", "bfs")].within_2sigma)
  assert pd.isna(r.loc[("forget", "bfs")].delta_sigma)
  assert r.loc[("baseline", "floyd_warshall")].steps == "300-500"


# --- golden files and the CLI ---------------------------------------------------------------


def regenerate_golden(golden, produced):
  """Write `produced` as the golden file, by hand only: under CI (the CI variable set) the
  test fails instead, so a NAR_REGEN_GOLDEN=1 left in CI's environment cannot turn every
  golden comparison into a rewrite that passes."""
  if os.environ.get("CI"):
    pytest.fail(f"NAR_REGEN_GOLDEN=1 with CI set: golden files are regenerated by hand and "
                f"reviewed, never in CI; not writing {golden}")
  golden.parent.mkdir(parents=True, exist_ok=True)
  golden.write_bytes(produced)


def test_golden_regeneration_is_refused_under_ci(monkeypatch, tmp_path):
  golden = tmp_path / "golden.tex"
  golden.write_bytes(b"old")
  monkeypatch.setenv("CI", "true")
  with pytest.raises(pytest.fail.Exception, match="never in CI"):
    regenerate_golden(golden, b"new")
  assert golden.read_bytes() == b"old"
  monkeypatch.delenv("CI")
  regenerate_golden(golden, b"new")
  assert golden.read_bytes() == b"new"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
  out = {}
  for mode in ("plain", "paper"):
    d = tmp_path_factory.mktemp(mode)
    logs = []
    make_tables.make_all(RESULTS, d, paper=mode == "paper", log=logs.append)
    out[mode] = (d, logs)
  return out


@pytest.mark.parametrize("mode", ["plain", "paper"])
@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_golden(generated, mode, name):
  produced = (generated[mode][0] / name).read_bytes()
  golden = GOLDEN / mode / name
  if REGEN:
    regenerate_golden(golden, produced)
  assert golden.exists(), f"no golden {golden}; run with NAR_REGEN_GOLDEN=1 once"
  assert produced == golden.read_bytes(), f"{name} differs from {golden}"
  if name.endswith(".tex"):  # cheap checks here; the pdflatex tests compile them
    text = produced.decode("utf-8").replace("\\{", "").replace("\\}", "")
    depth = 0
    for ch in text:
      depth += {"{": 1, "}": -1}.get(ch, 0)
      assert depth >= 0, name
    assert depth == 0, name
    for env in ("table", "tabular", "document"):
      assert text.count("\\begin{%s}" % env) == text.count("\\end{%s}" % env), env


def test_make_all_logs_left_out_files_and_diverged_runs(generated):
  logs = generated["plain"][1]
  left_out = [line for line in logs if line.startswith("warning: left out ")]
  assert [line.split(": ")[1][len("left out ") :] for line in left_out] == [
    os.path.join(RESULTS, p)
    for p in (
      "forget/bfs/seed0/result.json",
      "forget/floyd_warshall/seed2/result.json",
      "gforget/bfs/seed3/result.json",
    )
  ]
  assert (
    "33 runs from 36 result.json files (3 left out); 2 diverged runs (counted with "
    "their test score where they have one; 1 without one)"
  ) in logs


def test_tables_are_skipped_with_a_message_when_their_models_are_absent(tmp_path):
  shutil.copytree(RESULTS / "baseline", tmp_path / "results" / "baseline")
  logs = []
  written = make_tables.make_all(tmp_path / "results", tmp_path / "out", log=logs.append)
  names = {p.name for p in written}
  assert {"three_models.tex", "summary.tex", "reproduction.md"} <= names
  assert not names & {"penalty_ablation.tex", "multitask.tex"}
  assert "skipped penalty_ablation.tex: no gforget_nopenalty results" in logs
  assert "skipped multitask.tex: no baseline_multitask/forget_multitask results" in logs
  tex = (tmp_path / "out" / "three_models.tex").read_text(encoding="utf-8")
  assert table_row(tex, "insertion_sort") == (
    "Insertion Sort & " + CELL % ("72.00", "2.00") + " & — & —"
  )


def test_cli_by_path_from_another_directory(tmp_path):
  out = tmp_path / "out"
  proc = subprocess.run(
    [
      sys.executable,
      str(ROOT / "analysis" / "make_tables.py"),
      "--results",
      str(RESULTS),
      "--out",
      str(out),
      "--paper",
      "--figures",
      "floyd_warshall",
    ],
    cwd=tmp_path,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr.count("warning: left out ") == 3
  assert str(RESULTS / "forget" / "bfs" / "seed0" / "result.json") in proc.stderr
  for name in GOLDEN_FILES + ("results_long.csv",):
    assert (out / name).stat().st_size > 0, name
  assert (out / "three_models.tex").read_bytes() == (
    GOLDEN / "paper" / "three_models.tex"
  ).read_bytes()
  names = [f"floyd_warshall_{kind}" for kind in ("train_loss", "val_score", "hint_step_loss",
                                                  "hidden_norm", "gate")] + ["ours_vs_paper"]
  for name in names:
    assert (out / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "figures" / f"{name}.pdf").read_bytes()[:4] == b"%PDF"
  assert len(list((out / "figures").iterdir())) == 2 * len(names)


def test_cli_rejects_an_unknown_algorithm(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "analysis.make_tables",
      "--results",
      str(RESULTS),
      "--out",
      str(tmp_path),
      "--figures",
      "bogosort",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert proc.returncode == 2
  assert "unknown algorithm(s) ['bogosort']" in proc.stderr


def _make_tables(results, out, cwd):
  return subprocess.run(
    [sys.executable, str(ROOT / "analysis" / "make_tables.py"), "--results", str(results),
     "--out", str(out)],
    cwd=cwd,
    capture_output=True,
    text=True,
    timeout=120,
  )


@pytest.mark.parametrize("content", ["nothing", "a corrupt result", "a calibration run"])
def test_cli_with_no_runs_is_one_error_and_writes_nothing(content, tmp_path):
  """Was: exit 0 after writing six empty tables."""
  results = tmp_path / "results"
  results.mkdir()
  if content == "a corrupt result":
    shutil.copytree(RESULTS / "forget" / "bfs", results / "forget" / "bfs")  # left out
  elif content == "a calibration run":
    folder = results / "_calibration" / "lambda0" / "calibrate" / "bfs" / "seed0"
    folder.mkdir(parents=True)
    shutil.copy(RESULTS / "gforget" / "bfs" / "seed1" / "result.json", folder)
    data = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps(dict(data, model="calibrate")))
  proc = _make_tables(results, tmp_path / "out", tmp_path)
  assert proc.returncode == 2, proc.stderr
  line = proc.stderr.strip().splitlines()[-1]
  assert line.startswith(f"make_tables.py: error: no runs to tabulate under --results {results} ")
  assert line.endswith("; nothing written")
  assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_cli_on_a_read_only_out_is_one_error(tmp_path):
  """Was: a PermissionError (or, on a read-only file system, OSError) traceback."""
  from conftest import read_only  # pylint: disable=g-import-not-at-top  (tests/ is on sys.path)

  folder = tmp_path / "shared"
  folder.mkdir()
  with read_only(folder):
    proc = _make_tables(RESULTS, folder / "tables", tmp_path)
  assert proc.returncode == 1, proc.stderr
  (line,) = proc.stderr.splitlines()
  assert line.startswith(f"make_tables.py: error: cannot write --out {folder / 'tables'}: "), line
  assert list(folder.iterdir()) == []


def test_analysis_imports_neither_jax_nor_clrs():
  code = (
    "import sys, analysis, analysis.make_tables, analysis.figures; "
    'bad = [m for m in ("jax", "clrs", "haiku") if m in sys.modules]; '
    "assert not bad, bad"
  )
  subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


# --- figures --------------------------------------------------------------------------------


def test_band_averages_seeds_on_a_common_grid():
  from analysis import figures
  import numpy as np

  grid, mean, std = figures.band(
    [
      (np.array([0.0, 10.0, 20.0]), np.array([1.0, 2.0, 3.0])),
      (np.array([0.0, 20.0]), np.array([3.0, 5.0])),  # logged less often: interpolated at 10
    ]
  )
  assert grid.tolist() == [0.0, 10.0, 20.0]
  assert mean.tolist() == [2.0, 3.0, 4.0]
  assert std.tolist() == [1.0, 1.0, 1.0]
  assert figures.smooth([1.0, 1.0, 1.0, 1.0], 3).tolist() == [1.0, 1.0, 1.0, 1.0]
  assert figures.smooth([0.0, 3.0, 0.0], 3).tolist() == [1.5, 1.0, 1.5]


def test_figures_skip_runs_without_curves(loaded, tmp_path):
  from analysis import figures

  runs = [dict(r) for r in loaded[0] if r["algorithm"] == "bfs"]
  for r in runs:
    if r["model"] == "gforget":
      del r["curves"]
  paths = figures.make_figures(runs, ["bfs", "dfs"], tmp_path)
  assert sorted(p.name for p in paths) == sorted(
    f"bfs_{k}.{e}" for k in ("train_loss", "val_score", "hint_step_loss", "hidden_norm")
    for e in ("png", "pdf")
  )  # no bfs_gate: the one gated label of bfs has no curves


@needs_pdflatex
@pytest.mark.parametrize("mode", ["plain", "paper"])
def test_golden_tables_compile_with_pdflatex(tmp_path, mode):
  shutil.copytree(GOLDEN / mode, tmp_path / mode)
  proc = subprocess.run(
    ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "tables.tex"],
    cwd=tmp_path / mode,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stdout[-2000:]


def test_comparison_markdown_puts_ours_next_to_the_paper(tmp_path):
  make_tables.make_all(RESULTS, tmp_path, log=lambda *_: None)
  lines = (tmp_path / "comparison.md").read_text().splitlines()
  assert lines[0].startswith("| Algorithm | Baseline (ours) | (paper) | ForgetNet (ours) |")
  assert "Baseline, multi-task (ours)" in lines[0]
  ins = next(l for l in lines if l.startswith("| Insertion Sort |")).split(" | ")
  assert ins[1:3] == ["72.00 ± 2.00", "70.62 ± 8.26"]   # baseline: ours, paper
  assert ins[5:7] == ["99.00 ± 0.50", "98.40 ± 0.21"]   # G-ForgetNet: ours, paper
  assert not any(l.startswith("| DFS |") for l in lines)  # no results, no row


# --- model labels beyond the paper's, calibration runs --------------------------------------

from analysis import labels


@pytest.mark.parametrize(
  "label, paper_model, display",
  [
    ("baseline", "baseline", "Baseline"),
    ("gforget", "gforget", "G-ForgetNet"),
    ("gforget_constant", "gforget", "G-ForgetNet (constant)"),
    ("gforget_lambda_x2", "gforget", "G-ForgetNet (lambda x2)"),
    ("gforget_nopenalty", "gforget_nopenalty", "G-ForgetNet w/o penalty"),
    ("gforget_nopenalty_long", "gforget_nopenalty", "G-ForgetNet w/o penalty (long)"),
    ("forget_wide", "forget", "ForgetNet (wide)"),
    ("forget_multitask", "forget_multitask", "ForgetNet"),
    ("forget_wide_multitask", "forget_multitask", "ForgetNet (wide)"),
    ("gforget_multitask", None, "G-ForgetNet"),  # the paper has no multi-task G-ForgetNet
    ("calibrate", None, "G-ForgetNet (calibrate)"),
    ("gforgetful", None, "gforgetful"),
    ("mystery", None, "mystery"),
  ],
)
def test_model_labels_map_to_the_papers_models(label, paper_model, display):
  assert labels.paper_model(label) == paper_model
  assert labels.model_label(label) == display


def test_model_order_puts_variants_after_their_paper_model():
  assert labels.sort_models(
    ["mystery", "gforget_constant", "forget_multitask", "gforget", "baseline", "forget"]
  ) == ["baseline", "forget", "gforget", "gforget_constant", "forget_multitask", "mystery"]
  assert labels.is_calibration({"model": "calibrate", "path": "x/bfs/seed0/result.json"})
  assert labels.is_calibration({"model": "gforget", "path": "_calibration/bfs/seed0/result.json"})
  assert labels.is_calibration({"model": "gforget", "path": "calibrate/bfs/seed0/result.json"})
  assert not labels.is_calibration({"model": "gforget", "path": "gforget/bfs/seed0/result.json"})


def _quiet_load(root):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", results_lib.ResultWarning)
    return results_lib.load_runs(root)


def _copy_run(src, dst, **changes):
  result = json.loads(src.read_text(encoding="utf-8"))
  result.update(changes)
  dst.parent.mkdir(parents=True, exist_ok=True)
  dst.write_text(json.dumps(result), encoding="utf-8")


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
  """The fixture tree + G-ForgetNet under the 'constant' reading (gforget_constant), a label
  of no known family (mystery) and lambda calibration runs in both places they may live."""
  root = tmp_path_factory.mktemp("extended") / "results"
  shutil.copytree(RESULTS, root)
  scores = {"insertion_sort": [0.97, 0.98], "bfs": [0.999, 0.997]}
  for algorithm, values in scores.items():
    for seed, score in enumerate(values):
      _copy_run(
        RESULTS / "gforget" / algorithm / f"seed{seed}" / "result.json",
        root / "gforget_constant" / algorithm / f"seed{seed}" / "result.json",
        model="gforget_constant",
        test_score=score,
        lambda_gate=0.05,
        lambda_reading="constant",
        lambda_calibration={"L": 0.5, "G": 10.0, "window_steps": 500},
      )
  _copy_run(
    RESULTS / "baseline" / "bfs" / "seed0" / "result.json",
    root / "mystery" / "bfs" / "seed0" / "result.json",
    model="mystery",
    test_score=0.5,
  )
  for rel in ("calibrate/bfs/seed0", "_calibration/constant/calibrate/bfs/seed0"):
    _copy_run(
      RESULTS / "gforget" / "bfs" / "seed0" / "result.json",
      root / rel / "result.json",
      model="calibrate",
      test_score=0.123,
      lambda_gate=0.0,
    )
  out = root.parent / "tables"
  logs = []
  written = make_tables.make_all(root, out, paper=True, figures="all", log=logs.append)
  return root, out, logs, written


def test_variant_labels_get_their_own_column_compared_with_the_papers_model(extended):
  _, out, logs, _ = extended
  tex = (out / "three_models.tex").read_text(encoding="utf-8")
  header = next(line for line in tex.splitlines() if "\\textbf{Algorithm}" in line)
  assert header.strip().split(" & ")[:6] == [
    "\\textbf{Algorithm}",
    "\\textbf{Baseline}",
    "\\textbf{ForgetNet}",
    "\\textbf{G-ForgetNet}",
    "\\textbf{G-ForgetNet (constant)}",
    "\\textbf{mystery}",
  ]
  assert "\\begin{tabular}{lccccc|lccccc}" in tex
  row = table_row(tex, "insertion_sort").split(" & ")
  # gforget_constant: 97.50 +- 0.71 over 2 of 3 seeds, better than the baseline; the paper
  # reports no such variant, so no paper number beside it (was the paper's G-ForgetNet
  # 98.40, as if the paper had run it); mystery has no paper counterpart, no insertion sort.
  assert row[4] == (
    "\\cellcolor{green!30!white} " + CELL % ("97.50", "0.71") + "\\textsuperscript{\\light{[2]}}"
  )
  assert row[3].endswith(" {\\light{\\scriptsize(98.40)}}")  # the paper's own G-ForgetNet
  assert "Our variants' columns have no paper number" in tex
  assert row[5] == "—"
  assert table_row(tex, "bfs").split(" & ")[5] == "$50.00\\%$\\textsuperscript{\\light{[1]}}"
  summary = (out / "summary.tex").read_text(encoding="utf-8")
  header = next(line for line in summary.splitlines() if "\\textbf{Algorithm}" in line)
  assert header.count("G-ForgetNet (paper)") == 1  # one paper column for gforget + constant
  assert "\\textbf{G-ForgetNet (constant) (ours)}" in header
  penalty = (out / "penalty_ablation.tex").read_text(encoding="utf-8")
  assert "\\textbf{G-ForgetNet (constant)}" in penalty and "mystery" not in penalty

  frame = pd.read_csv(out / "reproduction.csv")
  r = frame.set_index(["model", "algorithm"]).loc[("gforget_constant", "insertion_sort")]
  assert (r.paper_model, r.paper_table, r.paper_mean_pct) == (
    "gforget", "three_model_comparison", 98.40
  )
  assert r.delta_pct == pytest.approx(-0.90)
  assert frame.loc[frame["model"] == "mystery", "paper_model"].isna().all()
  md = (out / "reproduction.md").read_text(encoding="utf-8")
  assert (
    "## G-ForgetNet (constant) (`gforget_constant`; paper: G-ForgetNet, "
    "tab:three_model_comparison)"
  ) in md
  assert "- No paper counterpart, not compared: `mystery`." in md
  assert "| `gforget_constant` | Insertion Sort | 0.05 | constant | " in md
  lambdas = pd.read_csv(out / "lambdas.csv", keep_default_na=False)
  constant = lambdas[lambdas["model"] == "gforget_constant"]
  assert set(constant["lambda_reading"]) == {"constant"} and len(constant) == 4
  assert json.loads(constant["lambda_calibration"].iloc[0]) == {
    "G": 10.0, "L": 0.5, "window_steps": 500
  }
  comparison = (out / "comparison.md").read_text(encoding="utf-8").splitlines()
  assert "G-ForgetNet (constant) (ours)" in comparison[0]


def test_calibration_runs_are_in_no_table(extended):
  root, out, logs, _ = extended
  assert "2 lambda calibration runs: not results, left out of the tables" in logs
  assert not [line for line in logs if "duplicate" in line]  # two readings, same key: fine
  for name in ("seeds.csv", "reproduction.csv", "results_long.csv", "lambdas.csv"):
    assert "calibrate" not in (out / name).read_text(encoding="utf-8"), name
  for name in ("three_models.tex", "summary.tex", "comparison.md"):
    text = (out / name).read_text(encoding="utf-8")
    assert "calibrate" not in text and "12.30" not in text, name
  assert "Lambda calibration runs (model `calibrate`" in (out / "reproduction.md").read_text()
  runs, _ = _quiet_load(root)
  assert len(results_lib.split_calibration(runs)[1]) == 2


def test_figures_draw_every_label_found(extended):
  from analysis import figures

  root, out, _, written = extended
  assert {p.name for p in written if p.suffix == ".png"} == {
    f"{a}_{k}.png"
    for a in ("bfs", "floyd_warshall", "insertion_sort")
    for k in ("train_loss", "val_score", "hint_step_loss", "hidden_norm", "gate")
  } | {"ours_vs_paper.png"}
  runs, _ = results_lib.split_calibration(_quiet_load(root)[0])
  by_model = figures._runs_by_model(runs, "bfs")
  assert list(by_model) == ["baseline", "gforget", "gforget_constant", "mystery"]
  style = figures.styles(by_model)
  assert style["gforget"] == ("tab:green", "-") and style["gforget_constant"] == ("tab:green", "--")
  assert style["mystery"][0] not in figures.COLORS.values()
  fig, ax = figures.plt.subplots()
  assert figures._curve_plot(ax, by_model, "val", "hidden_norm")
  legend = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
  assert legend == [
    "Baseline (3 seeds)",
    "G-ForgetNet (3 seeds)",
    "G-ForgetNet (constant) (2 seeds)",
    "mystery (1 seed)",
  ]
  assert len(ax.get_lines()) == 4 + 3 + 3 + 2  # + a thin line per seed of several
  figures.plt.close(fig)


@needs_pdflatex
def test_every_generated_table_compiles_with_pdflatex(extended, tmp_path):
  _, out, _, _ = extended
  shutil.copytree(out, tmp_path / "out")
  names = sorted(p.name for p in out.glob("*.tex") if p.name != "tables.tex")
  assert names == ["multitask.tex", "penalty_ablation.tex", "summary.tex", "three_models.tex"]
  for name in names:  # each table alone, then the combined document
    (tmp_path / "out" / f"only_{name}").write_text(
      tables.standalone_document([name]), encoding="utf-8"
    )
  for doc in [f"only_{n}" for n in names] + ["tables.tex"]:
    proc = subprocess.run(
      ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc],
      cwd=tmp_path / "out",
      capture_output=True,
      text=True,
      timeout=120,
    )
    assert proc.returncode == 0, (doc, proc.stdout[-2000:])


# --- captions -------------------------------------------------------------------------------


def _one_seed_agg():
  long = pd.DataFrame(
    [
      (m, a, 0, metric, value)
      for m, a, score in [("baseline", "bfs", 0.9), ("gforget", "bfs", 0.95)]
      for metric, value in [("test_score", score), ("diverged", 0.0), ("steps", 5.0),
                            ("train_steps", 5.0)]
    ],
    columns=["model", "algorithm", "seed", "metric", "value"],
  )
  return results_lib.aggregate(long)


def test_caption_never_speaks_of_fewer_than_one_seed():
  agg = _one_seed_agg()
  tex = tables.comparison_table(agg, list(tables.THREE_MODELS), label="three_model_comparison")
  caption = next(line for line in tex.splitlines() if "\\caption{" in line)
  assert "Ours: one seed per cell (no std), in \\%; — marks no run. Diverged runs: 0." in caption
  assert "[n]" not in caption and "$<$" not in caption and "superscript" not in caption
  # Asked for 10 seeds: the single-seed cells carry [1] and the caption explains it.
  tex = tables.comparison_table(
    agg, list(tables.THREE_MODELS), label="three_model_comparison", expected_seeds=10
  )
  assert "a grey superscript [n] marks a mean over n of the 10 seeds;" in tex
  assert "\\textsuperscript{\\light{[1]}}" in table_row(tex, "bfs")
  summary = tables.summary_table(agg, ["baseline", "gforget"])
  assert "[k/m]" in summary  # bfs alone: 1 of 12 graph algorithms
  empty = results_lib.aggregate(pd.DataFrame(columns=["model", "algorithm", "seed", "metric",
                                                      "value"]))
  tex = tables.comparison_table(empty, list(tables.THREE_MODELS), label="three_model_comparison")
  assert "[n]" not in tex and "n $<$ 0" not in tex


# --- the output folder is replaced as a whole -----------------------------------------------


def test_make_all_leaves_no_stale_files_and_no_temporary_folders(tmp_path):
  out = tmp_path / "tables"
  make_tables.make_all(RESULTS, out, log=lambda *_: None)
  (out / "stale_table_of_an_earlier_run.tex").write_text("old")
  (out / "figures").mkdir()
  (out / "figures" / "bfs_train_loss.png").write_bytes(b"old")
  written = make_tables.make_all(RESULTS, out, log=lambda *_: None)
  assert not (out / "stale_table_of_an_earlier_run.tex").exists()
  assert not (out / "figures").exists()
  assert all(p.parent == out and p.exists() for p in written)
  assert (out / make_tables.MARKER).exists()
  assert sorted(p.name for p in tmp_path.iterdir()) == ["tables"]


def test_make_all_failing_midway_leaves_the_previous_output_intact(tmp_path, monkeypatch):
  out = tmp_path / "tables"
  make_tables.make_all(RESULTS, out, log=lambda *_: None)
  before = {p.name: p.read_bytes() for p in out.iterdir()}

  def broken(*args, **kwargs):
    raise RuntimeError("disk full")

  monkeypatch.setattr(report, "comparison_markdown", broken)  # after most files are written
  with pytest.raises(RuntimeError, match="disk full"):
    make_tables.make_all(RESULTS, out, paper=True, log=lambda *_: None)
  assert {p.name: p.read_bytes() for p in out.iterdir()} == before
  assert sorted(p.name for p in tmp_path.iterdir()) == ["tables"]

  monkeypatch.undo()
  real_rename = os.rename

  def rename_fails_on_the_swap(src, dst):
    if pathlib.Path(src).name.startswith(".tables.new-"):
      raise OSError("rename failed")
    return real_rename(src, dst)

  monkeypatch.setattr(make_tables.os, "rename", rename_fails_on_the_swap)
  with pytest.raises(OSError, match="rename failed"):
    make_tables.make_all(RESULTS, out, paper=True, log=lambda *_: None)
  assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # put back
  assert sorted(p.name for p in tmp_path.iterdir()) == ["tables"]


def test_make_all_refuses_to_replace_a_folder_it_did_not_write(tmp_path):
  foreign = tmp_path / "thesis"
  foreign.mkdir()
  (foreign / "chapter1.tex").write_text("precious")
  with pytest.raises(ValueError, match="did not write"):
    make_tables.make_all(RESULTS, foreign, log=lambda *_: None)
  assert (foreign / "chapter1.tex").read_text() == "precious"
  with pytest.raises(ValueError, match="holds --results"):
    make_tables.make_all(RESULTS, RESULTS.parent, log=lambda *_: None)
  proc = subprocess.run(
    [sys.executable, "-m", "analysis.make_tables", "--results", str(RESULTS), "--out",
     str(foreign)],
    cwd=ROOT, capture_output=True, text=True, timeout=60,
  )
  assert proc.returncode == 2 and "did not write" in proc.stderr


def test_hint_accuracy_figure_from_evaluate_json(tmp_path, capsys):
  from analysis import hint_accuracy

  def write(name, acc):
    hints = {"i": {"steps": [1, 2, 3], "accuracy": acc, "samples": [4, 4, 2],
                   "overall": sum(acc) / 3}}
    path = tmp_path / name
    path.write_text(json.dumps({"algorithm": "insertion_sort", "scores": [
        {"source": "test", "nb_nodes": 64, "score": 0.9, "hints": hints}]}))
    return path

  a, b = write("a.json", [1.0, 0.5, 0.25]), write("b.json", [1.0, 1.0, 0.75])
  assert hint_accuracy.main(["--eval", f"ForgetNet={a}", "--eval", f"baseline={b}",
                             "--out", str(tmp_path / "fig")]) == 0
  printed = capsys.readouterr().out.split()
  assert printed == [str(tmp_path / "fig" / f"insertion_sort_hint_accuracy.{e}")
                     for e in ("png", "pdf")]
  assert all(pathlib.Path(p).stat().st_size > 1000 for p in printed)
  # A file written without --hints is refused by name, not drawn empty.
  plain = tmp_path / "plain.json"
  plain.write_text(json.dumps({"algorithm": "insertion_sort",
                               "scores": [{"nb_nodes": 64, "score": 0.9}]}))
  with pytest.raises(SystemExit):
    hint_accuracy.main(["--eval", f"x={plain}", "--out", str(tmp_path / "fig2")])
  assert "no per-step hint scores" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    hint_accuracy.main(["--eval", "no-equals-sign", "--out", str(tmp_path / "fig3")])


def test_selection_curve_reports_what_each_selection_rule_would_keep(tmp_path, capsys):
  from analysis import selection_curve
  steps = [0, 50, 100, 150, 200]
  run = {"algorithm": "insertion_sort", "model": "gforget", "seed": 0,
         "penalty_start_step": 100, "val_best_step": 50, "test_score": 0.4,
         "curves": {"val": {"step": steps, "score": [0.5, 1.0, 0.9, 1.0, 0.95]},
                    "test": {"step": steps[1:], "score": [0.4, 0.7, 0.95, 0.9]}}}
  path = tmp_path / "run" / "result.json"
  path.parent.mkdir()
  path.write_text(json.dumps(run))
  # A run folder is accepted as well as its result.json.
  assert selection_curve.main(["--run", f"G-ForgetNet s0={path.parent}",
                               "--out", str(tmp_path / "fig")]) == 0
  printed = capsys.readouterr().out.splitlines()
  assert printed[-3:] == [str(tmp_path / "fig" / f"insertion_sort_test_curve.{e}")
                          for e in ("png", "pdf", "json")]
  s = json.loads((tmp_path / "fig" / "insertion_sort_test_curve.json").read_text())
  s = s["G-ForgetNet s0"]
  assert s["kept"] == {"step": 50, "test_score": 0.4, "test_curve_there": 0.4}
  assert s["selection"] == {"first_best": {"step": 50, "val": 1.0, "test": 0.4},
                            "last_best": {"step": 150, "val": 1.0, "test": 0.95},
                            "final": {"step": 200, "val": 0.95, "test": 0.9}}
  assert s["tied_with_best"] == [{"step": 50, "test": 0.4}, {"step": 150, "test": 0.95}]
  assert s["test"]["min"] == 0.4 and s["test"]["max"] == 0.95
  assert s["test"]["median"] == pytest.approx(0.8) and s["test"]["steps_below_0.8"] == [50, 100]
  assert "test 40.0-95.0 %" in printed[0] and "last_best step 150: 95.00" in printed[0]
  # A run trained without Protocol.test_every_steps is refused by name.
  del run["curves"]["test"]
  path.write_text(json.dumps(run))
  with pytest.raises(SystemExit):
    selection_curve.main(["--run", f"x={path}", "--out", str(tmp_path / "fig2")])
  assert "no test curve" in capsys.readouterr().err


def test_lambda_table_says_where_lambda_came_from_in_words():
  """The λ table's calibration cell: one phrase per provenance (the three seeds of a calibrated
  algorithm collapse to one), a count of the runs that continued from the calibration's state,
  no file paths (those stay in lambdas.csv)."""
  record = {"source": "calibration record", "record": "/abs/_calibration/schedule/bfs.json",
            "reading": "schedule", "status": "done", "share": 0.5, "calibration_step": 6000,
            "seeds": [0, 1, 2], "penalty_start_step": 6000, "created": "2026-11-23T03:26:24"}
  runs = [json.dumps(dict(record, continued_from=f"/abs/seed{s}/final_state.pkl"))
          for s in (0, 1)] + [json.dumps(record), ""]
  cell = report.calibration_summary(runs)
  assert cell == ("calibration record (status `done`), penalty share 0.5 at step 6,000, "
                  "calibrated on seeds 0, 1, 2, penalty from step 6,000; "
                  "2 of 3 runs continued from the calibration's state")
  assert "/abs" not in cell
  by_hand = json.dumps({"source": "bound by hand", "lambda": 0.1, "penalty_start_step": 0})
  assert report.calibration_summary([by_hand]) == "bound by hand, penalty from step 0"
  assert report.calibration_summary(["", ""]) == ""
