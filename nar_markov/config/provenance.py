"""Which code trained a run: the git commit of this package's checkout and whether it was dirty.

Read once per process (`code_version`), with a short timeout, never failing: outside a
git checkout, without git, or when git does not answer, both are None.  result.json
records them ("commit", "dirty"); they define nothing (definitions.definition_mismatch never
compares them).
"""

from __future__ import annotations

import functools
import pathlib
import subprocess
from typing import Dict, Optional, Union

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
TIMEOUT_S = 5.0


def _git(*args: str) -> Optional[str]:
  """git's stdout in the package's folder, or None when it fails or is not there."""
  try:
    proc = subprocess.run(["git", "-C", str(PACKAGE_DIR), *args], capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
  except (OSError, subprocess.SubprocessError):
    return None
  return proc.stdout if proc.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def code_version() -> Dict[str, Union[str, bool, None]]:
  """The git commit of this package's checkout and whether it is dirty, read once per process.

  Returns:
    {"commit": HEAD's hash, or None outside a git checkout, without git or when git does
    not answer; "dirty": whether `git status --porcelain` lists anything, None without a
    commit or when that fails}.
  """
  head = _git("rev-parse", "HEAD")
  if not head or not head.strip():
    return {"commit": None, "dirty": None}
  status = _git("status", "--porcelain")
  return {"commit": head.strip(), "dirty": None if status is None else bool(status.strip())}
