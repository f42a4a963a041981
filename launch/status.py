"""What became of a sweep's runs: done, diverged, running, failed, missing, corrupt, other.

`survey` is what the sweep plans from and what --status reports: each run's result
(nar_markov.store.runs.check_result), its checkpoint
(nar_markov.store.state_files.check_checkpoint, where the settings are known) and its last
job (launch/jobs.py).  Imports no jax.
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from launch import jobs
from launch import sweep_spec
from nar_markov.store import runs
from nar_markov.store import state_files

STATES = ("done", "diverged", "running", "failed", "missing", "corrupt", "other")
# A job's phase (jobs.JobState) as a run's state; never submitted: missing.
_BY_PHASE = {"queued": "running", "unknown": "running", "ended": "failed"}


@dataclasses.dataclass(frozen=True)
class RunView:
  """One run as it stands (`survey`).

  Attributes:
    run: the run.
    result: its result's verdict (runs.check_result).
    checkpoint: its checkpoint's verdict, looked at where the result is missing and the
      settings are known; else None.
    job: its last job's state; None: never submitted (or the result is there).
  """
  run: sweep_spec.Run
  result: runs.Verdict
  checkpoint: Optional[runs.Verdict] = None
  job: Optional[jobs.JobState] = None

  model = property(lambda self: self.run.model)
  algorithm = property(lambda self: self.run.algorithm)
  seed = property(lambda self: self.run.seed)
  name = property(lambda self: self.run.name)
  job_id = property(lambda self: self.job.job_id if self.job else None)
  log = property(lambda self: self.job.log if self.job else None)

  @property
  def other_checkpoint(self) -> bool:
    """Whether it has a checkpoint its job would refuse (written with other settings)."""
    return self.checkpoint is not None and self.checkpoint.state == "other"

  @property
  def state(self) -> str:
    """One of STATES.

    The result's state unless it is missing; then 'other' for a checkpoint made with
    other settings, else from the last job: 'running' (queued, or unknown), 'failed'
    (ended), 'missing' (none, or never submitted).
    """
    if self.result.state != "missing":
      return self.result.state
    if self.other_checkpoint:
      return "other"
    return _BY_PHASE.get(self.job.phase if self.job else "", "missing")

  @property
  def detail(self) -> str:
    """The state in words: the result's, the checkpoint's or the job's detail."""
    if self.result.state != "missing":
      return self.result.detail
    if self.other_checkpoint:
      return self.checkpoint.detail
    return self.job.detail if self.job else "never submitted"


def survey(results_dir, sweep_runs: Sequence[sweep_spec.Run],
           expected: Optional[Mapping] = None) -> Tuple[List[RunView], List[str]]:
  """Each run of `sweep_runs` as it stands, the scheduler asked once.

  Args:
    results_dir: the results folder (its sweep manifests name the runs' jobs).
    sweep_runs: the runs.
    expected: run key -> the definition its result must have
      (sweep_spec.expected_definitions; then results and checkpoints made with other
      settings are "other"), or None: the result alone is checked, no checkpoint.

  Returns:
    (a RunView per run, in order; warnings: the scheduler could not be asked).
  """
  results = {r.key: runs.check_result(r.run_dir, (expected or {}).get(r.key))
             for r in sweep_runs}
  unfinished = [r for r in sweep_runs if results[r.key].state == "missing"]
  last, _ = jobs.last_jobs(results_dir)
  states, warnings = jobs.states({r.key: last[r.key] for r in unfinished if r.key in last})
  checkpoints = {}
  if expected:
    for r in unfinished:
      checkpoints[r.key] = state_files.check_checkpoint(
          r.checkpoint_folder, [expected[(r.model, a, r.seed)] for a in r.trained_with])
  return [RunView(r, results[r.key], checkpoints.get(r.key), states.get(r.key))
          for r in sweep_runs], warnings


_RUN_FOLDER = re.compile(r"^seed(\d+)$")


def runs_on_disk(results_dir) -> List[Tuple[str, str, int]]:
  """(model, algorithm, seed) of every run folder under `results_dir`.

  A run folder is `<model>/<algorithm>/seed<k>`; model folders starting with '_' or '.'
  hold no runs.
  """
  found = []
  for seed_dir in pathlib.Path(results_dir).glob("*/*/seed*"):
    model, algorithm = seed_dir.parent.parent.name, seed_dir.parent.name
    m = _RUN_FOLDER.match(seed_dir.name)
    if m and seed_dir.is_dir() and not model.startswith(("_", ".")):
      found.append((model, algorithm, int(m.group(1))))
  return found


def classify(results_dir, sweep_runs: Optional[Sequence[sweep_spec.Run]] = None,
             expected: Optional[Mapping] = None) -> Tuple[List[RunView], List[str]]:
  """`survey` of `sweep_runs`, sorted by model, algorithm and seed.

  Without `sweep_runs`: of every run on disk or in a sweep manifest of `results_dir`, the
  result alone checked (unless `expected` is given).
  """
  if sweep_runs is None:
    keys = set(runs_on_disk(results_dir)) | set(jobs.last_jobs(results_dir)[0])
    sweep_runs = [sweep_spec.Run(*key, gin_files=(), gin_params=(), results_dir=str(results_dir))
                  for key in keys]
  views, warnings = survey(results_dir, sweep_runs, expected)
  return sorted(views, key=lambda v: v.run.key), warnings


