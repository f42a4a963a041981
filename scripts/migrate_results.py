"""Brings results written by older versions up to today's formats, in place, changing no number.

Owns these rewrites of a run folder, each idempotent:

* ``config.gin``: the old flat bindings (``run_experiment.batch_size``, ...,
  ``run_experiment.lambda_gate``) become today's (``Protocol.*``, ``NetConfig.*``,
  ``GatePenalty.lambda_gate``); the net's history and the gate penalty, which the model
  label implied then (components.PAPER_LABELS), are bound; the modules gin/base.gin
  imports are imported.  A λ calibration run (label ``calibrate``) was written with the
  sweep's gin, over which nar_markov/training/calibrate.py gave its own label, length and λ:
  those are appended from its result.json, as today's runs write them
  (experiment.run_gin).  Values are copied as they are written.
* ``config.gin``, again: the launcher's module moved out of the library
  (``import nar_markov.cluster`` -> ``import launch.cluster``, `MOVED_MODULES`), so the
  Slurm resources and sweep axes it binds (``slurm_resources.*``, ``sweep_axes.*``)
  resolve; nothing else of the file changes.
* ``result.json``: ``lambda_calibration.record`` and ``.continued_from``, absolute paths
  of the machine that trained the run, become relative to the results folder the run
  was trained into (calibration_records.legacy_relpath) -- the only edit of a value.
  A result written before result.json recorded them gains, every other byte kept:
  ``selection`` (`recovered_selection`: each rule's step from ``curves.val``, a test score
  only where that step is the tested one), and ``commit``, ``dirty`` and ``provenance``
  (`recovered_provenance`: the commit that added the file, the code that trained it where
  a record outside the result names it -- ``--trained-from COMMIT --evidence TEXT`` -- else
  a line saying that it cannot be recovered).

Then each folder is checked as nar_markov.tools.replay does (`replay.check_folder`).

CLI:
  python scripts/migrate_results.py results/          # rewrite, then check
  python scripts/migrate_results.py results/ --check  # only check
  python scripts/migrate_results.py results/pilot --trained-from 1482029 \
      --evidence "commit 048d68a: the pilot is running from the frozen tree at 1482029"
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

if __package__ in (None, ""):  # run by path: the repository root first, as benchmarks/ do
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from nar_markov.config import components
from nar_markov.config import gin_files
from nar_markov.config import calibration_records
from nar_markov.config.netconfig import NetConfig
from nar_markov.store import runs
from nar_markov.tools import replay

# What gin/base.gin imports: the configurables a config.gin binds.
IMPORTS = ("import nar_markov.training.experiment",
           "import nar_markov.config.lambda_heuristic", "import nar_markov.config.netconfig")
# Modules a config.gin imported that have moved since: old -> new.
# Modules gin files import that moved: the launcher's out of the library, then (issue 74)
# the library's flat modules into its subpackages.
MOVED_MODULES = {"nar_markov.cluster": "launch.cluster",
                 "nar_markov.experiment": "nar_markov.training.experiment",
                 "nar_markov.lambda_heuristic": "nar_markov.config.lambda_heuristic",
                 "nar_markov.netconfig": "nar_markov.config.netconfig",
                 "nar_markov.runspec": "nar_markov.config.runspec"}
_IMPORT = re.compile(r"^import (" + "|".join(re.escape(m) for m in MOVED_MODULES) + r")\b", re.M)
_FLAT = re.compile(r"^run_experiment\.([a-z_][a-z0-9_]*)(\s*=)", re.M)
_MODEL = re.compile(r"^run_experiment\.model\s*=\s*'([a-z0-9_]+)'\s*$", re.M)
PATH_KEYS = ("record", "continued_from")


def flat_target(name: str) -> Optional[str]:
  """Today's configurable of an old flat `run_experiment.<name>` binding, or None for a
  parameter run_experiment still has."""
  for cls in (components.Protocol, NetConfig):
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
  base = model and model.group(1).removesuffix(components.MULTITASK_SUFFIX)
  if base not in components.PAPER_LABELS:
    raise ValueError(f"model label {base!r}: not one of the paper's, whose history and "
                     "penalty the label implied")
  history, has_penalty = components.PAPER_LABELS[base]
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
  """`text` (a config.gin) importing today's module where one has moved (MOVED_MODULES),
  and without the launcher's (`gin_files.without_launcher`)."""
  return gin_files.without_launcher(_IMPORT.sub(lambda m: "import " + MOVED_MODULES[m.group(1)], text))


