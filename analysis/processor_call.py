"""Which processor the paper's three models used, by docs/design.md's rule.

The rule ("Which processor"), applied to the committed full-protocol baseline runs.

    python -m analysis.processor_call --results results/full_decisive \
        results/full_insertion_sort results/full_activity_selector results/processor \
        --out results/processor/call

The rule, as committed before the first `triplet_mpnn` run: on each of RULE_ALGORITHMS where
both candidates' baselines have seeds 0-2, a candidate lands if its 3-seed mean is within
LANDS_WITHIN_SIGMA of the paper's sigma of the paper's baseline mean; the candidate that lands
on more is the paper's, on a tie the one with the smaller mean |delta/sigma|. No call is made
before FIRST_CALL (kadane and binary_search) are complete. Beside it, per
algorithm: Welch's t-test between the candidates' seeds and each candidate's one-sample
t-test against the paper's mean; a call that rests on an algorithm whose Welch p is above
PROVISIONAL_P reads "provisional". Every compared run must share one protocol apart from the
processor (else the command refuses, naming the runs). Writes call.md and call.csv into --out.
"""

import argparse
import math
import sys

import numpy as np
import pandas as pd

from analysis import labels
from analysis import paper as paper_lib
from analysis import protocols
from analysis import results as results_lib
from analysis import stats

CANDIDATES = ("triplet_gmpnn", "triplet_mpnn")
RULE_ALGORITHMS = ("find_maximum_subarray_kadane", "binary_search", "insertion_sort",
                   "activity_selector")
SEEDS = (0, 1, 2)
LANDS_WITHIN_SIGMA = 2.0
PROVISIONAL_P = 0.1
# docs/design.md: "The call is first made on kadane and binary_search", then made again when
# insertion_sort and activity_selector have run.
FIRST_CALL = RULE_ALGORITHMS[:2]


def baseline_scores(runs):
  """The test scores of the baseline runs the rule compares.

  Those are the runs of model `baseline` on RULE_ALGORITHMS and SEEDS with status 'done'
  on one of CANDIDATES (calibration runs left out).

  Args:
    runs: results, each with its 'path'.

  Returns:
    {(algorithm, processor): {seed: test score in %}}.

  Raises:
    ValueError: two of them differ in protocol apart from the processor, or one
      (algorithm, processor, seed) has two runs.
  """
  picked = []  # (run, its processor)
  by_protocol = {}
  for r in runs:
    if (r["model"] != "baseline" or r["algorithm"] not in RULE_ALGORITHMS
        or r["seed"] not in SEEDS or r.get("status") != "done" or labels.is_calibration(r)):
      continue
    rest = protocols.protocol(r)
    proc = rest.pop("processor")
    if proc not in CANDIDATES:
      continue
    picked.append((r, proc))
    by_protocol.setdefault(tuple(sorted(rest.items())), []).append(r["path"])
  if len(by_protocol) > 1:
    groups = "; ".join(f"{paths[0]} (+{len(paths) - 1})" for paths in by_protocol.values())
    raise ValueError(f"the baselines differ in protocol apart from the processor: {groups}")
  out = {}
  for r, proc in picked:
    cell = out.setdefault((r["algorithm"], proc), {})
    if r["seed"] in cell:
      raise ValueError(f"two baseline runs of {r['algorithm']} seed {r['seed']} on "
                       f"{proc}: {r['path']} and another")
    cell[r["seed"]] = 100.0 * float(r["test_score"])
  return out


def algorithm_rows(scores, paper_baseline):
  """The comparison per algorithm of RULE_ALGORITHMS and candidate.

  Args:
    scores: `baseline_scores(...)`.
    paper_baseline: {algorithm: (mean %, sd %)} of the paper's baseline
      (paper.paper_cells).

  Returns:
    A DataFrame, one row per (algorithm, candidate): its seeds, n, mean, sd, the paper's
    mean and sd, delta_sigma to the paper's baseline, lands (None unless it has every seed
    of SEEDS), its one-sample t-test against the paper's mean (vs_paper_*) and, on the
    algorithm, Welch's test of triplet_mpnn minus triplet_gmpnn (welch_*).
  """
  rows = []
  for alg in RULE_ALGORITHMS:
    p_mean, p_sd = paper_baseline[alg]
    seeds = {c: scores.get((alg, c), {}) for c in CANDIDATES}
    welch = stats.welch_t(list(seeds[CANDIDATES[1]].values()),
                          list(seeds[CANDIDATES[0]].values()))
    for c in CANDIDATES:
      values = [seeds[c][s] for s in sorted(seeds[c])]
      mean = float(np.mean(values)) if values else math.nan
      sd = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
      complete = set(seeds[c]) == set(SEEDS)
      dz = (mean - p_mean) / p_sd
      one = stats.one_sample_t(values, p_mean)
      rows.append({
          "algorithm": alg, "processor": c, "seeds": ",".join(map(str, sorted(seeds[c]))),
          "n": len(values), "mean": mean, "sd": sd, "paper_mean": p_mean, "paper_sd": p_sd,
          "delta_sigma": dz, "lands": bool(abs(dz) <= LANDS_WITHIN_SIGMA) if complete else None,
          "vs_paper_diff": one.mean, "vs_paper_low": one.low, "vs_paper_high": one.high,
          "vs_paper_p": one.p,
          "welch_mpnn_minus_gmpnn": welch.mean, "welch_low": welch.low,
          "welch_high": welch.high, "welch_p": welch.p, "welch_dof": welch.dof})
  return pd.DataFrame(rows)


