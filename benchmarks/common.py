"""What the benchmarks share: counting XLA compilations, the machine's facts, the JSON report."""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import pathlib
import platform
import sys
import time
import warnings
from typing import Any, Dict, List, Optional

from nar_markov.training import threads

threads.pin_xla_threads()  # the benchmarks train: the committed runs' pool, before jax

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position

from nar_markov.store import runs
from nar_markov.store import util
from nar_markov.training import devices

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


# What jax's compiler says of each compilation and the persistent cache (jax 0.10-0.11:
# jax._src.compiler logs a hit or a miss, then why an entry is not written, or warns
# that writing it failed).
_CACHE_MESSAGES = (
    ("hit", re.compile(r"Persistent compilation cache hit for '([^']+)'")),
    ("miss", re.compile(r"PERSISTENT COMPILATION CACHE MISS for '([^']+)'")),
    ("not_written", re.compile(r"Not writing persistent cache entry for '([^']+)' because (.*)")),
    ("write_failed", re.compile(r"Error writing persistent compilation cache entry for "
                                r"'([^']+)': (.*)")),
)


class CacheLog(logging.Handler):
  """Per compiled function, what the persistent compilation cache did while open.

  `records`: one dict per backend compilation, in order: `function` (the module
  jax names, e.g. 'jit__train_step'), `cache` ('hit' or 'miss'; None with the cache
  off), `written` (a miss: True, or why not: jax's reason, e.g. XLA:CPU's
  "Multiple temp buffer allocations found", or that it compiled in under
  `jax_persistent_cache_min_compile_time_secs`), `seconds` (the compile event's
  duration: the load, for a hit), and the CPU seconds this process (`cpu_s`) and
  its calling thread (`thread_cpu_s`) spent from the end of the lowering to the end
  of the compile: on a machine others load, wall seconds stretch with the load and
  CPU seconds much less (the process's may include a step still running
  asynchronously beside the compile).  Reads jax's compiler log and its write
  warnings (learner.py filters the expected one; here it is recorded).
  """

  def __init__(self):
    # learner.py ignores the expected write failure when it is imported; imported first,
    # its filter is behind the one below, which records every warning.
    from nar_markov.nets import learner  # pylint: disable=g-import-not-at-top,unused-import
    super().__init__(level=logging.DEBUG)
    self.records: List[Dict[str, Any]] = []
    self._logger = logging.getLogger("jax._src.compiler")
    self._saved = (self._logger.level, self._logger.propagate)
    self._logger.setLevel(logging.DEBUG)
    self._logger.propagate = False   # its DEBUG lines are read here, not printed
    self._logger.addHandler(self)
    self._warnings = warnings.catch_warnings(record=True)
    self._caught = self._warnings.__enter__()
    warnings.simplefilter("always")
    self._mark = (time.process_time(), time.thread_time())
    jax.monitoring.register_event_duration_secs_listener(self._on_duration)

  def emit(self, record: logging.LogRecord) -> None:
    self._note(record.getMessage())

  def _note(self, message: str) -> None:
    for kind, pattern in _CACHE_MESSAGES:
      m = pattern.search(message)
      if not m:
        continue
      if kind in ("hit", "miss"):
        self.records.append({"function": m.group(1), "cache": kind,
                             "written": None if kind == "hit" else True, "seconds": None})
      elif self.records and self.records[-1]["function"] == m.group(1):
        self.records[-1]["written"] = " ".join(m.group(2).split())
      return

  def _on_duration(self, event: str, duration: float, **kwargs) -> None:
    del kwargs
    if event == _LOWER_EVENT:
      self._mark = (time.process_time(), time.thread_time())
    if event != BACKEND_COMPILE_EVENT:
      return
    self._drain_warnings()
    if not (self.records and self.records[-1]["seconds"] is None):  # cache off
      self.records.append({"function": None, "cache": None, "written": None,
                           "seconds": None})
    self.records[-1].update(seconds=duration, cpu_s=time.process_time() - self._mark[0],
                            thread_cpu_s=time.thread_time() - self._mark[1])

  def _drain_warnings(self) -> None:
    while self._caught:
      self._note(str(self._caught.pop(0).message))

  def close(self) -> None:
    self._drain_warnings()
    jax.monitoring.unregister_event_duration_listener(self._on_duration)
    self._warnings.__exit__(None, None, None)
    self._logger.removeHandler(self)
    self._logger.setLevel(self._saved[0])
    self._logger.propagate = self._saved[1]
    super().close()

  def by_function(self) -> Dict[str, Dict[str, Any]]:
    """function -> compilations, seconds (wall, CPU), hits, misses, and why entries were
    not written."""
    out: Dict[str, Dict[str, Any]] = {}
    for r in self.records:
      f = out.setdefault(str(r["function"]), {"compilations": 0, "seconds": 0.0,
                                              "cpu_s": 0.0, "thread_cpu_s": 0.0, "hits": 0,
                                              "misses": 0, "not_written": {}})
      f["compilations"] += 1
      for key in ("seconds", "cpu_s", "thread_cpu_s"):
        f[key] += r.get(key) or 0.0
      f["hits"] += r["cache"] == "hit"
      f["misses"] += r["cache"] == "miss"
      if isinstance(r["written"], str):
        f["not_written"][r["written"]] = f["not_written"].get(r["written"], 0) + 1
    return out


def cpu_seconds() -> float:
  """CPU seconds this process has used (user + system, all its threads)."""
  import resource  # pylint: disable=g-import-not-at-top
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


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
