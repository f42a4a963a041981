"""LaTeX tables in the paper's format, from `results.aggregate` output.

Cells copy the paper's LaTeX: `$98.40\\% \\scriptstyle{{\\light{\\pm0.21}}}$` (percent, two
decimals), `\\cellcolor{green!30!white}` for "better than the baseline", `\\textbf{..}` for the
best and `\\underline{..}` for the second best. Comparisons use the values as printed (rounded
to 2 decimals), so a reader can check every mark by eye; ties get the same mark.

Our additions, explained in each caption:
  `\\textsuperscript{\\light{[n]}}`  the mean is over n seeds, fewer than the N expected
  `—`                                no run for this cell
  `{\\light{\\scriptsize(98.40)}}`    (option paper=...) the paper's mean for the same cell
Columns: the paper's models of each table, each followed by our variants of it
(`table_models`: gforget_constant after gforget, headed "G-ForgetNet (constant)" and compared
with the paper's G-ForgetNet).
The tables need booktabs, colortbl, graphicx, xcolor and the paper's macro
`\\definecolor{light}{rgb}{0.3, 0.3, 0.3}\\def\\light#1{{\\color{light}#1}}` (PREAMBLE).
"""

import math

from analysis import categories
from analysis import labels
from analysis import paper as paper_lib

PREAMBLE = (
  "\\usepackage{booktabs}\n\\usepackage{colortbl}\n\\usepackage{graphicx}\n"
  "\\usepackage{xcolor}\n\\definecolor{light}{rgb}{0.3, 0.3, 0.3}\n"
  "\\def\\light#1{{\\color{light}#1}}\n"
)
MISSING = "—"
HIGHLIGHT = "\\cellcolor{green!30!white} "
MODEL_LABELS = labels.MODEL_LABELS
THREE_MODELS = ("baseline", "forget", "gforget")
PENALTY_MODELS = ("baseline", "gforget_nopenalty", "gforget")
MULTITASK_MODELS = ("baseline_multitask", "forget_multitask")
_TEX_SPECIALS = {"_": "\\_", "&": "\\&", "%": "\\%", "#": "\\#", "$": "\\$"}


def tex_escape(text):
  """`text` with LaTeX's special characters _ & % # $ escaped."""
  return "".join(_TEX_SPECIALS.get(ch, ch) for ch in text)


def header_name(label):
  """A model label as a LaTeX column header (labels.model_label, escaped)."""
  return tex_escape(labels.model_label(label))


def table_models(present, models, *, unmatched=False):
  """The columns of a table of the paper's `models`, in order.

  Args:
    present: the model labels with results.
    models: the paper's models of the table.
    unmatched: also append the present labels with no paper counterpart (single-task
      ones in a single-task table, *_multitask ones in a multi-task table), calibration
      runs excepted.

  Returns:
    Each of `models` (present or not), each followed by the labels in `present` that are
    variants of it (labels.paper_model), e.g. gforget_constant after gforget.
  """
  multitask = all(labels.split_label(m)[2] for m in models)
  columns = []
  for m in models:
    columns.append(m)
    columns += [
      label
      for label in labels.sort_models(present)
      if label != m and label not in models and labels.paper_model(label) == m
    ]
  if unmatched:
    columns += [
      label
      for label in labels.sort_models(present)
      if labels.paper_model(label) is None
      and label != labels.CALIBRATION_MODEL
      and labels.split_label(label)[2] == multitask
      and label not in columns
    ]
  return columns

# The paper's captions; ours append notes on seeds, missing runs and divergence.
CAPTIONS = {
  "three_model_comparison": (
    "Test OOD micro-F1 score of the baseline, ForgetNet, and G-ForgetNet methods. The cells "
    "are highlighted if their corresponding results are better than the baseline."
  ),
  "main_comparison": (
    "Test OOD micro-F1 score of G-ForgetNet and existing methods. The highest scores are "
    "highlighted in bold, while the second-highest scores are underlined."
  ),
  "penalty_ablate": (
    "Test OOD micro-F1 score of the baseline, G-ForgetNet without penalty, and G-ForgetNet "
    "methods. The cells are highlighted if their corresponding results are better than the "
    "baseline. The highest scores are highlighted in bold."
  ),
  "multi_table": (
    "Test OOD micro-F1 scores of the baseline and ForgetNet on the multi-task setting."
  ),
}


