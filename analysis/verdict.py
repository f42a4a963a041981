"""The paper's claims called on our runs: F > B, G > F and G > B, one row per algorithm.

Does ForgetNet beat the baseline here, G-ForgetNet ForgetNet, and G-ForgetNet the
baseline, as in the paper?

    python -m analysis.verdict --results results/full_insertion_sort \
        results/full_activity_selector results/full_decisive --out results/verdict

Reads every run of the baseline (`baseline`), of ForgetNet (label `forget`) and of one
G-ForgetNet arm (`--arm`, default `gforget`: the default net) under the given results
folders, and applies the rules written down before the runs (results/full_decisive/README.md)
to each paired comparison -- F vs B (the paper's first claim), G vs F (its second) and G vs B
(its headline: G-ForgetNet above the baseline on all 30):
  beats     a's mean over the seeds both models ran is above b's, and a is above b on at
            least 2 of those seeds; with fewer than 3 such seeds the comparison is reported,
            not called. G vs F: "yes" or "no". F vs B and G vs B, both ways round: "yes"; the
            baseline beats it under the same rule with the two swapped ("no: the baseline
            beats it"); else "no: neither".
  how sure  beside every call: the paired mean difference over those seeds with its 95 %
            interval (t distribution, n - 1 degrees of freedom) and the two-sided paired
            t-test's p-value (analysis.stats); a call of a winner whose p is above 0.1 reads
            "direction only", at or below it "stands".
  as in the paper   the called direction is the sign of the paper's difference, and
            "neither" also is where the paper's |a - b| is within both its σ (kadane's F - B
            +0.90); G vs F: "yes" is as in the paper where the paper's G - F is positive,
            "no" where it is not.
  Δ/σ       each model's mean minus the paper's, in the paper's σ, in the order B, F, G
            (within 2: reproduces). It is the distance to the paper's mean, not a
            significance test; our own spread (sample std over our seeds) is beside it.
  Markov    measured on the tested checkpoint, on the test split (`<run>/markov.json`, from
            `python -m nar_markov.probes.evaluate <run> --markov`; docs/design.md): its
            history scope gates every consumer of h(t-1) (`processor_decoder`, the
            default), and zeroing the history moves its score by less than 1 point and
            under 1 % of its predictions, with its gate norm there below 0.1
            (nar_markov.markov.rule.markov_in_effect) -- "yes" only when every seed is
            measured and Markov; a run without markov.json (its parameters are not here)
            is not measured: "not measured" where no seed is, "not called" where some
            are. The validation gate norm at the last step is shown beside it.
An algorithm without baseline runs says so. Calibration runs are dropped; a diverged run
counts with its test score when it has one. No algorithm with both ForgetNet and the arm, an
--arm that is no G-ForgetNet label, a markov.json of another checkpoint, or an --out that
cannot be written: one line, exit 2. Writes verdict.csv and verdict.md (the table the README
shows).
"""

import argparse
import os
import pathlib
import sys

import numpy as np
import pandas as pd

from analysis import labels
from analysis import markov_columns
from analysis import paper as paper_lib
from analysis import results as results_lib
from analysis import stats

MIN_SEEDS_TO_CALL = 3
BASELINE = "baseline"
NO_BASELINE = "no baseline runs"
FB_CALLS = {"forget": "yes", "baseline": "no: the baseline beats it", "neither": "no: neither"}


def _scores(runs, model, algorithm):
  """{seed: (test %, gate norm at the last validation, scope, markov.json or None)} of one
  model on one algorithm."""
  return {r["seed"]: (100.0 * r["test_score"], r["curves"]["val"]["hidden_norm"][-1],
                      markov_columns.history_scope(r), r.get("markov"))
          for r in runs if r["model"] == model and r["algorithm"] == algorithm
          and r.get("test_score") is not None}


def _mean_sd(values):
  values = list(values)
  return np.mean(values), (np.std(values, ddof=results_lib.STD_DDOF)
                             if len(values) > results_lib.STD_DDOF else np.nan)


def paired(a, b):
  """The paired comparison of two {seed: test %} over the seeds both ran.

  Returns:
    (mean of a - b, NaN without such seeds; how many of them a is above b on; how many
    there are).
  """
  seeds = sorted(set(a) & set(b))
  diff = np.mean([a[s] - b[s] for s in seeds]) if seeds else np.nan
  return diff, sum(a[s] > b[s] for s in seeds), len(seeds)


def wins_by_the_rule(a, b):
  """Whether a beats b: its paired mean is above and it is above on at least 2 paired seeds."""
  diff, wins, _ = paired(a, b)
  return bool(diff > 0 and wins >= 2)


