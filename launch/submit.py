"""Submitting a sweep's plan: on Slurm one submitit job array per stage (the G-ForgetNet
runs of an algorithm after its λ calibration), here (local, debug) one job at a time; the
manifest says which job runs what before each goes out."""

from __future__ import annotations

import contextlib
import json
import pathlib
import shlex
import signal
import subprocess
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from launch import cluster
from launch import executors
from launch import job_logs
from launch import jobs
from launch import sweep_spec
from launch.plan import Plan, UsageError

# -- signals -----------------------------------------------------------------------------

# Ctrl-C, kill, and a terminal (an SSH session) that closes.
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
  """One of SIGNALS: the sweep stops, saying in `said` what it leaves behind.

  Attributes:
    signum: the signal's number.
    said: what the sweep leaves behind, in words ('' for nothing to say).
  """

  def __init__(self, signum: int, said: str = ""):
    super().__init__(signum, said)
    self.signum, self.said = int(signum), said

  @property
  def exit_code(self) -> int:
    """The sweep's exit status: 128 + the signal's number."""
    return 128 + self.signum

  def __str__(self) -> str:
    return (f"interrupted by {signal.Signals(self.signum).name}"
            + (f": {self.said}" if self.said else ""))


@contextlib.contextmanager
def signals_interrupt():
  """Within it, each of SIGNALS raises Interrupted where the sweep is, as Ctrl-C does.

  So SIGTERM and SIGHUP too let what the sweep was doing be cleaned up and recorded on the
  way out.  The previous handlers are restored after.
  """
  def handler(signum, _):
    raise Interrupted(signum)
  with _handlers(handler):
    yield


@contextlib.contextmanager
def _handlers(handler):
  old = {s: signal.signal(s, handler) for s in SIGNALS}
  try:
    yield
  finally:
    for s, h in old.items():
      signal.signal(s, h)


# -- Slurm -----------------------------------------------------------------------------


class Submission:
  """A sweep's arrays going out one sbatch at a time.

  Each array is tagged in the manifest before its sbatch and recorded there before the
  next.  Within `held`, a signal is held until then, and the submission stops there
  (Interrupted).  A second signal stops it at once: the array sbatch was sending is then
  found in the queue by its tag, if it got there.

  Attributes:
    executor: submitit's Slurm executor.
    manifest: the sweep's manifest.
    n_runs: the runs the sweep submits in all.
    arrays: the ids of the arrays submitted and recorded so far.
    runs_out: how many runs those submitted (the caller's `record` counts them).
    received: the signals received within `held`.
  """

  def __init__(self, executor, manifest: jobs.Manifest, n_runs: int):
    self.executor, self.manifest, self.n_runs = executor, manifest, n_runs
    self.arrays: List[str] = []  # array ids submitted
    self.runs_out = 0
    self.received: List[int] = []

  def _on_signal(self, signum, _):
    self.received.append(signum)
    if len(self.received) > 1:
      raise Interrupted(signum, f"while sbatch was running; {self.where()}")

  def held(self):
    """A context in which SIGNALS are held as the class says."""
    return _handlers(self._on_signal)

  def array(self, calls, tag_entries, record) -> list:
    """Submits the jobs `calls` as one array, tagged, and records it in the manifest.

    Args:
      calls: (job, keyword arguments) of each task; the tasks all run the first one's job.
      tag_entries: tag_entries(index) tags their planned entries and returns the tag
        (sbatch's --comment).
      record: record(jobs) records the submitted jobs in the manifest.

    Returns:
      The submitted jobs.

    Raises:
      Interrupted: a signal came while this array went out (after it is recorded).
      OSError: the manifest cannot be written.
      What submitit raises where sbatch fails; the files submitit left for the array
      are removed first.
    """
    logs = pathlib.Path(self.manifest.data["results_dir"]) / jobs.LOG_DIR
    before = _loose_files(logs)
    tag = tag_entries(len(self.arrays))
    self.executor.update_parameters(slurm_comment=tag)
    self._save("before submitting its next job array")
    try:
      array = self.executor.map_array(calls[0][0], [kwargs for _, kwargs in calls])
    except BaseException:
      for path in _loose_files(logs) - before:  # submitit's, for an array sbatch did not take
        path.unlink(missing_ok=True)
      raise
    record(array)
    array_id = str(array[0].job_id).split("_")[0]
    self._save(f"to record job array {array_id} (submitted: a rerun finds it in Slurm's "
               f"queue by its comment {tag})")
    self.arrays.append(array_id)
    if self.received:
      raise Interrupted(self.received[0], self.where())
    return array

  def _save(self, when: str) -> None:
    try:
      self.manifest.save()
    except OSError as e:
      raise OSError(e.errno, f"cannot write the sweep manifest {self.manifest.path} {when}: "
                    f"{e.strerror}; {self.where()}") from None

  def where(self) -> str:
    """What has been submitted and recorded so far, and what a rerun does about the rest."""
    left = self.n_runs - self.runs_out
    recorded = (f"job array(s) {', '.join(self.arrays)} recorded in {self.manifest.path}"
                if self.arrays else "no job array recorded")
    return recorded + (f"; {left} of {self.n_runs} runs not submitted: run the same command "
                       "again to submit them (it skips what is queued or running)"
                       if left else "; every run was submitted")


