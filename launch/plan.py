"""A sweep's plan: which runs and λ calibrations are done, in flight or to submit; whether
it may go ahead; and how --dry-run and the sweep print it.  Imports no jax."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import pathlib
import shlex
from typing import Dict, List, Optional, Sequence

from launch import jobs
from launch import cluster
from launch import status
from launch import sweep_spec
from nar_markov.store import runs


class UsageError(Exception):
  """Bad input, or a plan that must not go ahead: one line, exit code 2, nothing submitted."""


@dataclasses.dataclass
class Plan:
  """The sweep's runs as they stand, and its λ calibrations (`make_plan`).

  Attributes:
    runs: the sweep's runs (`sweep_spec.expand_runs`).
    views: run key -> the run as it stands (status.RunView).
    calibs: the calibrations without a record (`sweep_spec.calibration_plan`).
    calibrated: algorithm -> its usable calibration record.
    calib_jobs: algorithm -> the state of the last job of its calibration, for those of
      `calibs` that have one.
    problems: calibration records that cannot be used; the plan must not go ahead.
    warnings: questions the scheduler could not answer.
    force: submit runs whose last job Slurm could not be asked about.
  """
  runs: List[sweep_spec.Run]
  views: Dict[tuple, status.RunView]
  calibs: List[sweep_spec.Calibration]
  calibrated: Dict[str, dict]
  calib_jobs: Dict[str, jobs.JobState]
  problems: List[str]
  warnings: List[str]
  force: bool = False  # submit runs whose last job Slurm could not be asked about

  def _runs(self, test) -> List[sweep_spec.Run]:
    return [r for r in self.runs if test(self.views[r.key])]

  @property
  def done(self) -> List[sweep_spec.Run]:
    """The runs whose result is done."""
    return self._runs(lambda v: v.result.done)

  @property
  def flying(self) -> List[sweep_spec.Run]:
    """The runs not done whose last job is queued or running."""
    return self._runs(lambda v: not v.result.done and v.job is not None and v.job.in_flight)

  @property
  def unknown(self) -> List[sweep_spec.Run]:
    """The runs not done whose last job Slurm could not be asked about."""
    return self._runs(lambda v: not v.result.done and v.job is not None
                      and v.job.phase == "unknown")

  @property
  def todo(self) -> List[sweep_spec.Run]:
    """The runs to submit: neither done nor in flight (nor unknown, unless `force`)."""
    held = {r.key for r in self.flying + ([] if self.force else self.unknown)}
    return [r for r in self.runs if r not in self.done and r.key not in held]

  @property
  def corrupt(self) -> List[sweep_spec.Run]:
    """The runs to submit whose result.json is corrupt (the sweep moves it aside)."""
    return [r for r in self.todo if self.views[r.key].result.state == "corrupt"]

  @property
  def other(self) -> List[sweep_spec.Run]:
    """The runs to submit with a result or checkpoint made with other settings."""
    return [r for r in self.todo if self.views[r.key].state == "other"]

  @property
  def calib_flying(self) -> Dict[str, jobs.JobState]:
    """Algorithm -> its calibration's job, where that is queued, running or unknown."""
    return {a: s for a, s in self.calib_jobs.items() if s.in_flight or s.phase == "unknown"}

  @property
  def calib_todo(self) -> List[sweep_spec.Calibration]:
    """The calibrations to submit: of algorithms with runs to submit, none in flight."""
    needed = {r.algorithm for r in self.todo}
    return [c for c in self.calibs if c.algorithm in needed and c.algorithm not in self.calib_flying]


def make_plan(sweep_runs: Sequence[sweep_spec.Run], results_dir, force: bool = False) -> Plan:
  """The plan of `sweep_runs` on `results_dir`, the scheduler asked once per kind of job.

  Args:
    sweep_runs: the sweep's runs (sweep_spec.expand_runs, gin parsed).
    results_dir: the results folder.
    force: as `Plan.force`.
  """
  views, warnings = status.survey(results_dir, sweep_runs,
                                  sweep_spec.expected_definitions(sweep_runs))
  calibs, calibrated, problems = sweep_spec.calibration_plan(sweep_runs)
  _, last = jobs.last_jobs(results_dir)
  algorithm_of = {str(c.record_path): c.algorithm for c in calibs}
  states, more = jobs.states({p: last[p] for p in algorithm_of if p in last})
  return Plan(list(sweep_runs), {v.run.key: v for v in views}, calibs, calibrated,
              {algorithm_of[p]: s for p, s in states.items()}, problems, warnings + more,
              force)


