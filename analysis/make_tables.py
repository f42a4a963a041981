"""results/ -> the paper's tables (LaTeX), seed counts, a reproduction report and figures.

    python analysis/make_tables.py --results runs --out tables [--paper] \
        [--figures floyd_warshall,activity_selector] [--expected-seeds 10] \
        [--split-by train_steps,hidden_size | --allow-mixed]

Reads every **/result.json under --results (schema nar_markov.result/1), reports corrupt or
partial files by path and leaves them out, sets the lambda calibration runs apart (not
results), and replaces --out as a whole (a fresh folder next to it takes its place) with:
  three_models.tex      Table 1 (tab:three_model_comparison): baseline / ForgetNet / G-ForgetNet
                        (+ one column per variant label such as gforget_constant)
  summary.tex           Table 2 (tab:main_comparison): category and overall averages, counts
  penalty_ablation.tex  Table 7 (tab:penalty_ablate), when gforget_nopenalty results exist
  multitask.tex         Table 8 (tab:multi_table), when *_multitask results exist
  tables.tex            a LaTeX document that \\input's the tables above (with the macros)
  results_long.csv      every run, long format: model, algorithm, seed, metric, value
  seeds.csv             per model and algorithm: mean_pct, std_pct, n_seeds, n_runs,
                        n_diverged, seeds, steps, train_steps
  lambdas.csv           per gated run: lambda_gate, lambda_reading, lambda_calibration
  reproduction.csv/.md  ours vs the paper per cell: Δ, within ±2σ, seeds, steps
  comparison.md         ours next to the paper, one row per algorithm with results
  figures/<alg>_{train_loss,val_score,hint_step_loss,hidden_norm,gate}.{png,pdf} and
  figures/ours_vs_paper.{png,pdf}  with --figures (analysis.figures; gate: gated runs only)
--paper prints the paper's mean next to ours in every cell of Tables 1, 7, 8 and adds the
paper's columns (literature baselines included) to Table 2. Works when run by path from any
directory and as a module (`from analysis import make_tables; make_tables.make_all(...)`).
Runs of different protocols (training steps, schedule, batch, learning rate, train sizes,
validation mode, hidden size, processor, ...: analysis.protocols) are never put in one
table unless asked: --split-by SETTING,... writes one table set per group into
--out/<setting=value,...>/, --allow-mixed one table of them all; without either a mixed
--results is refused with the groups it holds. Duplicate runs (same model, algorithm, seed
and protocol under two paths) are left out with a warning each and one closing line that
says what to do.
Errors are one line on stderr: bad arguments, no runs to tabulate or mixed protocols
(exit 2, nothing written), an --out that cannot be written, e.g. read-only or a full disk
(exit 1, the old --out left as it was).
"""

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import warnings

if __package__ in (None, ""):  # run by path: make `analysis` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from analysis import categories  # noqa: E402
from analysis import labels  # noqa: E402
from analysis import paper as paper_lib  # noqa: E402
from analysis import protocols  # noqa: E402
from analysis import report  # noqa: E402
from analysis import results as results_lib  # noqa: E402
from analysis import tables  # noqa: E402

TABLE_FILES = {
  "three_model_comparison": "three_models.tex",
  "main_comparison": "summary.tex",
  "penalty_ablate": "penalty_ablation.tex",
  "multi_table": "multitask.tex",
}
# Written into every output folder: a folder with it (or, from before it existed, with
# tables.tex and seeds.csv) is ours to replace; any other non-empty folder is refused.
MARKER = ".made-by-make_tables"


class NoRuns(ValueError):
  """--results holds no run to put in a table."""


class MixedProtocols(ValueError):
  """--results holds runs of different protocols and no way to split them was given."""


def _write(path, text, written):
  path.write_text(text, encoding="utf-8")
  written.append(path)


def check_out_dir(out_dir, results_dir):
  """Checks that `out_dir` may be replaced as a whole by make_all.

  It may where it does not exist, is empty, or holds make_tables' output (MARKER, or
  tables.tex and seeds.csv).

  Raises:
    ValueError: `out_dir` is or holds `results_dir`, is not a directory, or is a non-empty
      directory make_tables did not write.
  """
  out = pathlib.Path(out_dir).resolve()
  results = pathlib.Path(results_dir).resolve()
  if out == results or out in results.parents:
    raise ValueError(f"--out {out_dir} holds --results {results_dir}; refusing to replace it")
  if out.exists():
    if not out.is_dir():
      raise ValueError(f"--out {out_dir} exists and is not a directory")
    ours = (out / MARKER).exists() or (
      (out / "tables.tex").exists() and (out / "seeds.csv").exists()
    )
    if not ours and any(out.iterdir()):
      raise ValueError(
        f"--out {out_dir} is a non-empty directory that make_tables did not write; "
        "refusing to replace it"
      )