def not_called(n):
  """The answer of a comparison on `n` < MIN_SEEDS_TO_CALL paired seeds."""
  return f"not called ({n} paired seed{'s' * (n != 1)})"


def call_pair(a, b):
  """'a', 'b' or 'neither' by the rule both ways round (`wins_by_the_rule`).

  None with fewer than MIN_SEEDS_TO_CALL paired seeds.
  """
  if paired(a, b)[2] < MIN_SEEDS_TO_CALL:
    return None
  if wins_by_the_rule(a, b):
    return "a"
  return "b" if wins_by_the_rule(b, a) else "neither"


def forget_vs_baseline(forget, base):
  """'forget', 'baseline' or 'neither' by the rule both ways round (`call_pair`).

  None with fewer than MIN_SEEDS_TO_CALL paired seeds.
  """
  return {"a": "forget", "b": "baseline", "neither": "neither", None: None}[
      call_pair(forget, base)]


def as_in_the_paper(called, p_f, p_b):
  """Whether the called direction is the paper's sign of a - b.

  'neither' also is where the paper's |a - b| is within both its σ.

  Args:
    called: 'forget' for a, 'baseline' for b, 'neither', or None (no call).
    p_f, p_b: the paper's (mean, σ) of a and b.

  Returns:
    'yes', 'no', '—' for no call, or 'no paper number'.
  """
  if called is None:
    return "—"
  d = p_f[0] - p_b[0]
  if np.isnan(d):
    return "no paper number"
  direction = "forget" if d > 0 else "baseline" if d < 0 else "neither"
  tie = called == "neither" and abs(d) < min(p_f[1], p_b[1])
  return "yes" if called == direction or tie else "no"


def paired_test(a, b):
  """stats.Paired of a - b over the seeds both of two {seed: test %} ran."""
  seeds = sorted(set(a) & set(b))
  return stats.paired_t([a[s] - b[s] for s in seeds])


def reading(call_is_a_winner, test):
  """How sure a call is, by `test`'s p against stats.DIRECTION_ONLY_P (0.1).

  Returns:
    'stands' (p <= 0.1) or 'direction only' (p > 0.1) for a call that names a winner;
    '' for no call, a call of no winner, or a p of NaN.
  """
  if not call_is_a_winner or np.isnan(test.p):
    return ""
  return "stands" if test.p <= stats.DIRECTION_ONLY_P else "direction only"


def test_columns(prefix, test):
  """`test`'s interval and p as the columns <prefix>_ci_low, <prefix>_ci_high, <prefix>_p."""
  return {f"{prefix}_ci_low": test.low, f"{prefix}_ci_high": test.high, f"{prefix}_p": test.p}


def baseline_columns(forget, base, p_f, p_b):
  """The columns of the paper's first claim (ForgetNet above the baseline).

  Args:
    forget, base: {seed: test %} of ForgetNet (not empty) and the baseline.
    p_f, p_b: the paper's (mean, σ) of each.
  """
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


def headline_columns(gated, base, p_g, p_b):
  """The columns of the paper's headline (G-ForgetNet above the baseline).

  By the same rule as ForgetNet's, with the same answers (FB_CALLS).

  Args:
    gated, base: {seed: test %} of the arm and the baseline.
    p_g, p_b: the paper's (mean, σ) of each.
  """
  diff, wins, n = paired(gated, base)
  called = {"a": "forget", "b": "baseline", "neither": "neither", None: None}[
      call_pair(gated, base)]
  if not base:
    answer = NO_BASELINE
  else:
    answer = FB_CALLS[called] if called else not_called(n)
  test = paired_test(gated, base)
  return {
      "gb_paired_seeds": n, "gb_seeds_above": wins, "gb_paired_diff": diff,
      **test_columns("gb", test), "paper_gb_diff": p_g[0] - p_b[0],
      "gforget_beats_baseline": answer, "gb_as_in_paper": as_in_the_paper(called, p_g, p_b),
      "gb_reading": reading(called in ("forget", "baseline"), test),
  }


def _test_scores(runs, model, algorithm):
  """{seed: test %} of one model on one algorithm (the runs with a test score)."""
  return {r["seed"]: 100.0 * r["test_score"] for r in runs
          if r["model"] == model and r["algorithm"] == algorithm
          and r.get("test_score") is not None}