def check(plan: Plan, archive_mismatched: bool, results_dir) -> List[str]:
  """Checks that the plan may go ahead.

  Args:
    plan: the plan.
    archive_mismatched: --archive-mismatched: runs made with other settings are archived
      and trained again.
    results_dir: the results folder (named in the message).

  Returns:
    The warnings to print: with `plan.force`, one for the runs Slurm could not be asked
    about.

  Raises:
    UsageError: runs made with other settings without `archive_mismatched`; calibration
      records that cannot be used; runs whose last job Slurm could not be asked about,
      without `plan.force`.
  """
  other = plan.other
  if other and not archive_mismatched:
    kinds = {"checkpoints" if plan.views[r.key].result.state == "missing" else "results"
             for r in other}
    raise UsageError(
        f"{len(other)} runs have {' or '.join(sorted(kinds))} made with other settings "
        "(nothing was submitted):\n  " + "\n  ".join(
            f"{r.name}: {plan.views[r.key].detail}" for r in other)
        + "\nUse another --results folder, or --archive-mismatched to move them to "
        f"{pathlib.Path(results_dir) / runs.ARCHIVE_DIR}/<timestamp>/ and train them again.")
  if plan.problems:
    raise UsageError("lambda calibration records that cannot be used (nothing was "
                     "submitted):\n  " + "\n  ".join(plan.problems))
  unknown = plan.unknown
  if not unknown:
    return []
  n = len(unknown)
  what = "1 run whose last job" if n == 1 else f"{n} runs whose last jobs"
  why = plan.views[unknown[0].key].job.detail.partition("unknown: ")[2]
  if not plan.force:
    jobs_are = "1 run's job is" if n == 1 else f"{n} runs' jobs are"
    raise UsageError(f"cannot ask Slurm whether {jobs_are} still queued or running ({why}); "
                     "nothing submitted: run the sweep again when Slurm answers, or with "
                     "--force to submit them anyway (a job that is still queued would then "
                     "train its run twice)")
  return [f"--force: submitting {what} Slurm could not be asked about ({why})"]


def data_cache_dir() -> pathlib.Path:
  """The data cache the jobs will use: nar_markov.data.split_cache.resolve_cache_dir's answer
  ($NAR_MARKOV_CACHE > gin `cache_dir.path` > ~/.cache/nar_markov), without clrs."""
  from nar_markov.config import clrs30  # pylint: disable=g-import-not-at-top
  for candidate in (os.environ.get("NAR_MARKOV_CACHE"), clrs30.cache_dir()):
    if candidate:
      return pathlib.Path(candidate).expanduser()
  return pathlib.Path("~/.cache/nar_markov").expanduser()


def cached_test_split(algorithm: str) -> Optional[pathlib.Path]:
  """Where the data cache keeps the test split of `algorithm`, without importing clrs.

  As nar_markov.data.splits.cache_path(algorithm, 'test'); None where dm-clrs is not
  installed.
  """
  try:
    version = importlib.metadata.version("dm-clrs")
  except importlib.metadata.PackageNotFoundError:
    return None
  return data_cache_dir() / f"clrs-{version}" / f"{algorithm}_test.npz"


def check_data_cache(plan: Plan) -> None:
  """Checks that the jobs of the plan can find or make the test splits they need.

  Raises:
    UsageError: every job would fail at start: a test split they need is not in the data
      cache, and the cache cannot be written (a job makes the split there).
  """
  needed = sorted({r.algorithm for r in plan.todo} | {c.algorithm for c in plan.calib_todo})
  paths = [p for p in map(cached_test_split, needed) if p is not None]
  missing = [p for p in paths if not p.is_file()]
  if not missing:
    return
  folder = missing[0].parent
  existing = next(f for f in [folder, *folder.parents] if f.exists())
  if existing.is_dir() and os.access(existing, os.W_OK | os.X_OK, effective_ids=True):
    return
  why = ("not a folder" if not existing.is_dir() else
         "a read-only file system" if os.statvfs(existing).f_flag & os.ST_RDONLY else
         "permission denied")
  names = ", ".join(p.stem[:-len("_test")] for p in missing[:3])
  more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
  raise UsageError(
      f"the data cache {folder} cannot be written ({why}: {existing}) and lacks the test "
      f"split of {names}{more}: every job would fail at start (nothing submitted). Point "
      "NAR_MARKOV_CACHE at a writable folder, or fill the cache where it can be written "
      "(python -m nar_markov.data.pipeline --all --cache-dir <folder>)")


