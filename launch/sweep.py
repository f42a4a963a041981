#!/usr/bin/env python
"""Launch a sweep (model x ALGORITHMS x SEEDS from gin) as one Slurm job array.

  python launch/sweep.py --gin gin/baseline.gin
  python launch/sweep.py --gin gin/forget.gin --gin_param "ALGORITHMS=['bfs','dfs']" \
      --gin_param "SEEDS=[0,1]" --results runs
  python launch/sweep.py --gin gin/baseline.gin --gin gin/smoke.gin --cluster local
  python launch/sweep.py --gin gin/gforget.gin --dry-run [--list]
  python launch/sweep.py --status --results runs [--gin gin/baseline.gin]

Runs that are done (their result reads back with the settings asked for, beside the
files that replay and re-score it), or whose last job is queued or running, are skipped;
the rest go out as one submitit job array (G-ForgetNet: after a λ calibration per
algorithm), each array recorded in the sweep's manifest before the next goes out.
--dry-run checks and prints what the sweep would do: first what it asks for (Slurm's job
arrays and resources, the cost), then the runs folded per model x algorithm (--list: one
line each); bad input (launch/inputs.py: gin files whose order would decide the sweep, a
binding the model does not use, one that does not parse), results or checkpoints
made with other settings, and a data cache the jobs could not write exit with code 2
and submit nothing.  A signal (Ctrl-C, kill, a closed terminal) stops the sweep after
the array it reached, in one line (exit 128 + the signal); a file it cannot write (a
full disk) is one line, exit 1.  --cluster auto: slurm if `sbatch` is on PATH, else
local (one run after another, each in its own process); debug: in this process.  How
it all works: docs/running.md.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import shutil
import signal
import sys
from typing import List, Optional, Sequence

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script: `python launch/sweep.py`
  sys.path.insert(0, str(REPO_ROOT))

# pylint: disable=g-import-not-at-top,wrong-import-position
from launch import executors
from launch import jobs
from launch import plan as plan_lib
from launch import status
from launch import submit
from nar_markov import quiet
from nar_markov.store import archive
from nar_markov.store import locks
from nar_markov.store import runs
from launch.plan import UsageError
# pylint: enable=g-import-not-at-top,wrong-import-position


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  """The command line's flags (module docstring); argparse exits 2 on a bad one."""
  p = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--gin", action="append", default=[], metavar="FILE",
                 help="gin file (repeatable; relative to the cwd or the repo root)")
  p.add_argument("--gin_param", action="append", default=[], metavar="BINDING",
                 help="gin binding, e.g. \"SEEDS=[0,1]\" (repeatable; after the files)")
  p.add_argument("--cluster", choices=("auto", "slurm", "local", "debug"), default="auto")
  p.add_argument("--results", default=runs.DEFAULT_RESULTS, metavar="DIR",
                 help=f"results root (default: ./{runs.DEFAULT_RESULTS}, not the committed "
                      "evidence in results/; its parent must exist)")
  p.add_argument("--dry-run", action="store_true",
                 help="check and list what the sweep would submit and skip; submit nothing")
  p.add_argument("--list", action="store_true",
                 help="with --dry-run: a line per run and per job (else counts per "
                      "model x algorithm)")
  p.add_argument("--status", action="store_true",
                 help="report done/diverged/running/failed/missing/corrupt/other per "
                      "model x algorithm")
  p.add_argument("--archive-mismatched", action="store_true",
                 help="move runs with results or checkpoints made with other settings to "
                      "<results>/_archive/ and train them again (else the sweep refuses)")
  p.add_argument("--force", action="store_true",
                 help="submit runs whose last job Slurm cannot be asked about (a job "
                      "still queued would then train its run twice)")
  quiet.add_flag(p)
  return p.parse_args(argv)