def verdict_row(runs, algorithm, arm, paper):
  """One algorithm's row of the verdict.

  Args:
    runs: results (with their markov.json record under 'markov').
    algorithm: the algorithm.
    arm: the G-ForgetNet label compared with ForgetNet.
    paper: the paper's {algorithm: (mean, σ)} of ForgetNet, the arm and the baseline.

  Returns:
    The row's columns, or None unless both ForgetNet and the arm have a run with a test
    score on it.
  """
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
  f_scores, g_scores = ({s: v[0] for s, v in x.items()} for x in (forget, gated))
  base = _test_scores(runs, BASELINE, algorithm)
  gf_test, fb_test = paired_test(g_scores, f_scores), paired_test(f_scores, base)
  if n < MIN_SEEDS_TO_CALL:
    gf_as_in_paper = "—"
  elif np.isnan(p_g[0] - p_f[0]):
    gf_as_in_paper = "no paper number"
  else:
    gf_as_in_paper = "yes" if (beats == "yes") == (p_g[0] - p_f[0] > 0) else "no"
  fb_call = forget_vs_baseline(f_scores, base)
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
      **markov_columns.markov_columns(gated),
      "beats": beats,
      **baseline_columns(f_scores, base, p_f, p_b),
      **test_columns("gf", gf_test), "gf_as_in_paper": gf_as_in_paper,
      "gf_reading": reading(beats == "yes", gf_test),
      **test_columns("fb", fb_test),
      "fb_reading": reading(fb_call in ("forget", "baseline"), fb_test),
      **headline_columns(g_scores, base, p_g, p_b),
  }


def verdict_frame(runs, arm="gforget"):
  """A `verdict_row` per algorithm of `runs` that both ForgetNet and `arm` ran, sorted."""
  table = paper_lib.load_paper_results()
  paper_f = paper_lib.paper_cells(table, labels.FORGETNET)
  paper_g = paper_lib.paper_cells(table, labels.paper_model(arm))
  paper_b = paper_lib.paper_cells(table, BASELINE)
  rows = [verdict_row(runs, a, arm, (paper_f, paper_g, paper_b))
          for a in sorted({r["algorithm"] for r in runs})]
  return pd.DataFrame([r for r in rows if r is not None])


def _num(x, fmt="+.2f"):
  return "—" if pd.isna(x) else format(x, fmt)


def _p(p):
  if pd.isna(p):
    return "—"
  return f"{p:.2g}" if p >= 0.001 else "< 0.001"


def comparison_cell(diff, above, n, low, high, p):
  """A paired comparison's cell, e.g. '+12.42 [+8.10, +16.74], p 0.0094 (3 of 3)'.

  The paired mean difference, its 95 % interval, the paired t-test's p and the seeds the
  first is above on; '—' without paired seeds, no interval nor p with one.
  """
  if not n:
    return "—"
  if n < 2:
    return f"{diff:+.2f} ({above} of {n})"
  return f"{diff:+.2f} [{low:+.2f}, {high:+.2f}], p {_p(p)} ({above} of {n})"


def call_cell(call, how_sure):
  """`call`, with `reading`'s word after a comma where there is one."""
  return f"{call}, {how_sure}" if how_sure else call


COLUMNS = (
    "algorithm", "baseline (seeds)", "ForgetNet (seeds)", "G-ForgetNet (seeds)",
    "F beats B here? (first claim: ForgetNet above the baseline)",
    "F − B, paired: mean [95 % CI], p (seeds F above)", "paper: B → F (F − B)",
    "F vs B as in the paper?",
    "G beats F here? (second claim: G-ForgetNet above ForgetNet)",
    "G − F, paired: mean [95 % CI], p (seeds G above)", "paper: F → G (G − F)",
    "G vs F as in the paper?",
    "G beats B here? (headline: G-ForgetNet above the baseline)",
    "G − B, paired: mean [95 % CI], p (seeds G above)", "paper: B → G (G − B)",
    "G vs B as in the paper?",
    "Δ/σ to the paper: B, F, G (distance to the paper's mean, not a significance test)",
    "our std over seeds: B, F, G",
    "gate norm at the end (validation)",
    "history zeroed at test: Δ points, predictions changed, gate norm (seeds)",
    "Markov at test",
)


