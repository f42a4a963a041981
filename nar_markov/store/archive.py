"""Results moved away, never deleted: a corrupt file renamed beside itself (`move_aside`), a
run made with other settings moved under the results folder's `_archive/` (`archive_run`).

Imports no jax.
"""

from __future__ import annotations

import datetime
import os
import pathlib

from nar_markov.store.runs import ARCHIVE_DIR


def _stamp() -> str:
  return datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")


def move_aside(path) -> pathlib.Path:
  """Renames `path` (a corrupt result, or any file) to `<name>.corrupt-<timestamp>`, kept.

  Returns:
    The new path.
  """
  path = pathlib.Path(path)
  target = path.with_name(f"{path.name}.corrupt-{_stamp()}")
  os.rename(path, target)
  return target


def archive_run(results_dir, run_folder) -> pathlib.Path:
  """Moves a run folder to `<results_dir>/_archive/<timestamp>/`, under its relative path.

  Args:
    results_dir: the results folder; `run_folder` must lie under it.
    run_folder: the run folder, e.g. `<results_dir>/<model>/<algorithm>/seed<k>`.

  Returns:
    The folder's new path.
  """
  run_folder = pathlib.Path(run_folder)
  rel = run_folder.resolve().relative_to(pathlib.Path(results_dir).resolve())
  target = pathlib.Path(results_dir) / ARCHIVE_DIR / _stamp() / rel
  target.parent.mkdir(parents=True, exist_ok=True)
  os.rename(run_folder, target)
  return target