def _finite(x):
  return x is not None and not (isinstance(x, float) and math.isnan(x))


def shown(x):
  """The value as printed (2 decimals), or None for a missing value."""
  return float(f"{x:.2f}") if _finite(x) else None


def marks(values):
  """'bold' for the best printed value, 'underline' for the second best, else None.

  Needs two or more values to compare; ties share the mark.
  """
  printed = [shown(v) for v in values]
  present = sorted({v for v in printed if v is not None}, reverse=True)
  if sum(v is not None for v in printed) < 2:
    return [None] * len(values)
  best = present[0]
  second = present[1] if len(present) > 1 else None
  return [
    "bold" if v == best else "underline" if v is not None and v == second else None for v in printed
  ]


def _number(text, mark):
  if mark == "bold":
    return "\\textbf{" + text + "}"
  if mark == "underline":
    return "\\underline{" + text + "}"
  return text


def score_cell(mean_pct, std_pct=None, *, mark=None, highlight=False, note=None, paper=None):
  """One cell in the paper's format, e.g. `$98.40\\% \\scriptstyle{{\\light{\\pm0.21}}}$`.

  Args:
    mean_pct: our mean in percent; None or NaN: the cell is MISSING.
    std_pct: its std; None or NaN: none printed.
    mark: None|'bold'|'underline'.
    highlight: green background.
    note: grey superscript (seed count).
    paper: the paper's mean (percent) to print after ours, None for none.
  """
  if not _finite(mean_pct):
    cell = MISSING
  else:
    cell = "$" + _number(f"{mean_pct:.2f}", mark) + "\\%"
    if _finite(std_pct):
      cell += " \\scriptstyle{{\\light{\\pm" + f"{std_pct:.2f}" + "}}}"
    cell += "$"
    if highlight:
      cell = HIGHLIGHT + cell
  if note:
    cell += "\\textsuperscript{\\light{[" + note + "]}}"
  if _finite(paper):
    cell += " {\\light{\\scriptsize(" + f"{paper:.2f}" + ")}}"
  return cell


def count_cell(count, total, mark=None):
  """A count cell, e.g. `$27/30$`, bold or underlined by `mark`."""
  return "$" + _number(f"{count}/{total}", mark) + "$"


def _cells(agg, model):
  """{algorithm: row of aggregate} for one model."""
  rows = agg[agg["model"] == model]
  return {r.algorithm: r for r in rows.itertuples()}


def models_present(agg, models):
  """Those of `models` with a row in `agg`, in order."""
  return [m for m in models if (agg["model"] == m).any()]


def expected_seeds_of(agg, models):
  """Default N for the seed-count marks: the most seeds any cell of these models has, or 0."""
  n = agg.loc[agg["model"].isin(models), "n_seeds"]
  return int(n.max()) if len(n) else 0


def _diverged_note(agg, models):
  sub = agg[agg["model"].isin(models)]
  n_diverged = int(sub["n_diverged"].sum())
  text = f" Diverged runs: {n_diverged}"
  if n_diverged:
    n_unscored = int((sub["n_runs"] - sub["n_seeds"]).sum())
    text += ", counted in mean and std with the test score of their best-validation parameters"
    if n_unscored:
      text += f" ({n_unscored} without a test score left out)"
  return text + "."


