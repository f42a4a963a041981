"""submitit's executors for a sweep's jobs (Slurm, local, debug), and cancelling a job:
a local job starts in a process group of its own, so that a terminal's Ctrl-C reaches the
sweep alone and a cancel reaches every process of the job."""

from __future__ import annotations

import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, Dict, Sequence

from launch import cluster
from launch import jobs
from launch.plan import UsageError

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def make_executor(cluster_name: str, results_dir, resources: cluster.SlurmResources):
  """submitit's executor for the sweep's jobs on `cluster_name` ('slurm', 'local', 'debug').

  Makes `<results>/_logs` private to this user, and the sweep's compilation cache folder
  (private where it is the default).  Slurm and local jobs find this repository on their
  PYTHONPATH (set in this process's environment for local ones).  A local job gets the
  GPUs `resources` asks for (`SlurmResources.local_gpus`) through CUDA_VISIBLE_DEVICES,
  as submitit's LocalExecutor sets it, and starts in a process group of its own
  (`cancel`).

  Raises:
    UsageError: a folder cannot be made private; a bad compilation_cache.path; a local
      job asks for more GPUs than this machine shows.
  """
  import submitit  # pylint: disable=g-import-not-at-top
  try:
    jobs.private_log_dir(results_dir)
    cluster.private_cache_dir(results_dir, cluster.compilation_cache_dir(results_dir))  # pylint: disable=no-value-for-parameter
  except OSError as e:
    raise UsageError(f"{e.filename} cannot be made private to this user ({e.strerror}): "
                     "jobs unpickle or load what is in it") from None
  except ValueError as e:
    raise UsageError(str(e)) from None
  folder = jobs.log_folder(results_dir)
  params = resources.executor_params()
  # Jobs start in other directories and may not see an editable install.
  pythonpath = f"export PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}"
  if cluster_name == "slurm":
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm",
                                     slurm_max_num_timeout=params.pop("slurm_max_num_timeout"))
    params["slurm_setup"] = [pythonpath] + params["slurm_setup"]
    executor.update_parameters(**params)
  elif cluster_name == "local":
    executor = _local_executor_class()(folder=folder)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    executor.update_parameters(**dict({"timeout_min": params["timeout_min"],
                                       "setup": params["slurm_setup"]},
                                      **_local_gpu_params(resources)))
  else:
    executor = submitit.AutoExecutor(folder=folder, cluster="debug")
  return executor


def _local_executor_class():
  """submitit's LocalExecutor whose jobs start in a process group of their own (`_start_job`)."""
  import submitit  # pylint: disable=g-import-not-at-top

  class GroupedLocalExecutor(submitit.LocalExecutor):
    """Local jobs in their own session: a terminal's Ctrl-C reaches the sweep alone (which
    cancels the job, `cancel`), and the job's processes, however far down, are one group
    `cancel` signals at once."""

    def _submit_command(self, command: str):
      ntasks = self.parameters.get("tasks_per_node", 1)
      n_gpus = self.parameters.get("gpus_per_node", 0)
      visible = self.parameters.get("visible_gpus", ())
      gpus = range(n_gpus) if visible == () else visible[:n_gpus]
      process = _start_job(self.folder, command, ntasks, ",".join(str(k) for k in gpus),
                           self.parameters.get("timeout_min", 2.0),
                           self.parameters.get("signal_delay_s", 30),
                           self.parameters.get("stderr_to_stdout", False),
                           self.parameters.get("setup", ()))
      return submitit.local.local.LocalJob(folder=self.folder, job_id=str(process.pid),
                                           process=process, tasks=list(range(ntasks)))

  return GroupedLocalExecutor


# Where the local jobs' controllers (submitit's, one per job) write what they print, under
# <results>/_logs: not the sweep's terminal (a controller ended by a cancel prints a traceback).
CONTROLLER_LOG = "local_controllers.log"


def _start_job(folder, command: str, ntasks: int, cuda_devices: str, timeout_min: float,
               signal_delay_s: int, stderr_to_stdout: bool, setup: Sequence[str]):
  """submitit.local.local.start_controller (1.5: the environment its Controller reads), the
  controller started in a new session: its pid is the group id of every process of the job."""
  env = dict(os.environ)
  env.update(
      SUBMITIT_LOCAL_NTASKS=str(ntasks), SUBMITIT_LOCAL_COMMAND=command,
      SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * timeout_min)),
      SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(int(signal_delay_s)), SUBMITIT_LOCAL_NODEID="0",
      SUBMITIT_LOCAL_JOB_NUM_NODES="1", SUBMITIT_STDERR_TO_STDOUT="1" if stderr_to_stdout else "",
      SUBMITIT_EXECUTOR="local", CUDA_VISIBLE_DEVICES=cuda_devices,
      SUBMITIT_LOCAL_WITH_SHELL="1" if setup else "")
  cmd: Any = [sys.executable, "-m", "submitit.local._local", str(folder)]
  if setup:
    cmd = " && ".join(list(setup) + [shlex.join(cmd)])
  log = pathlib.Path(folder).parent / CONTROLLER_LOG
  with open(log, "ab") as out:  # pylint: disable=unspecified-encoding
    return subprocess.Popen(cmd, shell=bool(setup), env=env, stdout=out,  # pylint: disable=consider-using-with
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def _local_gpu_params(resources: cluster.SlurmResources) -> Dict[str, Any]:
  """submitit LocalExecutor's gpus_per_node and visible_gpus for the GPUs a local job
  gets; GPUs named otherwise than by index (UUIDs) go through the job's setup."""
  try:
    gpus = resources.local_gpus(cluster.visible_gpus())
  except ValueError as e:
    raise UsageError(str(e)) from None
  if all(g.isdigit() for g in gpus):
    return {"gpus_per_node": len(gpus), "visible_gpus": tuple(int(g) for g in gpus)}
  return {"setup": list(resources.setup) + [
      f"export CUDA_VISIBLE_DEVICES={shlex.quote(','.join(gpus))}"]}


# How long a cancelled local job has to end on SIGINT before what is left of it is killed.
CANCEL_GRACE_S = 10.0


def cancel(job, grace_s: float = CANCEL_GRACE_S) -> None:
  """Cancels `job`: on Slurm, scancel; a local job, its whole process group.

  A local job (`_start_job`: its own process group) gets SIGINT to the whole group -- the
  shell of its setup lines, submitit's controller and the process running the call, and
  one the controller is forking that moment (a group signal reaches a child being forked)
  -- then SIGKILL to what is left after `grace_s` seconds.  Returns once the group is gone
  (or 5 s after the SIGKILL).
  """
  process = getattr(job, "_process", None)  # a local job's Popen; None on Slurm
  if process is None:
    job.cancel()
    return
  group = process.pid
  for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGKILL, 5.0)):
    try:
      os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
      return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
      process.poll()  # reap the group's leader, our child
      if not _group_alive(group):
        return
      time.sleep(0.05)


def _group_alive(group: int) -> bool:
  """Whether a process of process group `group` is still running (Linux /proc: zombies,
  ended and waiting for their parent, do not count; elsewhere, any member)."""
  try:
    os.killpg(group, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  if not pathlib.Path("/proc/self/stat").exists():
    return True
  for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
    fields = jobs.stat_fields(stat.parent.name)
    if fields is not None and len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
      return True
  return False