def replace_dir(new, out):
  """Puts the folder `new` in place of `out` (both on one file system).

  The old `out` is renamed aside first and only removed once `new` is in place (put back
  if that fails).
  """
  if not out.exists():
    os.rename(new, out)
    return
  old = pathlib.Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
  os.rmdir(old)  # a free name next to `out`, on the same file system
  os.rename(out, old)
  try:
    os.rename(new, out)
  except BaseException:
    os.rename(old, out)
    raise
  shutil.rmtree(old, ignore_errors=True)


def _protocol_identity(run):
  return tuple(sorted(protocols.protocol(run).items()))


def table_sets(runs, results_dir, *, split_by=None, allow_mixed=False):
  """The table sets of `runs`: one, or one per group of the protocol settings `split_by`.

  Args:
    runs: the runs (calibrations set apart).
    results_dir: --results, named in the message.
    split_by: protocol settings (analysis.protocols.PROTOCOL_KEYS); None: one set.
    allow_mixed: a set may hold runs of several protocols.

  Returns:
    [(subfolder, runs)]: ('', runs) for --out itself, else a subfolder per group named
    by its settings (e.g. 'train_steps=1500'), sorted.

  Raises:
    MixedProtocols: a set would hold runs of several protocols, without allow_mixed.
  """
  if split_by is None:
    groups = protocols.protocol_groups(runs)
    if len(groups) > 1 and not allow_mixed:
      raise MixedProtocols(
        f"--results {results_dir} holds runs of {len(groups)} protocols "
        f"({protocols.describe(groups)}); pass --split-by {','.join(protocols.differing(groups))} "
        "for one table set per protocol, or --allow-mixed for one table of them all"
      )
    return [("", runs)]
  sets = []
  for group in protocols.protocol_groups(runs, split_by):
    name = protocols.group_name(group, split_by)
    inner = protocols.protocol_groups(group.runs)
    if len(inner) > 1 and not allow_mixed:
      raise MixedProtocols(
        f"--split-by {','.join(split_by)} leaves runs of {len(inner)} protocols in {name} "
        f"({protocols.describe(inner)}); add {','.join(protocols.differing(inner))} to "
        "--split-by, or pass --allow-mixed"
      )
    sets.append((name, list(group.runs)))
  return sorted(sets)


