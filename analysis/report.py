"""Reproduction report: ours vs the paper, per model and algorithm (CSV + Markdown).

For each of our model labels and each of the 30 algorithms: our mean ± std (percent, ddof=1),
the paper's for the model the label is compared with (labels.paper_model: gforget_constant ->
the paper's G-ForgetNet; none for a label of no known family), Δ = ours − paper, Δ/σ (Δ in the
paper's standard deviations), whether ours lies within the paper's mean ± 2σ (σ: the
paper's std over its 10 seeds), and the seeds, diverged runs and training steps (`steps`
trained / `train_steps` configured, from the JSON) behind our number. The lambda calibration
runs are not results and are not reported here.
"""

import json
import math

import numpy as np
import pandas as pd

from analysis import categories
from analysis import labels
from analysis import paper as paper_lib
from analysis import results as results_lib
from analysis import tables

COLUMNS = [
  "model",
  "paper_model",
  "algorithm",
  "paper_table",
  "ours_mean_pct",
  "ours_std_pct",
  "n_seeds",
  "n_runs",
  "n_diverged",
  "steps",
  "train_steps",
  "paper_mean_pct",
  "paper_std_pct",
  "delta_pct",
  "delta_sigma",
  "within_2sigma",
]


def reproduction_frame(agg, paper):
  """Ours against the paper, per model label and algorithm.

  Args:
    agg: results.aggregate().
    paper: paper.load_paper_results().

  Returns:
    A DataFrame of COLUMNS, one row per (model label in `agg`, algorithm of CLRS-30 in
    the paper's order), calibration runs excepted; ours NaN (n_* 0) where the label has
    no result on the algorithm, paper columns empty for a label with no paper
    counterpart; within_2sigma a nullable boolean (NA without our mean).
  """
  models = [m for m in labels.sort_models(agg["model"]) if m != labels.CALIBRATION_MODEL]
  rows = []
  for model in models:
    ours = tables._cells(agg, model)
    theirs = tables._paper_cells(paper, model)
    counterpart = labels.paper_model(model)
    for algorithm in categories.PAPER_ORDER:
      s = ours.get(algorithm)
      p_mean, p_std = theirs.get(algorithm, (np.nan, np.nan))
      mean = s.mean_pct if s is not None else np.nan
      delta = mean - p_mean
      rows.append(
        {
          "model": model,
          "paper_model": counterpart or "",
          "algorithm": algorithm,
          "paper_table": paper_lib.PAPER_TABLE[counterpart] if counterpart else "",
          "ours_mean_pct": mean,
          "ours_std_pct": s.std_pct if s is not None else np.nan,
          "n_seeds": s.n_seeds if s is not None else 0,
          "n_runs": s.n_runs if s is not None else 0,
          "n_diverged": s.n_diverged if s is not None else 0,
          "steps": s.steps if s is not None else "",
          "train_steps": s.train_steps if s is not None else "",
          "paper_mean_pct": p_mean,
          "paper_std_pct": p_std,
          "delta_pct": delta,
          # The difference in the paper's standard deviations (its 10 seeds).
          "delta_sigma": delta / p_std if p_std > 0 else np.nan,
          "within_2sigma": (pd.NA if math.isnan(delta) else bool(abs(delta) <= 2 * p_std + 1e-9)),
        }
      )
  df = pd.DataFrame(rows, columns=COLUMNS)
  df["within_2sigma"] = df["within_2sigma"].astype("boolean")
  return df


def _pm(mean, std):
  if not tables._finite(mean):
    return tables.MISSING
  return f"{mean:.2f}" + (f" ± {std:.2f}" if tables._finite(std) else "")


def _diverged_line(agg):
  n_diverged = int(agg["n_diverged"].sum()) if len(agg) else 0
  n_unscored = int((agg["n_runs"] - agg["n_seeds"]).sum()) if len(agg) else 0
  text = f"- Diverged runs (a non-finite training loss): {n_diverged}"
  if n_diverged:
    text += (
      "; counted in mean/std with the test score of their best-validation parameters"
      f" (as dm-clrs run.py, which drops no seed); {n_unscored} without a test score left out"
    )
  return text + "."