def _loose_files(folder: pathlib.Path) -> set:
  """The plain files at the top of `folder`: where submitit keeps an array's pickled
  calls and sbatch script until sbatch answers (then it moves them to the job's folder)."""
  try:
    return {p for p in folder.iterdir() if p.is_file() and not p.is_symlink()}
  except OSError:
    return set()


def on_slurm(executor, plan: Plan, manifest: jobs.Manifest,
             resources: cluster.SlurmResources) -> Tuple[Dict[str, str], List[Tuple[list, Any]]]:
  """Submits the plan to Slurm: stage 1 (the calibrations to make, one array), then stage 2.

  Signals are held as `Submission` says.

  Returns:
    (algorithm -> its calibration's task id, [(runs, their job)]).

  Raises:
    UsageError: sbatch refused a job array (unknown partition, account, limits, ...).
    Interrupted: a signal stopped the submission.
  """
  import submitit  # pylint: disable=g-import-not-at-top
  submission = Submission(executor, manifest, len(plan.todo))
  with submission.held():
    try:
      calibrations = submit_calibrations(submission, plan.calib_todo)
      return calibrations, submit_runs(submission, plan.todo, resources,
                                       _waits(plan, calibrations))
    except (subprocess.CalledProcessError, submitit.core.utils.FailedJobError) as e:
      if submission.received:  # the signal reached sbatch too
        raise Interrupted(submission.received[0], submission.where()) from None
      # sbatch refused the script (unknown partition, account, limits...).
      raise UsageError(f"sbatch refused the job array: {' '.join(str(e).split())}"
                       + (f"; {submission.where()}" if submission.arrays else "")) from None


def _waits(plan: Plan, calibrations: Dict[str, str]) -> Dict[str, str]:
  """Algorithm -> the calibration task its runs wait for: submitted now, or in flight."""
  return dict({alg: s.job_id for alg, s in plan.calib_flying.items() if s.job_id},
              **calibrations)


def submit_calibrations(submission: Submission,
                        calibs: Sequence[sweep_spec.Calibration]) -> Dict[str, str]:
  """Submits the calibrations `calibs` as one array, a task per algorithm.

  Returns:
    Algorithm -> its task's job id; {} where there is none.
  """
  if not calibs:
    return {}
  manifest = submission.manifest
  array = submission.array(
      [c.job_call() for c in calibs],
      lambda index: manifest.tag(index, [], calibs),
      lambda array: [manifest.add_calibration(c, job) for c, job in zip(calibs, array)])
  return {c.algorithm: str(j.job_id) for c, j in zip(calibs, array)}


