"""Brings results written by older versions up to today's formats, in place, changing no number.

Owns these rewrites of a run folder, each idempotent:

* ``config.gin``: the old flat bindings (``run_experiment.batch_size``, ...,
  ``run_experiment.lambda_gate``) become today's (``Protocol.*``, ``NetConfig.*``,
  ``GatePenalty.lambda_gate``); the net's history and the gate penalty, which the model
  label implied then (runspec.PAPER_LABELS), are bound; the modules gin/base.gin
  imports are imported.  A λ calibration run (label ``calibrate``) was written with the
  sweep's gin, over which nar_markov/calibrate.py gave its own label, length and λ:
  those are appended from its result.json, as today's runs write them
  (experiment.run_gin).  Values are copied as they are written.
* ``config.gin``, again: the launcher's module moved out of the library
  (``import nar_markov.cluster`` -> ``import launch.cluster``, `MOVED_MODULES`), so the
  Slurm resources and sweep axes it binds (``slurm_resources.*``, ``sweep_axes.*``)
  resolve; nothing else of the file changes.
* ``result.json``: ``lambda_calibration.record`` and ``.continued_from``, absolute paths
  of the machine that trained the run, become relative to the results folder the run
  was trained into (lambda_heuristic.legacy_relpath) -- the only edit made to a result.

Then each folder is checked as nar_markov.replay does (`replay.check_folder`).

CLI:
  python -m nar_markov.migrate_results results/          # rewrite, then check
  python -m nar_markov.migrate_results results/ --check  # only check
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

from nar_markov import lambda_heuristic
from nar_markov import replay
from nar_markov import runs
from nar_markov import runspec
from nar_markov.netconfig import NetConfig

# What gin/base.gin imports: the configurables a config.gin binds.
IMPORTS = ("import launch.cluster", "import nar_markov.experiment",
           "import nar_markov.lambda_heuristic", "import nar_markov.netconfig")
# Modules a config.gin imported that have moved since: old -> new.
MOVED_MODULES = {"nar_markov.cluster": "launch.cluster"}
_IMPORT = re.compile(r"^import (" + "|".join(re.escape(m) for m in MOVED_MODULES) + r")\b", re.M)
_FLAT = re.compile(r"^run_experiment\.([a-z_][a-z0-9_]*)(\s*=)", re.M)
_MODEL = re.compile(r"^run_experiment\.model\s*=\s*'([a-z0-9_]+)'\s*$", re.M)
PATH_KEYS = ("record", "continued_from")


def flat_target(name: str) -> Optional[str]:
  """Today's configurable of an old flat `run_experiment.<name>` binding, or None for a
  parameter run_experiment still has."""
  for cls in (runspec.Protocol, NetConfig):
    if name in {f.name for f in dataclasses.fields(cls)}:
      return cls.__name__
  return "GatePenalty" if name == "lambda_gate" else None


def is_flat(text: str) -> bool:
  return any(flat_target(m.group(1)) for m in _FLAT.finditer(text))


def migrate_flat(text: str) -> str:
  """`text` (a config.gin) with its flat bindings renamed, the history and penalty its
  model label implied bound, and gin/base.gin's imports; unchanged if it has none."""
  if not is_flat(text):
    return text
  model = _MODEL.search(text)
  base = model and model.group(1).removesuffix(runspec.MULTITASK_SUFFIX)
  if base not in runspec.PAPER_LABELS:
    raise ValueError(f"model label {base!r}: not one of the paper's, whose history and "
                     "penalty the label implied")
  history, has_penalty = runspec.PAPER_LABELS[base]
  lam = re.search(r"^run_experiment\.lambda_gate\s*=\s*(.*?)\s*$", text, re.M)
  if not has_penalty and lam and lam.group(1) != "None":
    raise ValueError(f"a {base!r} run binds a lambda: not a config.gin this migrates")

  def rename(m):
    target = flat_target(m.group(1))
    return m.group(0) if target is None else f"{target}.{m.group(1)}{m.group(2)}"

  out = _FLAT.sub(rename, text)
  if not has_penalty:
    out = re.sub(r"^GatePenalty\.lambda_gate\s*=\s*None\s*\n", "", out, flags=re.M)
  missing = [line for line in IMPORTS if not re.search(rf"^{re.escape(line)}\b", out, re.M)]
  head = "\n".join(missing) + "\n\n" if missing else ""
  tail = ("\n# What the model label implied when this run was trained (bound since):\n"
          f"NetConfig.history = {history!r}\n")
  if has_penalty:
    tail += "run_experiment.penalty = @GatePenalty()\n"
  return head + out.rstrip("\n") + "\n" + tail


def migrate_imports(text: str) -> str:
  """`text` (a config.gin) importing today's module where one has moved (MOVED_MODULES)."""
  return _IMPORT.sub(lambda m: "import " + MOVED_MODULES[m.group(1)], text)