def make_all(results_dir, out_dir, *, figures=(), paper=False, expected_seeds=None,
             split_by=None, allow_mixed=False, log=print):
  """Writes everything of the module docstring from the runs under `results_dir`.

  The files are written into a fresh folder next to `out_dir`, which then replaces
  `out_dir` as a whole: no file of an earlier run survives, and a failure leaves `out_dir`
  as it was.

  Args:
    results_dir: searched for **/result.json.
    out_dir: the output folder, replaced (`check_out_dir`).
    figures: algorithm names, or "all" (those with results); () for none.
    paper: print the paper's numbers next to ours (--paper).
    expected_seeds: N for the [n] marks of cells with fewer seeds; None: the most any
      cell of the table has.
    split_by: protocol settings: one table set per group, in a subfolder of `out_dir`
      named by them (`table_sets`).
    allow_mixed: one table of runs of several protocols, duplicates by (model,
      algorithm, seed) left out.
    log: called with each line to report (left-out files, skipped tables, counts).

  Returns:
    The paths written, under `out_dir`.

  Raises:
    ValueError: as `check_out_dir`.
    NoRuns: no run to tabulate (nothing written).
    MixedProtocols: as `table_sets` (nothing written).
    OSError: a file cannot be written (`out_dir` left as it was).
  """
  out = pathlib.Path(out_dir)
  check_out_dir(out, results_dir)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", results_lib.ResultWarning)  # logged below instead
    all_runs, problems = results_lib.load_runs(results_dir, identity=_protocol_identity)
  n_files = len(all_runs) + len(problems)
  runs, calibration = results_lib.split_calibration(all_runs)
  if not runs:
    # Six empty tables would look like output; say instead that there is nothing to show.
    raise NoRuns(
      f"no runs to tabulate under --results {results_dir} ({n_files} result.json files, "
      f"{len(problems)} left out, {len(calibration)} lambda calibration runs); nothing written"
    )
  sets = table_sets(runs, results_dir, split_by=split_by, allow_mixed=allow_mixed)
  out.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.new-"))
  written, messages = [], []
  try:
    for name, set_runs in sets:
      set_runs, duplicates = results_lib.drop_duplicates(set_runs)  # only when mixed
      folder = tmp / name if name else tmp
      folder.mkdir(exist_ok=True)
      os.chmod(folder, 0o755)  # mkdtemp's 0700 would hide the tables from a shared group
      w, m = _make_all_into(
        folder, set_runs, problems=problems + duplicates, n_files=n_files,
        n_calibration=len(calibration), figures=figures, paper=paper,
        expected_seeds=expected_seeds,
      )
      written += w
      messages += [f"{name}: {x}" if name else x for x in m]
      problems += duplicates
    (tmp / MARKER).write_text("analysis/make_tables.py output; replaced as a whole\n")
    replace_dir(tmp, out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  for p in problems:
    log(f"warning: left out {os.path.join(results_dir, p)}")  # p: 'path: reason'
  if calibration:
    log(f"{len(calibration)} lambda calibration runs: not results, left out of the tables")
  for m in messages:
    log(m)
  n_duplicates = sum(f": {results_lib.DUPLICATE} " in p for p in problems)
  if n_duplicates:
    log(f"{n_duplicates} duplicate runs left out (the same model, algorithm, seed and "
        "protocol under two paths; the first in path order is in the tables): point --results "
        "at one sweep's folder, or move the copies you do not want under an _archive/ folder")
  log(f"wrote {len(written)} files to {out}")
  return [out / p.relative_to(tmp) for p in written]


def _make_all_into(out, runs, *, problems, n_files, n_calibration, figures, paper,
                   expected_seeds):
  """make_all's files of `runs` (one protocol, or mixed by request), written into the
  (fresh) folder `out`; (paths, closing messages)."""
  messages = []
  log = messages.append
  long = results_lib.to_long(runs)
  agg = results_lib.aggregate(long)
  paper_df = paper_lib.load_paper_results()
  written = []
  long.to_csv(out / "results_long.csv", index=False)
  written.append(out / "results_long.csv")
  tables.seeds_frame(agg).to_csv(out / "seeds.csv", index=False, float_format="%.4f")
  written.append(out / "seeds.csv")
  lambdas = results_lib.lambda_frame(runs)
  if len(lambdas):
    lambdas.to_csv(out / "lambdas.csv", index=False, float_format="%.6g")
    written.append(out / "lambdas.csv")

  shown_paper = paper_df if paper else None
  found = list(agg["model"].unique())
  present = lambda models: tables.models_present(agg, models)  # noqa: E731
  three = tables.table_models(found, tables.THREE_MODELS, unmatched=True)
  made = []
  if present(three):
    _write(
      out / TABLE_FILES["three_model_comparison"],
      tables.comparison_table(
        agg,
        three,
        label="three_model_comparison",
        highlight_vs="baseline",
        paper=shown_paper,
        expected_seeds=expected_seeds,
      ),
      written,
    )
    _write(
      out / TABLE_FILES["main_comparison"],
      tables.summary_table(agg, present(three), paper=shown_paper),
      written,
    )
    made += ["three_model_comparison", "main_comparison"]
  else:
    log("skipped three_models.tex and summary.tex: no baseline/forget/gforget results")
  penalty = tables.table_models(found, tables.PENALTY_MODELS)
  if present([m for m in penalty if labels.paper_model(m) == "gforget_nopenalty"]):
    _write(
      out / TABLE_FILES["penalty_ablate"],
      tables.comparison_table(
        agg,
        penalty,
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
  multitask = tables.table_models(found, tables.MULTITASK_MODELS, unmatched=True)
  if present(multitask):
    _write(
      out / TABLE_FILES["multi_table"],
      tables.comparison_table(
        agg,
        multitask,
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
  skipped = [m for m in labels.sort_models(agg["model"]) if labels.paper_model(m) is None]
  _write(
    out / "reproduction.md",
    report.reproduction_markdown(
      frame,
      n_files=n_files,
      problems=problems,
      agg=agg,
      skipped_models=skipped,
      n_calibration=n_calibration,
      lambdas=lambdas,
    ),
    written,
  )

  _write(out / "comparison.md", report.comparison_markdown(frame), written)

  if figures == "all":
    figures = [a for a in categories.PAPER_ORDER if a in {r["algorithm"] for r in runs}]
  if figures:
    from analysis import figures as figures_lib  # matplotlib only when asked for

    written += figures_lib.make_figures(runs, figures, out / "figures")
    written += figures_lib.plot_ours_vs_paper(agg, paper_df, out / "figures")

  n_diverged = int(agg["n_diverged"].sum()) if len(agg) else 0
  n_unscored = int((agg["n_runs"] - agg["n_seeds"]).sum()) if len(agg) else 0
  messages += [
    f"{len(runs)} runs from {n_files} result.json files ({len(problems)} left out); "
    f"{n_diverged} diverged runs (counted with their test score where they have one"
    + (f"; {n_unscored} without one" if n_unscored else "")
    + ")"
  ]
  return written, messages


def parse_algorithms(text, runs_algorithms=()):
  """--figures' algorithms: 'all' gives those of `runs_algorithms`, in the paper's order.

  Raises:
    ValueError: a name that is not a CLRS-30 algorithm.
  """
  if text == "all":
    return [a for a in categories.PAPER_ORDER if a in set(runs_algorithms)]
  names = [a.strip() for a in text.split(",") if a.strip()]
  unknown = [a for a in names if a not in categories.ALGORITHMS]
  if unknown:
    raise ValueError(f"unknown algorithm(s) {unknown}; valid: {', '.join(categories.ALGORITHMS)}")
  return names


def _positive_int(text):
  try:
    n = int(text)
  except ValueError:
    n = 0
  if n < 1:
    raise argparse.ArgumentTypeError(f"wants a number of seeds >= 1, got {text!r}")
  return n


def parse_split_by(text):
  """--split-by's setting names, without repeats.

  Raises:
    ValueError: (one line) none given, or one that is not a protocol setting.
  """
  names = [k.strip() for k in text.split(",") if k.strip()]
  unknown = [k for k in names if k not in protocols.PROTOCOL_KEYS]
  if not names or unknown:
    raise ValueError(f"--split-by {text!r}: {', '.join(unknown) or 'no setting'} is not a "
                     "protocol setting; valid: " + ", ".join(protocols.PROTOCOL_KEYS))
  return list(dict.fromkeys(names))


def main(argv=None):
  """The command line (module docstring); returns 0, 2 or 1 as it says.

  Bad arguments are argparse errors (exit 2).
  """
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
    "--split-by",
    default=None,
    help="comma-separated protocol settings (e.g. train_steps,hidden_size): one table set "
    "per group, in a subfolder of --out named by them; valid: " + ", ".join(protocols.PROTOCOL_KEYS),
  )
  parser.add_argument(
    "--allow-mixed",
    action="store_true",
    help="put runs of different protocols in one table (refused by default)",
  )
  parser.add_argument(
    "--expected-seeds",
    type=_positive_int,
    default=None,
    help="N for the [n] marks of cells with fewer seeds (default: the most "
    "seeds any cell of the table has)",
  )
  args = parser.parse_args(argv)
  if not pathlib.Path(args.results).is_dir():
    parser.error(f"--results {args.results!r} is not a directory")
  figures = []
  if args.figures == "all":
    figures = "all"
  elif args.figures:
    try:
      figures = parse_algorithms(args.figures)
    except ValueError as e:
      parser.error(str(e))
  split_by = None
  try:
    check_out_dir(args.out, args.results)
    if args.split_by is not None:
      split_by = parse_split_by(args.split_by)
  except ValueError as e:
    parser.error(str(e))
  try:
    make_all(
      args.results,
      args.out,
      figures=figures,
      paper=args.paper,
      expected_seeds=args.expected_seeds,
      split_by=split_by,
      allow_mixed=args.allow_mixed,
      log=lambda m: print(m, file=sys.stderr),
    )
  except (NoRuns, MixedProtocols) as e:
    print(f"make_tables.py: error: {e}", file=sys.stderr)
    return 2
  except OSError as e:  # a read-only --out, a full disk: the old --out is left as it was
    where = f" ({e.filename})" if e.filename else ""
    print(f"make_tables.py: error: cannot write --out {args.out}: {e.strerror or e}{where}",
          file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
