"""Which JAX backend and devices a process got, for result.json and job logs; a job's GPU check."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pathlib
import platform
from typing import Any, Dict, Optional, Sequence

import jax

# The instruction-set extensions XLA's CPU code generation picks kernels by.
_SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")


def describe_host_cpu(cpuinfo: Optional[str] = None) -> Dict[str, Any]:
  """The host CPU's model name and the SIMD extensions XLA's CPU code generation picks kernels by.

  Training is bitwise deterministic on one kind of CPU with one thread count
  (`xla_cpu_threads`), not across CPUs: XLA compiles for the host's extensions, so another
  CPU rounds otherwise and, after a few steps, trains another trajectory.  result.json
  records both, so that a rerun can tell which case it is in.

  Args:
    cpuinfo: the text of /proc/cpuinfo; None: read it.

  Returns:
    {"model": its "model name" (else platform.processor(), else None), "simd": the
    extensions of `_SIMD_FLAGS` in its "flags" (else "Features") field, in that order}.
    Where /proc/cpuinfo does not read: {"model": platform.processor() or
    platform.machine() or None, "simd": None}.
  """
  if cpuinfo is None:
    try:
      cpuinfo = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
      return {"model": platform.processor() or platform.machine() or None, "simd": None}
  fields: Dict[str, str] = {}
  for line in cpuinfo.splitlines():
    key, sep, value = line.partition(":")
    if sep and key.strip() not in fields:
      fields[key.strip()] = value.strip()
  flags = set(fields.get("flags", fields.get("Features", "")).split())
  return {"model": fields.get("model name") or platform.processor() or None,
          "simd": [f for f in _SIMD_FLAGS if f in flags]}


def xla_cpu_threads() -> int:
  """The size of XLA:CPU's thread pool in this process, as XLA counts it.

  As `xla::DefaultThreadPoolSize`: PJRT_NPROC, else NPROC (the first that is an integer;
  a negative one as 0), else the CPUs the process may run on.  The training entry points
  set PJRT_NPROC = 2 where neither is set (`threads.pin_xla_threads`): work is split by
  it, and with it the rounding.  Read from the environment, so it is the pool's size as
  long as nothing changed PJRT_NPROC after JAX made its CPU client.
  """
  for name in ("PJRT_NPROC", "NPROC"):
    try:
      return max(0, int(os.environ[name]))
    except (KeyError, ValueError):  # XLA, too, passes over a value that is no number
      pass
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


def describe_backend() -> Dict[str, Any]:
  """The JAX backend and devices of this process, for result.json and job logs.

  Returns:
    {"backend": jax.default_backend() ("cpu", "gpu", "tpu"), "device_kind": the first
    local device's (e.g. "NVIDIA H100 80GB HBM3" or "cpu"; None without one),
    "device_count": the local devices, "host_cpu": `describe_host_cpu()`,
    "xla_cpu_threads": `xla_cpu_threads()`}.  A GPU job that fell back to the CPU (a
    CPU-only jaxlib, no visible GPU) reads "cpu".
  """
  devices = jax.local_devices()
  return {"backend": jax.default_backend(),
          "device_kind": devices[0].device_kind if devices else None,
          "device_count": len(devices), "host_cpu": describe_host_cpu(),
          "xla_cpu_threads": xla_cpu_threads()}


# The distributions that give jaxlib its CUDA backend (the `cuda12` extra installs the
# first two; a host image may ship the CUDA 13 ones).
CUDA_PLUGINS = ("jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt")


class GpuError(RuntimeError):
  """A job that asked for GPUs did not get them; the message says why, in one line."""


def check_gpus(asked: int, local_devices: Optional[Sequence[Any]] = None,
               environ: Optional[Dict[str, str]] = None,
               plugins: Optional[Sequence[str]] = None) -> None:
  """Raises GpuError unless JAX runs on at least `asked` GPUs in this process.

  A job that asked its scheduler for GPUs and would train on the CPU is stopped at its
  start.

  Args:
    asked: the GPUs the job asked for (slurm_resources.gpus_per_task).
    local_devices, environ, plugins: this process's JAX devices, environment and
      installed CUDA plugin distributions (`installed_cuda_plugins`), unless given.

  Raises:
    GpuError: fewer GPUs than asked.  The message names the first cause that applies:
      CUDA_VISIBLE_DEVICES hides the GPUs, jaxlib has no CUDA plugin installed, or JAX
      found fewer GPUs than asked (its own warning in the job's log says why, e.g. the
      driver).
  """
  devices = jax.local_devices() if local_devices is None else list(local_devices)
  environ = os.environ if environ is None else environ
  gpus = [d for d in devices if d.platform in ("gpu", "cuda", "rocm")]
  if len(gpus) >= asked:
    return
  got = (f"JAX runs on {devices[0].platform if devices else 'no device'}" if not gpus
         else f"JAX sees {len(gpus)} GPU(s)")
  head = f"slurm_resources.gpus_per_task = {asked} but {got}: "
  hidden = environ.get("CUDA_VISIBLE_DEVICES")
  if hidden is not None and len([n for n in hidden.split(",") if n.strip()]) < asked:
    raise GpuError(head + f"CUDA_VISIBLE_DEVICES={hidden!r} leaves it fewer (the "
                   "scheduler or launcher did not give the job its GPUs)")
  plugins = installed_cuda_plugins() if plugins is None else list(plugins)
  if not plugins:
    raise GpuError(head + "jaxlib has no CUDA plugin here (install one: pip install -e "
                   "'.[cuda12]')")
  raise GpuError(head + f"its CUDA plugin ({', '.join(plugins)}) found no more; JAX's "
                 "warning above in this log says why (driver, CUDA libraries)")


def installed_cuda_plugins() -> list:
  """The installed distributions of `CUDA_PLUGINS`, as "<name> <version>".

  Where none is installed: the jax_plugins modules (xla_cuda12, xla_cuda13) that JAX
  would load, where present.
  """
  found = []
  for name in CUDA_PLUGINS:
    try:
      found.append(f"{name} {importlib.metadata.version(name)}")
    except importlib.metadata.PackageNotFoundError:
      pass
  for module in ("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13"):
    try:
      if not found and importlib.util.find_spec(module) is not None:
        found.append(module)
    except ImportError:  # no jax_plugins package at all
      pass
  return found


if __name__ == "__main__":
  print(describe_backend())
