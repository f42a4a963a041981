"""G-ForgetNet arms side by side: score, gate norm, penalty share and Δ to ForgetNet, per algorithm.

    python -m analysis.arms --results results/pilot --out results/pilot/tables

One row per (algorithm, model label), each a mean over the seeds found (every arm that ran):
  test_*      OOD test micro-F1 (%) under each selection rule of result.json's "selection"
              (first_best = run.py's, the run's test_score; last_best; final);
  delta_*     that minus ForgetNet's (label `forget`) on the same algorithm and seeds (paired);
  gate_norm   the validation history norm ||g * h||/sqrt(d) at the last evaluation (Fig. 5);
  gate_norm_switch  the same at the penalty's start (its last evaluation before it);
  share       the penalty's share of the loss, P / (L + P), over the last 5 % of training;
  lambda      the lambda the run ended with (adaptive: its last update).
Writes arms.csv, arms.md and one figure of gate-norm curves per algorithm (figures.py).
"""

import argparse
import pathlib
import sys

import numpy as np
import pandas as pd

from analysis import figures
from analysis import labels
from analysis import results as results_lib

RULES = ("first_best", "last_best", "final")


def _last_window(run, fraction=0.05):
  train = run["curves"]["train"]
  steps = np.asarray(train["step"], dtype=float)
  keep = steps > steps.max() * (1 - fraction)
  return {k: np.asarray([np.nan if v is None else v for v in train[k]], dtype=float)[keep]
          for k in ("output_loss", "hint_loss", "gate_penalty")}


def run_row(run):
  """The per-run numbers of the table, from one result.json.

  Args:
    run: a run's result (with its curves); one without a "selection" counts its
      test_score as first_best.

  Returns:
    model, algorithm, seed; gate_norm and gate_norm_switch (NaN without a penalty start);
    share (a fraction, NaN where the loss is 0); lambda (its last update, else
    lambda_gate); test_<rule> for each of RULES in % (NaN where the rule has no score).
  """
  val = run["curves"]["val"]
  start = run.get("penalty_start_step") or 0
  before = [n for s, n in zip(val["step"], val["hidden_norm"]) if s <= start]
  w = _last_window(run)
  task, pen = np.mean(w["output_loss"] + w["hint_loss"]), np.mean(w["gate_penalty"])
  selection = run.get("selection") or {"first_best": {"test_score": run["test_score"]}}
  row = {"model": run["model"], "algorithm": run["algorithm"], "seed": run["seed"],
         "gate_norm": val["hidden_norm"][-1],
         "gate_norm_switch": before[-1] if before and start else np.nan,
         "share": pen / (task + pen) if task + pen > 0 else np.nan,
         "lambda": (run["lambda_updates"][-1][1] if run.get("lambda_updates")
                    else run.get("lambda_gate"))}
  for rule in RULES:
    score = (selection.get(rule) or {}).get("test_score")
    row[f"test_{rule}"] = np.nan if score is None else 100.0 * score
  return row


def arms_frame(runs):
  """Per-seed rows and the per-(algorithm, model) means with Δ to ForgetNet.

  Args:
    runs: results (calibrations left out by the caller).

  Returns:
    (per_seed: a `run_row` per run; means: per (algorithm, model), the seeds found and
    the mean of each number, with delta_<rule> (paired on the seeds ForgetNet has too;
    absent or NaN where it has none), sorted by algorithm, then model label order).
  """
  per_seed = pd.DataFrame([run_row(r) for r in runs])
  means = per_seed.groupby(["algorithm", "model"]).agg(
      seeds=("seed", lambda s: ",".join(str(int(x)) for x in sorted(s))),
      **{c: (c, "mean") for c in per_seed.columns if c not in ("model", "algorithm", "seed")})
  forget = per_seed[per_seed.model == labels.FORGETNET].set_index(["algorithm", "seed"])
  for (alg, model), _ in means.iterrows():
    mine = per_seed[(per_seed.algorithm == alg) & (per_seed.model == model)]
    paired = [(r, forget.loc[(alg, r.seed)]) for r in mine.itertuples()
              if (alg, r.seed) in forget.index]
    if not paired:
      continue
    for rule in RULES:  # paired: ForgetNet on the same seeds only
      means.loc[(alg, model), f"delta_{rule}"] = np.mean(
          [getattr(r, f"test_{rule}") - f[f"test_{rule}"] for r, f in paired])
  order = {m: i for i, m in enumerate(labels.sort_models(means.index.get_level_values(1)))}
  means = means.reset_index()
  means = means.sort_values(["algorithm", "model"], key=lambda c: c.map(order) if c.name == "model" else c)
  return per_seed, means


def to_markdown(means, per_seed):
  """arms.md: a Markdown row per (algorithm, arm) of `means`, with the per-seed scores."""
  lines = ["| algorithm | arm | seeds | test (run.py) | Δ ForgetNet | test (last at best) | "
           "test (final) | gate norm: switch → end | penalty share (end) | λ (end) | per seed (run.py) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for _, r in means.iterrows():
    seeds = per_seed[(per_seed.algorithm == r.algorithm) & (per_seed.model == r.model)]
    per = ", ".join(f"{x:.1f}" for x in seeds.sort_values("seed").test_first_best)
    fmt = lambda x, d=1: "–" if pd.isna(x) else f"{x:.{d}f}"
    lines.append(
        f"| {r.algorithm} | {labels.model_label(r.model)} | {r.seeds} | {fmt(r.test_first_best)} "
        f"| {fmt(r.get('delta_first_best'))} | {fmt(r.test_last_best)} | {fmt(r.test_final)} "
        f"| {fmt(r.gate_norm_switch, 2)} → {fmt(r.gate_norm, 3)} | {fmt(r.share, 2)} "
        f"| {'–' if pd.isna(r['lambda']) else format(r['lambda'], '.3g')} | {per} |")
  return "\n".join(lines) + "\n"


def main(argv=None):
  """The command line (module docstring); returns 0, or 2 where there is no run."""
  parser = argparse.ArgumentParser(prog="python -m analysis.arms",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--results", required=True)
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)
  runs, _ = results_lib.load_runs(args.results)
  runs = [r for r in runs if not labels.is_calibration(r)]
  if not runs:
    print(f"arms: no runs under {args.results}", file=sys.stderr)
    return 2
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  per_seed, means = arms_frame(runs)
  means.to_csv(out / "arms.csv", index=False)
  per_seed.to_csv(out / "arms_per_seed.csv", index=False)
  (out / "arms.md").write_text(to_markdown(means, per_seed))
  (out / "figures").mkdir(exist_ok=True)
  for alg in sorted({r["algorithm"] for r in runs}):
    figures.plot_hidden_norm(runs, alg, out / "figures")
  print((out / "arms.md").read_text())
  return 0


if __name__ == "__main__":
  sys.exit(main())
