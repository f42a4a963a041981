"""The paper's published numbers (every table of Bohde et al., ICLR 2024), shipped as CSV.

analysis/paper_results.csv was transcribed from the paper's LaTeX by
analysis/extract_paper_results.py; its docstring documents the columns (table, model, row,
mean, std, unit). Means/stds are in percent as printed (unit=percent), except the
"number of algorithms above 99/97/95 %" rows of the summary table (unit=count).
"""

import pathlib

import pandas as pd

from analysis import categories

PAPER_RESULTS_CSV = pathlib.Path(__file__).with_name("paper_results.csv")

# Where the paper reports each of our models, per algorithm (the table a reproduction is
# compared with). The literature baselines only appear in Table 6 (main_comparison_full).
PAPER_TABLE = {
  "baseline": "three_model_comparison",
  "forget": "three_model_comparison",
  "gforget": "three_model_comparison",
  "gforget_nopenalty": "penalty_ablate",
  "baseline_multitask": "multi_table",
  "forget_multitask": "multi_table",
  "memnet": "main_comparison_full",
  "mpnn": "main_comparison_full",
  "pgn": "main_comparison_full",
  "triplet_gmpnn": "main_comparison_full",
}
LITERATURE_MODELS = ("memnet", "mpnn", "pgn", "triplet_gmpnn")


def load_paper_results(path=PAPER_RESULTS_CSV):
  """The long-format paper table (std NaN where the paper prints none)."""
  return pd.read_csv(
    path, dtype={"table": str, "model": str, "row": str, "unit": str, "mean": float, "std": float}
  )


def paper_cells(paper, model):
  """{algorithm: (mean_pct, std_pct)} of `model` in its table of PAPER_TABLE.

  Args:
    paper: `load_paper_results()`.
    model: one of PAPER_TABLE's models.

  Raises:
    KeyError: `model` is not in PAPER_TABLE.
  """
  rows = paper[
    (paper["table"] == PAPER_TABLE[model])
    & (paper["model"] == model)
    & (paper["unit"] == "percent")
  ]
  return {r.row: (r.mean, r.std) for r in rows.itertuples() if r.row in categories.ALGORITHMS}


def paper_summary(paper, model):
  """{row: (value, std)} of `model` in the paper's printed Table 2 ({} if not in it).

  Rows are categories, 'overall_average' and the 'above_*' counts (unit count).
  """
  rows = paper[(paper["table"] == "main_comparison") & (paper["model"] == model)]
  return {r.row: (r.mean, r.std) for r in rows.itertuples()}