def _notes(agg, models, expected_seeds, with_paper):
  sub = agg[agg["model"].isin(models)]
  n_seeds = sub["n_seeds"]
  if len(n_seeds) and n_seeds.max() > 1:
    text = " Ours: mean $\\pm$ sample std (ddof=1) over seeds, in \\%"
  else:
    text = " Ours: one seed per cell (no std), in \\%"
  # Only when a cell carries the mark: with N <= 1 "n < N seeds" would be nonsense.
  few = n_seeds[(n_seeds > 0) & (n_seeds < expected_seeds)]
  if len(few):
    text += f"; a grey superscript [n] marks a mean over n of the {expected_seeds} seeds"
  text += f"; {MISSING} marks no run."
  text += _diverged_note(agg, models)
  if with_paper:
    text += " Grey (x): the paper's mean."
  return text


def _wrap(label, caption, colspec, header, body_lines):
  lines = [
    "\\begin{table}",
    "\t\\caption{" + caption + "}",
    "\t\\label{tab:" + label + "}",
    "\t\\centering",
    "\t\\resizebox{\\columnwidth}{!}{",
    "\t\\begin{tabular}{" + colspec + "}",
    "\t\t\\toprule",
    "\t\t" + " & ".join("\\textbf{" + h + "}" for h in header) + " \\\\",
    "\t\t\\midrule",
  ]
  lines += ["\t\t" + line for line in body_lines]
  lines += ["\t\t\\bottomrule", "\t\\end{tabular}", "\t}", "\\end{table}"]
  return "% Generated by analysis/make_tables.py; do not edit.\n" + "\n".join(lines) + "\n"


def comparison_table(agg, models, *, label, highlight_vs=None, paper=None, expected_seeds=None):
  """The paper's two-column per-algorithm table (15 algorithms a side, `lccc|lccc`).

  The best printed mean of a row is bold (no underline, as in the paper's Tables 1, 7, 8).

  Args:
    agg: results.aggregate().
    models: the columns, in order.
    label: the table's label, a key of CAPTIONS (tab:<label>).
    highlight_vs: the model whose printed mean a cell must beat for the green highlight
      (None: no highlight).
    paper: the paper DataFrame, to print the paper's mean in each cell of a paper model's
      column (None: ours only).
    expected_seeds: N for the [n] marks; None: `expected_seeds_of`.

  Returns:
    The table's LaTeX.
  """
  if expected_seeds is None:
    expected_seeds = expected_seeds_of(agg, models)
  cells = {m: _cells(agg, m) for m in models}
  # The paper's number only under a column of a model the paper reports: a variant of ours
  # (gforget_constant, gforget_adaptive, ...) has none, though it is compared with one.
  paper_means = (
    {m: _paper_cells(paper, m) if labels.paper_model(m) == m else {} for m in models}
    if paper is not None else None
  )

  def row(algorithm):
    stats = [cells[m].get(algorithm) for m in models]
    means = [s.mean_pct if s is not None else None for s in stats]
    # Tables 1, 7 and 8 of the paper bold the best cell only; no underline.
    row_marks = [m if m == "bold" else None for m in marks(means)]
    reference = shown(means[models.index(highlight_vs)]) if highlight_vs in models else None
    out = [categories.display_name(algorithm)]
    for m, s, mean, mark in zip(models, stats, means, row_marks):
      note = None
      if s is not None and 0 < s.n_seeds < expected_seeds:
        note = str(s.n_seeds)
      highlight = (
        m != highlight_vs
        and reference is not None
        and shown(mean) is not None
        and shown(mean) > reference
      )
      p = paper_means[m].get(algorithm, (None, None))[0] if paper_means is not None else None
      out.append(
        score_cell(
          mean,
          s.std_pct if s is not None else None,
          mark=mark,
          highlight=highlight,
          note=note,
          paper=p,
        )
      )
    return " & ".join(out)

  half = len(categories.PAPER_ORDER) // 2
  body = []
  for left, right in zip(categories.PAPER_ORDER[:half], categories.PAPER_ORDER[half:]):
    body += [row(left) + " &", "\t" + row(right) + " \\\\"]
  header = ["Algorithm"] + [header_name(m) for m in models]
  colspec = "l" + "c" * len(models)
  caption = CAPTIONS[label] + _notes(agg, models, expected_seeds, paper is not None)
  if paper is not None and any(labels.paper_model(m) != m for m in models):
    caption += " Our variants' columns have no paper number: the paper reports no such variant."
  return _wrap(label, caption, colspec + "|" + colspec, header + header, body)