# -- printing --------------------------------------------------------------------------


def summary(plan: Plan, cluster_name: str) -> List[str]:
  """The sweep's first line(s): how many runs to submit, done, in flight; the calibrations'."""
  sweep_runs, todo = plan.runs, plan.todo
  line = (f"sweep {sweep_runs[0].model}: {len(sweep_runs)} runs "
          f"({len({r.algorithm for r in sweep_runs})} algorithms x "
          f"{len({r.seed for r in sweep_runs})} seeds) on {cluster_name}; "
          f"{len(todo)} runs to submit, {len(plan.done)} already done")
  for n, what in [(len(plan.flying), "already queued or running"),
                  (len(plan.corrupt), "with a corrupt result.json (moved aside, rerun)"),
                  (len(plan.other), "made with other settings (archived, rerun)")]:
    line += f", {n} {what}" if n else ""
  lines = [line]
  if plan.calibs or plan.calibrated:
    reading = (plan.calibs[0].reading if plan.calibs else
               next(iter(plan.calibrated.values()))["reading"])
    lines.append(f"stage 1, lambda calibration ({reading} reading): {len(plan.calib_todo)} "
                 f"algorithms to calibrate, {len(plan.calibrated)} calibrated, "
                 f"{len(plan.calib_flying)} calibrating")
  return lines


def dry_run(plan: Plan, cluster_name: str, resources: cluster.SlurmResources,
            full: bool = False) -> List[str]:
  """The lines --dry-run prints after the summary, what it will ask for first.

  On Slurm the job arrays and the resources each task of them gets (additional sbatch
  parameters and setup lines too); the estimated cost; then the calibrations and the runs
  -- counts per model x algorithm and a line for each run with something to say (corrupt,
  archived, a checkpoint), or (`full`, --list) a line per run and per job; the gin; and
  'dry run: nothing submitted'.
  """
  lines = []
  k = plan.runs[0].seeds_per_job
  if cluster_name == "slurm":
    lines += _resource_lines(plan, resources)
  calibrations = _calibration_lines(plan)
  if calibrations and not full:
    tags: Dict[str, int] = {}
    for line in calibrations[:-1]:
      tags[line.split()[0]] = tags.get(line.split()[0], 0) + 1
    calibrations = ["lambda calibrations: " + ", ".join(f"{n} {t}" for t, n in tags.items()),
                    calibrations[-1]]
  lines += _cost_lines(plan) + calibrations
  lines += _run_lines(plan) if full else _folded_run_lines(plan)
  if k > 1 and plan.todo:
    groups = sweep_spec.job_groups(plan.todo)
    lines.append(f"{len(groups)} jobs of up to {k} seeds (SEEDS_PER_JOB={k}), "
                 "each seed-group trained in one process" + (":" if full else ""))
    if full:
      lines += [f"  job {i:<4} {g[0].model}/{g[0].algorithm} seeds "
                + ",".join(str(r.seed) for r in g) for i, g in enumerate(groups, 1)]
  if not full:
    lines.append("  (--list: a line per run" + (" and per job)" if k > 1 else ")"))
  first = plan.runs[0]
  lines.append(f"gin: {' '.join(first.gin_files)}"
               + "".join(f" --gin_param {shlex.quote(p)}" for p in first.gin_params))
  return lines + ["dry run: nothing submitted"]


def job_arrays(plan: Plan) -> List[tuple]:
  """The job arrays the sweep would submit to Slurm, in order.

  The calibrations (one array), then the runs' jobs -- one array per calibration they
  wait for, one for the others, each split at cluster.MAX_ARRAY_SIZE tasks.

  Returns:
    (what, tasks) of each array.
  """
  arrays = [("lambda calibration", len(plan.calib_todo))] if plan.calib_todo else []
  waits = {c.algorithm for c in plan.calib_todo} | set(plan.calib_flying)
  by_wait: Dict[Optional[str], int] = {}
  for group in sweep_spec.job_groups(plan.todo):
    alg = group[0].algorithm if group[0].algorithm in waits else None
    by_wait[alg] = by_wait.get(alg, 0) + 1
  for alg, n in by_wait.items():
    what = "training, each after its algorithm's calibration" if alg else "training"
    for start in range(0, n, cluster.MAX_ARRAY_SIZE):
      arrays.append((what, min(cluster.MAX_ARRAY_SIZE, n - start)))
  return arrays