def submit_runs(submission: Submission, todo: Sequence[sweep_spec.Run],
                resources: cluster.SlurmResources, after: Dict[str, str]) -> List[Tuple[list, Any]]:
  """Submits the runs' jobs: one array per calibration task they wait for, one for the others.

  Each array is split at cluster.MAX_ARRAY_SIZE tasks.  Runs that wait go with
  `--dependency=afterok:<task>` and `--kill-on-invalid-dep=yes`: a failed calibration
  cancels them.

  Args:
    submission: the sweep's submission.
    todo: the runs to submit.
    resources: the sweep's resources (their additional sbatch parameters are kept).
    after: algorithm -> the calibration task its runs wait for.

  Returns:
    [(runs, their job)] of each job submitted.
  """
  executor, manifest = submission.executor, submission.manifest
  extra = resources.executor_params()["slurm_additional_parameters"]
  by_dependency: Dict[Optional[str], list] = {}
  for group in sweep_spec.job_groups(todo):
    by_dependency.setdefault(after.get(group[0].algorithm), []).append(group)
  submitted = []
  for dependency, groups in by_dependency.items():
    # A failed calibration cancels its algorithm's runs (Slurm would otherwise keep
    # them pending forever with DependencyNeverSatisfied).
    executor.update_parameters(slurm_additional_parameters=dict(
        extra, **({"dependency": f"afterok:{dependency}", "kill-on-invalid-dep": "yes"}
                  if dependency else {})))
    for start in range(0, len(groups), cluster.MAX_ARRAY_SIZE):
      chunk = groups[start:start + cluster.MAX_ARRAY_SIZE]

      def record(array, chunk=chunk, dependency=dependency):
        for group, job in zip(chunk, array):
          for run in group:
            manifest.add(run, job, after=dependency)
        submission.runs_out += sum(len(g) for g in chunk)

      array = submission.array([sweep_spec.job_call(g) for g in chunk],
                               lambda index, chunk=chunk: manifest.tag(index, chunk), record)
      submitted += list(zip(chunk, array))
  executor.update_parameters(slurm_additional_parameters=extra)
  return submitted


def slurm_report(plan: Plan, calibrations: Dict[str, str], submitted, resources,
                 manifest: jobs.Manifest) -> List[str]:
  """The lines the sweep prints once its arrays are submitted (jobs, logs, results, status)."""
  lines = []
  if calibrations:
    arrays = sorted({j.split("_")[0] for j in calibrations.values()})
    lines.append(f"submitted {len(calibrations)} lambda calibrations as job array {arrays[0]}:")
    lines += [f"  {job_id:<12} calibrate/{alg}" for alg, job_id in calibrations.items()]
  todo, k = plan.todo, plan.runs[0].seeds_per_job
  array_ids = sorted({str(j.job_id).split("_")[0] for _, j in submitted})
  what = (f"{len(todo)} runs in {len(submitted)} multi-task jobs (one per seed)"
          if todo[0].multitask else
          f"{len(todo)} runs in {len(submitted)} jobs of up to {k} seeds" if k > 1
          else f"{len(submitted)} runs")
  lines.append(f"submitted {what} as job array {', '.join(array_ids)} ({resources.describe()})")
  waits = _waits(plan, calibrations)
  for group, job in submitted:
    dependency = waits.get(group[0].algorithm)
    lines.append(f"  {job.job_id:<12} {', '.join(r.name for r in group)}"
                 + (f"  (after {dependency})" if dependency else ""))
  results_dir = plan.runs[0].results_dir
  return lines + [
      f"logs:     {jobs.log_folder(results_dir)}  (%j = job id, e.g. {submitted[0][1].paths.stderr})",
      f"results:  {results_dir}/<model>/<algorithm>/seed<k>/result.json",
      f"manifest: {manifest.path}",
      f"status:   python launch/sweep.py --status --results {shlex.quote(str(results_dir))}"]


# -- here: one job at a time -------------------------------------------------------------


