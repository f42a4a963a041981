#!/usr/bin/env python
"""The λ heuristic's evidence in a results folder: calibration records, both readings' gate norms.

  python analysis/lambda_evidence.py --results results/lambda_readings_1500 \
      --out results/lambda_readings_1500/tables

Writes `lambda_evidence.md` (per algorithm and reading: λ, the penalty's share reached,
every search trial of the 'constant' reading; the test scores of baseline / gforget /
gforget_constant) and `<algorithm>_gate_norm.png`: the validation hidden-state norm over
training (paper Fig. 5; one legend entry per model, outside the axes; no date or version in
the file, so the same results give the same bytes) of the baseline, G-ForgetNet under each
reading, and the 'constant' search's trial 0 -- λ = L/G of λ = 0 training applied from step
0 (the legend's "old calibration").
"""

import argparse
import json
import pathlib
import sys

if __package__ in (None, ""):  # run by path: make `analysis` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from analysis import figures  # noqa: E402  (matplotlib, Agg)

plt = figures.plt

MODELS = (("baseline", "baseline", "tab:blue", "-"),
          ("gforget", "G-ForgetNet, schedule reading", "tab:green", "-"),
          ("gforget_constant", "G-ForgetNet, constant reading", "tab:green", "--"))


def _read(path):
  try:
    return json.loads(pathlib.Path(path).read_text())
  except (OSError, ValueError):
    return None


def records(results):
  """The calibration records under `<results>/_calibration/*/`, those that read.

  Returns:
    (reading, algorithm) -> record; of two folders with the same pair, the later in
    sorted order wins.
  """
  out = {}
  for path in sorted(pathlib.Path(results, "_calibration").glob("*/*.json")):
    rec = _read(path)
    if rec:
      out[(rec["reading"], rec["algorithm"])] = rec
  return out


def runs(results, model, algorithm):
  """The result.json of each seed folder of `<results>/<model>/<algorithm>/` that reads,
  in seed order (seed 2 before seed 10)."""
  found = [r for r in (_read(p) for p in
                       pathlib.Path(results, model, algorithm).glob("seed*/result.json")) if r]
  return sorted(found, key=lambda r: int(r.get("seed", -1)))


def _pct(x):
  return "—" if x is None else f"{100 * x:.2f}"


def report(results) -> str:
  """lambda_evidence.md: per algorithm and reading, the record and a test score; the
  constant reading's search trials; the test scores of MODELS per algorithm."""
  recs = records(results)
  algorithms = sorted({a for _, a in recs} | {
      p.parent.parent.name for m, *_ in MODELS
      for p in pathlib.Path(results, m).glob("*/seed*/result.json")})
  lines = ["# The λ heuristic's two readings", "",
           f"From `{results}`. Share = the gate penalty's part of the total training loss "
           "over the calibration window (schedule: at the switch, with the λ = 0 run's L and "
           "G, ½ by construction; constant: reached in a run trained with that λ).", "",
           "| algorithm | reading | λ | share | calibration step | status | test (seed 0) |",
           "|---|---|---|---|---|---|---|"]
  for alg in algorithms:
    for reading, model in (("schedule", "gforget"), ("constant", "gforget_constant")):
      rec = recs.get((reading, alg))
      res = runs(results, model, alg)
      score = next((_pct(r["test_score"]) for r in res if r.get("seed") == 0), "—")
      if rec is None:
        lines.append(f"| {alg} | {reading} | — | — | — | — | {score} |")
        continue
      lines.append(f"| {alg} | {reading} | {rec['lambda']:.4g} | {rec.get('share', 0):.3f} | "
                   f"{rec['calibration_step']} | {rec.get('status')} | {score} |")
  lines += ["", "## Search trials of the constant reading", "",
            "| algorithm | seed | trial | λ | L | G | penalty | share | gate norm |",
            "|---|---|---|---|---|---|---|---|---|"]
  for (reading, alg), rec in sorted(recs.items()):
    if reading != "constant":
      continue
    for s in rec["seeds"]:
      for t in s.get("trials", []):
        if t.get("share") is None:
          lines.append(f"| {alg} | {s['seed']} | {t['trial']} | {t['lambda']:.4g} | "
                       f"diverged at step {t.get('diverged_step')} | | | | |")
          continue
        lines.append(f"| {alg} | {s['seed']} | {t['trial']} | {t['lambda']:.4g} | "
                     f"{t['L']:.4g} | {t['G']:.4g} | {t['P']:.4g} | {t['share']:.3f} | "
                     f"{t['gate_norm']:.4g} |")
  lines += ["", "## Test scores (OOD micro-F1, %)", "", "| algorithm | " + " | ".join(
      m for m, *_ in MODELS) + " |", "|---|" + "---|" * len(MODELS)]
  for alg in algorithms:
    cells = []
    for model, *_ in MODELS:
      res = runs(results, model, alg)
      cells.append(", ".join(_pct(r["test_score"]) for r in res) or "—")
    lines.append(f"| {alg} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def plot(results, algorithm, out_dir):
  """Writes `<out_dir>/<algorithm>_gate_norm.png` (module docstring).

  Returns:
    Its path, or None where there is no curve to draw.
  """
  fig, ax = plt.subplots(figsize=(6, 3.6))
  drawn = 0
  for model, label, color, style in MODELS:
    found = runs(results, model, algorithm)
    for i, r in enumerate(found):  # one legend entry per model, not per seed
      val = r["curves"]["val"]
      ax.plot(val["step"], val["hidden_norm"], color=color, ls=style,
              label=f"{label} ({len(found)} seed{'s' * (len(found) != 1)})" if i == 0 else None)
      drawn += 1
  rec = records(results).get(("constant", algorithm))
  if rec:
    trial0 = rec["seeds"][0]["trials"][0]
    r = _read(pathlib.Path(trial0["run_dir"]) / "result.json")
    if r:
      val = r["curves"]["val"]
      ax.plot(val["step"], val["hidden_norm"], color="tab:red", ls=":",
              label=f"old calibration: λ = L/G = {trial0['lambda']:.3g} from step 0")
      drawn += 1
  sched = records(results).get(("schedule", algorithm))
  if sched:
    ax.axvline(sched["calibration_step"], color="gray", lw=0.8, ls="--")
  if not drawn:
    plt.close(fig)
    return None
  ax.set_xlabel("training step")
  ax.set_ylabel("hidden-state norm (validation)")
  ax.set_title(algorithm)
  figures.outside_legend(ax)  # right of the axes: it never covers a curve
  path = figures.savefig(fig, pathlib.Path(out_dir) / f"{algorithm}_gate_norm.png")
  plt.close(fig)
  return path


def main(argv=None) -> int:
  """The command line (module docstring); returns 0, or 2 where --results is no folder.

  A figure is drawn for each algorithm with a calibration record.
  """
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--results", required=True)
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)
  results = pathlib.Path(args.results)
  if not results.is_dir():
    print(f"lambda_evidence: no results folder {results}", file=sys.stderr)
    return 2
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "lambda_evidence.md").write_text(report(results))
  algorithms = sorted({a for _, a in records(results)})
  for alg in algorithms:
    plot(results, alg, out)
  print(f"wrote {out / 'lambda_evidence.md'} and the gate-norm figures of {algorithms}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