def check_flags(args: argparse.Namespace, argv: Sequence[str]) -> None:
  """Checks that the flags go together.

  Args:
    args: the parsed flags.
    argv: the command line as given (which flags were given at all).

  Raises:
    UsageError: --list without --dry-run; --status with --dry-run, --archive-mismatched,
      --force, --cluster or --list (--status reports a results folder and plans
      nothing, so they would be ignored).
  """
  if not args.status:
    if args.list and not args.dry_run:
      raise UsageError("--list lists the runs of a --dry-run: give --dry-run too")
    return
  given = [flag for flag in ("--dry-run", "--archive-mismatched", "--force", "--cluster",
                             "--list")
           if any(a == flag or a.startswith(flag + "=") for a in argv)]
  if given:
    raise UsageError(f"--status and {given[0]} do not go together: --status reports what "
                     "the results folder holds and plans nothing; give one of them")


def pick_cluster(name: str, dry_run: bool = False) -> str:
  """--cluster as the sweep will use it: auto is slurm where sbatch is on PATH, else local.

  Raises:
    UsageError: slurm without sbatch on PATH, unless `dry_run` (planning needs none).
  """
  if name == "auto":
    return "slurm" if shutil.which("sbatch") else "local"
  if name == "slurm" and shutil.which("sbatch") is None and not dry_run:
    raise UsageError("--cluster slurm: `sbatch` is not on PATH "
                     "(use --cluster local, or start Slurm: launch/local_slurm.sh start)")
  return name


def expand(gin_files, gin_params, results_dir):
  """sweep_spec.expand_runs, its ValueError or FileNotFoundError turned into UsageError.

  Raises:
    UsageError: no gin file, or bad input (one line, without gin's "In call to" notes).
  """
  from launch import sweep_spec  # pylint: disable=g-import-not-at-top
  if not gin_files:
    raise UsageError("no gin file given (--gin FILE, e.g. --gin gin/baseline.gin)")
  try:
    return sweep_spec.expand_runs(gin_files, gin_params, results_dir)
  except (ValueError, FileNotFoundError) as e:
    # Without gin's note on where the value was used ("In call to configurable ...").
    raise UsageError(" ".join(line.strip() for line in str(e).splitlines()
                              if not line.strip().startswith("In call to"))) from e


def results_folder(path: str) -> pathlib.Path:
  """--results as the sweep will write to it (runs.check_results_folder).

  Raises:
    UsageError: a folder a sweep cannot write into.
  """
  try:
    return runs.check_results_folder(path)
  except ValueError as e:
    raise UsageError(f"--results {e}") from None


def cmd_status(args) -> int:
  """--status: prints the report of the results folder (with --gin, of that sweep's runs).

  Returns:
    0.

  Raises:
    UsageError: --results is a file or (without --gin) no folder; bad gin input.
  """
  results_dir = pathlib.Path(args.results).expanduser().resolve()
  if results_dir.exists() and not results_dir.is_dir():
    raise UsageError(f"--results {results_dir} is a file, not a results folder")
  if args.gin:
    from launch import sweep_spec  # pylint: disable=g-import-not-at-top
    sweep_runs = expand(args.gin, args.gin_param, results_dir)
    views, warnings = status.classify(results_dir, sweep_runs,
                                      sweep_spec.expected_definitions(sweep_runs))
  elif not results_dir.is_dir():
    raise UsageError(f"no results folder {results_dir}")
  else:
    views, warnings = status.classify(results_dir)
  print(status.format_report(results_dir, views, warnings))
  return 0


