"""Why a job ended, from its own error log: its exception, submitit's or Slurm's word on it,
or a full disk; one line each.  Imports no jax.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import List, Mapping, Optional

# submitit's own log lines (submitit/core/submission.py) when a job ends.
_SUBMITIT_SUCCESS = "Job completed successfully"
_SUBMITIT_ERROR = "Submitted job triggered an exception"
# slurmstepd's word on a killed job, e.g.
#   slurmstepd-vm: error: *** JOB 13 ON vm CANCELLED AT 2026-11-21T12:19:01 DUE TO TIME LIMIT ***
_SLURM_VERDICT = re.compile(r"slurmstepd\S*: error: (\*\*\* .* \*\*\*|.*oom.kill.*)", re.I)
# Lines of a job's error log that follow an exception and are none of its message.
_NOT_THE_MESSAGE = ("srun: ", "slurmstepd", "submitit ")
# Less free space than this on a log's file system is a full disk, for the reader.
_NEARLY_FULL_BYTES = 1 << 20


def _log_tail(path: Optional[str], size: int = 65536) -> str:
  if not path:
    return ""
  try:
    with open(path, "rb") as f:
      f.seek(max(0, os.path.getsize(path) - size))
      return f.read().decode("utf-8", "replace")
  except OSError:
    return ""


def exception_of(text: str) -> Optional[str]:
  """'Type: message' of the last exception in `text` (a traceback, or a log that ends in one).

  Without its frames, notes such as gin's "In call to configurable ...", what srun and
  submitit print after it, and the exception's module.  None where `text` has no such
  line.
  """
  start = text.rfind("Traceback (most recent call last):")
  lines = text[start:].splitlines()[1:] if start >= 0 else text.splitlines()
  said: List[str] = []
  for line in lines:
    if not line.strip() or line[:1].isspace() or line.startswith(_NOT_THE_MESSAGE):
      if said:  # the message has ended
        break
      continue    # a frame
    said.append(line.strip())
  if not said:
    return None
  return re.sub(r"^(?:\w+\.)+(?=\w+(: |$))", "", " ".join(said))


def why_it_ended(job: Mapping, slurm_state: Optional[str] = None) -> str:
  """Why a job that left no result ended, in one line.

  Its exception (from its own error log; a word on a full disk where the log ends before
  naming it), else that it finished without a result, else Slurm's word on it in the
  log, else the entry's recorded outcome, else `slurm_state`, else a guess.

  Args:
    job: its manifest entry (stderr: its error log; outcome, optional).
    slurm_state: its Slurm state, where known.
  """
  text = _log_tail(job.get("stderr"))
  if _SUBMITIT_ERROR in text:
    return (exception_of(text.rsplit(_SUBMITIT_ERROR, 1)[1])
            or "the job raised an exception; its log ends before naming it"
            + _full_disk(job.get("stderr")))
  if _SUBMITIT_SUCCESS in text:
    return "the job finished but wrote no result"
  verdicts = _SLURM_VERDICT.findall(text)
  if verdicts:
    return f"job ended without a result: {verdicts[-1].strip()}"
  if job.get("outcome"):
    return job["outcome"]
  if slurm_state and slurm_state != "UNKNOWN":
    return f"job ended without a result (Slurm: {slurm_state})"
  return "job ended without a result (killed: time or memory limit, scancel, node failure?)"


def _full_disk(path: Optional[str]) -> str:
  """' (the disk of <path> is full: ...)' where its file system is (nearly) full now:
  the likely reason a job's log was cut short; else ''."""
  try:
    free = shutil.disk_usage(os.path.dirname(path)).free
  except (OSError, TypeError):
    return ""
  if free >= _NEARLY_FULL_BYTES:
    return ""
  return f" (the disk of {path} is full: {free} bytes free; No space left on device?)"


def log_says_it_ended(job: Mapping) -> bool:
  """Whether the job's error log has submitit's word that the job ended."""
  text = _log_tail(job.get("stderr"))
  return _SUBMITIT_ERROR in text or _SUBMITIT_SUCCESS in text


def summarize_exception(error: BaseException, log_path: Optional[str] = None) -> str:
  """Why a job the sweep waited for failed, in one line.

  Args:
    error: what waiting for the job raised.
    log_path: the job's error log, if any.

  Returns:
    Its exception from the log where it names one or Slurm's word on it
    (`why_it_ended`; submitit's FailedJobError only quotes it), else `error`'s
    'Type: message' (or its type's name).
  """
  text = _log_tail(log_path)
  if _SUBMITIT_ERROR in text or _SLURM_VERDICT.search(text):
    return why_it_ended({"stderr": log_path})
  import traceback  # pylint: disable=g-import-not-at-top
  return (exception_of("".join(traceback.format_exception_only(type(error), error)))
          or type(error).__name__)