def _lambda_lines(lambdas):
  """Markdown lines on lambda per model label x algorithm (runs with a gate only)."""
  if lambdas is None or not len(lambdas):
    return []
  lines = [
    "",
    "## λ (gate penalty weight) of the gated runs",
    "",
    "| Model | Algorithm | λ | reading | calibration | seeds |",
    "|---|---|---|---|---|---|",
  ]
  for (model, algorithm), g in lambdas.groupby(["model", "algorithm"], sort=False):
    values = sorted({float(x) for x in g["lambda_gate"].dropna()})
    readings = sorted({x for x in g["lambda_reading"] if x})
    lines.append(
      f"| `{model}` | {categories.plain_name(algorithm)} | "
      + (", ".join(f"{v:.4g}" for v in values) or tables.MISSING)
      + f" | {', '.join(readings)} | "
      + calibration_summary(g["lambda_calibration"])
      + f" | {len(g)} |"
    )
  return lines


def calibration_summary(calibrations):
  """The calibration cell of the λ table, from lambda_frame's lambda_calibration column.

  Where λ came from, in words, once per distinct provenance (the runs of one algorithm
  share it), and how many runs continued from the calibration's own training prefix; ''
  where no run has a calibration.  The whole dict, with its paths, stays in lambdas.csv.
  """
  infos = [json.loads(c) for c in calibrations if c]
  if not infos:
    return ""
  phrases = sorted({_provenance_phrase(info) for info in infos})
  continued = sum(1 for info in infos if info.get("continued_from"))
  if continued:
    phrases.append(f"{continued} of {len(infos)} runs continued from the calibration's state")
  return "; ".join(phrases)


def _provenance_phrase(info):
  """One run's λ provenance (result.json's lambda_calibration) as a short phrase."""
  parts = [str(info.get("source") or "unknown source")]
  if info.get("status"):
    parts[0] += f" (status `{info['status']}`)"
  share, step = info.get("share"), info.get("calibration_step")
  if share is not None and step is not None:
    parts.append(f"penalty share {share:.3g} at step {int(step):,}")
  if info.get("seeds"):
    parts.append("calibrated on seed" + ("s " if len(info["seeds"]) > 1 else " ")
                 + ", ".join(str(s) for s in info["seeds"]))
  if info.get("penalty_start_step") is not None:
    parts.append(f"penalty from step {int(info['penalty_start_step']):,}")
  return ", ".join(parts)