def cmd_sweep(args, argv: List[str]) -> int:
  """The sweep: plans it, and prints the plan (--dry-run) or submits it.

  Except for --dry-run, the sweep lock of the results folder is held while it plans and
  writes the manifest (on Slurm, and submits); local and debug jobs run here after the
  lock is given back.

  Returns:
    0, or 1 where a local or debug run failed.

  Raises:
    UsageError: bad input, a plan that must not go ahead, or the sweep lock cannot be
      taken.
  """
  from launch import cluster  # pylint: disable=g-import-not-at-top
  results_dir = results_folder(args.results)
  cluster_name = pick_cluster(args.cluster, args.dry_run)
  sweep_runs = expand(args.gin, args.gin_param, results_dir)
  resources = cluster.SlurmResources()  # bound by the gin just parsed
  if args.dry_run:
    plan = _checked_plan(args, sweep_runs, results_dir)
    print("\n".join(plan_lib.summary(plan, cluster_name)
                    + plan_lib.dry_run(plan, cluster_name, resources, full=args.list)))
    return 0
  with contextlib.ExitStack() as lock:
    try:  # one sweep at a time plans and submits on a results folder
      lock.enter_context(locks.sweep_lock(results_dir))
    except OSError as e:
      raise UsageError(f"--results {results_dir}: cannot take the sweep lock "
                       f"{results_dir / runs.SWEEP_LOCK} ({e.strerror})") from None
    plan = _checked_plan(args, sweep_runs, results_dir)
    print("\n".join(plan_lib.summary(plan, cluster_name)), flush=True)
    if not plan.todo:
      return 0
    executor, manifest = _prepare(plan, cluster_name, resources, argv)
    if cluster_name == "slurm":
      calibrations, submitted = submit.on_slurm(executor, plan, manifest, resources)
      print("\n".join(submit.slurm_report(plan, calibrations, submitted, resources, manifest)))
      return 0
  # Local runs train after the lock is given back (the manifest says they are queued).
  print(f"logs: {jobs.log_folder(results_dir)}; manifest: {manifest.path}")
  return 1 if submit.run_here(executor, plan, manifest, cluster_name) else 0


def _checked_plan(args, sweep_runs, results_dir) -> plan_lib.Plan:
  """The plan, refused (UsageError) where it must not go ahead; its warnings printed."""
  plan = plan_lib.make_plan(sweep_runs, results_dir, force=args.force)
  warnings = plan_lib.check(plan, args.archive_mismatched, results_dir)
  plan_lib.check_data_cache(plan)
  for warning in warnings + plan.warnings:
    print(f"warning: {warning}", file=sys.stderr)
  return plan


def _prepare(plan: plan_lib.Plan, cluster_name: str, resources, argv):
  """Results in the way moved aside or archived, the executor, and the manifest of
  the plan written before anything is submitted (a second sweep sees it queued)."""
  for r in plan.corrupt:
    view = plan.views[r.key]
    print(f"{r.name}: not done ({view.result.detail}); its result.json moved aside to "
          f"{archive.move_aside(view.result.path)}")
  results_dir = plan.runs[0].results_dir
  for r in plan.other:
    # A multi-task job's checkpoint is not in the run folder; its seed's runs share it.
    for folder in dict.fromkeys([r.run_dir, r.checkpoint_folder]):
      if folder.exists():
        print(f"{r.name}: {plan.views[r.key].detail}; archived to "
              f"{archive.archive_run(results_dir, folder)}")
  executor = executors.make_executor(cluster_name, results_dir, resources)
  first = plan.runs[0]
  manifest = jobs.Manifest(results_dir, cluster_name, first.gin_files, first.gin_params, argv)
  manifest.plan(plan.todo, plan.calib_todo)
  manifest.save()
  return executor, manifest


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The command line (module docstring); returns the exit status.

  Returns:
    0 where all went well; what went wrong is one line on stderr: 2 for bad input or a
    plan that must not go ahead, 1 for a file that cannot be written (e.g. a full disk)
    or a local run that failed, 128 + its number for a signal (Ctrl-C: 130).
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse_args(argv)
  try:
    check_flags(args, argv)
    with submit.signals_interrupt():
      return cmd_status(args) if args.status else cmd_sweep(args, argv)
  except UsageError as e:
    print(f"sweep.py: error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt as e:
    e = e if isinstance(e, submit.Interrupted) else submit.Interrupted(signal.SIGINT)
    print(f"sweep.py: {e}", file=sys.stderr)
    return e.exit_code
  except OSError as e:
    where = f"{e.filename}: " if e.filename else ""
    print(f"sweep.py: error: {where}{e.strerror or e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
  quiet.setup()  # before anything imports clrs/tensorflow
  sys.exit(main())
