"""Small utilities every part of a run uses: JSON-safe values, package versions, the log line.

No jax: the launcher and the analysis import it too.
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
import sys
from typing import Dict

import numpy as np


def _finite_or_none(x):
  x = float(x)
  return x if math.isfinite(x) else None


def jsonable(obj):
  """`obj` as JSON can hold it: dict keys as str, tuples and arrays as lists, numpy scalars
  as Python numbers, a non-finite float as None (JSON has no NaN)."""
  if isinstance(obj, dict):
    return {str(k): jsonable(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [jsonable(v) for v in obj]
  if isinstance(obj, (np.floating, float)):
    return _finite_or_none(obj)
  if isinstance(obj, (np.integer,)):
    return int(obj)
  if isinstance(obj, np.ndarray):
    return jsonable(obj.tolist())
  return obj


def package_versions() -> Dict[str, str]:
  """The installed versions of python and the packages a result depends on, by short name
  ("not installed" for one that is not), as result.json records them."""
  versions = {"python": platform.python_version()}
  for key, dist in [("jax", "jax"), ("jaxlib", "jaxlib"), ("haiku", "dm-haiku"),
                    ("optax", "optax"), ("clrs", "dm-clrs"), ("gin", "gin-config"),
                    ("numpy", "numpy"), ("nar_markov", "nar_markov")]:
    try:
      versions[key] = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
      versions[key] = "not installed"
  return versions


def log(msg: str) -> None:
  """One line of progress on stderr, prefixed "[nar_markov]", flushed."""
  print(f"[nar_markov] {msg}", file=sys.stderr, flush=True)
