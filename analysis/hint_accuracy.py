"""Hint accuracy along the trajectory, one panel per hint, one line per model: the figure of
`python -m nar_markov.probes.evaluate RUN_DIR --hints --json OUT` files.

    python -m analysis.hint_accuracy --eval ForgetNet=forget.json --eval baseline=base.json \
        --out DIR [--name insertion_sort_hint_accuracy]

Each --eval is LABEL=PATH; the first scored split or size of each file is drawn (evaluate's
"scores"[0]). The figure shows where along a test trajectory a model's own hint predictions
(each step fed the previous step's) stop matching the algorithm's: the accumulation of
inaccurate intermediate predictions the paper argues about (Section 3.2, Appendix C).
Writes NAME.png and NAME.pdf; no jax.
"""

import argparse
import json
import pathlib
import sys

from analysis import figures

plt = figures.plt


def read_evaluation(path):
  """The per-step hint scores of an evaluate --json file: those of its first scored split.

  Returns:
    (algorithm, nb_nodes, {hint: {"steps", "accuracy", "overall", ...}}).

  Raises:
    ValueError: the file has no per-step hint scores (or is not JSON).
    OSError: it cannot be read.
  """
  data = json.loads(pathlib.Path(path).read_text())
  scores = data.get("scores") or []
  if not scores or "hints" not in scores[0]:
    raise ValueError(f"{path}: no per-step hint scores (write it with "
                     "`python -m nar_markov.probes.evaluate RUN_DIR --hints --json OUT`)")
  return data["algorithm"], scores[0]["nb_nodes"], scores[0]["hints"]


def plot_hint_accuracy(evaluations, out_dir, name):
  """Draws the figure: one panel per hint of the first evaluation, a line per evaluation.

  Args:
    evaluations: [(label, path)] of evaluate --hints --json files.
    out_dir: where the figure goes (made where missing).
    name: the file name, without extension.

  Returns:
    The paths written (PNG and PDF).

  Raises:
    ValueError: as `read_evaluation`, or the files are of different algorithms or sizes.
  """
  read = [(label,) + read_evaluation(path) for label, path in evaluations]
  algorithms = {(alg, n) for _, alg, n, _ in read}
  if len(algorithms) != 1:
    raise ValueError(f"the evaluations are of different algorithms or sizes: {sorted(algorithms)}")
  [(algorithm, nb_nodes)] = algorithms
  hint_names = list(read[0][3])
  fig, axes = plt.subplots(1, len(hint_names), figsize=(4.2 * len(hint_names), 3.2),
                           squeeze=False)
  for ax, hint in zip(axes[0], hint_names):
    for label, _, _, hints in read:
      if hint in hints:
        h = hints[hint]
        ax.plot(h["steps"], h["accuracy"], label=f"{label} ({h['overall']:.2f})")
    ax.set_title(f"{hint}")
    ax.set_xlabel("execution step t")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel("hint accuracy at step t")
  axes[0][-1].legend(fontsize=8)
  fig.suptitle(f"{algorithm}, {nb_nodes} nodes: hints predicted from the model's own previous "
               "hints", fontsize=10)
  pathlib.Path(out_dir).mkdir(parents=True, exist_ok=True)
  return figures.save_figure(fig, out_dir, name)


def main(argv=None):
  """The command line (module docstring): prints the paths written; returns 0.

  A file that cannot be read or used is an argparse error (exit 2).
  """
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--eval", dest="evaluations", type=figures.labelled_path("--eval"),
                      action="append", required=True,
                      help="LABEL=PATH of an evaluate --hints --json file")
  parser.add_argument("--out", required=True)
  parser.add_argument("--name", default=None,
                      help="file name without extension (default: <algorithm>_hint_accuracy)")
  args = parser.parse_args(argv)
  try:
    name = args.name or f"{read_evaluation(args.evaluations[0][1])[0]}_hint_accuracy"
    paths = plot_hint_accuracy(args.evaluations, args.out, name)
  except (OSError, ValueError) as e:
    parser.error(str(e))
  for p in paths:
    print(p)
  return 0


if __name__ == "__main__":
  sys.exit(main())
