"""What became of a sweep's runs: done / diverged / running / failed / missing.

Sources, in order of authority:
  1. ``<run_dir>/result.json``, judged by nar_markov.runs.check_result (the
     same test the sweep and the trainer use): done / diverged; corrupt (the
     next sweep moves it aside and trains the run again); other (made with
     other settings than the gin files given: the sweep refuses it until
     `--archive-mismatched`).  Without gin files only the result itself is
     checked (no settings to compare with).
  2. The sweep manifests ``<results>/_sweeps/<timestamp>.json`` written by
     launch/sweep.py: which job (id, log files) last ran each run.
  3. For that job: ``squeue`` (Slurm: pending or running), the process table
     (local jobs), and submitit's ``<id>_<task>_result.pkl`` (the job ended,
     with the traceback when it raised).
A run a sweep has planned but not submitted yet (the manifest is written
before submission) is "running" while that sweep's process lives.
A run with a job that is neither queued nor has a result is "failed" (killed
by a time/memory limit, scancel, a node failure...); its log says why.
``sacct`` is not used: it needs a Slurm accounting database, which many
small clusters (and the CI one, launch/local_slurm.sh) do not run.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

MANIFEST_DIR = "_sweeps"
LOG_DIR = "_logs"
MANIFEST_SCHEMA = "nar_markov.sweep/1"
STATES = ("done", "diverged", "running", "failed", "missing", "corrupt", "other")
_RUN_RE = re.compile(r"^seed(\d+)$")


@dataclasses.dataclass
class RunStatus:
  model: str
  algorithm: str
  seed: int
  state: str                      # one of STATES
  detail: str = ""                # job state, error line, ...
  job_id: Optional[str] = None
  log: Optional[str] = None       # stderr log of the last job

  @property
  def name(self) -> str:
    return f"{self.model}/{self.algorithm}/seed{self.seed}"


# -- manifests -----------------------------------------------------------------


def manifest_dir(results_dir) -> pathlib.Path:
  return pathlib.Path(results_dir) / MANIFEST_DIR


def read_manifests(results_dir) -> List[dict]:
  """All sweep manifests, oldest first (file names are sortable timestamps)."""
  out = []
  for path in sorted(manifest_dir(results_dir).glob("*.json")):
    try:
      m = json.loads(path.read_text())
    except (OSError, ValueError) as e:
      print(f"warning: unreadable sweep manifest {path}: {e}", file=sys.stderr)
      continue
    if m.get("schema") == MANIFEST_SCHEMA:
      m["_path"] = str(path)
      out.append(m)
  return out


def latest_jobs(manifests: Sequence[dict]) -> Dict[Tuple[str, str, int], dict]:
  """(model, algorithm, seed) -> the last job entry that ran it (+ its cluster,
  and the sweep process that wrote it)."""
  jobs = {}
  for m in manifests:
    for j in m.get("jobs", []):
      jobs[(j["model"], j["algorithm"], int(j["seed"]))] = dict(
          j, cluster=m.get("cluster"), manifest=m["_path"], sweep=m.get("sweep"))
  return jobs


# -- the sweep process: planned entries are in flight while it lives -------------


def _start_time(pid: int) -> Optional[str]:
  try:
    stat = pathlib.Path(f"/proc/{int(pid)}/stat").read_text()
  except (OSError, ValueError):
    return None
  return stat.rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks


def process_token() -> dict:
  """This process, recognisably: pid, host and start time (pids are reused)."""
  return {"pid": os.getpid(), "host": socket.gethostname(),
          "start": _start_time(os.getpid())}


def process_alive(token: Optional[dict]) -> bool:
  if not token or token.get("host") != socket.gethostname():
    return False
  start = _start_time(token.get("pid", -1))
  return start is not None and start == token.get("start")


def planned_state(job: dict) -> Optional[str]:
  """For an entry planned but not yet submitted (no job id): 'queued by ...' while
  its sweep lives, None once the sweep has ended without submitting it."""
  if process_alive(job.get("sweep")):
    return f"queued by sweep pid {job['sweep']['pid']} (not submitted yet)"
  return None


# -- asking the scheduler ------------------------------------------------------


class SchedulerUnavailable(RuntimeError):
  pass


def squeue_states(job_ids: Iterable[str]) -> Dict[str, str]:
  """Array-task or job id -> Slurm state, for jobs still known to squeue.

  Raises SchedulerUnavailable when squeue is missing or fails (controller
  down): then nothing can be said about unfinished runs.
  """
  base_ids = sorted({str(j).split("_")[0] for j in job_ids if j})
  if not base_ids:
    return {}
  if shutil.which("squeue") is None:
    raise SchedulerUnavailable("squeue is not on PATH")
  # -r: one line per array task, also for pending tasks ("12_[3-9]" otherwise).
  cmd = ["squeue", "-h", "-r", "-o", "%i|%T", "-j", ",".join(base_ids)]
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                        check=False)
  if proc.returncode != 0:
    # squeue exits 1 with "Invalid job id specified" when every id has aged out.
    if "Invalid job id" in proc.stderr:
      return {}
    raise SchedulerUnavailable(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
  states = {}
  for line in proc.stdout.splitlines():
    if "|" in line:
      jid, state = line.strip().split("|", 1)
      states[jid] = state
  return states


def local_job_alive(job_id: str) -> bool:
  """A local submitit job's id is its controller's pid."""
  try:
    cmdline = pathlib.Path(f"/proc/{int(job_id)}/cmdline").read_bytes()
  except (OSError, ValueError):
    return False
  return b"submitit" in cmdline


# submitit's own log lines (submitit/core/submission.py) when a job ends; on an
# exception Python then prints the traceback below them.
_SUBMITIT_SUCCESS = "Job completed successfully"
_SUBMITIT_ERROR = "Submitted job triggered an exception"


def _submitit_outcome(job: dict) -> Optional[Tuple[str, str]]:
  """('success'|'error', text) of an ended job, from submitit's lines in its
  stderr log; None if it says neither.  Text only: submitit's result pickle
  is never loaded (a results folder may be shared; a pickle executes code)."""
  path = job.get("stderr")
  if not path or not os.path.exists(path):
    return None
  with open(path, "rb") as f:
    f.seek(max(0, os.path.getsize(path) - 65536))
    text = f.read().decode("utf-8", "replace")
  if _SUBMITIT_ERROR in text:
    return "error", text.rsplit(_SUBMITIT_ERROR, 1)[1]
  if _SUBMITIT_SUCCESS in text:
    return "success", text.rsplit(_SUBMITIT_SUCCESS, 1)[1].strip()[:200]
  return None


def _last_error_line(traceback_text: str) -> str:
  lines = [l.strip() for l in traceback_text.strip().splitlines() if l.strip()]
  return lines[-1] if lines else "error"


# -- classifying runs ----------------------------------------------------------


def runs_on_disk(results_dir) -> List[Tuple[str, str, int]]:
  """(model, algorithm, seed) of every run folder under results_dir."""
  root = pathlib.Path(results_dir)
  found = []
  for seed_dir in root.glob("*/*/seed*"):
    model, algorithm = seed_dir.parent.parent.name, seed_dir.parent.name
    m = _RUN_RE.match(seed_dir.name)
    if m and seed_dir.is_dir() and not model.startswith(("_", ".")):
      found.append((model, algorithm, int(m.group(1))))
  return found


def classify(results_dir, expected=None) -> Tuple[List[RunStatus], List[str]]:
  """Status of every expected run (default: every run on disk or in a manifest).

  `expected`: run keys (model, algorithm, seed), or a mapping key -> the
  run's definition (cluster.expected_definitions: then a result made with
  other settings is "other"), or None.
  Returns (statuses sorted by model/algorithm/seed, warnings).
  """
  from nar_markov import runs as runs_lib  # pylint: disable=g-import-not-at-top  (no jax)
  results_dir = pathlib.Path(results_dir)
  jobs = latest_jobs(read_manifests(results_dir))
  if expected is None:
    expected = sorted(set(runs_on_disk(results_dir)) | set(jobs))
  definitions = expected if isinstance(expected, dict) else {}
  warnings = []

  pending_slurm = []
  statuses = {}
  for key in expected:
    model, algorithm, seed = key
    verdict = runs_lib.check_result(runs_lib.run_dir(results_dir, model, algorithm, seed),
                                    definitions.get(key))
    job = jobs.get(key)
    log = job.get("stderr") if job else None
    job_id = job.get("job_id") if job else None
    if verdict.state != "missing":
      statuses[key] = RunStatus(*key, verdict.state, verdict.detail, job_id, log)
    elif job is None:
      statuses[key] = RunStatus(*key, "missing", "never submitted")
    elif not job_id:
      planned = planned_state(job)
      statuses[key] = (RunStatus(*key, "running", planned, None, None) if planned else
                       RunStatus(*key, "missing", "planned by a sweep that ended before "
                                 f"submitting it ({job.get('manifest')})"))
    elif job.get("cluster") == "slurm":
      pending_slurm.append(key)
    elif job.get("cluster") == "local" and job_id and local_job_alive(job_id):
      statuses[key] = RunStatus(*key, "running", "local process", job_id, log)
    else:
      statuses[key] = _ended_without_result(key, job)

  if pending_slurm:
    try:
      queue = squeue_states(jobs[k]["job_id"] for k in pending_slurm)
    except SchedulerUnavailable as e:
      queue = None
      warnings.append(f"cannot ask Slurm about {len(pending_slurm)} unfinished "
                      f"run(s): {e}; they are listed as failed only if their "
                      "job wrote an error")
    for key in pending_slurm:
      job = jobs[key]
      state = None if queue is None else queue.get(str(job["job_id"]))
      if state is not None:
        statuses[key] = RunStatus(*key, "running", state.lower(), job["job_id"],
                                  job.get("stderr"))
      elif queue is None and _submitit_outcome(job) is None:
        statuses[key] = RunStatus(*key, "running", "unknown (Slurm unavailable)",
                                  job["job_id"], job.get("stderr"))
      else:
        statuses[key] = _ended_without_result(key, job)
  ordered = [statuses[k] for k in sorted(statuses)]
  return ordered, warnings


# slurmstepd's own word on a killed job, e.g.
#   slurmstepd-vm: error: *** JOB 13 ON vm CANCELLED AT 2026-11-21T12:19:01 DUE TO TIME LIMIT ***
#   slurmstepd-vm: error: Detected 1 oom_kill event in StepId=13.0...
_SLURM_VERDICT_RE = re.compile(r"slurmstepd\S*: error: (\*\*\* .* \*\*\*|.*oom.kill.*)",
                               re.IGNORECASE)


def _slurm_verdict(log_path: Optional[str]) -> Optional[str]:
  if not log_path:
    return None
  try:
    text = pathlib.Path(log_path).read_text(errors="replace")
  except OSError:
    return None
  found = _SLURM_VERDICT_RE.findall(text)
  return found[-1].strip() if found else None


def _ended_without_result(key, job: dict) -> RunStatus:
  outcome = _submitit_outcome(job)
  if outcome is None:
    verdict = _slurm_verdict(job.get("stderr"))
    detail = job.get("outcome") or (
        f"job ended without a result: {verdict}" if verdict else
        "job ended without a result (killed: time or memory limit, scancel, node failure?)")
  elif outcome[0] == "error":
    detail = _last_error_line(outcome[1])
  else:
    detail = "job finished but wrote no result.json"
  return RunStatus(*key, "failed", detail, job.get("job_id"), job.get("stderr"))


# -- report --------------------------------------------------------------------


def summarize(statuses: Sequence[RunStatus]) -> Dict[Tuple[str, str], Dict[str, int]]:
  table = collections.OrderedDict()
  for s in statuses:
    row = table.setdefault((s.model, s.algorithm), dict.fromkeys(STATES, 0))
    row[s.state] += 1
  return table


def calibration_report(results_dir) -> List[str]:
  """Stage 1 of G-ForgetNet sweeps: each lambda calibration's record or last job.

  done: a valid record; calibrating: its job is queued/running; failed: its
  job ended without a record (the log says why); unusable: a record that
  does not read back.
  """
  from nar_markov import lambda_heuristic  # pylint: disable=g-import-not-at-top  (no jax)
  records = lambda_heuristic.read_records(results_dir)
  jobs = {}
  for m in read_manifests(results_dir):
    for j in m.get("calibration_jobs", []):
      jobs[(j.get("reading"), j.get("algorithm"))] = dict(j, cluster=m.get("cluster"),
                                                          sweep=m.get("sweep"))
  if not records and not jobs:
    return []
  queue = {}
  slurm_ids = [j["job_id"] for k, j in jobs.items() if k not in records
               and j["cluster"] == "slurm" and j.get("job_id")]
  if slurm_ids:
    try:
      queue = squeue_states(slurm_ids)
    except SchedulerUnavailable:
      queue = {}
  lines = ["", "lambda calibrations (stage 1 of G-ForgetNet sweeps):"]
  for key in sorted(set(records) | set(jobs)):
    reading, alg = key
    rec, job = records.get(key), jobs.get(key)
    if isinstance(rec, Exception):
      state = f"unusable: {rec}"
    elif rec is not None:
      state = (f"done: lambda = {rec['lambda']:.6g}, share {rec.get('share', float('nan')):.3f} "
               f"at step {rec['calibration_step']}, seeds {[x['seed'] for x in rec['seeds']]}, "
               f"{rec.get('status')}")
    elif not job.get("job_id"):
      state = ("calibrating: " + planned_state(job) if planned_state(job) else
               "failed: planned by a sweep that ended before starting it")
    elif job["cluster"] == "slurm" and str(job["job_id"]) in queue:
      state = f"calibrating: job {job['job_id']} {queue[str(job['job_id'])].lower()}"
    elif job["cluster"] == "local" and local_job_alive(str(job["job_id"])):
      state = f"calibrating: local job {job['job_id']}"
    else:
      outcome = _submitit_outcome(job)
      why = _last_error_line(outcome[1]) if outcome and outcome[0] == "error" else (
          job.get("outcome") or "ended without a record")
      state = f"failed: job {job['job_id']} ({why}); log {job.get('stderr')}"
    lines.append(f"  {reading:<9} {alg:<30} {state}")
  return lines


def format_report(results_dir, statuses: Sequence[RunStatus],
                  warnings: Sequence[str] = ()) -> str:
  table = summarize(statuses)
  lines = [f"results: {pathlib.Path(results_dir).resolve()}"]
  if not statuses:
    lines.append("no runs found (no result folders, no sweep manifests)")
    return "\n".join(lines + calibration_report(results_dir)
                     + [f"warning: {w}" for w in warnings])
  w_model = max([len("model")] + [len(m) for m, _ in table])
  w_alg = max([len("algorithm")] + [len(a) for _, a in table])
  header = f"{'model':<{w_model}}  {'algorithm':<{w_alg}}" + "".join(
      f" {s:>8}" for s in STATES)
  lines += [header, "-" * len(header)]
  totals = dict.fromkeys(STATES, 0)
  for (model, algorithm), row in table.items():
    lines.append(f"{model:<{w_model}}  {algorithm:<{w_alg}}" + "".join(
        f" {row[s]:>8}" for s in STATES))
    for s in STATES:
      totals[s] += row[s]
  lines.append("-" * len(header))
  lines.append(f"{'total':<{w_model}}  {'':<{w_alg}}" + "".join(
      f" {totals[s]:>8}" for s in STATES))
  invalid = [s for s in statuses if s.state in ("corrupt", "other")]
  if invalid:
    lines.append("")
    lines.append("results that do not count as done (corrupt: the next sweep moves it "
                 "aside and trains the run again; other: made with other settings, "
                 "the sweep refuses until --archive-mismatched):")
    for s in invalid:
      lines.append(f"  {s.name}  {s.state}: {s.detail}")
  failed = [s for s in statuses if s.state == "failed"]
  if failed:
    lines.append("")
    lines.append("failed runs (last job, its log, the error):")
    for s in failed:
      lines.append(f"  {s.name}  job {s.job_id}  log {s.log}")
      lines.append(f"      {s.detail}")
  running = [s for s in statuses if s.state == "running"]
  if running:
    lines.append("")
    lines.append("running/pending: " + ", ".join(
        f"{s.name} ({s.job_id} {s.detail})" for s in running))
  lines += calibration_report(results_dir)
  lines += [f"warning: {w}" for w in warnings]
  return "\n".join(lines)