def calibration_overrides(result: Mapping[str, Any]) -> str:
  """What nar_markov/training/calibrate.py gave a calibration run over the sweep's gin (its
  label, the gated net, the calibration length on the same horizon, λ from step 0), as
  gin, from the run's result.json."""
  s = result["settings"]
  return ("\n# Given by nar_markov/training/calibrate.py over the sweep's gin above (from this "
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
    new = calibration_records.legacy_relpath(old)
    pattern = f'"{key}": {json.dumps(old)}'
    if new == old or out.count(pattern) != 1:
      raise ValueError(f"cannot make lambda_calibration.{key} {old!r} relative")
    out = out.replace(pattern, f'"{key}": {json.dumps(new)}')
  if out != text:
    want = dict(result, lambda_calibration={
        **info, **{k: calibration_records.legacy_relpath(v) for k, v in info.items()
                   if k in PATH_KEYS and v}})
    if json.loads(out) != want:
      raise ValueError("rewriting the paths would change more than the paths")
  return out


SELECTION_RULES = ("first_best", "last_best", "final")  # = nar_markov.training.train's (jax there)
SELECTION_RECOVERED = ("recovered from curves.val by nar_markov.migrate_results (the result "
                       "predates selection): each rule's step; a test score only where the "
                       "step is the tested one, the other steps' parameters were not kept")
UNRECOVERABLE = ("which commit trained this run was not recorded and cannot be recovered: the "
                 "code is that of added_in (the commit that added this result) or older")


def recovered_selection(result: Mapping[str, Any]) -> Dict[str, Any]:
  """{"selection": ...} for a result written before it was recorded, else {}. The steps
  are train.py's: run.py's first best (the first validation at the best score: its
  val_best_step, checked), the last step that validates at the best, the final step."""
  if "selection" in result:
    return {}
  val = result["curves"]["val"]
  best = max(val["score"])
  at_best = [s for s, v in zip(val["step"], val["score"]) if v >= best]
  if at_best[0] != result.get("val_best_step"):
    raise ValueError(f"curves.val's first best is step {at_best[0]}, val_best_step "
                     f"{result.get('val_best_step')}: not a selection to recover")
  final = None if result["status"] == "diverged" else result["steps"]
  tested = {"step": at_best[0], "test_score": result["test_score"]}
  rule = lambda step: dict(tested) if step == tested["step"] else {"step": step,
                                                                   "test_score": None}
  return {"selection": {"rule": SELECTION_RULES[0], SELECTION_RULES[0]: tested,
                        "last_best": rule(at_best[-1]), "final": rule(final),
                        "recovered": SELECTION_RECOVERED}}


def recovered_provenance(result: Mapping[str, Any], added_in: Optional[str],
                         trained_from: Optional[str] = None,
                         evidence: Optional[str] = None) -> Dict[str, Any]:
  """{"commit", "dirty", "provenance"} for a result written before result.json recorded
  its commit, else {}: `added_in` the commit that added it to the repository;
  `trained_from` the commit that trained it, where `evidence` (a record outside the
  result) names it; else a line saying that it cannot be recovered."""
  if "commit" in result:
    return {}
  if bool(trained_from) != bool(evidence):
    raise ValueError("a commit that trained a run is recovered with the evidence that "
                     "names it, and only with it")
  return {"commit": trained_from, "dirty": None,
          "provenance": {"recorded": False, "added_in": added_in,
                         "trained_from": trained_from,
                         "evidence": evidence if trained_from else UNRECOVERABLE}}


def append_fields(text: str, fields: Mapping[str, Any]) -> str:
  """result.json `text` (json.dumps(indent=1), as train.py writes it) with `fields`
  appended as new top-level keys, every byte before them kept; ValueError if a key is
  there already or the text is not an object."""
  if not fields:
    return text
  old = json.loads(text)
  body = text.rstrip()
  if not isinstance(old, dict) or not body.endswith("}") or set(fields) & set(old):
    raise ValueError("not a result.json to append to, or a field it already has")
  lines = [f" {json.dumps(k)}: " + json.dumps(v, indent=1).replace("\n", "\n ")
           for k, v in fields.items()]
  out = body[:-1].rstrip() + ",\n" + ",\n".join(lines) + "\n}"
  if json.loads(out) != dict(old, **fields):
    raise ValueError("appending would change what the result already says")
  return out


def git_added_in(path) -> Optional[str]:
  """The commit that first added `path` to its git repository (renames followed); None
  outside git, or for a file not committed."""
  path = pathlib.Path(path).resolve()
  try:
    proc = subprocess.run(["git", "-C", str(path.parent), "log", "--follow",
                           "--diff-filter=A", "--format=%H", "--", path.name],
                          capture_output=True, text=True, timeout=30, check=False)
  except (OSError, subprocess.SubprocessError):
    return None
  found = proc.stdout.split() if proc.returncode == 0 else []
  return found[-1] if found else None


def resolve_commit(commit: str, before: Optional[str], where) -> str:
  """`commit`'s full hash; ValueError unless it exists and is `before` or its ancestor."""
  def git(*args):
    return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                          timeout=30, check=False)
  found = git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
  if found.returncode != 0:
    raise ValueError(f"--trained-from {commit}: no such commit")
  full = found.stdout.strip()
  if before and git("merge-base", "--is-ancestor", full, before).returncode != 0:
    raise ValueError(f"--trained-from {commit} is not an ancestor of {before}, the commit "
                     "that added the result")
  return full


