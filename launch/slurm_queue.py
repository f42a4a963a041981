"""Asking Slurm about a sweep's jobs: their states (sacct through submitit, else squeue), and
the arrays a sweep submitted but did not live to record (by their comment).  Imports no jax.
"""

from __future__ import annotations

import getpass
import logging
import shutil
import subprocess
from typing import Dict, Iterable, List, Sequence, Tuple

from nar_markov import quiet

# Slurm states of a job that has not ended (sacct and squeue spell them alike).
NOT_ENDED = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
              "REQUEUE_FED", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "STOPPED",
              "RESV_DEL_HOLD", "SPECIAL_EXIT")


class SchedulerUnavailable(RuntimeError):
  """Slurm cannot be asked: squeue is missing, fails or does not answer."""
  pass


def slurm_states(job_ids: Iterable[str]) -> Dict[str, str]:
  """The Slurm state of each of `job_ids` that the scheduler still knows.

  Asked of submitit's `Job.state` (one sacct call) where the cluster keeps accounting,
  of squeue for the others.

  Returns:
    Job (array task) id -> Slurm state.

  Raises:
    SchedulerUnavailable: squeue is needed and fails.
  """
  ids = sorted({str(j) for j in job_ids if j})
  found = {j: s for j, s in _accounted_states(ids).items() if s != "UNKNOWN"}
  rest = [j for j in ids if j not in found]
  return dict(found, **(_squeue_states(rest) if rest else {}))


def _accounted_states(ids: Sequence[str]) -> Dict[str, str]:
  """submitit's view (its Job.state: sacct); UNKNOWN for every job where the cluster
  keeps no accounting."""
  if not ids or shutil.which("sacct") is None:
    return {}
  import submitit  # pylint: disable=g-import-not-at-top
  # The watcher behind submitit's Job.state, a fresh one: no state cached from an
  # earlier question in this process.
  watcher = submitit.slurm.slurm.SlurmInfoWatcher()
  for j in ids:
    watcher.register_job(j)
  logger = logging.getLogger("submitit")
  level = logger.level
  # A cluster without accounting fails every sacct call (submitit warns, sacct says why
  # on fd 2): squeue answers instead.
  logger.setLevel(logging.ERROR)
  try:
    with quiet.filtered_stderr(drop=lambda line: True):
      watcher.update()  # one sacct call for all
  finally:
    logger.setLevel(level)
  return {j: watcher.get_state(j, mode="cache").split(" ")[0] for j in ids}


def _squeue(args: Sequence[str]) -> List[List[str]]:
  """squeue's lines, split at '|' (-r: one line per array task, also for pending tasks,
  "12_[3-9]" otherwise); [] when every job asked for has aged out."""
  if shutil.which("squeue") is None:
    raise SchedulerUnavailable("squeue is not on PATH")
  cmd = ["squeue", "-h", "-r"] + list(args)
  try:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
  except subprocess.TimeoutExpired:
    raise SchedulerUnavailable(f"{' '.join(cmd)} did not answer in 60 s") from None
  if proc.returncode != 0:
    # squeue exits 1 with "Invalid job id specified" when every id has aged out.
    if "Invalid job id" in proc.stderr:
      return []
    why = " ".join(proc.stderr.split()) or f"exit code {proc.returncode}"
    raise SchedulerUnavailable(f"squeue failed: {why}")
  return [line.strip().split("|") for line in proc.stdout.splitlines() if "|" in line]


def _squeue_states(ids: Sequence[str]) -> Dict[str, str]:
  lines = _squeue(["-o", "%i|%T", "-j", ",".join(sorted({j.split("_")[0] for j in ids}))])
  return {line[0]: line[1] for line in lines}


def queued_by_tag(tags: Iterable[str]) -> Dict[Tuple[str, int], Tuple[str, str]]:
  """This user's queued or running jobs whose comment is one of `tags` (`Manifest.tag`).

  These are arrays a sweep submitted but did not live to record.

  Returns:
    (tag, task) -> (job id, Slurm state).

  Raises:
    SchedulerUnavailable: squeue fails.
  """
  tags = set(tags)
  found = {}
  for line in _squeue(["-u", getpass.getuser(), "-o", "%i|%T|%k"]):
    if len(line) == 3 and line[2] in tags:
      job_id, state, tag = line
      task = job_id.partition("_")[2] or "0"  # an array of one is a plain job
      if task.isdigit():
        found[(tag, int(task))] = (job_id, state)
  return found