def run_here(executor, plan: Plan, manifest: jobs.Manifest, cluster_name: str) -> int:
  """Runs the plan here (local or debug): the calibrations, then each job, one at a time.

  Prints progress; a failed calibration fails its algorithm's runs, which are skipped.

  Returns:
    How many runs failed.

  Raises:
    Interrupted: a signal (or Ctrl-C) cancelled the job in flight.
  """
  failed = {}
  for i, c in enumerate(plan.calib_todo, 1):
    why = _run_one(executor, c.job_call(), lambda job, c=c: [manifest.add_calibration(c, job)],
                   f"[calibration {i}/{len(plan.calib_todo)}] {c.name}", manifest,
                   cluster_name, lambda _, c=c: _calibration_outcome(c))
    if why:
      failed[c.algorithm] = why
  todo = [r for r in plan.todo if r.algorithm not in failed]
  for r in plan.todo:
    if r.algorithm in failed:
      print(f"skip {r.name}: its lambda calibration failed: {failed[r.algorithm]}")
  failures = len(plan.todo) - len(todo)
  groups = sweep_spec.job_groups(todo)
  t_sweep = time.time()
  for i, group in enumerate(groups, 1):
    why = _run_one(executor, sweep_spec.job_call(group),
                   lambda job, g=group: [manifest.add(r, job) for r in g],
                   f"[{i}/{len(groups)}] {_group_name(group)}", manifest, cluster_name,
                   lambda paths, g=group: _outcome(paths, g), t_sweep)
    failures += len(group) if why else 0
  print(f"{len(plan.todo) - failures}/{len(plan.todo)} runs finished, {failures} failed; "
        f"results in {plan.runs[0].results_dir}")
  return failures


def _run_one(executor, call, record, name: str, manifest: jobs.Manifest, cluster_name: str,
             outcome, t_sweep: Optional[float] = None) -> Optional[str]:
  """Submit one job, `record` it in the manifest (its entries), wait for it and print
  how it went (`outcome` of its result: what to say, why it failed); why it failed."""
  t0 = time.time()
  job = executor.submit(call[0], call[1])
  records = record(job)
  manifest.save()
  where = f" (pid {job.job_id}, log {records[0]['stderr']})" if cluster_name == "local" else ""
  print(f"{name}: started{where}", flush=True)
  try:
    said, why = outcome(job.result())
  except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (signals_interrupt)
    executors.cancel(job)
    for r in records:
      r["outcome"] = "interrupted by the user"
    manifest.save()
    raise Interrupted(getattr(e, "signum", signal.SIGINT),
                      f"{name}: job {job.job_id} cancelled (a checkpoint resumes it); run "
                      "the same command again to go on") from None
  except Exception as e:  # pylint: disable=broad-except
    why = job_logs.summarize_exception(e, records[0]["stderr"])
    said = f"failed: {why}"
    for r in records:
      r["outcome"] = why
    manifest.save()
  finally:
    jobs.remove_literal_log_folder(manifest.data["results_dir"])
  elapsed = f" (sweep elapsed {time.time() - t_sweep:.1f}s)" if t_sweep is not None else ""
  print(f"{name}: {said} in {time.time() - t0:.1f}s{elapsed}", flush=True)
  return why


def _calibration_outcome(calib: sweep_spec.Calibration) -> Tuple[str, None]:
  rec = json.loads(calib.record_path.read_text())
  return (f"lambda = {rec['lambda']:.6g} (share {rec.get('share', 0):.3f}, "
          f"status {rec.get('status')})"), None


def _outcome(paths, group) -> Tuple[str, Optional[str]]:
  """(what a finished job's results say, why it failed or None)."""
  paths = [paths] if isinstance(paths, str) else list(paths or [])
  if not paths or any(not pathlib.Path(p).exists() for p in paths):
    return "failed: no result.json written", "no result.json written"
  run, said = group[0], []
  for path in paths:
    res = json.loads(pathlib.Path(path).read_text())
    prefix = (f"{res.get('algorithm')}: " if run.multitask else
              f"seed{res.get('seed')}: " if run.seeds_per_job > 1 else "")
    said.append(prefix + f"{res.get('status')} (steps {res.get('steps')}, "
                f"test_score {res.get('test_score')})")
  return "; ".join(said), None


def _group_name(group) -> str:
  """What one job trains, for progress lines."""
  run = group[0]
  if run.multitask:
    return f"{run.model}/seed{run.seed} ({len(run.job_algorithms)} algorithms)"
  if run.seeds_per_job > 1:
    return (f"{run.model}/{run.algorithm}/seeds {','.join(str(r.seed) for r in group)} "
            f"({len(group)} seeds in one job)")
  return run.name
