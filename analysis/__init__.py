"""Analysis: results/ -> the paper's tables, a reproduction report and figures.

Bohde et al., ICLR 2024: the paper's numbers side by side with ours. Light on purpose: pandas,
numpy and (for figures) matplotlib, no jax/clrs, so it runs anywhere the result JSON files are.

    glob **/result.json -> results.load_runs (validate) -> results.to_long (long DataFrame)
    -> results.aggregate (mean/std per model x algorithm) -> tables / report / figures

CLI: python analysis/make_tables.py --results DIR --out DIR [--paper] [--figures ALG,...]
"""

from analysis.categories import (
  ALGORITHMS,
  CATEGORY,
  CATEGORY_ALGORITHMS,
  DISPLAY_NAMES,
  PAPER_ORDER,
)
from analysis.labels import is_calibration, model_label, paper_model
from analysis.paper import load_paper_results, PAPER_TABLE
from analysis.report import reproduction_frame, reproduction_markdown
from analysis.results import aggregate, load_results, load_runs, to_long, validate
from analysis.tables import comparison_table, summary_table

__all__ = [
  "ALGORITHMS",
  "CATEGORY",
  "CATEGORY_ALGORITHMS",
  "DISPLAY_NAMES",
  "PAPER_ORDER",
  "is_calibration",
  "model_label",
  "paper_model",
  "load_paper_results",
  "PAPER_TABLE",
  "reproduction_frame",
  "reproduction_markdown",
  "aggregate",
  "load_results",
  "load_runs",
  "to_long",
  "validate",
  "comparison_table",
  "summary_table",
]
