"""The test curve of a run trained with `Protocol.test_every_steps`: how its test score moves
between the evaluations best-validation selection could keep, and what other selection rules
would have kept.

  python -m analysis.selection_curve --run "G-ForgetNet s0=RUN/result.json" --out DIR [--name NAME]

Each --run is LABEL=PATH of a result.json whose curves hold "test" (a run without the option
has none and is refused by name).  Writes NAME.png/.pdf (validation and test score against the
training step, one panel per run, the kept step and the penalty switch marked) and NAME.json:

- `kept`: the step the run kept (run.py's rule, the first strict improvement of the validation
  score) and its test score, with the test curve's value there as a check;
- `selection`: the step and test score each rule would have kept, read off the recorded curves
  (no parameters are re-evaluated): `first_best` (run.py), `last_best` (the last step whose
  validation equals the best: the `>=` rule), `final` (the last step trained);
- `tied_with_best`: every test-curve step whose validation equals the best, with its test score
  (what selection is choosing among once validation saturates);
- `test`: min / median / max of the test curve, and its steps below 80 %.

The test split is never used to select anything here either: this reports, after the fact, how
much the choice among equally validated parameters matters.  No jax.
"""

import argparse
import json
import pathlib
import statistics
import sys

from analysis import figures

plt = figures.plt

LOW_SCORE = 0.8


def read_run(path):
  """The result.json at `path` (a file or a run folder), checked to hold a test curve.

  Returns:
    The result, with `_path` the file's path.

  Raises:
    ValueError: it does not parse as JSON or has no test curve.
    OSError: it cannot be read.
  """
  path = pathlib.Path(path)
  if path.is_dir():
    path = path / "result.json"
  run = json.loads(path.read_text())
  curves = run.get("curves") or {}
  if not (curves.get("test") or {}).get("step"):
    raise ValueError(f"{path}: no test curve (train it with "
                     "--gin_param Protocol.test_every_steps=N)")
  run["_path"] = str(path)
  return run


def summarise(run):
  """The selection summary of one run (`read_run`): the JSON the module docstring describes.

  Also path, algorithm, model, seed, penalty_start_step and val_best; a rule's step
  without a test evaluation has test None.
  """
  val = dict(zip(run["curves"]["val"]["step"], run["curves"]["val"]["score"]))
  test = dict(zip(run["curves"]["test"]["step"], run["curves"]["test"]["score"]))
  best = max(val.values())
  best_steps = [s for s in sorted(val) if val[s] == best]
  rules = {"first_best": best_steps[0], "last_best": best_steps[-1], "final": max(val)}
  scores = sorted(test.values())
  return {
      "path": run["_path"],
      "algorithm": run["algorithm"], "model": run["model"], "seed": run["seed"],
      "penalty_start_step": run.get("penalty_start_step"),
      "val_best": best,
      "kept": {"step": run["val_best_step"], "test_score": run["test_score"],
               "test_curve_there": test.get(run["val_best_step"])},
      "selection": {name: {"step": step, "val": val[step], "test": test.get(step)}
                    for name, step in rules.items()},
      "tied_with_best": [{"step": s, "test": test[s]} for s in best_steps if s in test],
      "test": {"first_step": min(test), "last_step": max(test), "evaluations": len(test),
               "min": scores[0], "median": statistics.median(scores), "max": scores[-1],
               f"steps_below_{LOW_SCORE:g}": [s for s in sorted(test) if test[s] < LOW_SCORE]},
  }


def plot_test_curves(runs, out_dir, name):
  """Draws the figure of the module docstring, one panel per run.

  Args:
    runs: [(label, run)] of `read_run` results.
    out_dir: where the figure goes (made where missing).
    name: the file name, without extension.

  Returns:
    The paths written (PNG and PDF).
  """
  fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.8 * len(runs)), squeeze=False)
  for ax, (label, run) in zip(axes[:, 0], runs):
    c = run["curves"]
    first = min(c["test"]["step"])
    # Validation from a little before the test curve starts, so the two share an axis.
    vs = [(s, v) for s, v in zip(c["val"]["step"], c["val"]["score"]) if s >= first - 500]
    ax.plot([s for s, _ in vs], [v for _, v in vs], lw=1, label="validation (16 nodes)")
    ax.plot(c["test"]["step"], c["test"]["score"], lw=1, marker=".", ms=3,
            label="test (OOD, 64 nodes)")
    ax.axvline(run["val_best_step"], color="k", ls="--", lw=0.8,
               label=f"kept: step {run['val_best_step']} ({100 * run['test_score']:.2f})")
    if run.get("penalty_start_step"):
      ax.axvline(run["penalty_start_step"], color="grey", ls=":", lw=0.8, label="penalty switch")
    ax.set_title(f"{label}: {run['algorithm']}", fontsize=10)
    ax.set_ylabel("micro-F1")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
  axes[-1, 0].set_xlabel("training step")
  pathlib.Path(out_dir).mkdir(parents=True, exist_ok=True)
  return figures.save_figure(fig, out_dir, name)


def main(argv=None):
  """The command line (module docstring): prints a line per run and the paths; returns 0.

  A run that cannot be read or has no test curve is an argparse error (exit 2).
  """
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--run", dest="runs", type=figures.labelled_path("--run"),
                      action="append", required=True,
                      help="LABEL=PATH of a result.json (or its run folder) with a test curve")
  parser.add_argument("--out", required=True)
  parser.add_argument("--name", default=None,
                      help="file name without extension (default: <algorithm>_test_curve)")
  args = parser.parse_args(argv)
  try:
    runs = [(label, read_run(path)) for label, path in args.runs]
  except (OSError, ValueError) as e:
    parser.error(str(e))
  name = args.name or f"{runs[0][1]['algorithm']}_test_curve"
  summary = {label: summarise(run) for label, run in runs}
  paths = list(plot_test_curves(runs, args.out, name))
  out = pathlib.Path(args.out) / f"{name}.json"
  out.write_text(json.dumps(summary, indent=1) + "\n")
  for label, s in summary.items():
    sel = ", ".join(f"{k} step {v['step']}: "
                    + ("n/a" if v["test"] is None else f"{100 * v['test']:.2f}")
                    for k, v in s["selection"].items())
    t = s["test"]
    print(f"{label}: test {100 * t['min']:.1f}-{100 * t['max']:.1f} % (median "
          f"{100 * t['median']:.1f}, {len(t[f'steps_below_{LOW_SCORE:g}'])} of "
          f"{t['evaluations']} below {100 * LOW_SCORE:g}) over steps {t['first_step']}-"
          f"{t['last_step']}; of those, {len(s['tied_with_best'])} validate at the best "
          f"{s['val_best']:.4f}; {sel}")
  for p in paths + [out]:
    print(p)
  return 0


if __name__ == "__main__":
  sys.exit(main())