def _paper_cells(paper, label):
  """The paper's per-algorithm cells of the model `label` is compared with ({} if none)."""
  model = labels.paper_model(label)
  return paper_lib.paper_cells(paper, model) if model is not None else {}


def category_stats(cells, algorithms):
  """(mean, mean of stds, n present) over `algorithms` of {algorithm: (mean, std)}.

  The paper's Table 2 averages per-algorithm means and per-algorithm stds over a category
  (checked against its Table 6 in tests); algorithms without a result are skipped, and
  stds that are missing.  (None, None, 0) where none has a result; the std None where
  none has one.
  """
  present = [cells[a] for a in algorithms if a in cells and _finite(cells[a][0])]
  if not present:
    return None, None, 0
  stds = [s for _, s in present if _finite(s)]
  mean = sum(m for m, _ in present) / len(present)
  return mean, (sum(stds) / len(stds) if stds else None), len(present)


THRESHOLDS_PCT = (99, 97, 95)


def summary_columns(agg, models, paper=None):
  """The columns of the summary table.

  Without `paper`, one per model of ours; with it, the literature baselines, one paper
  column per paper model our labels are compared with, then ours.

  Returns:
    [(header, {algorithm: (mean_pct, std_pct)}, printed)]; printed: the paper's own
    Table 2 values {row: (value, std)} for a paper column the paper summarises
    (literature baselines, G-ForgetNet), used instead of re-aggregating its rounded
    per-algorithm values (which can differ by 0.01); {} otherwise.
  """
  ours = [
    (m, {r.algorithm: (r.mean_pct, r.std_pct) for r in _cells(agg, m).values()}) for m in models
  ]
  if paper is None:
    return [(header_name(m), c, {}) for m, c in ours]
  columns = [
    (MODEL_LABELS[m], paper_lib.paper_cells(paper, m), paper_lib.paper_summary(paper, m))
    for m in paper_lib.LITERATURE_MODELS
  ]
  # One paper column per paper model, however many of our labels it is compared with.
  paper_models = list(dict.fromkeys(labels.paper_model(m) for m in models))
  columns += [
    (
      MODEL_LABELS[m] + " (paper)",
      paper_lib.paper_cells(paper, m),
      paper_lib.paper_summary(paper, m),
    )
    for m in paper_models
    if m is not None
  ]
  columns += [(header_name(m) + " (ours)", c, {}) for m, c in ours]
  return columns


def summary_values(columns):
  """Per row of the summary table, per column: (value, std, n_present, n_total).

  Rows: each category, 'overall_average' and 'above_<t>' for THRESHOLDS_PCT (counts of
  printed means strictly above t; n_present None).  A column's printed values replace
  the computed ones (n_present then n_total; no std for the overall average).
  """
  n_all = len(categories.ALGORITHMS)
  rows = {}
  for cat, algs in categories.CATEGORY_ALGORITHMS.items():
    rows[cat] = [category_stats(c, algs) + (len(algs),) for _, c, _ in columns]
  rows["overall_average"] = [
    category_stats(c, categories.ALGORITHMS) + (n_all,) for _, c, _ in columns
  ]
  for t in THRESHOLDS_PCT:
    # Counted on the printed means, strictly above: 99.00 is not ">99%".
    rows[f"above_{t}"] = [
      (sum(shown(m) > t for m, _ in c.values() if _finite(m)), None, None, n_all)
      for _, c, _ in columns
    ]
  for row, values in rows.items():
    for i, (_, _, printed) in enumerate(columns):
      if row in printed:
        value, std = printed[row]
        if row.startswith("above_"):
          value = int(value)
        values[i] = (value, None if row == "overall_average" else std, n_all, n_all)
  return rows


