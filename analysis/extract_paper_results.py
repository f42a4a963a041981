"""Transcribe the paper's result tables from its LaTeX source into analysis/paper_results.csv.

Developer tool, run once; the CSV is what ships (the .tex is not in the repo):

    python analysis/extract_paper_results.py /work/shared/seed/markov_nar_paper.tex \
        > analysis/paper_results.csv

CSV columns (long format, one row per printed cell):
    table   the \\label of the table without 'tab:' (three_model_comparison, main_comparison,
            main_comparison_full, penalty_ablate, multi_table)
    model   baseline|forget|gforget|gforget_nopenalty|memnet|mpnn|pgn|triplet_gmpnn|
            baseline_multitask|forget_multitask (the names our result JSON uses)
    row     a CLRS-30 algorithm name; in main_comparison also a category of
            analysis.categories.CATEGORY_ALGORITHMS, 'overall_average', 'above_99',
            'above_97', 'above_95'
    mean    as printed: percent with 2 decimals (unit=percent), or the number of algorithms out
            of 30 (unit=count, rows above_*)
    std     the printed ± in percent points; empty where the paper prints none
    unit    percent|count
Values are copied as printed, paper inconsistencies included (e.g. G-ForgetNet articulation
points is ±0.58 in Tables 1/7 but ±0.46 in Table 6).
"""

import re
import sys

try:
  from analysis import categories
except ImportError:  # run by path
  import os

  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  from analysis import categories

_HEADER_MODELS = {
  "Baseline": "baseline",
  "ForgetNet": "forget",
  "G-ForgetNet": "gforget",
  "G-ForgetNet w/o penalty": "gforget_nopenalty",
  "Memnet": "memnet",
  "MPNN": "mpnn",
  "PGN": "pgn",
  "Triplet-GMPNN": "triplet_gmpnn",
}
_TABLES = (
  "three_model_comparison",
  "main_comparison",
  "main_comparison_full",
  "penalty_ablate",
  "multi_table",
)
_SUMMARY_ROWS = {
  "Overall Average": "overall_average",
  "$>99\\%$": "above_99",
  "$>97\\%$": "above_97",
  "$>95\\%$": "above_95",
}
_CELL = re.compile(
  r"^\$(?P<mean>\d+\.\d\d)\\%(?: \\scriptstyle\{\{\\light\{\\pm(?P<std>\d+\.\d\d)\}\}\})?\$$"
)
_COUNT = re.compile(r"^\$(?P<count>\d+)/30\$$")


def _row_key(label):
  label = label.strip().replace("\u2019", "'")  # Table 6 spells Jarvis’ with a curly quote
  for alg, name in categories.DISPLAY_NAMES.items():
    if name == label:
      return alg
  for cat, name in categories.CATEGORY_DISPLAY_NAMES.items():
    if name == label:
      return cat
  if label in _SUMMARY_ROWS:
    return _SUMMARY_ROWS[label]
  raise ValueError(f"unknown row label {label!r}")


def _strip_markup(cell):
  cell = cell.replace("\\cellcolor{green!30!white}", "")
  cell = re.sub(r"\\(?:textbf|underline)\{([^}]*)\}", r"\1", cell)
  return cell.strip()


def parse_table(tex, table):
  """The cells of the table labelled tab:<table> in the LaTeX source `tex`.

  Returns:
    [(model, row, mean, std, unit)], strings as printed (std '' where none is printed),
    rows in the paper's order (left half, then right half of a two-column table), models
    in column order.

  Raises:
    ValueError: no such table, or a row label or cell it cannot read.
  """
  start = tex.index("\\label{tab:%s}" % table)
  body = tex[start : tex.index("\\end{tabular}", start)]
  header, body = body.split("\\midrule", 1)
  header = header[header.index("\\toprule") + len("\\toprule") :]
  columns = [
    re.sub(r"\\textbf\{(.*)\}", r"\1", h.strip()) for h in header.replace("\\\\", "").split("&")
  ]
  # Two-column layouts repeat the header: 'Algorithm', models..., 'Algorithm', models...
  width = columns[1:].index("Algorithm") + 1 if "Algorithm" in columns[1:] else len(columns)
  models = [_HEADER_MODELS[c] for c in columns[1:width]]
  if table == "multi_table":  # one processor trained on all 30 (Appendix C.1)
    models = [m + "_multitask" for m in models]
  out = []
  for line in body.replace("\\midrule", "").replace("\\bottomrule", "").split("\\\\"):
    cells = re.split(r"(?<!\\)&", line)  # not the \& of 'Div. \& C.'
    if not line.strip():
      continue
    assert len(cells) % width == 0, (table, line)
    for i in range(0, len(cells), width):
      row = _row_key(cells[i])
      for model, cell in zip(models, cells[i + 1 : i + width]):
        cell = _strip_markup(cell)
        m = _CELL.match(cell)
        if m:
          out.append((model, row, m["mean"], m["std"] or "", "percent"))
          continue
        m = _COUNT.match(cell)
        if not m:
          raise ValueError(f"cannot parse {table}/{model}/{row}: {cell!r}")
        out.append((model, row, m["count"], "", "count"))
  rank = {
    r: i
    for i, r in enumerate(
      categories.PAPER_ORDER
      + tuple(categories.CATEGORY_DISPLAY_NAMES)
      + tuple(_SUMMARY_ROWS.values())
    )
  }
  # Row-major order interleaves the two halves of a two-column table: list rows as the paper
  # numbers them (left half, then right half), models in column order.
  return sorted(out, key=lambda r: (rank[r[1]], models.index(r[0])))


def main(argv):
  """Writes the CSV of the module docstring to stdout; exits with the docstring on bad usage."""
  if len(argv) != 2:
    sys.exit(__doc__)
  with open(argv[1], encoding="utf-8") as f:
    tex = f.read()
  lines = ["table,model,row,mean,std,unit"]
  for table in _TABLES:
    lines += [",".join((table,) + r) for r in parse_table(tex, table)]
  sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
  main(sys.argv)
