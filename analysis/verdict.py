"""Does G-ForgetNet beat ForgetNet here, and ForgetNet the baseline, as in the paper? One row
per algorithm.

    python -m analysis.verdict --results results/full_insertion_sort results/full_activity_selector \
        results/full_decisive --out results/verdict

Reads every run of ForgetNet (label `forget`), of one G-ForgetNet arm (`--arm`, default
`gforget`: the default net) and of the baseline (`baseline`) under the given results folders,
and applies the rules written down before the runs (results/full_decisive/README.md):
  beats     G-ForgetNet's mean over the seeds both models ran is above ForgetNet's, and it is
            above ForgetNet on at least 2 of those seeds; with fewer than 3 such seeds the
            comparison is reported, not called;
  Δ/σ       G-ForgetNet's mean minus the paper's, in the paper's σ (within 2: reproduces);
  F vs B    ForgetNet beats the baseline under the same rule ("yes"); the baseline beats
            ForgetNet under it with the two swapped ("no: the baseline beats it"); else
            "no: neither"; fewer than 3 paired seeds: reported, not called. "As in the paper":
            the called direction is the sign of the paper's F - B, and "neither" also is where
            the paper's |F - B| is within both its σ (kadane's +0.90); the baseline's and
            ForgetNet's Δ/σ to the paper beside it. An algorithm without baseline runs says so;
  Markov    measured on the tested checkpoint, on the test split (`<run>/markov.json`, from
            `python -m nar_markov.evaluate <run> --markov`; docs/design.md): its history scope
            gates every consumer of h(t-1) (`processor_decoder`, the default), and zeroing the
            history moves its score by less than 1 point and under 1 % of its predictions,
            with its gate norm there below 0.1 (nar_markov.evaluate.markov_in_effect) -- "yes"
            only when every seed is measured and Markov; a run without markov.json (its
            parameters are not here) is "not measured". The validation gate norm at the last
            step is shown beside it, as before.
Calibration runs are dropped; a diverged run counts with its test score when it has one. No
algorithm with both models: exit 2. Writes verdict.csv and verdict.md (the table the README
shows).
"""

import argparse
import pathlib
import re
import sys

import numpy as np
import pandas as pd

from analysis import labels
from analysis import paper as paper_lib
from analysis import results as results_lib
from nar_markov import evaluate  # no jax at import: the Markov rule
from nar_markov import netconfig  # no jax
from nar_markov import runs as runs_lib  # no jax

MIN_SEEDS_TO_CALL = 3
FULL_SCOPE = evaluate.MARKOV_SCOPE                  # every consumer of h(t-1) gated
assert FULL_SCOPE in netconfig.HISTORY_SCOPES
NOT_MEASURED = "not measured (no parameters here)"
BASELINE = "baseline"
NO_BASELINE = "no baseline runs"
FB_CALLS = {"forget": "yes", "baseline": "no: the baseline beats it", "neither": "no: neither"}
DEFAULT_SCOPE = netconfig.NetConfig().history_scope  # what a config that binds none ran
_SCOPE = re.compile(r"NetConfig\.history_scope\s*=\s*'(\w+)'")


def history_scope(run):
  """The run's NetConfig.history_scope, from its saved config (the default when unbound)."""
  found = _SCOPE.search(run.get("gin_config") or "")
  return found.group(1) if found else DEFAULT_SCOPE


def _scores(runs, model, algorithm):
  """{seed: (test %, gate norm at the last validation, scope, markov.json or None)} of one
  model on one algorithm."""
  return {r["seed"]: (100.0 * r["test_score"], r["curves"]["val"]["hidden_norm"][-1],
                      history_scope(r), r.get("markov"))
          for r in runs if r["model"] == model and r["algorithm"] == algorithm
          and r.get("test_score") is not None}


