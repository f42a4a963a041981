"""The cluster side of a sweep: each job's Slurm resources, the GPUs a local job gets, the
sweep's JAX compilation cache, and the environment every job runs in.

`SlurmResources` (gin: ``slurm_resources.*``) is what one task of the sweep's job array asks
Slurm for, as submitit's executor parameters; `visible_gpus` and
`SlurmResources.local_gpus` what a `--cluster local` job gets.  `compilation_cache_dir`
(gin: ``compilation_cache.path``) is the folder of JAX's persistent compilation cache that
the sweep's jobs share.  `job_environment` is what a job (launch/sweep_spec.py's `Job`) runs
in: the check that it got the GPUs it asked for, and JAX's compilation cache pointed at the
sweep's.  Imports neither jax nor submitit.  Requeue, preemption, GPUs: docs/running.md.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

import gin

from nar_markov.config import gin_files as config_lib
from nar_markov.training import threads

# sbatch refuses arrays with more tasks than MaxArraySize (Slurm's default 1001).
MAX_ARRAY_SIZE = 1000
# submitit asks Slurm for USR2 90 s (its signal_delay_s) before the time limit, to
# checkpoint and requeue.  A shorter limit signals each attempt at once and the run
# never progresses (seen on the local cluster with timeout_min=2).
MIN_TIMEOUT_MIN = 5


@gin.configurable("slurm_resources")
@dataclasses.dataclass(frozen=True)
class SlurmResources:
  """Resources of one job (one task of the sweep's array), gin: ``slurm_resources.*``.

  Bound by the Slurm overlays (gin/slurm_gpu.gin) or on the command line, never by
  gin/base.gin (a run's gin names nothing of the launcher), e.g.
  ``--gin_param "slurm_resources.partition='gpu'"``; unbound, these defaults.

  Attributes:
    partition: the Slurm partition; None: the cluster's default.
    gpus_per_task: GPUs per job.  The paper's runs take 1 (gin/slurm_gpu.gin); a job
      that asked for GPUs and got fewer stops at its start
      (nar_markov.training.devices.check_gpus).  0 trains on CPU.  None (the default):
      Slurm is asked for none; a local job gets the first GPU the machine shows, if any,
      and runs on whatever JAX finds (docs/running.md).
    cpus_per_task: CPUs per job (>= 1).
    mem_gb: memory per job in GB (> 0).
    timeout_min: the limit of one attempt in minutes (>= MIN_TIMEOUT_MIN); a longer run is
      checkpointed and requeued, at most `max_num_timeout` times.
    array_parallelism: most tasks of an array running at once (>= 1).
    max_num_timeout: most requeues after a timeout (>= 0).
    job_name: the Slurm job name.
    setup: shell lines run before the job starts.
    additional_parameters: more sbatch flags, e.g. {'account': 'x', 'qos': 'y'}.

  Raises:
    ValueError: a field of the wrong type or below its minimum.
  """
  partition: Optional[str] = None
  gpus_per_task: Optional[int] = None
  cpus_per_task: int = 2
  mem_gb: float = 16
  timeout_min: int = 240
  array_parallelism: int = 64
  max_num_timeout: int = 10
  job_name: str = "nar_markov"
  setup: Sequence[str] = ("export XLA_PYTHON_CLIENT_PREALLOCATE=false",)
  additional_parameters: Optional[Dict[str, Any]] = None

  def __post_init__(self):
    for name, minimum in [("gpus_per_task", 0), ("cpus_per_task", 1),
                          ("timeout_min", MIN_TIMEOUT_MIN), ("array_parallelism", 1),
                          ("max_num_timeout", 0)]:
      value = getattr(self, name)
      if name == "gpus_per_task" and value is None:
        continue
      if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"slurm_resources.{name} must be an int >= {minimum}, got {value!r}")
    mem = self.mem_gb
    if isinstance(mem, bool) or not isinstance(mem, (int, float)) or not mem > 0:
      raise ValueError(f"slurm_resources.mem_gb must be a number > 0, got {mem!r}")
    if self.partition is not None and not isinstance(self.partition, str):
      raise ValueError("slurm_resources.partition must be a string or None, got "
                       f"{self.partition!r}")
    if isinstance(self.setup, str) or not all(isinstance(l, str) for l in self.setup):
      raise ValueError(f"slurm_resources.setup must be a list of shell lines, got {self.setup!r}")

  def describe(self) -> str:
    """One line, as --dry-run and the sweep print it."""
    return (f"partition={self.partition or 'default'} cpus_per_task={self.cpus_per_task} "
            f"mem_gb={float(self.mem_gb)} gpus_per_task={self.gpus_per_task or 0} "
            f"timeout_min={self.timeout_min} array_parallelism={self.array_parallelism}")

  def executor_params(self) -> Dict[str, Any]:
    """These resources as submitit's executor parameters, sbatch's requeue always set."""
    params = {
        "timeout_min": self.timeout_min, "cpus_per_task": self.cpus_per_task,
        "mem_gb": float(self.mem_gb), "tasks_per_node": 1, "nodes": 1, "name": self.job_name,
        "slurm_array_parallelism": self.array_parallelism,
        "slurm_max_num_timeout": self.max_num_timeout, "slurm_setup": list(self.setup),
        # A requeued run must be allowed back into the queue even where the
        # cluster's JobRequeue default is 0.
        "slurm_additional_parameters": {"requeue": True,
                                        **dict(self.additional_parameters or {})},
    }
    if self.partition:
      params["slurm_partition"] = self.partition
    if self.gpus_per_task:
      params["slurm_gpus_per_task"] = self.gpus_per_task
    return params

  def local_gpus(self, visible: Sequence[str]) -> List[str]:
    """The GPUs a `--cluster local` job gets.

    Args:
      visible: the GPUs this process can hand out (`visible_gpus`).

    Returns:
      The first `gpus_per_task` of them; with None the first one there is, if any.

    Raises:
      ValueError: `gpus_per_task` asks for more than there are.
    """
    if self.gpus_per_task is None:
      return list(visible[:1])
    if self.gpus_per_task > len(visible):
      raise ValueError(
          f"slurm_resources.gpus_per_task = {self.gpus_per_task} but this machine shows "
          f"{len(visible)} GPU(s) to local jobs ({_gpu_source()}); bind 0 to train on CPU")
    return list(visible[:self.gpus_per_task])


def visible_gpus(environ: Optional[Mapping[str, str]] = None) -> List[str]:
  """The GPUs this process can hand to local jobs, as CUDA_VISIBLE_DEVICES names them.

  Imports no jax: the launcher asks before any job starts.

  Args:
    environ: the environment to read; None: os.environ.

  Returns:
    CUDA_VISIBLE_DEVICES' entries where it is set, up to the first empty or -1 one (CUDA
    ignores what follows an entry of -1; empty: none), else the indices `nvidia-smi -L`
    lists, else none (no nvidia-smi on PATH, or it failed or hung).
  """
  environ = os.environ if environ is None else environ
  if "CUDA_VISIBLE_DEVICES" in environ:
    names = []
    for name in environ["CUDA_VISIBLE_DEVICES"].split(","):
      if not name.strip() or name.strip() == "-1":
        break
      names.append(name.strip())
    return names
  nvidia_smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
  if nvidia_smi is None:
    return []
  try:
    listing = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=30,
                             check=True, env=dict(environ)).stdout
  except (OSError, subprocess.SubprocessError):  # no driver loaded, or it hung
    return []
  return re.findall(r"^GPU (\d+):", listing, re.M)


def _gpu_source() -> str:
  if "CUDA_VISIBLE_DEVICES" in os.environ:
    return f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}"
  return "nvidia-smi -L" if shutil.which("nvidia-smi") else "no nvidia-smi on PATH"


# Where a sweep's jobs share JAX's persistent compilation cache, under its results
# folder (`compilation_cache_dir`); made private to the user like <results>/_logs.
COMPILATION_CACHE_DIR = "_jax_cache"


@gin.configurable("compilation_cache")
def compilation_cache_dir(results_dir, path: Optional[str] = None) -> str:
  """The folder of JAX's persistent compilation cache for the jobs of a sweep.

  JAX keys each entry by the computation, the backend, its devices and the versions, so
  one folder serves CPU and GPU jobs.

  Args:
    results_dir: the sweep's results folder.
    path: gin ``compilation_cache.path``: a folder, or 'off' (no persistent cache: every
      job compiles all it runs).  None: $NAR_MARKOV_JAX_CACHE where the job's environment
      sets it, else `<results_dir>/_jax_cache` -- a folder every job of the sweep
      reaches, on a cluster too, so that an algorithm's step is compiled once per sweep,
      not once per run.

  Returns:
    The folder (``~`` expanded), or 'off' or '' as given.

  Raises:
    ValueError: `path` is not a string or None.
  """
  if path is None:
    path = os.environ.get("NAR_MARKOV_JAX_CACHE")
  if path is None:
    return str(pathlib.Path(results_dir) / COMPILATION_CACHE_DIR)
  if not isinstance(path, str):
    raise ValueError(f"compilation_cache.path must be a folder, 'off' or None, got {path!r}")
  return path if path in ("", "off") else str(pathlib.Path(path).expanduser())


def private_cache_dir(results_dir, path: str) -> Optional[pathlib.Path]:
  """Makes the sweep's default cache folder (`<results>/_jax_cache`) private to this user.

  Mode 0700, like <results>/_logs: a job loads the executables it holds, so whoever can
  write there runs code in your jobs.  A folder chosen with compilation_cache.path or
  $NAR_MARKOV_JAX_CACHE is left as it is (JAX makes it).

  Args:
    results_dir: the sweep's results folder.
    path: the cache folder (`compilation_cache_dir`).

  Returns:
    The default folder, made where missing; None where `path` is another one or 'off'.

  Raises:
    PermissionError: the folder belongs to someone else (it cannot be made 0700).
  """
  folder = pathlib.Path(results_dir) / COMPILATION_CACHE_DIR
  if pathlib.Path(path) != folder:
    return None
  folder.mkdir(mode=0o700, parents=True, exist_ok=True)
  if folder.stat().st_mode & 0o077:
    os.chmod(folder, 0o700)
  return folder


@contextlib.contextmanager
def job_environment(kwargs: Mapping[str, Any]) -> Iterator[None]:
  """What a job (`sweep_spec.Job`) runs in: its GPU check and the sweep's compilation cache.

  Pins XLA's CPU threads, parses the sweep's gin (into this process's gin state), checks
  the GPUs `slurm_resources.gpus_per_task` asks for, makes the default cache folder
  private and points $NAR_MARKOV_JAX_CACHE at the cache ('off' for none) for the body;
  $NAR_MARKOV_JAX_CACHE is restored after (a debug sweep runs its jobs in its own
  process).

  Args:
    kwargs: the job's arguments: gin_files, gin_params (optional), results_dir.  Without
      gin_files nothing is done.

  Raises:
    GpuError: fewer GPUs than asked (`devices.check_gpus`).
    PermissionError: as `private_cache_dir`.
  """
  if "gin_files" not in kwargs:
    yield
    return
  threads.pin_xla_threads()  # a job trains: before its GPU check makes JAX's client
  config_lib.parse_gin(kwargs["gin_files"], kwargs.get("gin_params", ()))
  asked = SlurmResources().gpus_per_task
  cache = compilation_cache_dir(kwargs["results_dir"])  # pylint: disable=no-value-for-parameter
  if asked:
    from nar_markov.training import devices  # pylint: disable=g-import-not-at-top  (imports jax)
    devices.check_gpus(asked)
  private_cache_dir(kwargs["results_dir"], cache)
  saved = os.environ.get("NAR_MARKOV_JAX_CACHE")
  os.environ["NAR_MARKOV_JAX_CACHE"] = cache or "off"
  try:
    yield
  finally:
    if saved is None:
      os.environ.pop("NAR_MARKOV_JAX_CACHE", None)
    else:
      os.environ["NAR_MARKOV_JAX_CACHE"] = saved
