"""The XLA:CPU thread pin of the entry points that train (no jax: it must run before JAX
makes its CPU client).

XLA:CPU runs a step on a pool of PJRT_NPROC threads (else NPROC, else as many as the CPUs
the process may run on: `xla::DefaultThreadPoolSize`), and how it splits work over them
changes the rounding: binary_search at hidden 128 trains to other losses within four steps
with 1, 4 or 8 threads than with 2.  The runs in results/ are trained with 2, so an entry
point that trains (run_experiment, a sweep's job, the tests, the benchmarks) pins 2 where
the process has not chosen; result.json records the pool's size
(devices.xla_cpu_threads).  Importing nar_markov sets nothing.
"""

from __future__ import annotations

import os
import sys
from typing import MutableMapping, Optional

XLA_CPU_THREADS = 2  # the committed runs' pool


def pin_xla_threads(environ: Optional[MutableMapping[str, str]] = None) -> bool:
  """Sets PJRT_NPROC = XLA_CPU_THREADS where the process has not chosen its pool's size.

  Args:
    environ: the environment to set it in; None: os.environ.

  Returns:
    Whether it set it: not where PJRT_NPROC or NPROC is set, nor where JAX has made its
    backends already (the pin would not reach them).
  """
  environ = os.environ if environ is None else environ
  if {"PJRT_NPROC", "NPROC"} & set(environ):
    return False
  bridge = sys.modules.get("jax._src.xla_bridge")
  if bridge is not None and bridge.backends_are_initialized():
    return False
  environ["PJRT_NPROC"] = str(XLA_CPU_THREADS)
  return True