# -- the report ------------------------------------------------------------------------


def summarize(views: Sequence[RunView]) -> Dict[Tuple[str, str], Dict[str, int]]:
  """(model, algorithm) -> state -> how many runs, in first-appearance order."""
  table = collections.OrderedDict()
  for v in views:
    row = table.setdefault((v.model, v.algorithm), dict.fromkeys(STATES, 0))
    row[v.state] += 1
  return table


def calibration_report(results_dir) -> Tuple[List[str], List[str]]:
  """Stage 1 of G-ForgetNet sweeps on `results_dir`: a line per λ calibration.

  Each calibration's record (done, or unusable: it does not read back) or, for one
  without a record, its last job (calibrating; failed, with why and its log).

  Returns:
    (lines, none where there is neither record nor job; warnings of the scheduler).
  """
  from nar_markov.config import calibration_records  # pylint: disable=g-import-not-at-top  (no jax)
  records = {str(calibration_records.calibration_root(results_dir) / reading / f"{alg}.json"):
             (reading, alg, rec)
             for (reading, alg), rec in calibration_records.read_records(results_dir).items()}
  _, last = jobs.last_jobs(results_dir)
  states, warnings = jobs.states({p: j for p, j in last.items() if p not in records})
  if not records and not states:
    return [], warnings
  lines = ["", "lambda calibrations (stage 1 of G-ForgetNet sweeps):"]
  rows = list(records.values()) + [
      (str(last[p].get("reading")), str(last[p].get("algorithm")), state)
      for p, state in states.items()]
  for reading, alg, what in sorted(rows, key=lambda row: row[:2]):
    lines.append(f"  {reading:<9} {alg:<30} {_calibration_state(what)}")
  return lines, warnings


def _calibration_state(what) -> str:
  if isinstance(what, Exception):
    return f"unusable: {what}"
  if isinstance(what, jobs.JobState):
    if what.in_flight or what.phase == "unknown":
      return f"calibrating: {what.detail}"
    if what.phase == "never submitted":
      return "failed: planned by a sweep that ended before starting it"
    return f"failed: job {what.job_id} ({what.detail}); log {what.log}"
  return (f"done: lambda = {what['lambda']:.6g}, share {what.get('share', float('nan')):.3f} "
          f"at step {what['calibration_step']}, seeds {[x['seed'] for x in what['seeds']]}, "
          f"{what.get('status')}")


def format_report(results_dir, views: Sequence[RunView], warnings: Sequence[str] = ()) -> str:
  """The --status report: the table of states per model x algorithm, the runs that need a
  word (corrupt, other, failed, running), the calibrations and the warnings."""
  calibrations, more = calibration_report(results_dir)
  lines = [f"results: {pathlib.Path(results_dir).resolve()}"]
  if not views:
    lines.append("no runs found (no result folders, no sweep manifests)")
  else:
    lines += _table(summarize(views))
    lines += _runs_needing_a_word(views)
  return "\n".join(lines + calibrations + [f"warning: {w}" for w in list(warnings) + more])


def _table(table) -> List[str]:
  w_model = max([len("model")] + [len(m) for m, _ in table])
  w_alg = max([len("algorithm")] + [len(a) for _, a in table])
  header = f"{'model':<{w_model}}  {'algorithm':<{w_alg}}" + "".join(f" {s:>8}" for s in STATES)
  lines = [header, "-" * len(header)]
  totals = dict.fromkeys(STATES, 0)
  for (model, algorithm), row in table.items():
    lines.append(f"{model:<{w_model}}  {algorithm:<{w_alg}}"
                 + "".join(f" {row[s]:>8}" for s in STATES))
    for s in STATES:
      totals[s] += row[s]
  return lines + ["-" * len(header), f"{'total':<{w_model}}  {'':<{w_alg}}"
                  + "".join(f" {totals[s]:>8}" for s in STATES)]


def _runs_needing_a_word(views: Sequence[RunView]) -> List[str]:
  lines = []
  invalid = [v for v in views if v.state in ("corrupt", "other")]
  if invalid:
    lines += ["", "results that do not count as done (corrupt: the next sweep moves it "
              "aside and trains the run again; other: a result or checkpoint made with "
              "other settings, the sweep refuses until --archive-mismatched):"]
    lines += [f"  {v.name}  {v.state}: {v.detail}" for v in invalid]
  failed = [v for v in views if v.state == "failed"]
  if failed:
    lines += ["", "failed runs (last job, its log, the error):"]
    for v in failed:
      lines += [f"  {v.name}  job {v.job_id}  log {v.log}", f"      {v.detail}"]
  running = [v for v in views if v.state == "running"]
  if running:
    lines += ["", "running/pending: " + ", ".join(f"{v.name} ({v.detail})" for v in running)]
  return lines