def run_folders(root) -> List[pathlib.Path]:
  """Every folder under `root` with a config.gin (a run, finished or not)."""
  return sorted(p.parent for p in pathlib.Path(root).glob(f"**/{runs.CONFIG_NAME}")
                if runs.ARCHIVE_DIR not in p.relative_to(root).parts)


def migrate_folder(folder: pathlib.Path, trained_from: Optional[str] = None,
                   evidence: Optional[str] = None) -> List[str]:
  """Rewrite `folder`'s config.gin and result.json where needed; the files rewritten.
  `trained_from`, `evidence`: the commit that trained a result that does not say, and
  the record that names it (`recovered_provenance`)."""
  changed = []
  result_path = folder / runs.RESULT_NAME
  result = None
  if result_path.exists():
    text = result_path.read_text(encoding="utf-8")
    result = json.loads(text)
    new = migrate_result_paths(text)
    if "commit" not in result or "selection" not in result:
      added_in = git_added_in(result_path)
      commit = trained_from and resolve_commit(trained_from, added_in, folder)
      new = append_fields(new, {**recovered_selection(result),
                                **recovered_provenance(result, added_in, commit, evidence)})
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
  parser = argparse.ArgumentParser(prog="python scripts/migrate_results.py",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("root", help="a results folder (all run folders under it)")
  parser.add_argument("--check", action="store_true", help="only check, rewrite nothing")
  parser.add_argument("--trained-from", default=None,
                      help="the commit that trained the results under root that record none")
  parser.add_argument("--evidence", default=None,
                      help="with --trained-from: the record (outside the results) naming it")
  args = parser.parse_args(argv)
  if bool(args.trained_from) != bool(args.evidence):
    parser.error("--trained-from and --evidence go together")
  if not args.check:
    try:
      for folder in run_folders(args.root):
        for path in migrate_folder(folder, args.trained_from, args.evidence):
          print(f"rewrote {path}")
    except ValueError as e:
      parser.exit(2, f"migrate_results: error: {e}\n")
  problems = check_folders(args.root)
  for folder, why in problems.items():
    print(f"{folder}: {why}", file=sys.stderr)
  print(f"{len(runs.result_files(args.root)) - len(problems)} finished runs replay from "
        f"their folders, {len(problems)} do not")
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