def read_markov(folder, run):
  """`folder`'s markov.json if it measured the checkpoint `run` tested, None where there is
  none; ValueError (one line) for a record of another checkpoint or an unreadable one."""
  record = runs_lib.read_markov(folder)
  if record is None:
    return None
  if (record.get("step"), record.get("test_score")) != (run.get("val_best_step"),
                                                        run.get("test_score")):
    raise ValueError(f"{folder}/{runs_lib.MARKOV_NAME} measured step {record.get('step')} "
                     f"(test_score {record.get('test_score')}), the run tested step "
                     f"{run.get('val_best_step')} (test_score {run.get('test_score')}): "
                     "measure it again")
  return record


def markov_columns(gated):
  """The Markov columns of one arm (`_scores`'s dict): the rule's answer and the means over
  the measured seeds (Δ and changed predictions in points / %, gate norm at test)."""
  scopes = {v[2] for v in gated.values()}
  measured = {s: v[3] for s, v in gated.items() if v[3] is not None}
  cols = {"markov_seeds": ",".join(map(str, sorted(measured))),
          "markov_delta": np.nan, "markov_changed": np.nan, "markov_gate_norm": np.nan}
  if measured:
    cols.update(
        markov_delta=100.0 * np.mean([m["delta"] for m in measured.values()]),
        markov_changed=100.0 * np.mean([m["predictions_changed"] for m in measured.values()]),
        markov_gate_norm=np.mean([m["gate_norm"] for m in measured.values()]))
  if scopes != {FULL_SCOPE}:
    cols["markov"] = f"no (scope {', '.join(sorted(scopes))})"
    return cols
  if not measured:
    cols["markov"] = NOT_MEASURED
    return cols
  markov = {s: evaluate.markov_in_effect(FULL_SCOPE, m["delta"], m["predictions_changed"],
                                         m["gate_norm"]) for s, m in measured.items()}
  missing = sorted(set(gated) - set(measured))
  if not all(markov.values()):
    cols["markov"] = "no"
  elif missing:
    cols["markov"] = (f"not called (seed{'s' * (len(missing) > 1)} "
                      f"{','.join(map(str, missing))} not measured: no parameters here)")
  else:
    cols["markov"] = "yes"
  return cols


def _mean_sd(values):
  values = list(values)
  return np.mean(values), (np.std(values, ddof=results_lib.STD_DDOF)
                             if len(values) > results_lib.STD_DDOF else np.nan)


def paired(a, b):
  """(mean of a - b over the seeds both ran, the seeds a is above b on, those seeds' count)
  of two {seed: test %}."""
  seeds = sorted(set(a) & set(b))
  diff = np.mean([a[s] - b[s] for s in seeds]) if seeds else np.nan
  return diff, sum(a[s] > b[s] for s in seeds), len(seeds)


def wins_by_the_rule(a, b):
  """a beats b: its paired mean is above and it is above on at least 2 paired seeds."""
  diff, wins, _ = paired(a, b)
  return bool(diff > 0 and wins >= 2)


def not_called(n):
  return f"not called ({n} paired seed{'s' * (n != 1)})"


def forget_vs_baseline(forget, base):
  """'forget', 'baseline' or 'neither' by the rule both ways round; None: fewer than
  MIN_SEEDS_TO_CALL paired seeds."""
  if paired(forget, base)[2] < MIN_SEEDS_TO_CALL:
    return None
  if wins_by_the_rule(forget, base):
    return "forget"
  return "baseline" if wins_by_the_rule(base, forget) else "neither"


def as_in_the_paper(called, p_f, p_b):
  """Whether the called direction is the paper's sign of F - B; 'neither' also is where the
  paper's |F - B| is within both its σ."""
  if called is None:
    return "—"
  d = p_f[0] - p_b[0]
  if np.isnan(d):
    return "no paper number"
  direction = "forget" if d > 0 else "baseline" if d < 0 else "neither"
  tie = called == "neither" and abs(d) < min(p_f[1], p_b[1])
  return "yes" if called == direction or tie else "no"


