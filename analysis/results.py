"""Result JSON files -> validated runs -> long-format DataFrame -> per-cell statistics.

Data flows one way (STYLE.md): glob `**/result.json` -> list of run dicts -> long DataFrame
(model, algorithm, seed, metric, value) -> aggregates that the tables and figures read.

Decisions (the tables' captions and reproduction.md repeat them):
  * A file that is not valid JSON, lacks a required key or has a value of the wrong type is
    reported by path (a warning) and left out. It never counts as a run, let alone as a 0.
  * `status: diverged` runs are counted with their `test_score` when they have one (the trainer
    scores the best-validation checkpoint, so a late divergence still has a meaningful score;
    dropping them would bias the mean upwards). A diverged run with `test_score: null` has no
    score to count: it is left out of mean/std and only shows in `n_diverged`.
  * std is the sample standard deviation over seeds (ddof=1, pandas' default); with one seed
    it is undefined (NaN) and tables print the mean alone.
  * Scores are fractions in [0, 1] in the JSON; aggregates are in percent (`*_pct`).
  * Any model label is accepted (analysis.labels maps it to the paper's models). The lambda
    calibration runs (labels.is_calibration) load like any run but are not results:
    `split_calibration` sets them apart before anything is aggregated.
"""

import json
import math
import pathlib
import sys
import warnings

import numpy as np
import pandas as pd

from analysis import categories
from analysis import labels
from nar_markov.store import runs as runs_lib  # no jax: the results format's owner

# The result schema is nar_markov.store.runs's, the one owner of the results format.
SCHEMA = runs_lib.RESULT_SCHEMA
STD_DDOF = 1
STATUSES = runs_lib.FINAL_STATUSES
# Optional scalars copied into the long DataFrame when numeric.
_SCALAR_METRICS = ("val_best", "val_best_step", "wall_time_s", "steps_per_s", "lambda_gate")


class ResultWarning(UserWarning):
  """A result.json that was left out, or a duplicate run."""


def validate(result):
  """Reasons why `result` (parsed JSON) is not a usable run; [] if it is.

  As runs.result_problems, the algorithm checked against CLRS-30's.
  """
  return runs_lib.result_problems(result, algorithms=categories.ALGORITHMS)


DUPLICATE = "duplicate of"


def load_runs(results_dir, identity=None):
  """Valid runs under `results_dir` (sorted by path) and the problems found, by path.

  Every **/result.json but those under `_archive/`.  A duplicate (model, algorithm, seed)
  keeps the first path in sorted order.  Lambda calibration runs (labels.is_calibration)
  are kept apart from that check (they are not results, and each reading of the heuristic
  has its own).

  Args:
    results_dir: the results folder.
    identity: a function of a result whose value joins the duplicate key (make_tables
      passes the protocol, so that runs of two protocols are two runs, not duplicates).

  Returns:
    (runs, problems): runs are the parsed dicts plus a 'path' key (relative to
    results_dir, POSIX); problems is a list of 'relpath: reason' strings (unreadable,
    invalid, duplicate), each also emitted as a ResultWarning.

  Raises:
    FileNotFoundError: `results_dir` is not a directory.
  """
  root = pathlib.Path(results_dir)
  if not root.is_dir():
    raise FileNotFoundError(f"results directory {results_dir!r} does not exist")
  runs, problems, seen = [], [], {}
  for path in runs_lib.result_files(root):  # not those under _archive/
    rel = path.relative_to(root).as_posix()
    try:
      with open(path, encoding="utf-8") as f:
        result = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
      problems.append(f"{rel}: unreadable JSON ({e})")
      continue
    reasons = validate(result)
    if reasons:
      problems.append(f"{rel}: " + "; ".join(reasons))
      continue
    key = (result["model"], result["algorithm"], result["seed"])
    if identity is not None:
      key += (identity(result),)
    if labels.is_calibration(dict(result, path=rel)):
      key = (rel,)
    if key in seen:
      problems.append(f"{rel}: {DUPLICATE} {seen[key]} (model, algorithm, seed) = {key[:3]}")
      continue
    seen[key] = rel
    runs.append(dict(result, path=rel))
  for p in problems:
    warnings.warn(p, ResultWarning, stacklevel=2)
  return runs, problems


def _number(x):
  if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
    return None
  return float(x)


def to_long(runs):
  """Long-format DataFrame: one row per (model, algorithm, seed, metric).

  Metrics: test_score (NaN for a diverged run without one), test_score/<output>, diverged
  (0/1), steps, train_steps and the optional scalars of _SCALAR_METRICS that are numbers.
  """
  rows = []
  for r in runs:
    key = (r["model"], r["algorithm"], r["seed"])
    score = _number(r["test_score"])
    rows.append(key + ("test_score", np.nan if score is None else score))
    rows.append(key + ("diverged", float(r["status"] == "diverged")))
    rows.append(key + ("steps", float(r["steps"])))
    rows.append(key + ("train_steps", float(r["train_steps"])))
    for name in _SCALAR_METRICS:
      value = _number(r.get(name))
      if value is not None:
        rows.append(key + (name, value))
    per_output = r.get("test_scores")
    if isinstance(per_output, dict):
      for name in sorted(per_output):
        value = _number(per_output[name])
        if value is not None:
          rows.append(key + (f"test_score/{name}", value))
  df = pd.DataFrame(rows, columns=["model", "algorithm", "seed", "metric", "value"])
  return df.astype({"seed": "int64", "value": "float64"})


