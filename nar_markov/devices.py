"""Which JAX backend and devices a process got, for result.json and job logs."""

from __future__ import annotations

import os
import pathlib
import platform
from typing import Any, Dict, Optional

import jax

# The instruction-set extensions XLA's CPU code generation picks kernels by.
_SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")


def describe_host_cpu(cpuinfo: Optional[str] = None) -> Dict[str, Any]:
  """{"model": ..., "simd": [...]}: the host CPU's model name and the SIMD extensions
  of _SIMD_FLAGS it has (Linux /proc/cpuinfo; elsewhere platform.processor(), simd None).

  Training is bitwise deterministic on one kind of CPU with one thread count, not
  across CPUs: XLA compiles for the host's extensions, so another CPU gives other
  rounding and, after a few steps, another trajectory (seen here: the same code,
  versions and seed validated at 0.831 and at 0.7715 after 50 steps on two x86-64
  machines).  The thread count is `xla_cpu_threads`.  result.json records both so a
  rerun can tell which case it is in.
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
  """The threads of XLA:CPU's pool in this process, as XLA counts them
  (`xla::DefaultThreadPoolSize`): PJRT_NPROC, else NPROC, else the CPUs the process
  may run on.  The package sets PJRT_NPROC = 2 where neither is set (nar_markov/__init__.py):
  work is split by it, and with it the rounding.  Read from the environment, so it is
  the pool's size as long as nothing changed PJRT_NPROC after JAX made its CPU client."""
  for name in ("PJRT_NPROC", "NPROC"):
    try:
      return max(0, int(os.environ[name]))
    except (KeyError, ValueError):  # XLA, too, passes over a value that is no number
      pass
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


def describe_backend() -> Dict[str, Any]:
  """{"backend": "cpu"|"gpu"|"tpu", "device_kind": ..., "device_count": ...,
  "host_cpu": describe_host_cpu(), "xla_cpu_threads": xla_cpu_threads()}.

  A GPU job that silently fell back to the CPU (a CPU-only jaxlib, no visible
  GPU) reads "cpu" here; `device_kind` is the first local device's, e.g.
  "NVIDIA H100 80GB HBM3" or "cpu".
  """
  devices = jax.local_devices()
  return {"backend": jax.default_backend(),
          "device_kind": devices[0].device_kind if devices else None,
          "device_count": len(devices), "host_cpu": describe_host_cpu(),
          "xla_cpu_threads": xla_cpu_threads()}


if __name__ == "__main__":
  print(describe_backend())