def calibration_overrides(result: Mapping[str, Any]) -> str:
  """What nar_markov/calibrate.py gave a calibration run over the sweep's gin (its
  label, the gated net, the calibration length on the same horizon, λ from step 0), as
  gin, from the run's result.json."""
  s = result["settings"]
  return ("\n# Given by nar_markov/calibrate.py over the sweep's gin above (from this "
          "run's result.json):\n"
          f"run_experiment.model = {result['model']!r}\n"
          "NetConfig.history = 'gated'\n"
          f"Protocol.train_steps = {int(s['train_steps'])!r}\n"
          f"Protocol.schedule_steps = {int(s['schedule_steps'])!r}\n"
          "run_experiment.penalty = @GatePenalty()\n"
          f"GatePenalty.lambda_gate = {float(result['lambda_gate'])!r}\n"
          f"GatePenalty.start_step = {int(result['penalty_start_step'])!r}\n")


def migrate_config(text: str, result: Optional[Mapping[str, Any]]) -> str:
  """config.gin `text` in today's bindings, giving the run of `result` (None: a folder
  without a result, flat bindings only)."""
  out = migrate_imports(migrate_flat(text))
  if result is not None and result.get("model") == "calibrate":
    model = _MODEL.findall(out)
    if not model or model[-1] != "calibrate":
      out = out.rstrip("\n") + "\n" + calibration_overrides(result)
  return out


def migrate_result_paths(text: str) -> str:
  """result.json `text` with lambda_calibration's absolute paths made relative, every
  other byte as it was; ValueError if anything else would change."""
  result = json.loads(text)
  info = result.get("lambda_calibration") or {}
  out = text
  for key in PATH_KEYS:
    old = info.get(key)
    if not old or not pathlib.PurePosixPath(old).is_absolute():
      continue
    new = lambda_heuristic.legacy_relpath(old)
    pattern = f'"{key}": {json.dumps(old)}'
    if new == old or out.count(pattern) != 1:
      raise ValueError(f"cannot make lambda_calibration.{key} {old!r} relative")
    out = out.replace(pattern, f'"{key}": {json.dumps(new)}')
  if out != text:
    want = dict(result, lambda_calibration={
        **info, **{k: lambda_heuristic.legacy_relpath(v) for k, v in info.items()
                   if k in PATH_KEYS and v}})
    if json.loads(out) != want:
      raise ValueError("rewriting the paths would change more than the paths")
  return out


def run_folders(root) -> List[pathlib.Path]:
  """Every folder under `root` with a config.gin (a run, finished or not)."""
  return sorted(p.parent for p in pathlib.Path(root).glob(f"**/{runs.CONFIG_NAME}")
                if runs.ARCHIVE_DIR not in p.relative_to(root).parts)


def migrate_folder(folder: pathlib.Path) -> List[str]:
  """Rewrite `folder`'s config.gin and result.json where needed; the files rewritten."""
  changed = []
  result_path = folder / runs.RESULT_NAME
  result = None
  if result_path.exists():
    text = result_path.read_text(encoding="utf-8")
    result = json.loads(text)
    new = migrate_result_paths(text)
    if new != text:
      runs.atomic_write_bytes(result_path, new.encode("utf-8"))
      changed.append(str(result_path))
  gin_path = folder / runs.CONFIG_NAME
  text = gin_path.read_text(encoding="utf-8")
  new = migrate_config(text, result)
  if new != text:
    runs.atomic_write_bytes(gin_path, new.encode("utf-8"))
    changed.append(str(gin_path))
  return changed


def absolute_paths(result: Mapping[str, Any]) -> Dict[str, str]:
  """lambda_calibration's paths that are still absolute."""
  info = result.get("lambda_calibration") or {}
  return {k: info[k] for k in PATH_KEYS
          if info.get(k) and pathlib.PurePosixPath(info[k]).is_absolute()}


def check_folders(root) -> Dict[pathlib.Path, str]:
  """Each finished run folder under `root` whose config.gin does not give its result's
  run, or whose result names an absolute path -> why."""
  problems = {}
  for result_path in runs.result_files(root):
    folder = result_path.parent
    try:
      plan = replay.check_folder(folder)
      if absolute_paths(plan.result):
        raise replay.ReplayError(f"absolute paths {absolute_paths(plan.result)}")
    except replay.ReplayError as e:
      problems[folder] = str(e)
  return problems


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m nar_markov.migrate_results",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("root", help="a results folder (all run folders under it)")
  parser.add_argument("--check", action="store_true", help="only check, rewrite nothing")
  args = parser.parse_args(argv)
  if not args.check:
    for folder in run_folders(args.root):
      for path in migrate_folder(folder):
        print(f"rewrote {path}")
  problems = check_folders(args.root)
  for folder, why in problems.items():
    print(f"{folder}: {why}", file=sys.stderr)
  print(f"{len(runs.result_files(args.root)) - len(problems)} finished runs replay from "
        f"their folders, {len(problems)} do not")
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
