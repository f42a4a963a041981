"""The λ calibration records: where they are, how they are written, read and checked.

A record, ``<results>/_calibration/<reading>[-<scope>]/<algorithm>.json``, holds every
measurement of one algorithm's calibration and the settings it was made with (λ is the
median over its seeds); docs/formats.md describes it.  The heuristic that fills it is
nar_markov/config/lambda_heuristic.py; nar_markov/training/calibrate.py trains and writes.
Here: the records' and calibration runs' paths, reading a record and checking it against a
run's settings (`load_lambda`), and the saved state a G-ForgetNet run continues from
(`continuation`).  Imports no jax.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from nar_markov.config.lambda_heuristic import READINGS, CalibrationError, LambdaHeuristic
from nar_markov.store import definitions
from nar_markov.store import runs
from nar_markov.store import util

RECORD_SCHEMA = "nar_markov.lambda_calibration/1"
CALIBRATION_DIR = "_calibration"
# The net's history scope a record was made under names its folder, so that records
# (and λ = 0 runs) of several scopes can share a results folder; the default scope's
# are where they have always been.
DEFAULT_SCOPE = "processor_decoder"


def calibration_root(results_dir) -> pathlib.Path:
  """`<results_dir>/_calibration`: the folder of the calibration records and runs."""
  return pathlib.Path(results_dir) / CALIBRATION_DIR


def _scoped(name: str, scope: Optional[str]) -> str:
  return name if scope in (None, DEFAULT_SCOPE) else f"{name}-{scope}"


def record_path(results_dir, reading: str, algorithm: str,
                scope: Optional[str] = None) -> pathlib.Path:
  """The path of `algorithm`'s calibration record under `reading`.

  `<results_dir>/_calibration/<reading>/<algorithm>.json`, in the folder `<reading>-<scope>`
  for a scope other than `DEFAULT_SCOPE`.

  Args:
    results_dir: the results folder.
    reading: one of `READINGS`.
    algorithm: the algorithm.
    scope: the nets' history scope (NetConfig.history_scope); None: the default.

  Raises:
    ValueError: an unknown reading.
  """
  if reading not in READINGS:
    raise ValueError(f"unknown λ reading {reading!r}; valid: {READINGS}")
  return calibration_root(results_dir) / _scoped(reading, scope) / f"{algorithm}.json"


def lambda0_results_dir(results_dir, scope: Optional[str] = None) -> pathlib.Path:
  """The results folder of the λ = 0 calibration runs, shared by both readings.

  `<results_dir>/_calibration/runs/lambda0`, `lambda0-<scope>` for a scope other than the
  default.
  """
  return calibration_root(results_dir) / "runs" / _scoped("lambda0", scope)


def trial_results_dir(results_dir, algorithm: str, seed: int, trial: int,
                      scope: Optional[str] = None) -> pathlib.Path:
  """The results folder of the constant reading's search trial `trial` of `algorithm`, `seed`.

  `<results_dir>/_calibration/runs/constant[-<scope>]/<algorithm>/seed<seed>/trial<trial>`,
  the scope named only where it is not the default.
  """
  return (calibration_root(results_dir) / "runs" / _scoped("constant", scope) / algorithm
          / f"seed{int(seed)}" / f"trial{int(trial)}")


def check_results_dir(results_dir) -> pathlib.Path:
  """`results_dir` with `~` expanded, if it can be a results folder (it need not exist yet).

  Raises:
    CalibrationError: it is a file.
  """
  path = pathlib.Path(results_dir).expanduser()
  if path.exists() and not path.is_dir():
    raise CalibrationError(f"--results {path} is a file, not a results folder")
  return path


def atomic_write_json(path: pathlib.Path, obj: Any) -> None:
  """Writes `obj` to `path` as indented JSON, atomically (`runs.atomic_write_bytes`)."""
  runs.atomic_write_bytes(path, json.dumps(obj, indent=1).encode())


def read_record(path: pathlib.Path) -> Optional[Dict[str, Any]]:
  """The calibration record at `path`, checked; None where there is no file.

  A record is a JSON object with the schema tag `RECORD_SCHEMA`, a "lambda" >= 0 and the
  keys "algorithm", "reading", "settings", "seeds" and "calibration_step".  An unusable
  record is never overwritten or deleted here: the error names the file, and the user
  decides (move it aside to recalibrate).

  Raises:
    CalibrationError: the file does not read or parse, or is not a valid record.
  """
  path = pathlib.Path(path)
  if not path.exists():
    return None
  try:
    record = json.loads(path.read_text())
  except (OSError, ValueError) as e:
    raise CalibrationError(f"calibration record {path} is unreadable ({e}); move it "
                           "aside to recalibrate (it is not overwritten)") from e
  problems = []
  if not isinstance(record, dict):
    problems.append("not a JSON object")
  else:
    if record.get("schema") != RECORD_SCHEMA:
      problems.append(f"schema {record.get('schema')!r}, expected {RECORD_SCHEMA!r}")
    lam = record.get("lambda")
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not lam >= 0:
      problems.append(f"lambda {lam!r} is not a number >= 0")
    for key in ("algorithm", "reading", "settings", "seeds", "calibration_step"):
      if key not in record:
        problems.append(f"no {key!r}")
  if problems:
    raise CalibrationError(f"calibration record {path} is not a valid record ("
                           + "; ".join(problems) + "); move it aside to recalibrate "
                           "(it is not overwritten)")
  return record


def record_settings(settings: Mapping[str, Any], exclude: Sequence[str] = ()) -> Dict[str, Any]:
  """What a record keeps of a run's settings, and must agree on with every run that uses it.

  All but "train_steps" (the calibration trains to the switch only) and `exclude`
  (`runspec.record_settings` excludes the penalty's strength once on).
  """
  return {k: v for k, v in settings.items() if k != "train_steps" and k not in exclude}


def settings_mismatch(record: Mapping[str, Any], settings: Mapping[str, Any]) -> List[str]:
  """`key: record X vs run Y` for each setting in which a record and a run differ.

  Args:
    record: the calibration record.
    settings: the run's settings as a record keeps them (`runspec.record_settings`); a
      "train_steps" among them is ignored.  Compared over the keys of both sides, a key
      missing on one side as None (`definitions.definition_mismatch`).
  """
  return [f"{key}: record {theirs!r} vs run {ours!r}" for key, theirs, ours in
          definitions.definition_mismatch(record, {"settings": record_settings(settings)})]


def load_lambda(results_dir, algorithm: str, heuristic: LambdaHeuristic,
                settings: Mapping[str, Any]) -> Tuple[float, Dict[str, Any]]:
  """λ of a G-ForgetNet run of `algorithm`, and its provenance, from the calibration record.

  The record (`record_path` of the heuristic's reading and the settings' history_scope)
  must have been made with the same settings (`settings_mismatch`) and the same heuristic
  (`record_heuristic`).

  Args:
    results_dir: the results folder the record lies under.
    algorithm: the algorithm.
    heuristic: the run's λ heuristic.
    settings: the run's settings as a record keeps them (`runspec.record_settings`), with
      "schedule_steps".

  Returns:
    (λ, provenance): result.json's lambda_calibration, with "source" ("calibration
    record"), "record" (its path, `record_relpath`), and the record's reading, λ, status,
    calibration step, window, seeds, share and creation time.

  Raises:
    CalibrationError: there is no record (the message says how to make one), it is
      unusable (`read_record`), or it was made with other settings or another heuristic.
  """
  path = record_path(results_dir, heuristic.reading, algorithm, settings.get("history_scope"))
  record = read_record(path)
  if record is None:
    raise CalibrationError(
        f"no λ calibration record for {algorithm!r} ({heuristic.reading} reading) at "
        f"{path}: `python launch/sweep.py --gin gin/gforget.gin` calibrates first, or "
        f"`python -m nar_markov.training.calibrate --gin <files> --algorithm {algorithm} "
        "--results <results>`; or bind run_experiment.lambda_gate by hand")
  problems = settings_mismatch(record, settings)
  expected = record_heuristic(heuristic, settings["schedule_steps"])
  for key, value in expected.items():
    if definitions.normalize(record.get(key)) != definitions.normalize(value):
      problems.append(f"{key}: record {record.get(key)!r} vs run {value!r}")
  if problems:
    raise CalibrationError(f"calibration record {path} was made with other settings: "
                           + "; ".join(problems) + ". Use another results folder, or "
                           "move the record aside to recalibrate")
  return float(record["lambda"]), {
      "source": "calibration record", "record": record_relpath(path, results_dir),
      "reading": record["reading"], "lambda": float(record["lambda"]),
      "status": record.get("status"), "calibration_step": record["calibration_step"],
      "window_steps": record.get("window_steps"),
      "seeds": [s["seed"] for s in record["seeds"]],
      "share": record.get("share"), "created": record.get("created")}


def record_relpath(path, results_dir) -> str:
  """How result.json names a file of its results folder: relative to `results_dir`.

  Used for a calibration record and for the state a run continued from, so that results
  read the same on any machine.  `path` is tried relative to `results_dir` as given, then
  resolved; a path outside it is returned as it is.

  Args:
    path: the file.
    results_dir: the folder the run was trained into.

  Returns:
    The relative posix path, or `str(path)`.
  """
  path, root = pathlib.Path(path), pathlib.Path(results_dir)
  for base in (root, root.resolve()):
    try:
      return path.relative_to(base).as_posix()
    except ValueError:
      pass
  return str(path)


def legacy_relpath(path) -> str:
  """The `record_relpath` form of an absolute path into a `_calibration/` folder.

  For results that recorded the absolute path on the machine that trained them
  (``<its results folder>/_calibration/...``): its part from ``_calibration/`` on.  Any
  other path comes back as it is (a str).
  """
  p = pathlib.PurePosixPath(path)
  if p.is_absolute() and CALIBRATION_DIR in p.parts:
    return pathlib.PurePosixPath(*p.parts[p.parts.index(CALIBRATION_DIR):]).as_posix()
  return str(path)


def resolve_recorded(path, results_dir=None) -> pathlib.Path:
  """The file a result names, in `record_relpath`'s form or as an absolute path.

  Args:
    path: the recorded path.
    results_dir: the folder the run was trained into, under which a relative `path` lies;
      None: `path` is returned as it is.
  """
  path = pathlib.Path(path)
  if path.is_absolute() or results_dir is None:
    return path
  return pathlib.Path(results_dir) / path


def record_heuristic(h: LambdaHeuristic, schedule_steps: int) -> Dict[str, Any]:
  """The heuristic's settings a record is keyed by, for a schedule of `schedule_steps`.

  Returns:
    {"reading", "calibration_step", "window_steps", "calibration_seeds"}, and for the
    constant reading "band" and "max_trials".
  """
  out = {"reading": h.reading, "calibration_step": h.calibration_step(schedule_steps),
         "window_steps": h.window_steps(schedule_steps),
         "calibration_seeds": list(h.seeds)}
  if h.reading == "constant":
    out.update(band=list(h.band), max_trials=h.max_trials)
  return out


def continuation_state(record: Mapping[str, Any], entry: Mapping[str, Any]) -> Optional[str]:
  """The saved state at the calibration step that G-ForgetNet's run of a seed begins with.

  Schedule reading: the λ = 0 run's state (no penalty before the switch).  Constant
  reading: the chosen search trial's, only where its λ is the record's (the median over
  seeds may be another seed's).

  Args:
    record: the calibration record.
    entry: the seed's item of `record["seeds"]`.

  Returns:
    The state's path as the record names it, or None.
  """
  if record["reading"] == "schedule":
    return entry.get("final_state")
  if math.isclose(entry["lambda"], record["lambda"], rel_tol=1e-12):
    return entry.get("chosen_state")
  return None


@dataclasses.dataclass(frozen=True)
class Continuation:
  """Where a G-ForgetNet run begins instead of step 0: `state`, saved at `step` by a
  calibration run of its seed trained with λ = `lam` from step 0."""
  state: pathlib.Path
  step: int
  lam: float


def continuation(record_info: Mapping[str, Any], seed: int, *, lam: float,
                 penalty_start: int, lambda_constant: bool = True,
                 results_dir=None) -> Optional[Continuation]:
  """The calibration state a run of `seed` continues from, or None: it starts at step 0.

  It continues only where its training up to the calibration step is that run's: schedule
  reading, penalty off until the calibration step, as in the λ = 0 run; constant reading,
  penalty on from step 0 with the record's λ, one value throughout (no ramp, no
  adaptation), as in the chosen trial.  The state must exist (`continuation_state` says
  which).

  Args:
    record_info: the run's λ provenance (`load_lambda`'s), which names the record.
    seed: the run's seed.
    lam: the run's λ.
    penalty_start: the run's first penalised step.
    lambda_constant: whether the run's λ is one value throughout.
    results_dir: the folder the run trains into, under which a relative record path lies
      (`resolve_recorded`).

  Returns:
    The `Continuation` (its λ 0.0 under the schedule reading, else `lam`), or None.

  Raises:
    CalibrationError: the record is missing or unusable (`read_record`).
  """
  reading, step = record_info["reading"], int(record_info["calibration_step"])
  if penalty_start != (step if reading == "schedule" else 0):
    return None
  record_path = resolve_recorded(record_info["record"], results_dir)
  record = read_record(record_path)
  if record is None:
    raise CalibrationError(f"calibration record {record_path}, which the run's lambda came "
                           "from, is gone; restore it or recalibrate")
  if reading == "constant" and not (
      lambda_constant and math.isclose(lam, record["lambda"], rel_tol=1e-12)):
    return None
  entry = next((s for s in record["seeds"] if s["seed"] == int(seed)), None)
  named = continuation_state(record, entry) if entry is not None else None
  if not named:
    return None
  path = located_state(named, record_path)
  if path is None:
    util.log(f"seed {seed}: the calibration state {named} (record {record_path}) is not "
             f"there, nor under that record's results folder: training from step 0, "
             f"{step} more steps than continuing from it")
    return None
  return Continuation(path, step, 0.0 if reading == "schedule" else float(lam))


def located_state(named, record_path) -> Optional[pathlib.Path]:
  """Where a state a calibration record names is: the path as recorded, else the same
  place under the folder that holds the record's `_calibration/` (a results folder moved or
  copied, with its calibration runs, since the record was written); None: neither exists.

  Args:
    named: the state's path as the record names it (absolute, written by calibrate.py).
    record_path: where the record is now.
  """
  named = pathlib.Path(named)
  if named.exists():
    return named
  parts, record_parts = named.parts, pathlib.Path(record_path).parts
  if CALIBRATION_DIR not in parts or CALIBRATION_DIR not in record_parts:
    return None
  root = pathlib.Path(*record_parts[:record_parts.index(CALIBRATION_DIR)])
  moved = root.joinpath(*parts[parts.index(CALIBRATION_DIR):])
  return moved if moved.exists() else None


# -- all records of a results folder ---------------------------------------------


def read_records(results_dir) -> Dict[Tuple[str, str], Any]:
  """Every calibration record under `results_dir`, read.

  Returns:
    (reading, algorithm) -> the record, or the `CalibrationError` of an unusable one; the
    reading is `<reading>-<scope>` for a net of another history scope than the default.
  """
  out = {}
  root = calibration_root(results_dir)
  folders = [root / r for r in READINGS] + sorted(
      p for r in READINGS for p in root.glob(f"{r}-*") if p.is_dir())
  for folder in folders:
    for path in sorted(folder.glob("*.json")):
      try:
        out[(folder.name, path.stem)] = read_record(path)
      except CalibrationError as e:
        out[(folder.name, path.stem)] = e
  return out


def format_records(results_dir) -> str:
  """The records under `results_dir` as text for calibrate --show: one line each (or "none")."""
  records = read_records(results_dir)
  if not records:
    return f"no λ calibration records under {calibration_root(results_dir)}"
  lines = []
  for (reading, alg), rec in sorted(records.items()):
    if isinstance(rec, Exception):
      lines.append(f"  {reading:<9} {alg:<30} UNUSABLE: {rec}")
      continue
    lines.append(f"  {reading:<9} {alg:<30} λ = {rec['lambda']:.6g}  share "
                 f"{rec.get('share', float('nan')):.3f}  step {rec['calibration_step']}  "
                 f"seeds {[s['seed'] for s in rec['seeds']]}  {rec.get('status')}")
  return "\n".join(lines)