def baseline_columns(forget, base, p_f, p_b):
  """The columns of the paper's first claim (ForgetNet above the baseline): two {seed: test
  %} and the paper's (mean, σ) of each."""
  diff, wins, n = paired(forget, base)
  b_mean, b_sd = _mean_sd(base.values()) if base else (np.nan, np.nan)
  called = forget_vs_baseline(forget, base)
  if not base:
    answer = NO_BASELINE
  else:
    answer = FB_CALLS[called] if called else not_called(n)
  return {
      "baseline_seeds": ",".join(map(str, sorted(base))), "baseline_mean": b_mean,
      "baseline_sd": b_sd, "fb_paired_seeds": n, "fb_seeds_above": wins,
      "fb_paired_diff": diff, "paper_baseline": p_b[0], "paper_baseline_sd": p_b[1],
      "paper_fb_diff": p_f[0] - p_b[0],
      "baseline_delta_sigma": (b_mean - p_b[0]) / p_b[1],
      "forget_delta_sigma": (np.mean(list(forget.values())) - p_f[0]) / p_f[1],
      "forget_beats_baseline": answer, "fb_as_in_paper": as_in_the_paper(called, p_f, p_b),
  }


def _test_scores(runs, model, algorithm):
  """{seed: test %} of one model on one algorithm (the runs with a test score)."""
  return {r["seed"]: 100.0 * r["test_score"] for r in runs
          if r["model"] == model and r["algorithm"] == algorithm
          and r.get("test_score") is not None}


def verdict_row(runs, algorithm, arm, paper):
  """One algorithm's row; None unless both ForgetNet and the arm ran it. `paper`: the
  paper's {algorithm: (mean, σ)} of ForgetNet, the arm and the baseline."""
  forget, gated = _scores(runs, labels.FORGETNET, algorithm), _scores(runs, arm, algorithm)
  if not forget or not gated:
    return None
  paper_f, paper_g, paper_b = paper
  f_mean, f_sd = _mean_sd(v[0] for v in forget.values())
  g_mean, g_sd = _mean_sd(v[0] for v in gated.values())
  diff, wins, n = paired({s: v[0] for s, v in gated.items()},
                         {s: v[0] for s, v in forget.items()})
  if n < MIN_SEEDS_TO_CALL:
    beats = not_called(n)
  else:
    beats = "yes" if diff > 0 and wins >= 2 else "no"
  gate = np.mean([v[1] for v in gated.values()])
  nan = (np.nan, np.nan)
  p_f, p_g, p_b = (p.get(algorithm, nan) for p in (paper_f, paper_g, paper_b))
  return {
      "algorithm": algorithm, "arm": arm,
      "forget_seeds": ",".join(map(str, sorted(forget))), "forget_mean": f_mean, "forget_sd": f_sd,
      "gforget_seeds": ",".join(map(str, sorted(gated))), "gforget_mean": g_mean, "gforget_sd": g_sd,
      "paired_seeds": n, "seeds_above": wins, "paired_diff": diff,
      "paper_forget": p_f[0], "paper_forget_sd": p_f[1],
      "paper_gforget": p_g[0], "paper_gforget_sd": p_g[1],
      "paper_diff": p_g[0] - p_f[0],
      "delta_sigma": (g_mean - p_g[0]) / p_g[1],
      "gate_norm": gate,
      **markov_columns(gated),
      "beats": beats,
      **baseline_columns({s: v[0] for s, v in forget.items()},
                         _test_scores(runs, BASELINE, algorithm), p_f, p_b),
  }


def verdict_frame(runs, arm="gforget"):
  table = paper_lib.load_paper_results()
  paper_f = paper_lib.paper_cells(table, labels.FORGETNET)
  paper_g = paper_lib.paper_cells(table, labels.paper_model(arm))
  paper_b = paper_lib.paper_cells(table, BASELINE)
  rows = [verdict_row(runs, a, arm, (paper_f, paper_g, paper_b))
          for a in sorted({r["algorithm"] for r in runs})]
  return pd.DataFrame([r for r in rows if r is not None])