def call(frame):
  """The rule's call, over the algorithms where both candidates have every seed.

  Args:
    frame: `algorithm_rows(...)`.

  Returns:
    (the processor, or None before FIRST_CALL is complete; how: a sentence, with
    "provisional" where a deciding algorithm's Welch p is above PROVISIONAL_P or NaN).
  """
  ready = [alg for alg in RULE_ALGORITHMS
           if frame[(frame.algorithm == alg)].lands.notna().all()]
  missing = [alg for alg in FIRST_CALL if alg not in ready]
  if missing:
    return None, ("no call: the first call needs both processors' baselines on seeds "
                  f"{', '.join(map(str, SEEDS))} of {' and '.join(FIRST_CALL)}; "
                  f"not yet on {', '.join(missing)}")
  sub = frame[frame.algorithm.isin(ready)]
  landed = {c: int(sub[sub.processor == c].lands.sum()) for c in CANDIDATES}
  off = {c: float(sub[sub.processor == c].delta_sigma.abs().mean()) for c in CANDIDATES}
  a, b = CANDIDATES
  if landed[a] != landed[b]:
    chosen = a if landed[a] > landed[b] else b
    deciding = [alg for alg in ready
                if sub[(sub.algorithm == alg) & (sub.processor == a)].lands.item()
                != sub[(sub.algorithm == alg) & (sub.processor == b)].lands.item()]
    how = f"lands on {landed[chosen]} of {len(ready)}, the other on {min(landed.values())}"
  else:
    chosen = a if off[a] < off[b] else b
    deciding = ready
    how = (f"both land on {landed[a]} of {len(ready)}: the smaller mean |delta/sigma| "
           f"({off[chosen]:.1f} against {max(off.values()):.1f})")
  weak = [alg for alg in deciding
          if not sub[sub.algorithm == alg].welch_p.iloc[0] <= PROVISIONAL_P]
  sure = (f"provisional (Welch p > {PROVISIONAL_P} on {', '.join(weak)})" if weak
          else "not provisional")
  return chosen, f"{chosen}: {how}, on {', '.join(ready)}; {sure}"


def _f(x, fmt="+.2f"):
  return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def to_markdown(frame, verdict):
  """call.md: a Markdown row per row of `frame`, then the call `verdict`."""
  lines = ["| algorithm | processor | seeds | mean ± sd | paper baseline | Δ/σ (paper's σ) "
           "| lands | vs paper's mean: diff [95 %], p | mpnn − gmpnn (Welch) [95 %], p |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in frame.itertuples():
    lands = "—" if r.lands is None else "yes" if r.lands else "no"
    welch = (f"{_f(r.welch_mpnn_minus_gmpnn)} [{_f(r.welch_low)}, {_f(r.welch_high)}], "
             f"p {_f(r.welch_p, '.3f')}" if r.processor == CANDIDATES[1] else "")
    lines.append(
        f"| {r.algorithm} | {r.processor} | {r.seeds or '—'} | {_f(r.mean, '.2f')} ± "
        f"{_f(r.sd, '.2f')} | {r.paper_mean:.2f} ± {r.paper_sd:.2f} | {_f(r.delta_sigma, '+.1f')} "
        f"| {lands} | {_f(r.vs_paper_diff)} [{_f(r.vs_paper_low)}, {_f(r.vs_paper_high)}], "
        f"p {_f(r.vs_paper_p, '.3f')} | {welch} |")
  return "\n".join(lines + ["", f"**Call**: {verdict}",
                            "", "Δ/σ is in the paper's σ, not a significance test; the "
                            "t-tests are on our seeds.", ""])


def main(argv=None):
  """The command line (module docstring); returns 0, or 2 for results that cannot be used.

  A missing results folder or runs the rule cannot compare are one line on stderr.
  """
  parser = argparse.ArgumentParser(prog="python -m analysis.processor_call",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--results", nargs="+", required=True)
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)
  try:
    runs = []
    for root in args.results:
      found, _ = results_lib.load_runs(root)
      runs += [dict(r, path=f"{root}/{r['path']}") for r in found]
    paper = paper_lib.paper_cells(paper_lib.load_paper_results(), "baseline")
    frame = algorithm_rows(baseline_scores(runs), paper)
  except (FileNotFoundError, ValueError) as e:
    print(f"processor_call: error: {e}", file=sys.stderr)
    return 2
  _, verdict = call(frame)
  return results_lib.write_table("processor_call", args.out, "call", frame,
                                 to_markdown(frame, verdict))


if __name__ == "__main__":
  sys.exit(main())
