"""The one owner of the results format: run folders, file names, the result schema, done-ness.

Imports no jax: the launcher, ``--status`` and the analysis read results through it.

A run ``<results>/<model>/<algorithm>/seed<k>/`` is **done** when `check_result` says so: its
``result.json`` parses, has the schema (`result_problems`), a final status (done or diverged)
and the definition the caller asks for -- model, algorithm, seed, the training settings
(``runspec.run_settings``) and λ (value, reading of the heuristic, first penalised step) --
and the files that replay and re-score it read back (`run_file_problems`: ``config.gin``, and
``params.npz`` where there is one). A file that merely exists is not enough. The verdicts:

  done / diverged   a valid result with the asked-for definition, its files readable;
  missing           no result.json;
  corrupt           unreadable, not the schema, not a final status, a config.gin
                    missing or empty, or a params.npz cut short: result.json moved aside
                    (`archive.move_aside`, never deleted) and the run trained again;
  other             a valid result made with another definition (without one: another
                    run's, by the model, algorithm and seed of its folder), or one without
                    a "settings" record, whose settings cannot be checked: never counted
                    as done, never silently retrained -- the sweep refuses; `archive.archive_run`
                    moves it away.

How a run's definition is compared: nar_markov.store.definitions; results moved away:
nar_markov.store.archive; training-state files (checkpoints): nar_markov.store.state_files;
the locks on run and results folders: nar_markov.store.locks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import re
import tempfile
import zipfile
import zlib
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from nar_markov.store import util
from nar_markov.store import definitions

# Where a user's runs go unless told otherwise (gitignored): results/ holds the committed
# evidence, curated, and is no place for a new sweep's runs.
DEFAULT_RESULTS = "runs"
RESULT_SCHEMA = "nar_markov.result/1"
RESULT_NAME = "result.json"
CHECKPOINT_NAME = "checkpoint.npz"  # training state (nar_markov.store.state_files)
# A calibration run's state at its last step, from which G-ForgetNet's run of
# the same seed continues under the schedule reading (nar_markov/training/calibrate.py).
FINAL_STATE_NAME = "final_state.npz"
PARAMS_NAME = "params.npz"  # best-validation parameters (nar_markov.store.params_io)
# A parameters file's format tag, and the entry of its JSON header (nar_markov.store.params_io).
PARAMS_FORMAT = "nar_markov.params/1"
PARAMS_HEADER_KEY = "__nar_markov__"
# The tested checkpoint's test score with h(t-1) zeroed and its gate norm there
# (`python -m nar_markov.probes.evaluate <run> --markov`): small, committed beside result.json
# where params.npz never is (`read_markov`).
MARKOV_NAME = "markov.json"
MARKOV_SCHEMA = "nar_markov.markov/1"
CONFIG_NAME = "config.gin"
LOCK_NAME = ".lock"  # nar_markov.store.locks: run_lock
SWEEP_LOCK = "_sweeps/.lock"  # and sweep_lock
ARCHIVE_DIR = "_archive"  # results moved away by `sweep.py --archive-mismatched`
FINAL_STATUSES = ("done", "diverged")

# key -> accepted types (bool is rejected separately: it is an int to Python).
REQUIRED = {
    "schema": (str,),
    "model": (str,),
    "algorithm": (str,),
    "seed": (int,),
    "status": (str,),
    "test_score": (int, float, type(None)),
    "steps": (int,),
    "train_steps": (int,),
}
# Optional keys: their type is checked when present and not null.
OPTIONAL = {
    "lambda_reading": (str,),
    "lambda_calibration": (dict,),
    "settings": (dict,),
}


MULTITASK_JOB_DIR = "_multitask"  # checkpoints of multi-task jobs (several algorithms)


def run_dir(results_dir, model: str, algorithm: str, seed: int) -> pathlib.Path:
  """The run folder `<results_dir>/<model>/<algorithm>/seed<seed>` (a path; nothing is created)."""
  return pathlib.Path(results_dir) / model / algorithm / f"seed{int(seed)}"


def multitask_job_dir(results_dir, model: str, seed: int) -> pathlib.Path:
  """The checkpoint folder of a multi-task job: `<results_dir>/_multitask/<model>/seed<seed>`.

  A multi-task job trains one processor on several algorithms with one seed; its results go
  to each algorithm's `run_dir`.
  """
  return pathlib.Path(results_dir) / MULTITASK_JOB_DIR / model / f"seed{int(seed)}"


def job_folder(results_dir, model: str, algorithms: Sequence[str], seed: int) -> pathlib.Path:
  """Where the job of `seed` on `algorithms` keeps its checkpoint.

  Returns:
    The `run_dir` of its one algorithm, or for several the `multitask_job_dir`.
  """
  if len(algorithms) == 1:
    return run_dir(results_dir, model, algorithms[0], seed)
  return multitask_job_dir(results_dir, model, seed)


def atomic_write_bytes(path: pathlib.Path, payload: bytes) -> None:
  """Writes `payload` to `path` atomically: a temp file in the same folder, fsync, rename.

  The folder is created if missing, and the file gets mode 0644 (readable by a shared
  group).  On any failure the temp file is removed and `path` is left as it was.
  """
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from a shared group
    with os.fdopen(fd, "wb") as f:
      f.write(payload)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


# -- the result schema -----------------------------------------------------------


def result_problems(result: Any, algorithms: Optional[Iterable[str]] = None) -> List[str]:
  """Why `result` (a parsed result.json) is not a usable run's result.

  Checks the required keys and their types (`REQUIRED`; a bool is not an int), the types of
  the optional keys present (`OPTIONAL`), the schema tag, a final status, and a test_score
  that is a fraction in [0, 1] (null only for a diverged run).

  Args:
    result: the parsed JSON.
    algorithms: the valid algorithm names to check "algorithm" against (the analysis
      passes CLRS-30's); None: not checked.

  Returns:
    One line per problem, [] for a usable result.  Where keys are missing or of the wrong
    type, only those problems are returned.
  """
  if not isinstance(result, dict):
    return [f"top level is {type(result).__name__}, not an object"]
  problems = []
  for key, types in REQUIRED.items():
    if key not in result:
      problems.append(f"missing key {key!r}")
    elif isinstance(result[key], bool) or not isinstance(result[key], types):
      problems.append(f"{key!r} has type {type(result[key]).__name__}")
  for key, types in OPTIONAL.items():
    value = result.get(key)
    if value is not None and not isinstance(value, types):
      problems.append(f"{key!r} has type {type(value).__name__}")
  if problems:
    return problems
  if result["schema"] != RESULT_SCHEMA:
    problems.append(f"schema {result['schema']!r} is not {RESULT_SCHEMA!r}")
  if result["status"] not in FINAL_STATUSES:
    problems.append(f"status {result['status']!r} not in {FINAL_STATUSES}")
  if algorithms is not None and result["algorithm"] not in set(algorithms):
    problems.append(f"algorithm {result['algorithm']!r} is not a CLRS-30 algorithm")
  score = result["test_score"]
  if score is None:
    if result["status"] != "diverged":
      problems.append("test_score is null but status is not diverged")
  elif not (math.isfinite(score) and 0.0 <= score <= 1.0):
    problems.append(f"test_score {score!r} is not a fraction in [0, 1]")
  return problems


def read_result(path) -> Tuple[Optional[dict], List[str]]:
  """Reads and checks a result.json.

  Returns:
    (the parsed JSON, its `result_problems`), or (None, [why]) where the file does not
    read or parse.
  """
  try:
    result = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
  except (OSError, UnicodeDecodeError, ValueError) as e:
    return None, [f"unreadable JSON ({e})"]
  return result, result_problems(result)


@dataclasses.dataclass(frozen=True)
class RunRecord:
  """One run's result.json, typed; `as_json` lays it out in the schema (`result_problems`).

  The training loop fills it in; every key of result.json comes from a field here.
  """
  model: str
  history: str                        # NetConfig.history
  algorithm: str
  seed: int
  steps: int                          # trained (to the divergence, for a diverged run)
  train_steps: int
  diverged_step: Optional[int]
  test: Optional[Mapping[str, Any]]   # the first best's test: "score", "scores"
  val_best: Optional[float]
  val_best_step: Optional[int]
  lambda_gate: float
  lambda_reading: Optional[str]
  penalty_start_step: int
  lambda_calibration: Optional[Mapping[str, Any]]
  settings: Mapping[str, Any]         # runspec.run_settings
  validation_mode: str
  curves: Mapping[str, Any]
  train_time_s: float
  eval_time_s: float
  versions: Mapping[str, str]
  code_version: Mapping[str, Any]     # provenance.code_version
  device: Mapping[str, Any]
  gin_config: str
  selection: Mapping[str, Any]        # the test score under each selection rule
  lambda_updates: Optional[Sequence[Any]] = None   # adaptive λ: [step, λ, L, G] each
  multitask: Optional[Mapping[str, Any]] = None    # multitask_algorithms, _update, _val_mean_best

  def as_json(self) -> Dict[str, Any]:
    """The result.json dict, schema `RESULT_SCHEMA`; not yet JSON-safe (`write_result` is).

    Derives "status" ("diverged" where `diverged_step` is set, else "done"), "test_score" and
    "test_scores" (null without a test), "wall_time_s" and "steps_per_s"; copies hidden_size,
    batch_size, learning_rate, schedule_steps and train_lengths from the settings and the
    code version's keys to the top level; adds "lambda_updates" and the multi-task keys only
    where they are set.
    """
    s, test = self.settings, self.test
    result = {
        "schema": RESULT_SCHEMA, "model": self.model, "history": self.history,
        "algorithm": self.algorithm, "seed": self.seed,
        "status": "done" if self.diverged_step is None else "diverged",
        "steps": int(self.steps), "train_steps": self.train_steps,
        "diverged_step": self.diverged_step,
        "test_score": None if test is None else test["score"],
        "test_scores": None if test is None else test["scores"],
        "val_best": self.val_best, "val_best_step": self.val_best_step,
        "lambda_gate": self.lambda_gate, "lambda_reading": self.lambda_reading,
        "penalty_start_step": self.penalty_start_step,
        "lambda_calibration": self.lambda_calibration,
        **{k: s[k] for k in ("hidden_size", "batch_size", "learning_rate", "schedule_steps",
                             "train_lengths")},
        "validation_mode": self.validation_mode, "settings": s, "curves": self.curves,
        "wall_time_s": self.train_time_s + self.eval_time_s,
        "train_time_s": self.train_time_s, "eval_time_s": self.eval_time_s,
        "steps_per_s": self.steps / max(self.train_time_s, 1e-9),
        "versions": self.versions, **self.code_version, "device": self.device,
        "gin_config": self.gin_config, "selection": self.selection,
    }
    if self.lambda_updates is not None:
      result["lambda_updates"] = self.lambda_updates
    if self.multitask is not None:
      result.update(self.multitask)
    return result


def write_result(folder, record: RunRecord) -> None:
  """Writes `record` as `<folder>/result.json`, atomically.

  Values are made JSON-safe first (`util.jsonable`: no NaN, no numpy types).
  """
  atomic_write_bytes(pathlib.Path(folder) / RESULT_NAME,
                     json.dumps(util.jsonable(record.as_json()), indent=1).encode())


# -- is a run done? ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Verdict:
  """What a check found, of a run's result (`check_result`) or a checkpoint (`check_checkpoint`).

  `state` is done, diverged, missing, corrupt or other (of a checkpoint: missing, corrupt,
  other or resume); `path` the file judged; `detail` why, in one line; `result` the parsed
  result.json where it is valid (done, diverged, other).
  """
  state: str                      # done | diverged | missing | corrupt | other (| resume)
  path: pathlib.Path              # the result.json (check_checkpoint: the checkpoint)
  detail: str = ""
  result: Optional[dict] = None   # the parsed result (done, diverged, other)

  @property
  def done(self) -> bool:
    """Whether the run is finished: its state is "done" or "diverged"."""
    return self.state in FINAL_STATUSES


def check_result(run_folder, expected: Optional[Mapping[str, Any]] = None,
                 files: bool = True) -> Verdict:
  """Whether the run in `run_folder` is done.

  The one test of done-ness: the sweep, --dry-run, --status and run_experiment all use it.

  Args:
    run_folder: the run folder, `<results>/<model>/<algorithm>/seed<k>`.
    expected: the run's definition (`definition_mismatch`); a result without a "settings"
      record is then "other", its settings cannot be checked.  None checks only that the
      result is the run of its folder (`folder_run`), as ``--status`` without gin files does.
    files: also check the files beside the result (`run_file_problems`); replay, which
      trains the run again, passes False.

  Returns:
    A `Verdict` on `<run_folder>/result.json`: missing; corrupt (`result_problems`, or
    `run_file_problems`); other (another definition); else the result's final status,
    done or diverged.
  """
  path = pathlib.Path(run_folder) / RESULT_NAME
  if not path.exists():
    return Verdict("missing", path, "no result.json")
  result, problems = read_result(path)
  if problems:
    return Verdict("corrupt", path, "; ".join(problems))
  if expected is None:
    diffs = definitions.definition_mismatch(result, folder_run(run_folder))
    if diffs:
      return Verdict("other", path, "the result of another run: "
                     + definitions.format_mismatch(diffs, ours="its folder"), result)
  else:
    if not isinstance(result.get("settings"), dict):
      return Verdict("other", path, "no 'settings' record (written by an older version): "
                     "its settings cannot be checked", result)
    diffs = definitions.definition_mismatch(result, expected)
    if diffs:
      return Verdict("other", path,
                     "made with other settings: " + definitions.format_mismatch(diffs),
                     result)
  problems = run_file_problems(run_folder, result) if files else []
  if problems:
    return Verdict("corrupt", path, "; ".join(problems))
  return Verdict(result["status"], path,
                 f"diverged at step {result.get('diverged_step')}"
                 if result["status"] == "diverged" else f"test_score {result['test_score']}",
                 result)


_SEED_FOLDER = re.compile(r"seed(\d+)")


def folder_run(run_folder) -> dict:
  """The model, algorithm and seed a run folder `<model>/<algorithm>/seed<k>` is for.

  Returns:
    {"model", "algorithm", "seed"} from the path's last three parts; {} where the last part
    is not `seed<k>`.
  """
  folder = pathlib.Path(run_folder)
  m = _SEED_FOLDER.fullmatch(folder.name)
  if not m:
    return {}
  return {"model": folder.parent.parent.name, "algorithm": folder.parent.name,
          "seed": int(m.group(1))}


def run_file_problems(run_folder, result: Mapping[str, Any]) -> List[str]:
  """Why the files beside a valid result do not let the run be replayed and re-scored.

  Problems: config.gin missing, empty or unreadable; params.npz (the tested parameters)
  there but not reading back (`params_problem`: cut short by a full disk or a kill).  A
  params.npz that is not there is no problem: git keeps none (the runs committed under
  results/ have none, and are done), and replay makes it again.

  Args:
    run_folder: the run folder.
    result: the run's parsed result.json; not used by the checks.

  Returns:
    One line per problem; [] if there is none.
  """
  folder = pathlib.Path(run_folder)
  problems = []
  try:
    if not (folder / CONFIG_NAME).read_text(encoding="utf-8").strip():
      problems.append(f"{CONFIG_NAME} is empty: the run cannot be replayed")
  except FileNotFoundError:
    problems.append(f"no {CONFIG_NAME}: the run cannot be replayed")
  except (OSError, UnicodeDecodeError) as e:
    problems.append(f"{CONFIG_NAME} does not read back ({e}): the run cannot be replayed")
  if (folder / PARAMS_NAME).exists():
    why = params_problem(folder / PARAMS_NAME)
    if why:
      problems.append(f"{why}: its tested parameters cannot be scored again")
  return problems


def params_problem(path) -> Optional[str]:
  """Why `path` is not a whole parameters file (nar_markov.store.params_io), or None.

  Reads its zip directory and JSON header only, not its arrays: cheap enough for --status
  over a whole sweep.  A file cut short has no zip directory (it is a zip's last part).

  Returns:
    One line (no file, no header, does not read back, another format), or None.
  """
  path = pathlib.Path(path)
  try:
    # A zip's directory is its last part: a file cut short has none.
    with np.load(path, allow_pickle=False) as z:
      header = json.loads(str(z[PARAMS_HEADER_KEY]))
  except FileNotFoundError:
    return f"no {path.name}"
  except KeyError:
    return f"{path.name} is not a parameters file (no header)"
  except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
    return f"{path.name} does not read back ({type(e).__name__}: {e})"
  if not isinstance(header, dict) or header.get("format") != PARAMS_FORMAT:
    return f"{path.name} is not a parameters file (no {PARAMS_FORMAT!r} header)"
  return None


def refuse_other_settings(verdicts) -> None:
  """Refuses run folders whose results were made with other settings (the trainers' check).

  The trainers call it before touching a run folder; the sweep lists such results itself.

  Args:
    verdicts: the `Verdict`s of the runs (`check_result`).

  Raises:
    ValueError: some verdict is "other"; the message lists their paths and details, and
      the ways out (another results_dir, or launch/sweep.py --archive-mismatched).
  """
  other = [v for v in verdicts if v.state == "other"]
  if other:
    raise ValueError("results exist with other settings (not retrained, not "
                     "overwritten): " + " | ".join(f"{v.path}: {v.detail}" for v in other)
                     + ". Use another results_dir, or move them aside "
                     "(launch/sweep.py --archive-mismatched)")


def check_results_folder(results_dir) -> pathlib.Path:
  """`results_dir`, expanded and resolved, if a sweep can write there.

  The folder itself may be new, but its parent must exist.

  Returns:
    The resolved path.

  Raises:
    ValueError: (one line) it is a file, its parent is not an existing folder, or it (or
      its `_sweeps/` folder) is not writable by this user (permissions, a read-only file
      system).
  """
  path = pathlib.Path(results_dir).expanduser().resolve()
  if path.exists() and not path.is_dir():
    raise ValueError(f"{path} is a file, not a folder")
  if not path.exists() and not path.parent.is_dir():
    raise ValueError(f"{path}: its parent {path.parent} is not an existing folder")
  for folder in (path, path / pathlib.Path(SWEEP_LOCK).parent):
    target = folder if folder.exists() else folder.parent
    if target.exists() and not os.access(target, os.W_OK | os.X_OK, effective_ids=True):
      raise ValueError(f"{path} is not writable" + (f" ({target})" if target != path else ""))
  return path


def result_files(results_dir) -> List[pathlib.Path]:
  """Every result.json under `results_dir`, sorted, except those under `_archive/`."""
  root = pathlib.Path(results_dir)
  return sorted(p for p in root.glob(f"**/{RESULT_NAME}")
                if ARCHIVE_DIR not in p.relative_to(root).parts)


def read_markov(run_folder) -> Optional[dict]:
  """The run's markov.json (`MARKOV_NAME`), parsed and checked.

  Returns:
    The record, or None where the run folder has no markov.json.

  Raises:
    ValueError: (one line) the file does not read as JSON, or is not a `MARKOV_SCHEMA`
      record.
  """
  path = pathlib.Path(run_folder) / MARKOV_NAME
  if not path.is_file():
    return None
  try:
    record = json.loads(path.read_text(encoding="utf-8"))
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{path}: unreadable ({e})") from None
  if not isinstance(record, dict) or record.get("schema") != MARKOV_SCHEMA:
    raise ValueError(f"{path}: not a {MARKOV_SCHEMA} record")
  return record
