"""results/ -> the paper's tables (LaTeX), seed counts, a reproduction report and figures.

    python analysis/make_tables.py --results results --out tables [--paper] \
        [--figures floyd_warshall,activity_selector] [--expected-seeds 10]

Reads every **/result.json under --results (schema nar_markov.result/1), reports corrupt or
partial files by path and leaves them out, and writes into --out:
  three_models.tex      Table 1 (tab:three_model_comparison): baseline / ForgetNet / G-ForgetNet
  summary.tex           Table 2 (tab:main_comparison): category and overall averages, counts
  penalty_ablation.tex  Table 7 (tab:penalty_ablate), when gforget_nopenalty results exist
  multitask.tex         Table 8 (tab:multi_table), when *_multitask results exist
  tables.tex            a LaTeX document that \\input's the tables above (with the macros)
  results_long.csv      every run, long format: model, algorithm, seed, metric, value
  seeds.csv             per model and algorithm: mean_pct, std_pct, n_seeds, n_runs,
                        n_diverged, seeds, steps, train_steps
  reproduction.csv/.md  ours vs the paper per cell: Δ, within ±2σ, seeds, steps
  figures/<alg>_{train_loss,hint_step_loss,hidden_norm}.{png,pdf}   with --figures
--paper prints the paper's mean next to ours in every cell of Tables 1, 7, 8 and adds the
paper's columns (literature baselines included) to Table 2. Works when run by path from any
directory and as a module (`from analysis import make_tables; make_tables.make_all(...)`).
"""

import argparse
import os
import pathlib
import sys
import warnings

if __package__ in (None, ""):  # run by path: make `analysis` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from analysis import categories  # noqa: E402
from analysis import paper as paper_lib  # noqa: E402
from analysis import report  # noqa: E402
from analysis import results as results_lib  # noqa: E402
from analysis import tables  # noqa: E402

TABLE_FILES = {
  "three_model_comparison": "three_models.tex",
  "main_comparison": "summary.tex",
  "penalty_ablate": "penalty_ablation.tex",
  "multi_table": "multitask.tex",
}


def _write(path, text, written):
  path.write_text(text, encoding="utf-8")
  written.append(path)


def make_all(results_dir, out_dir, *, figures=(), paper=False, expected_seeds=None, log=print):
  """Everything of the module docstring; returns the list of written paths."""
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", results_lib.ResultWarning)  # logged below instead
    runs, problems = results_lib.load_runs(results_dir)
  n_files = len(runs) + len(problems)
  for p in problems:
    log(f"warning: left out {os.path.join(results_dir, p)}")  # p: 'path: reason'
  long = results_lib.to_long(runs)
  agg = results_lib.aggregate(long)
  paper_df = paper_lib.load_paper_results()
  written = []
  long.to_csv(out / "results_long.csv", index=False)
  written.append(out / "results_long.csv")
  tables.seeds_frame(agg).to_csv(out / "seeds.csv", index=False, float_format="%.4f")
  written.append(out / "seeds.csv")

  shown_paper = paper_df if paper else None
  present = lambda models: tables.models_present(agg, models)  # noqa: E731
  made = []
  if present(tables.THREE_MODELS):
    _write(
      out / TABLE_FILES["three_model_comparison"],
      tables.comparison_table(
        agg,
        list(tables.THREE_MODELS),
        label="three_model_comparison",
        highlight_vs="baseline",
        paper=shown_paper,
        expected_seeds=expected_seeds,
      ),
      written,
    )
    _write(
      out / TABLE_FILES["main_comparison"],
      tables.summary_table(agg, present(tables.THREE_MODELS), paper=shown_paper),
      written,
    )
    made += ["three_model_comparison", "main_comparison"]
  else:
    log("skipped three_models.tex and summary.tex: no baseline/forget/gforget results")
  if present(["gforget_nopenalty"]):
    _write(
      out / TABLE_FILES["penalty_ablate"],
      tables.comparison_table(
        agg,
        list(tables.PENALTY_MODELS),
        label="penalty_ablate",
        highlight_vs="baseline",
        paper=shown_paper,
        expected_seeds=expected_seeds,
      ),
      written,
    )
    made.append("penalty_ablate")
  else:
    log("skipped penalty_ablation.tex: no gforget_nopenalty results")
  if present(tables.MULTITASK_MODELS):
    _write(
      out / TABLE_FILES["multi_table"],
      tables.comparison_table(
        agg,
        list(tables.MULTITASK_MODELS),
        label="multi_table",
        paper=shown_paper,
        expected_seeds=expected_seeds,
      ),
      written,
    )
    made.append("multi_table")
  else:
    log("skipped multitask.tex: no baseline_multitask/forget_multitask results")
  _write(out / "tables.tex", tables.standalone_document([TABLE_FILES[t] for t in made]), written)

  frame = report.reproduction_frame(agg, paper_df)
  frame.to_csv(out / "reproduction.csv", index=False, float_format="%.4f")
  written.append(out / "reproduction.csv")
  skipped = sorted(set(agg["model"]) - set(paper_lib.PAPER_TABLE))
  _write(
    out / "reproduction.md",
    report.reproduction_markdown(
      frame, n_files=n_files, problems=problems, agg=agg, skipped_models=skipped
    ),
    written,
  )

  _write(out / "comparison.md", report.comparison_markdown(frame), written)

  if figures:
    from analysis import figures as figures_lib  # matplotlib only when asked for

    written += figures_lib.make_figures(runs, figures, out / "figures")

  n_diverged = int(agg["n_diverged"].sum()) if len(agg) else 0
  log(
    f"{len(runs)} runs from {n_files} result.json files ({len(problems)} left out); "
    f"{n_diverged} diverged runs (counted with their test score where they have one)"
  )
  log(f"wrote {len(written)} files to {out}")
  return written


def parse_algorithms(text, runs_algorithms=()):
  if text == "all":
    return [a for a in categories.PAPER_ORDER if a in set(runs_algorithms)]
  names = [a.strip() for a in text.split(",") if a.strip()]
  unknown = [a for a in names if a not in categories.ALGORITHMS]
  if unknown:
    raise ValueError(f"unknown algorithm(s) {unknown}; valid: {', '.join(categories.ALGORITHMS)}")
  return names


def main(argv=None):
  parser = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0],
    formatter_class=argparse.RawDescriptionHelpFormatter,
    epilog=__doc__.split("\n\n", 1)[1],
  )
  parser.add_argument("--results", required=True, help="directory searched for **/result.json")
  parser.add_argument("--out", required=True, help="output directory (created)")
  parser.add_argument(
    "--figures", default="", help="comma-separated CLRS algorithm names, or 'all' (with results)"
  )
  parser.add_argument("--paper", action="store_true", help="print the paper's numbers next to ours")
  parser.add_argument(
    "--expected-seeds",
    type=int,
    default=None,
    help="N for the [n] marks of cells with fewer seeds (default: the most "
    "seeds any cell of the table has)",
  )
  args = parser.parse_args(argv)
  if not pathlib.Path(args.results).is_dir():
    parser.error(f"--results {args.results!r} is not a directory")
  figures = []
  if args.figures:
    try:
      algorithms = (
        {
          p.parts[-3]
          for p in pathlib.Path(args.results).glob("**/result.json")
          if len(p.parts) >= 3
        }
        if args.figures == "all"
        else ()
      )
      figures = parse_algorithms(args.figures, algorithms)
    except ValueError as e:
      parser.error(str(e))
  make_all(
    args.results,
    args.out,
    figures=figures,
    paper=args.paper,
    expected_seeds=args.expected_seeds,
    log=lambda m: print(m, file=sys.stderr),
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
