"""What the benchmarks share: counting XLA compilations, the machine's facts, the JSON report."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import platform
import sys
from typing import Any, Dict, List

import jax

from nar_markov import devices
from nar_markov import runs
from nar_markov import util

# One event per backend compilation in jax 0.10.2 (`pxla._cached_compilation`); a
# persistent-cache hit fires it too.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
_LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def log(tool: str, msg: str) -> None:
  """Progress goes to stderr; stdout is the markdown table."""
  print(f"[{tool}] {msg}", file=sys.stderr, flush=True)


class CompileCounter:
  """Backend compilations (and their seconds) seen by jax.monitoring while open."""

  def __init__(self):
    self.count = 0
    self.seconds = 0.0
    self.trace_s = 0.0
    self.lower_s = 0.0
    self.cache_hits = 0
    self.by_function: Dict[str, List[float]] = collections.defaultdict(
        lambda: [0, 0.0])
    jax.monitoring.register_event_duration_secs_listener(self._on_duration)
    jax.monitoring.register_event_listener(self._on_event)

  def _on_duration(self, event: str, duration: float, **kwargs) -> None:
    if event == BACKEND_COMPILE_EVENT:
      self.count += 1
      self.seconds += duration
      entry = self.by_function[str(kwargs.get("fun_name", "?"))]
      entry[0] += 1
      entry[1] += duration
    elif event == _TRACE_EVENT:
      self.trace_s += duration
    elif event == _LOWER_EVENT:
      self.lower_s += duration

  def _on_event(self, event: str, **kwargs) -> None:
    del kwargs
    if event == _CACHE_HIT_EVENT:
      self.cache_hits += 1

  def close(self) -> None:
    jax.monitoring.unregister_event_duration_listener(self._on_duration)
    jax.monitoring.unregister_event_listener(self._on_event)


def machine_info() -> Dict[str, Any]:
  try:
    affinity = len(os.sched_getaffinity(0))
  except AttributeError:
    affinity = None
  return {"cpu_count": os.cpu_count(), "cpu_affinity": affinity,
          "platform": platform.platform(), "processor": platform.processor(),
          "machine": platform.machine(), "node": platform.node(),
          "jax_backend": jax.default_backend(),
          "jax_devices": [str(d) for d in jax.devices()],
          "host_cpu": devices.describe_host_cpu(),
          "loadavg": list(os.getloadavg())}


def write_json(path, report: Dict[str, Any], indent=1) -> None:
  """The report, atomically (a long run rewrites it as it goes)."""
  runs.atomic_write_bytes(pathlib.Path(path),
                          json.dumps(util.jsonable(report), indent=indent).encode())


def int_list(text: str) -> List[int]:
  """'4,7,11' -> [4, 7, 11] (the --lengths flag)."""
  return [int(x) for x in text.split(",") if x.strip()]
