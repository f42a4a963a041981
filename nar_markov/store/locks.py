"""Locks on a results folder: one trainer per run, one sweep at a time.

``fcntl.flock``, released when the holder exits, even when killed: `run_lock` on a run folder
while it trains (a second trainer is refused, `LockHeld`), `sweep_lock` on a results folder
while a sweep plans and submits (a second sweep waits).  The lock files' names:
nar_markov.store.runs (``LOCK_NAME``, ``SWEEP_LOCK``).  Imports no jax.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import socket
import sys
import time

from nar_markov.store import runs


class LockHeld(RuntimeError):
  """Another process holds the lock; the message names the holder (pid, host, since when)."""


def _holder(f) -> str:
  try:
    f.seek(0)
    text = f.read().strip()
  except OSError:
    text = ""
  return text or "unknown process"


def _acquire(path: pathlib.Path, wait: bool, on_wait=None):
  path.parent.mkdir(parents=True, exist_ok=True)
  f = open(path, "a+", encoding="utf-8")  # pylint: disable=consider-using-with
  try:
    try:
      fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = _holder(f)
      if not wait:
        raise LockHeld(holder) from None
      if on_wait is not None:
        on_wait(holder)
      fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()} since "
            f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
    f.flush()
  except BaseException:
    f.close()
    raise
  return f


@contextlib.contextmanager
def run_lock(run_folder):
  """Holds the run lock of `run_folder` while a run trains; refuses at once, never waits.

  Two trainers of one run mean two jobs for one run: the second should end now rather
  than hold a Slurm slot until the first is done.  The lock file (`runs.LOCK_NAME`)
  records the holder's pid, host and start time; the lock is released when the context
  exits or the process dies.

  Args:
    run_folder: the run folder (created if missing).

  Yields:
    The lock file's path.

  Raises:
    LockHeld: another process holds the lock; the message names the folder and the holder.
  """
  path = pathlib.Path(run_folder) / runs.LOCK_NAME
  try:
    f = _acquire(path, wait=False)
  except LockHeld as e:
    raise LockHeld(f"{run_folder} is being trained by another process ({e}; lock "
                   f"{path}): not starting a second training of the same run") from None
  try:
    yield path
  finally:
    f.close()


@contextlib.contextmanager
def sweep_lock(results_dir):
  """Holds the sweep lock of `results_dir` while a sweep plans, writes its manifest and submits.

  A second sweep on the same results folder waits for the lock, saying so on stderr.

  Args:
    results_dir: the results folder; the lock file is `runs.SWEEP_LOCK` under it (created).

  Yields:
    The lock file's path.
  """
  path = pathlib.Path(results_dir) / runs.SWEEP_LOCK

  def say(holder):
    print(f"waiting for {path}: another sweep on this results folder is planning or "
          f"submitting ({holder})", file=sys.stderr, flush=True)

  f = _acquire(path, wait=True, on_wait=say)
  try:
    yield path
  finally:
    f.close()
