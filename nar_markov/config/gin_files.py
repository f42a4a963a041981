"""Gin at the edges: parsing config files whose includes resolve from the repo root.

Slurm jobs start in arbitrary working directories, so `include 'gin/base.gin'`
must not depend on the cwd: the repository root is added to gin's search path,
and relative paths given on the command line are tried against the cwd first,
then the repository root.  Imports none of this package's modules.
"""

from __future__ import annotations

import pathlib
import re
from typing import Sequence

import gin

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
GIN_DIR = REPO_ROOT / "gin"


def resolve_gin_file(path: str) -> str:
  """The absolute path of a gin file given absolute, or relative to the cwd or the repo root.

  A relative path is tried against the cwd first, then `REPO_ROOT`; `~` is expanded.

  Raises:
    ValueError: no such file; the message lists the places looked in.
  """
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
  """Clears gin, then parses `gin_files` and then the bindings `gin_params`.

  A gin file names the modules it configures with `import` lines, as gin/base.gin does
  (gin imports them): this module imports none of ours, so nothing here forms an import
  cycle, and parsing a sweep's files imports no jax.

  Args:
    gin_files: gin files, each absolute or relative to the cwd or the repo root
      (`resolve_gin_file`).
    gin_params: bindings, one a string, parsed after the files.
    finalize: finalize gin's config after parsing.

  Raises:
    ValueError: a missing file, an unknown configurable or parameter, or a binding that
      does not parse; the message names the problem.
  """
  gin.clear_config()
  gin.add_config_file_search_path(str(REPO_ROOT))
  files = [resolve_gin_file(f) for f in gin_files]
  try:
    gin.parse_config_files_and_bindings(
        files, list(gin_params), skip_unknown=False, finalize_config=finalize)
  except Exception as e:  # gin raises many types (incl. tokenize.TokenError)
    raise ValueError(f"bad gin configuration: {e}") from e


def bound_value(binding_key: str):
  """The value bound to `binding_key` (gin.query_parameter), following macros to their value.

  Args:
    binding_key: e.g. 'NetConfig.history'.

  Raises:
    ValueError: nothing is bound to `binding_key` (gin's error).
  """
  value = gin.query_parameter(binding_key)
  # A macro reference's selector is '<NAME>/gin.macro'; its value is bound
  # under '<NAME>/macro.value'.
  while (isinstance(value, gin.config.ConfigurableReference)
         and value.configurable.name == "macro"):
    macro_name = value.scoped_selector.rpartition("/")[0]
    value = gin.query_parameter(f"{macro_name}/macro.value")
  return value


# The launcher's configurables (launch/cluster.py, launch/sweep_spec.py): how a sweep ran, not
# what a run is.
LAUNCHER_CONFIGURABLES = ("slurm_resources", "sweep_axes", "compilation_cache")
_LAUNCHER_IMPORT = re.compile(r"^import launch(?:\.\w+)*(\s+as\s+\w+)?\s*\n", re.M)
_LAUNCHER_SECTION = re.compile(
    r"^# Parameters for (?:" + "|".join(LAUNCHER_CONFIGURABLES) + r"):\n# =+\n(?:.*\S.*\n)*\n?",
    re.M)
_LAUNCHER_BINDING = re.compile(r"^(?:" + "|".join(LAUNCHER_CONFIGURABLES) + r")\.\w+\s*=.*\n",
                               re.M)


def without_launcher(text: str) -> str:
  """A gin text without the launcher's imports and bindings (`LAUNCHER_CONFIGURABLES`).

  Removes the `import launch...` lines, the `# Parameters for <configurable>:` sections of
  the launcher's configurables and any binding of theirs, so that what remains, a run's
  gin, parses with launch/ and submitit absent.

  Args:
    text: gin as gin.config_str() writes it, or a config.gin.
  """
  text = _LAUNCHER_IMPORT.sub("", text)
  text = _LAUNCHER_SECTION.sub("", text)
  return _LAUNCHER_BINDING.sub("", text)