def summary_table(agg, models, *, paper=None, label="main_comparison"):
  """The paper's Table 2, as LaTeX: category and overall averages, counts above 99/97/95 %.

  Bold best and underlined second best across the columns present.  Category cells with
  results for only k of the m algorithms carry a grey [k/m] and are never marked; the
  denominators of the counts are the 30 algorithms of CLRS-30.

  Args:
    agg: results.aggregate().
    models: our columns.
    paper: the paper DataFrame, for its columns (`summary_columns`); None: ours only.
    label: the table's label (tab:<label>); the caption is main_comparison's.
  """
  columns = summary_columns(agg, models, paper)
  values = summary_values(columns)
  n_all = len(categories.ALGORITHMS)

  def line(label_tex, row, with_std=True, counts=False):
    # An average over k < m algorithms is not comparable with a full one: never marked.
    row_marks = marks([mean if counts or k is None or k == n else None
                       for mean, _, k, n in row])
    out = [label_tex]
    for (mean, std, k, n), mark in zip(row, row_marks):
      if counts:
        out.append(count_cell(mean, n, mark))
        continue
      note = f"{k}/{n}" if 0 < k < n else None
      out.append(score_cell(mean, std if with_std else None, mark=mark, note=note))
    return " & ".join(out) + " \\\\"

  body = [
    line(categories.CATEGORY_DISPLAY_NAMES[c], values[c]) for c in categories.CATEGORY_ALGORITHMS
  ]
  body += [
    "\\midrule",
    line("Overall Average", values["overall_average"], with_std=False),
    "\\midrule",
  ]
  body += [line(f"$>{t}\\%$", values[f"above_{t}"], counts=True) for t in THRESHOLDS_PCT]
  header = ["Algorithm"] + [h for h, _, _ in columns]
  caption = CAPTIONS["main_comparison"]
  caption += " Ours: category averages of per-algorithm means and stds (as the paper);"
  if any(0 < k < n for row in values.values() for _, _, k, n in row if k is not None):
    caption += (" a grey superscript [k/m] marks an average over the k of m algorithms with"
                " results, never marked as the best or second best;")
  caption += f" counts are over the {n_all} algorithms; {MISSING} marks no run."
  caption += _diverged_note(agg, models)
  if paper is not None:
    caption += (
      " Literature and (paper) columns: the paper's Table 2 where it has the"
      " model, else its per-algorithm values aggregated the same way."
    )
  return _wrap(label, caption, "l" + "c" * len(columns), header, body)


def seeds_frame(agg):
  """The seed counts behind every cell: the aggregate sorted by label, then the paper's order."""
  order = {a: i for i, a in enumerate(categories.PAPER_ORDER)}
  model_order = {m: i for i, m in enumerate(labels.sort_models(agg["model"]))}
  out = agg.copy()
  out["_m"] = out["model"].map(model_order)
  out["_a"] = out["algorithm"].map(order)
  out = out.sort_values(["_m", "_a"]).drop(columns=["_m", "_a"])
  return out.reset_index(drop=True)


def standalone_document(table_files):
  """A LaTeX document that \\input's the generated tables (compile it in the output dir)."""
  body = "".join("\\input{" + f + "}\n\\clearpage\n" for f in table_files)
  return (
    "% Generated by analysis/make_tables.py; do not edit.\n"
    "\\documentclass{article}\n" + PREAMBLE + "\\begin{document}\n" + body + "\\end{document}\n"
  )


__all__ = [
  "table_models",
  "header_name",
  "comparison_table",
  "summary_table",
  "score_cell",
  "marks",
  "shown",
  "category_stats",
  "summary_values",
  "summary_columns",
  "seeds_frame",
  "expected_seeds_of",
  "models_present",
  "standalone_document",
]
