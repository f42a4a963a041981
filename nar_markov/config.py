"""Gin at the edges: parse config files whose includes resolve from the repo root.

Slurm jobs start in arbitrary working directories, so `include 'gin/base.gin'`
must not depend on the cwd: the repository root is added to gin's search path,
and relative paths given on the command line are tried against the cwd first,
then the repository root.
"""

from __future__ import annotations

import importlib
import os
import pathlib
from typing import Sequence

import gin

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
GIN_DIR = REPO_ROOT / "gin"

# Modules whose configurables gin files may bind; importing registers them.  None of
# them imports jax, haiku, clrs or TensorFlow: parsing a sweep's gin files is cheap
# (``--status``, ``--dry-run``); training imports nar_markov.train when it starts.
_CONFIGURABLE_MODULES = ("nar_markov.clrs30", "nar_markov.experiment",
                         "nar_markov.calibrate", "nar_markov.cluster")


def register_configurables() -> None:
  for name in _CONFIGURABLE_MODULES:
    try:
      importlib.import_module(name)
    except ModuleNotFoundError as e:
      if e.name != name:  # a real import error inside the module
        raise


def resolve_gin_file(path: str) -> str:
  """Absolute path of a gin file given relative to the cwd or the repo root."""
  p = pathlib.Path(path).expanduser()
  candidates = [p] if p.is_absolute() else [pathlib.Path.cwd() / p, REPO_ROOT / p]
  for c in candidates:
    if c.is_file():
      return str(c.resolve())
  raise ValueError(
      f"gin file not found: {path!r} (looked in: "
      + ", ".join(str(c) for c in candidates) + ")")


def parse_gin(gin_files: Sequence[str], gin_params: Sequence[str] = (),
              finalize: bool = False) -> None:
  """Clear gin, register configurables, parse files then bindings.

  Raises ValueError naming the problem for a missing file, an unknown
  configurable or parameter, or a binding that does not parse.
  """
  register_configurables()
  gin.clear_config()
  gin.add_config_file_search_path(str(REPO_ROOT))
  files = [resolve_gin_file(f) for f in gin_files]
  try:
    gin.parse_config_files_and_bindings(
        files, list(gin_params), skip_unknown=False, finalize_config=finalize)
  except Exception as e:  # gin raises many types (incl. tokenize.TokenError)
    raise ValueError(f"bad gin configuration: {e}") from e


def bound_value(binding_key: str):
  """gin.query_parameter, following a macro (`x = %NAME`) to its value.

  Raises ValueError when nothing is bound to `binding_key`.
  """
  value = gin.query_parameter(binding_key)
  # A macro reference's selector is '<NAME>/gin.macro'; its value is bound
  # under '<NAME>/macro.value'.
  while (isinstance(value, gin.config.ConfigurableReference)
         and value.configurable.name == "macro"):
    macro_name = value.scoped_selector.rpartition("/")[0]
    value = gin.query_parameter(f"{macro_name}/macro.value")
  return value