def _span(values):
  values = sorted({int(v) for v in values})
  if not values:
    return ""
  return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def aggregate(long, metric="test_score"):
  """Per (model, algorithm) of `to_long`'s frame, the statistics of `metric` in percent.

  Returns:
    A DataFrame, one row per (model, algorithm), sorted: mean_pct, std_pct (ddof=1; NaN
    with fewer than two scored runs), n_seeds (scored runs), n_runs, n_diverged, seeds
    (space-separated), steps and train_steps (the value, or 'min-max' when seeds differ).
    Empty, with these columns, for an empty frame.
  """
  columns = [
    "model",
    "algorithm",
    "mean_pct",
    "std_pct",
    "n_seeds",
    "n_runs",
    "n_diverged",
    "seeds",
    "steps",
    "train_steps",
  ]
  if long.empty:
    return pd.DataFrame(columns=columns)
  # One row per run (load_runs drops duplicate runs, so the index is unique).
  wide = long.set_index(["model", "algorithm", "seed", "metric"])["value"].unstack("metric")
  out = []
  for (model, algorithm), g in wide.groupby(level=["model", "algorithm"], sort=True):
    scores = g[metric].dropna() * 100.0
    out.append(
      {
        "model": model,
        "algorithm": algorithm,
        "mean_pct": scores.mean() if len(scores) else np.nan,
        "std_pct": scores.std(ddof=STD_DDOF) if len(scores) > STD_DDOF else np.nan,
        "n_seeds": int(len(scores)),
        "n_runs": int(len(g)),
        "n_diverged": int(g["diverged"].sum()),
        "seeds": " ".join(str(s) for s in g.index.get_level_values("seed")),
        "steps": _span(g["steps"]),
        "train_steps": _span(g["train_steps"]),
      }
    )
  return pd.DataFrame(out, columns=columns)


def drop_duplicates(runs):
  """`runs` sorted by path, one per (model, algorithm, seed): the first in path order.

  Calibration runs are all kept.

  Returns:
    (the runs kept, problems: one for each run left out, as load_runs words them).
  """
  kept, problems, seen = [], [], {}
  for r in sorted(runs, key=lambda r: r["path"]):
    key = (r["model"], r["algorithm"], r["seed"])
    if key in seen and not labels.is_calibration(r):
      problems.append(f"{r['path']}: {DUPLICATE} {seen[key]} (model, algorithm, seed) = {key}")
      continue
    seen.setdefault(key, r["path"])
    kept.append(r)
  return kept, problems


def split_calibration(runs):
  """(result runs, lambda calibration runs) of `runs`; the latter enter no table or figure."""
  calibration = [r for r in runs if labels.is_calibration(r)]
  return [r for r in runs if not labels.is_calibration(r)], calibration


LAMBDA_COLUMNS = ["model", "algorithm", "seed", "lambda_gate", "lambda_reading", "lambda_calibration"]


def lambda_frame(runs):
  """The lambda of the gated runs, and of any run that says how it got one.

  Returns:
    A DataFrame of LAMBDA_COLUMNS, one row per such run, sorted by model label order,
    algorithm and seed: lambda_gate (NaN if absent), lambda_reading ('' if absent) and
    lambda_calibration (the dict as compact JSON, '' if absent).
  """
  rows = []
  for r in runs:
    reading, calibration = r.get("lambda_reading"), r.get("lambda_calibration")
    lam = _number(r.get("lambda_gate"))
    if r.get("history") != "gated" and reading is None and calibration is None:
      continue
    rows.append(
      {
        "model": r["model"],
        "algorithm": r["algorithm"],
        "seed": r["seed"],
        "lambda_gate": np.nan if lam is None else lam,
        "lambda_reading": reading or "",
        "lambda_calibration": (
          json.dumps(calibration, sort_keys=True, separators=(",", ":")) if calibration else ""
        ),
      }
    )
  df = pd.DataFrame(rows, columns=LAMBDA_COLUMNS)
  if len(df):
    df["_m"] = df["model"].map(labels.model_sort_key)
    df = df.sort_values(["_m", "algorithm", "seed"]).drop(columns="_m").reset_index(drop=True)
  return df


def load_results(results_dir):
  """(runs, long DataFrame, problems) for a results directory (`load_runs`, `to_long`)."""
  runs, problems = load_runs(results_dir)
  return runs, to_long(runs), problems


def write_table(prog, out, stem, frame, text):
  """Writes a command's answer into folder `out`, then prints the text.

  Args:
    prog: the command's name, for the error line.
    out: the folder (made where missing).
    stem: the files' name: `<stem>.csv` (the frame) and `<stem>.md` (the text).
    frame: the answer's table.
    text: the answer in Markdown.

  Returns:
    The command's exit status: 0, or 2 (after one line on stderr, nothing printed) where
    `out` cannot be written.
  """
  out = pathlib.Path(out)
  try:
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / f"{stem}.csv", index=False)
    (out / f"{stem}.md").write_text(text)
  except OSError as e:
    where = f" ({e.filename})" if e.filename else ""
    print(f"{prog}: error: cannot write --out {out}: {e.strerror or e}{where}", file=sys.stderr)
    return 2
  print(text)
  return 0