def to_markdown(frame):
  def ms(mean, sd):
    if pd.isna(mean):
      return "—"
    return f"{mean:.2f}" if pd.isna(sd) else f"{mean:.2f} ± {sd:.2f}"
  def zeroed(r):
    if not r.markov_seeds:
      return "—"
    return (f"{r.markov_delta:+.2f}, {r.markov_changed:.1f} %, {r.markov_gate_norm:.3f} "
            f"({r.markov_seeds})")
  def sigma(x):
    return "—" if pd.isna(x) else f"{x:+.1f}"
  def fb(r):
    if r.forget_beats_baseline == NO_BASELINE:
      return "—"
    return f"{r.fb_paired_diff:+.2f} ({r.fb_seeds_above} of {r.fb_paired_seeds})"
  lines = ["| algorithm | ForgetNet (seeds) | G-ForgetNet (seeds) | baseline (seeds) "
           "| G − F, paired (seeds G above) | paper: F → G (G − F) | F − B, paired (seeds F "
           "above) | paper: B → F (F − B) | G beats F here? | F beats the baseline here? "
           "| as in the paper? | Δ/σ to the paper: G, F, B | gate norm at the end (validation) "
           "| history zeroed at test: Δ points, predictions changed, gate norm (seeds) "
           "| Markov at test |",
           "|" + "---|" * 15]
  for r in frame.itertuples():
    base = "—" if r.forget_beats_baseline == NO_BASELINE else (
        f"{ms(r.baseline_mean, r.baseline_sd)} ({r.baseline_seeds})")
    lines.append(
        f"| {r.algorithm} | {ms(r.forget_mean, r.forget_sd)} ({r.forget_seeds}) "
        f"| {ms(r.gforget_mean, r.gforget_sd)} ({r.gforget_seeds}) | {base} "
        f"| {r.paired_diff:+.2f} ({r.seeds_above} of {r.paired_seeds}) "
        f"| {r.paper_forget:.2f} → {r.paper_gforget:.2f} ({r.paper_diff:+.2f}) | {fb(r)} "
        f"| {r.paper_baseline:.2f} → {r.paper_forget:.2f} ({r.paper_fb_diff:+.2f}) "
        f"| {r.beats} | {r.forget_beats_baseline} | {r.fb_as_in_paper} "
        f"| {sigma(r.delta_sigma)}, {sigma(r.forget_delta_sigma)}, "
        f"{sigma(r.baseline_delta_sigma)} | {r.gate_norm:.3f} | {zeroed(r)} | {r.markov} |")
  return "\n".join(lines) + "\n"


def main(argv=None):
  parser = argparse.ArgumentParser(prog="python -m analysis.verdict",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--results", nargs="+", required=True)
  parser.add_argument("--arm", default="gforget",
                      help="the G-ForgetNet label compared with ForgetNet (default: %(default)s)")
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)
  runs = []
  try:
    for root in args.results:
      found, _ = results_lib.load_runs(root)
      runs += [dict(r, markov=read_markov(pathlib.Path(root, r["path"]).parent, r))
               for r in found if not labels.is_calibration(r)]
  except (FileNotFoundError, ValueError) as e:
    print(f"verdict: error: {e}", file=sys.stderr)
    return 2
  frame = verdict_frame(runs, args.arm)
  if frame.empty:
    print(f"verdict: no algorithm with both ForgetNet and {args.arm} under {args.results}",
          file=sys.stderr)
    return 2
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  frame.to_csv(out / "verdict.csv", index=False)
  (out / "verdict.md").write_text(to_markdown(frame))
  print((out / "verdict.md").read_text())
  return 0


if __name__ == "__main__":
  sys.exit(main())