def reproduction_markdown(
  frame, *, n_files, problems, agg, skipped_models=(), n_calibration=0, lambdas=None
):
  """reproduction.md: what was loaded, one table per model label, λ, the files left out.

  Args:
    frame: `reproduction_frame(...)`.
    n_files: result.json files found.
    problems: the files left out, 'path: reason'.
    agg: results.aggregate() (the run counts).
    skipped_models: labels without a paper counterpart, named as not compared.
    n_calibration: lambda calibration runs set apart.
    lambdas: results.lambda_frame() of the gated runs, or None.
  """
  n_runs = int(agg["n_runs"].sum()) if len(agg) else 0
  lines = [
    "# Reproduction report: ours vs Bohde et al. (ICLR 2024)",
    "",
    f"- result.json files found: {n_files}; runs used: {n_runs}; "
    f"files left out (corrupt/partial, listed at the end): {len(problems)}.",
    _diverged_line(agg),
    f"- Ours: mean ± sample std (ddof={results_lib.STD_DDOF}) over seeds, in percent. "
    'Δ = ours − paper; Δ/σ: Δ in the paper\'s standard deviations. "±2σ": |Δ| ≤ 2 × '
    "the paper's std.",
    "- steps: trained steps (`steps`), train_steps: configured (`train_steps`); "
    '"a-b" when seeds differ.',
  ]
  if n_calibration:
    lines.append(
      f"- Lambda calibration runs (model `{labels.CALIBRATION_MODEL}`, "
      "results/calibrate or results/_calibration): "
      f"{n_calibration}, not results: in no table."
    )
  if skipped_models:
    lines.append(
      "- No paper counterpart, not compared: " + ", ".join(f"`{m}`" for m in skipped_models) + "."
    )
  for model, g in frame.groupby("model", sort=False):
    have = g[g["n_seeds"] > 0]
    within = int(have["within_2sigma"].fillna(False).sum())
    mean_delta = have["delta_pct"].mean()
    title = _title(model)
    counterpart = g["paper_model"].iloc[0]
    if not counterpart:
      paper_text = "none"
    elif counterpart == model:
      paper_text = f"tab:{g['paper_table'].iloc[0]}"
    else:
      paper_text = f"{_title(counterpart)}, tab:{g['paper_table'].iloc[0]}"
    summary = f"{len(have)}/{len(g)} algorithms with results"
    if counterpart:
      summary += f"; {within}/{len(have)} within the paper's ±2σ" + (
        f"; mean Δ {mean_delta:+.2f}" if len(have) else ""
      )
    lines += [
      "",
      f"## {title} (`{model}`; paper: {paper_text})",
      "",
      summary + ".",
      "",
      "| Algorithm | Ours | Paper | Δ | Δ/σ | ±2σ | seeds | diverged | steps | train_steps |",
      "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in g.itertuples():
      within_text = "" if pd.isna(r.within_2sigma) else ("yes" if r.within_2sigma else "no")
      delta = f"{r.delta_pct:+.2f}" if tables._finite(r.delta_pct) else ""
      sigmas = f"{r.delta_sigma:+.1f}" if tables._finite(r.delta_sigma) else ""
      lines.append(
        f"| {categories.plain_name(r.algorithm)} | "
        f"{_pm(r.ours_mean_pct, r.ours_std_pct)} | "
        f"{_pm(r.paper_mean_pct, r.paper_std_pct)} | {delta} | {sigmas} | {within_text} | "
        f"{r.n_seeds} | {r.n_diverged} | {r.steps} | {r.train_steps} |"
      )
  lines += _lambda_lines(lambdas)
  lines += ["", "## Files left out", ""]
  lines += [("- `%s`: %s" % tuple(p.split(": ", 1))) for p in problems] or ["none"]
  return "\n".join(lines) + "\n"


def _title(model):
  return labels.model_label(model) + (", multi-task" if labels.split_label(model)[2] else "")


def comparison_markdown(frame):
  """comparison.md: a compact Markdown table of `reproduction_frame`'s rows.

  One row per algorithm that has results, and per model with results "ours" next to
  "paper" (what README shows); seeds and steps say what ours come from; then a line of
  the diverged runs, if any.  "No results." where there are none.
  """
  have = frame[frame["n_seeds"] > 0]
  if not len(have):
    return "No results.\n"
  models = list(dict.fromkeys(have["model"]))
  header = ["Algorithm"]
  for m in models:
    header += [f"{_title(m)} (ours)", "(paper)"]
  header += ["seeds", "steps"]
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for algorithm in categories.PAPER_ORDER:
    rows = frame[(frame["algorithm"] == algorithm) & frame["model"].isin(models)]
    if not (rows["n_seeds"] > 0).any():
      continue
    cells = [categories.plain_name(algorithm)]
    seeds, steps = set(), set()
    for m in models:
      r = rows[rows["model"] == m].iloc[0]
      cells += [_pm(r.ours_mean_pct, r.ours_std_pct), _pm(r.paper_mean_pct, r.paper_std_pct)]
      if r.n_seeds:
        seeds.add(str(r.n_seeds))
        steps.add(str(r.steps))
    cells += ["/".join(sorted(seeds)), "/".join(sorted(steps))]
    lines.append("| " + " | ".join(cells) + " |")
  diverged = frame[frame["n_diverged"] > 0]
  if len(diverged):
    lines += [
      "",
      "Diverged runs (counted with the test score of their best-validation parameters): "
      + ", ".join(
        f"{r.model}/{r.algorithm} {r.n_diverged}" for r in diverged.itertuples()
      )
      + ".",
    ]
  return "\n".join(lines) + "\n"