def to_markdown(frame):
  """verdict.md: one row per algorithm, the models and the claims in the README's order
  (baseline, ForgetNet, G-ForgetNet; first claim, second claim, headline), with the legend
  under the table."""
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
  def sd(x):
    return "—" if pd.isna(x) else f"{x:.2f}"
  lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
  for r in frame.itertuples():
    no_base = r.forget_beats_baseline == NO_BASELINE
    base = "—" if no_base else f"{ms(r.baseline_mean, r.baseline_sd)} ({r.baseline_seeds})"
    fb = "—" if no_base else comparison_cell(r.fb_paired_diff, r.fb_seeds_above,
                                             r.fb_paired_seeds, r.fb_ci_low, r.fb_ci_high,
                                             r.fb_p)
    gb = "—" if no_base else comparison_cell(r.gb_paired_diff, r.gb_seeds_above,
                                             r.gb_paired_seeds, r.gb_ci_low, r.gb_ci_high,
                                             r.gb_p)
    gf = comparison_cell(r.paired_diff, r.seeds_above, r.paired_seeds, r.gf_ci_low,
                         r.gf_ci_high, r.gf_p)
    cells = [
        r.algorithm, base, f"{ms(r.forget_mean, r.forget_sd)} ({r.forget_seeds})",
        f"{ms(r.gforget_mean, r.gforget_sd)} ({r.gforget_seeds})",
        call_cell(r.forget_beats_baseline, r.fb_reading), fb,
        f"{r.paper_baseline:.2f} → {r.paper_forget:.2f} ({r.paper_fb_diff:+.2f})",
        r.fb_as_in_paper,
        call_cell(r.beats, r.gf_reading), gf,
        f"{r.paper_forget:.2f} → {r.paper_gforget:.2f} ({r.paper_diff:+.2f})",
        r.gf_as_in_paper,
        call_cell(r.gforget_beats_baseline, r.gb_reading), gb,
        f"{r.paper_baseline:.2f} → {r.paper_gforget:.2f} ({r.paper_gb_diff:+.2f})",
        r.gb_as_in_paper,
        f"{sigma(r.baseline_delta_sigma)}, {sigma(r.forget_delta_sigma)}, "
        f"{sigma(r.delta_sigma)}",
        f"{'—' if no_base else sd(r.baseline_sd)}, {sd(r.forget_sd)}, {sd(r.gforget_sd)}",
        f"{r.gate_norm:.3f}", zeroed(r), r.markov,
    ]
    lines.append("| " + " | ".join(cells) + " |")
  lines += [
      "",
      "A call (\"yes\", \"no: the baseline beats it\") is the rule written before the runs: "
      "the mean over the paired seeds above, and above on at least 2 of them; fewer than "
      f"{MIN_SEEDS_TO_CALL} paired seeds: not called. Beside a call of a winner: \"stands\" "
      f"where the two-sided paired t-test's p is at most {stats.DIRECTION_ONLY_P:g}, "
      "\"direction only\" where it is above. The interval is the 95 % t interval of the "
      "paired mean difference (n − 1 degrees of freedom). Δ/σ is the distance of our mean "
      "to the paper's in the paper's standard deviation (its 10 seeds), not a significance "
      "test; our own std (ddof 1) is beside it.",
  ]
  return "\n".join(lines) + "\n"


ARM_FAMILIES = ("gforget", "gforget_nopenalty")


def check_arm(arm, runs):
  """Checks that `arm` is a single-task G-ForgetNet label: gforget, gforget_nopenalty or a variant.

  Raises:
    ValueError: (one line) it is not; the message lists the arms found in `runs`.
  """
  family, _, multitask = labels.split_label(arm)
  if family in ARM_FAMILIES and not multitask:
    return
  found = sorted({r["model"] for r in runs if labels.split_label(r["model"])[0] in ARM_FAMILIES
                  and not labels.split_label(r["model"])[2]})
  raise ValueError(f"--arm {arm!r} is not a G-ForgetNet label (gforget or gforget_<variant>); "
                   f"under --results: {', '.join(found) or 'none'}")


def check_out(out):
  """Checks that --out `out` is a folder this user can write, or does not exist yet.

  Raises:
    ValueError: (one line) it exists and is not a directory, or is not writable.
  """
  if out.exists() and not out.is_dir():
    raise ValueError(f"--out {out} exists and is not a directory")
  if out.exists() and not os.access(out, os.W_OK | os.X_OK):
    raise ValueError(f"--out {out} is not writable")


def main(argv=None):
  """The command line (module docstring); returns 0, or 2 as it says."""
  parser = argparse.ArgumentParser(prog="python -m analysis.verdict",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--results", nargs="+", required=True)
  parser.add_argument("--arm", default="gforget",
                      help="the G-ForgetNet label compared with ForgetNet (default: %(default)s)")
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)
  out = pathlib.Path(args.out)
  runs = []
  try:
    check_out(out)
    for root in args.results:
      found, _ = results_lib.load_runs(root)
      runs += [dict(r, markov=markov_columns.read_markov(pathlib.Path(root, r["path"]).parent, r))
               for r in found if not labels.is_calibration(r)]
    check_arm(args.arm, runs)
  except (FileNotFoundError, ValueError) as e:
    print(f"verdict: error: {e}", file=sys.stderr)
    return 2
  frame = verdict_frame(runs, args.arm)
  if frame.empty:
    print(f"verdict: no algorithm with both ForgetNet and {args.arm} under {args.results}",
          file=sys.stderr)
    return 2
  return results_lib.write_table("verdict", out, "verdict", frame, to_markdown(frame))


if __name__ == "__main__":
  sys.exit(main())