def _resource_lines(plan: Plan, resources: cluster.SlurmResources) -> List[str]:
  kinds: Dict[str, List[int]] = {}
  for what, tasks in job_arrays(plan):
    kinds.setdefault(what, []).append(tasks)
  k = plan.runs[0].seeds_per_job
  per = f"job (up to {k} seeds)" if k > 1 else "run"
  extra = resources.executor_params()["slurm_additional_parameters"]
  return [
      f"slurm job arrays: {sum(len(t) for t in kinds.values())}" + "".join(
          f"; {what}: {len(t)} array{'s' if len(t) > 1 else ''}, {sum(t)} tasks"
          for what, t in kinds.items()),
      f"slurm resources per {per}: {resources.describe()}",
      "slurm additional parameters: " + " ".join(f"{key}={value}" for key, value in
                                                 extra.items()),
      "slurm setup: " + ("; ".join(resources.setup) or "none"),
  ]


def _calibration_lines(plan: Plan) -> List[str]:
  if not (plan.calibs or plan.calibrated):
    return []
  lines = []
  todo = {c.algorithm: c for c in plan.calib_todo}
  for alg in sorted({r.algorithm for r in plan.runs}):
    if alg in plan.calibrated:
      c = plan.calibrated[alg]
      tag, what = "skip", f"record: lambda = {c['lambda']:.6g} ({c['record']})"
    elif alg in plan.calib_flying:
      tag, what = "skip", plan.calib_flying[alg].detail
    elif alg in todo:
      tag, what = "calibrate", str(todo[alg].record_path)
    else:
      tag, what = "skip", "no runs left to train"
    lines.append(f"  {tag:<12} {'calibrate/' + alg:<40} {what}")
  return lines + ["stage 2, training:"]


def _run_tags(plan: Plan) -> List[tuple]:
  """(run, what the sweep does about it, a note or '') for each run of the plan."""
  waits = {c.algorithm for c in plan.calibs}
  done, flying, todo = plan.done, plan.flying, plan.todo
  out = []
  for r in plan.runs:
    view = plan.views[r.key]
    tag, note, wait = "submit", "", ""
    if r in done:
      tag = "skip (done)"
    elif r in flying or r not in todo:
      tag = f"skip ({view.job.detail})"
    else:
      wait = " (after its calibration)" if r.algorithm in waits else ""
      if view.result.state == "corrupt":
        note = f" (corrupt: {view.result.detail}; moved aside)"
      elif view.state == "other":
        note = f" (other: {view.detail}; archived)"
      elif view.checkpoint is not None and view.checkpoint.state in ("corrupt", "resume"):
        note = f" (checkpoint: {view.checkpoint.detail})"
    out.append((r, tag, wait, note))
  return out


def _run_lines(plan: Plan) -> List[str]:
  return [f"  {tag:<12} {r.name:<40} {r.run_dir}{wait}{note}"
          for r, tag, wait, note in _run_tags(plan)]


def _folded_run_lines(plan: Plan) -> List[str]:
  """Per model x algorithm: how many runs, to submit and skipped (why); then each run
  with a note (corrupt, archived, a checkpoint) as the full list has it."""
  counts: Dict[str, Dict[str, int]] = {}
  noted = []
  for r, tag, wait, note in _run_tags(plan):
    tag = "skip (queued or running)" if tag.startswith("skip (") and tag != "skip (done)" \
        else tag
    per = counts.setdefault(f"{r.model}/{r.algorithm}", {})
    per[tag + wait] = per.get(tag + wait, 0) + 1
    if note:
      noted.append(f"  {tag:<12} {r.name:<40} {r.run_dir}{wait}{note}")
  width = max(len(name) for name in counts)
  lines = [f"runs per model/algorithm ({len(counts)}):"]
  for name, per in counts.items():
    n = sum(per.values())
    lines.append(f"  {name:<{width}}  {n} run{'s' if n != 1 else ''}: "
                 + ", ".join(f"{c} {tag}" for tag, c in per.items()))
  return lines + noted


def _cost_lines(plan: Plan) -> List[str]:
  from launch import cost  # pylint: disable=g-import-not-at-top  (no jax)
  settings = cost.settings_from_gin()
  lines = [cost.format_estimate(cost.count_by_algorithm(r.algorithm for r in plan.todo),
                                settings)]
  if plan.calib_todo:
    from nar_markov.config import lambda_heuristic  # pylint: disable=g-import-not-at-top  (no jax)
    lines.append(cost.format_calibration_estimate([c.algorithm for c in plan.calib_todo],
                                                  settings, lambda_heuristic.LambdaHeuristic()))
  return lines
