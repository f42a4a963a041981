"""What a sweep's jobs are doing: the one place that asks.

A sweep writes a manifest (`Manifest`) of the job that runs each run and each
λ calibration; `states` then answers, for the sweep and for --status alike,
whether that job is queued or running (the scheduler), or why it ended (its own
error log).  Imports no jax.  Details: docs/running.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import pathlib
import socket
import stat
import sys
from typing import Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

from launch import job_logs
from launch import slurm_queue
from nar_markov.store import runs

MANIFEST_DIR = "_sweeps"
LOG_DIR = "_logs"
MANIFEST_SCHEMA = "nar_markov.sweep/1"


def log_folder(results_dir) -> pathlib.Path:
  """submitit's folder for the sweep's jobs, `<results>/_logs/%j` (%j: the job id)."""
  return pathlib.Path(results_dir) / LOG_DIR / "%j"


def remove_literal_log_folder(results_dir) -> None:
  """Removes the empty `<results>/_logs/%j` that submitit's local controller makes.

  It makes its folder as named, `%j` and all, and no job writes to it (each job's logs
  are in `_logs/<id>/`).  A folder that is gone or not empty is left alone, silently.
  """
  with contextlib.suppress(OSError):  # gone already, or (never seen) not empty
    (pathlib.Path(results_dir) / LOG_DIR / "%j").rmdir()


def private_log_dir(results_dir) -> pathlib.Path:
  """`<results>/_logs`, made where missing and private to this user (0700).

  Jobs unpickle what is in it, so whoever can write there runs code in them.

  Raises:
    PermissionError: the folder belongs to someone else.
  """
  folder = pathlib.Path(results_dir) / LOG_DIR
  folder.mkdir(mode=0o700, parents=True, exist_ok=True)
  if stat.S_IMODE(folder.stat().st_mode) != 0o700:
    os.chmod(folder, 0o700)
  return folder


# -- the sweep process: planned entries are in flight while it lives ------------------


def stat_fields(pid) -> Optional[List[str]]:
  """/proc/<pid>/stat's fields after `pid (comm)`: field 3, the state, first.

  comm may hold spaces and parentheses, so the fields are split after its last ')'.

  Returns:
    The fields, or None where there is no such process (or no /proc, or `pid` is not an
    integer).
  """
  try:
    text = pathlib.Path(f"/proc/{int(pid)}/stat").read_text()
  except (OSError, ValueError):
    return None
  return text.rsplit(")", 1)[1].split()


def _start_time(pid: int) -> Optional[str]:
  fields = stat_fields(pid)
  return None if fields is None else fields[19]  # field 22: start time in clock ticks


def process_token() -> dict:
  """This process, recognisably: pid, host and start time (pids are reused)."""
  return {"pid": os.getpid(), "host": socket.gethostname(),
          "start": _start_time(os.getpid())}


def process_alive(token: Optional[dict]) -> bool:
  """Whether the process of `token` (`process_token`) still runs, on this host.

  False for an empty token or another host's, and where the pid now names a process
  that started at another time.
  """
  if not token or token.get("host") != socket.gethostname():
    return False
  start = _start_time(token.get("pid", -1))
  return start is not None and start == token.get("start")


def local_job_alive(job_id: str) -> bool:
  """Whether the local submitit job `job_id` still runs.

  A local submitit job's id is its controller's pid: alive while that process exists and
  its command line names submitit.
  """
  try:
    cmdline = pathlib.Path(f"/proc/{int(job_id)}/cmdline").read_bytes()
  except (OSError, ValueError):
    return False
  return b"submitit" in cmdline


# -- manifests ----------------------------------------------------------------------------


def _paths(job) -> dict:
  return {"job_id": str(job.job_id), "stdout": str(job.paths.stdout),
          "stderr": str(job.paths.stderr), "result_pickle": str(job.paths.result_pickle)}


class Manifest:
  """`<results>/_sweeps/<timestamp>.json`: the jobs one sweep submitted.

  The sweep saves it before it submits (its runs and calibrations planned, `plan`), then
  with their job ids (`add`, `add_calibration`).  On Slurm each array is tagged before
  its sbatch (`tag`: its entries name the tag and their task; the array carries it as
  its comment) and recorded after it, before the next: should the sweep die in between,
  `states` finds the array in the queue by it.  Planned entries (no job id yet) count as
  in flight while the sweep process that made the manifest lives.

  Attributes:
    path: the manifest's file.
    data: its content, as `save` writes it.
  """

  def __init__(self, results_dir, cluster_name: str, gin_files, gin_params, argv):
    """A new manifest of this process's sweep; makes `<results>/_sweeps`, writes nothing.

    Args:
      results_dir: the sweep's results folder.
      cluster_name: the cluster its jobs run on ('slurm', 'local', ...).
      gin_files, gin_params, argv: the sweep's gin files, bindings and command line,
        recorded as they are.
    """
    now = datetime.datetime.now()
    folder = pathlib.Path(results_dir) / MANIFEST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    self.path = folder / f"{now.strftime('%Y%m%d-%H%M%S-%f')}.json"
    self.data = {"schema": MANIFEST_SCHEMA, "created": now.isoformat(timespec="seconds"),
                 "cluster": cluster_name, "argv": list(argv), "gin_files": list(gin_files),
                 "gin_params": list(gin_params), "results_dir": str(results_dir),
                 "log_folder": str(log_folder(results_dir)), "jobs": [],
                 "calibration_jobs": [],
                 # Planned entries (no job id yet) are in flight while this lives.
                 "sweep": process_token()}

  def plan(self, todo, calibs=()) -> None:
    """Records the runs and calibrations about to be submitted, without job ids.

    Once saved, a second sweep on this folder sees them as queued while this one lives.

    Args:
      todo: the runs (with model, algorithm, seed, run_dir).
      calibs: the calibrations (with algorithm, reading, record_path).
    """
    for c in calibs:
      self.data["calibration_jobs"].append({"algorithm": c.algorithm, "reading": c.reading,
                                            "record": str(c.record_path), "job_id": None})
    for r in todo:
      self.data["jobs"].append({"model": r.model, "algorithm": r.algorithm, "seed": r.seed,
                                "run_dir": str(r.run_dir), "job_id": None})

  def tag(self, index: int, runs_by_task: Sequence[Sequence], calibrations=()) -> str:
    """Tags the planned entries of the array about to be submitted (the sweep's `index`-th).

    Each planned entry (no job id yet) of the array's runs or calibrations gets the tag
    and its task.

    Args:
      index: the array's number in this sweep.
      runs_by_task: task i runs `runs_by_task[i]`.
      calibrations: or task i calibrates `calibrations[i]`.

    Returns:
      The tag, for sbatch's --comment: it names this manifest and the array.
    """
    digest = hashlib.sha1(str(self.path.resolve()).encode()).hexdigest()[:12]
    tag = f"nar_markov-{digest}-{index}"
    for task, group in enumerate(runs_by_task):
      keys = {r.key for r in group}
      for e in self.data["jobs"]:
        if not e.get("job_id") and _run_key(e) in keys:
          e.update(submission=tag, task=task)
    records = {str(c.record_path): task for task, c in enumerate(calibrations)}
    for e in self.data["calibration_jobs"]:
      if not e.get("job_id") and e.get("record") in records:
        e.update(submission=tag, task=records[e["record"]])
    return tag

  @staticmethod
  def _put(entries: List[dict], record: dict, same) -> dict:
    """Replace the planned entry of the same run (or calibration), else append."""
    for i, e in enumerate(entries):
      if not e.get("job_id") and same(e):
        record.update({k: e[k] for k in ("submission", "task") if k in e})
        entries[i] = record
        return record
    entries.append(record)
    return record

  def add(self, run, job, after: Optional[str] = None) -> dict:
    """Records submitit job `job` of `run`, in place of its planned entry (keeping its tag).

    Args:
      run: the run (model, algorithm, seed, run_dir, key).
      job: its submitit job.
      after: the job id it waits for, if any.

    Returns:
      The entry recorded.
    """
    record = dict(model=run.model, algorithm=run.algorithm, seed=run.seed,
                  run_dir=str(run.run_dir), after=after, **_paths(job))
    return self._put(self.data["jobs"], record, lambda e: _run_key(e) == run.key)

  def add_calibration(self, calib, job) -> dict:
    """Records submitit job `job` of calibration `calib`, as `add` does for a run.

    Returns:
      The entry recorded.
    """
    record = dict(algorithm=calib.algorithm, reading=calib.reading,
                  record=str(calib.record_path), **_paths(job))
    return self._put(self.data["calibration_jobs"], record,
                     lambda e: e.get("record") == record["record"])

  def save(self) -> None:
    """Writes the manifest to `path`, atomically."""
    runs.atomic_write_bytes(self.path, json.dumps(self.data, indent=1).encode())


def _run_key(entry: dict) -> Tuple[str, str, int]:
  return (entry["model"], entry["algorithm"], int(entry["seed"]))


_warned_unreadable = set()  # manifests this process has said it cannot read


def read_manifests(results_dir) -> List[dict]:
  """All sweep manifests of `results_dir`, oldest first (file names are sortable timestamps).

  One that does not read is skipped with one warning on stderr per process; one of
  another schema is skipped silently.

  Returns:
    Each manifest's data, with `_path` its file.
  """
  out = []
  for path in sorted((pathlib.Path(results_dir) / MANIFEST_DIR).glob("*.json")):
    try:
      m = json.loads(path.read_text())
    except (OSError, ValueError) as e:
      if path not in _warned_unreadable:
        _warned_unreadable.add(path)
        print(f"warning: unreadable sweep manifest {path}: {e}", file=sys.stderr)
      continue
    if isinstance(m, dict) and m.get("schema") == MANIFEST_SCHEMA:
      m["_path"] = str(path)
      out.append(m)
  return out


def last_jobs(results_dir) -> Tuple[Dict[Tuple[str, str, int], dict], Dict[str, dict]]:
  """The last job entry of each run and calibration, over all manifests of `results_dir`.

  Returns:
    (run key (model, algorithm, seed) -> its last entry, calibration record path -> its
    last entry), each entry with its sweep's cluster, sweep (process token), manifest and
    log_folder added.
  """
  run_jobs, calib_jobs = {}, {}
  for m in read_manifests(results_dir):
    context = {"cluster": m.get("cluster"), "sweep": m.get("sweep"), "manifest": m["_path"],
               "log_folder": m.get("log_folder")}
    for j in m.get("jobs", []):
      run_jobs[_run_key(j)] = dict(j, **context)
    for j in m.get("calibration_jobs", []):
      calib_jobs[str(j.get("record"))] = dict(j, **context)
  return run_jobs, calib_jobs


# -- what is each job doing? -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JobState:
  """What the last job of a run (or calibration) is doing.

  Attributes:
    phase: 'queued' (pending, running, or planned by a sweep that is submitting it);
      'unknown' (Slurm cannot be asked and its log does not say it ended); 'ended';
      'never submitted' (planned by a sweep that ended first).
    detail: the phase in words; for 'ended', why the job left no result (`why_it_ended`).
    job_id: its job id, where it has one.
    log: its error log, where known.
  """
  phase: str
  detail: str
  job_id: Optional[str] = None
  log: Optional[str] = None

  @property
  def in_flight(self) -> bool:
    """Whether the job is still in flight: its phase is 'queued'."""
    return self.phase == "queued"


def states(entries: Mapping[Hashable, Mapping]) -> Tuple[Dict[Hashable, JobState], List[str]]:
  """The state of each entry's job, the scheduler asked once for all.

  Args:
    entries: key -> job entry, as `last_jobs` gives them.

  Returns:
    (key -> JobState, warnings): a warning for each question Slurm could not answer (its
    jobs are then 'unknown', or 'ended' where their log says so).
  """
  out: Dict[Hashable, JobState] = {}
  on_slurm, tagged = {}, {}
  for key, job in entries.items():
    job_id, log = job.get("job_id"), job.get("stderr")
    if not job_id:
      sweep = job.get("sweep")
      if process_alive(sweep):
        out[key] = JobState("queued", f"queued by sweep pid {sweep['pid']} (not submitted yet)")
      elif job.get("cluster") == "slurm" and job.get("submission"):
        tagged[key] = job
      else:
        out[key] = _never_submitted(job)
    elif job.get("cluster") == "slurm":
      on_slurm[key] = job
    elif job.get("cluster") == "local" and local_job_alive(job_id):
      out[key] = JobState("queued", f"local job {job_id} running", job_id, log)
    else:
      out[key] = JobState("ended", job_logs.why_it_ended(job), job_id, log)
  warnings = _found_in_the_queue(tagged, out)
  if on_slurm:
    try:
      queue: Optional[Dict[str, str]] = slurm_queue.slurm_states(
          j["job_id"] for j in on_slurm.values())
      unavailable = ""
    except slurm_queue.SchedulerUnavailable as e:
      queue, unavailable = None, str(e)
      warnings.append(f"cannot ask Slurm about {len(on_slurm)} job(s): {e}")
    for key, job in on_slurm.items():
      job_id, log = str(job["job_id"]), job.get("stderr")
      state = (queue or {}).get(job_id)
      if state in slurm_queue.NOT_ENDED:
        out[key] = JobState("queued", f"job {job_id} {state.lower()}", job_id, log)
      elif queue is None and not job_logs.log_says_it_ended(job):
        out[key] = JobState("unknown", f"unknown: {unavailable}", job_id, log)
      else:
        out[key] = JobState("ended", job_logs.why_it_ended(job, state), job_id, log)
  return out, warnings


def _never_submitted(job: Mapping) -> JobState:
  return JobState("never submitted", "planned by a sweep that ended before submitting it "
                  f"({job.get('manifest')})")


def _found_in_the_queue(tagged: Mapping[Hashable, Mapping], out: Dict[Hashable, JobState]
                        ) -> List[str]:
  """The state of each entry whose sweep tagged its array and ended before recording
  it (`out`, filled in): queued where Slurm lists a job with its tag and task, unknown
  where Slurm cannot be asked, else never submitted (an array that sbatch did not
  take, or that has left the queue since); warnings."""
  if not tagged:
    return []
  try:
    queue = slurm_queue.queued_by_tag(j["submission"] for j in tagged.values())
  except slurm_queue.SchedulerUnavailable as e:
    for key in tagged:
      out[key] = JobState("unknown", f"unknown: {e}")
    return [f"cannot ask Slurm about {len(tagged)} job(s) a sweep submitted without "
            f"recording them: {e}"]
  for key, job in tagged.items():
    hit = queue.get((job["submission"], int(job.get("task", 0))))
    if hit is None:
      out[key] = _never_submitted(job)
      continue
    job_id, state = hit
    log = f"{job.get('log_folder') or ''}".replace("%j", job_id) + f"/{job_id}_0_log.err"
    out[key] = JobState("queued", f"job {job_id} {state.lower()} (found in the queue by its "
                        "comment: its sweep ended before recording it)", job_id, log)
  return []
