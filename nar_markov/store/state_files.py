"""Training-state files (checkpoints): their format, and what a trainer will make of one.

`write_state` stores a state dict atomically as one .npz file (its arrays as entries, the rest
as one JSON entry); `read_state` loads it without executing code (no pickle: results folders
may be shared); `check_checkpoint` says whether a job will resume from the checkpoint in its
folder.  The files' names and folders: nar_markov.store.runs (``CHECKPOINT_NAME``,
``FINAL_STATE_NAME``, `job_folder`).  Imports no jax.
"""

from __future__ import annotations

import io
import json
import pathlib
import zipfile
import zlib
from typing import Any, Mapping, Optional, Sequence, Tuple

import numpy as np

from nar_markov.store import definitions
from nar_markov.store import runs

# The format tag in every state file's JSON entry.
STATE_FORMAT = "nar_markov.state/1"

# The layout of a checkpoint's state dict (its "format"), which nar_markov.state.checkpoint
# writes and is the only one a trainer resumes from.
CHECKPOINT_FORMAT = 2


def write_state(path, state: Mapping[str, Any]) -> None:
  """Writes a training state (a checkpoint) atomically as one `.npz` file.

  Numpy arrays and scalars become the file's entries; everything else is one JSON entry
  (`__state__`, format tag `STATE_FORMAT`) that refers to them.  `read_state` loads it
  back without pickle (results folders may be shared).

  Args:
    path: the file to write (its folder is created).
    state: nested dicts (str keys not starting with '__'), lists, tuples, numpy arrays and
      scalars, bools, ints, floats, strs and None.

  Raises:
    TypeError: a dict key that is not a str or starts with '__', or a value of another
      type (a namedtuple among them).
  """
  arrays = {}

  def encode(x):
    if isinstance(x, (np.ndarray, np.generic)):
      key = f"a{len(arrays)}"
      arrays[key] = np.asarray(x)
      return {"__array__": key}
    if isinstance(x, dict):
      bad = [k for k in x if not isinstance(k, str) or k.startswith("__")]
      if bad:
        raise TypeError(f"state dict keys must be str not starting with '__', got {bad}")
      return {k: encode(v) for k, v in x.items()}
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
      return {"__tuple__": [encode(v) for v in x]}
    if isinstance(x, list):
      return [encode(v) for v in x]
    if x is None or isinstance(x, (bool, int, float, str)):
      return x
    raise TypeError(f"cannot store a {type(x).__name__} in a state file (arrays, dicts, "
                    "lists, tuples, numbers, strings only)")

  doc = json.dumps({"format": STATE_FORMAT, "state": encode(dict(state))})
  buf = io.BytesIO()
  np.savez(buf, __state__=np.array(doc), **arrays)
  runs.atomic_write_bytes(path, buf.getvalue())


def read_state(path, arrays: bool = True) -> Any:
  """Loads a state written by `write_state`, executing no code (`allow_pickle=False`).

  Args:
    path: the state file.
    arrays: False reads only the JSON entry, and every array comes back as None: cheap,
      for a look at its record.

  Returns:
    The state as written; tuples come back as tuples, numpy scalars as 0-d arrays.

  Raises:
    ValueError: the file is missing, unreadable or cut short, or not of `STATE_FORMAT`.
  """
  try:
    with np.load(path, allow_pickle=False) as z:
      doc = json.loads(str(z["__state__"]))
      stored = {k: z[k] for k in z.files if k != "__state__"} if arrays else {}
  except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
    raise ValueError(f"{path} is not a readable state file: {e!r}") from None
  if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
    raise ValueError(f"{path}: unknown state format {doc.get('format') if isinstance(doc, dict) else doc!r}")

  def decode(x):
    if isinstance(x, dict):
      if set(x) == {"__array__"}:
        return stored.get(x["__array__"])
      if set(x) == {"__tuple__"}:
        return tuple(decode(v) for v in x["__tuple__"])
      return {k: decode(v) for k, v in x.items()}
    if isinstance(x, list):
      return [decode(v) for v in x]
    return x

  return decode(doc["state"])


def resume_problem(state: Mapping[str, Any], path,
                   expected: Sequence[Mapping[str, Any]]) -> Optional[Tuple[str, str]]:
  """Why a trainer refuses to resume from a checkpoint's state dict; None if it resumes.

  The one check behind both the trainer (`checkpoint.check_resume`, which raises it) and
  `check_checkpoint` (which reports it).  A recorded definition without a "history" key is
  compared as if it had the expected one; a checkpoint that records no definitions is
  refused only past the run's train_steps.

  Args:
    state: the checkpoint's dict (`read_state`).
    path: its file, for the message.
    expected: the job's definitions, one per algorithm, with the seed.

  Returns:
    None, or (kind, message), kind one of 'format' (not `CHECKPOINT_FORMAT`), 'algorithms',
    'steps' (no definitions recorded, its step past train_steps), 'definitions' (the message
    names the settings that differ).
  """
  if state.get("format") != CHECKPOINT_FORMAT:
    return "format", (f"checkpoint {path} has format {state.get('format')!r}, this code "
                      f"reads {CHECKPOINT_FORMAT}")
  algorithms = [d["algorithm"] for d in expected]
  if state.get("algorithms") != algorithms:
    return "algorithms", (f"checkpoint {path} is for algorithms {state.get('algorithms')}, "
                          f"this run is on {algorithms}")
  recorded = state.get("definitions")
  if recorded is None:  # written before checkpoints recorded their settings
    train_steps = expected[0]["settings"]["train_steps"]
    if state["step"] > train_steps:
      return "steps", (f"checkpoint {path} is at step {state['step']}, this run has "
                       f"train_steps={train_steps}")
    return None
  # Written before the history policy was part of a definition: the label pinned it.
  recorded = [dict(r, history=r.get("history", e.get("history")))
              for r, e in zip(recorded, expected)]
  diffs = [d for r, e in zip(recorded, expected) for d in definitions.definition_mismatch(r, e)]
  if diffs:
    return "definitions", (f"checkpoint {path} was written with "
                           + ", ".join(f"{k}={a!r}" for k, a, _ in diffs) + "; this run has "
                           + ", ".join(f"{k}={b!r}" for k, _, b in diffs))
  return None


def check_checkpoint(folder, expected: Sequence[Mapping[str, Any]]) -> runs.Verdict:
  """What a trainer will make of the checkpoint in `folder`, read without its arrays.

  The trainer's own check (`resume_problem`), without loading the arrays.

  Args:
    folder: a run folder, or a multi-task job's folder (`runs.job_folder`).
    expected: the job's definitions (`runspec.run_definition` with the seed), one per
      algorithm, in the job's order.

  Returns:
    A `runs.Verdict` on the checkpoint's path, its state one of
      missing   there is none;
      corrupt   unreadable: the trainer moves it aside and trains from step 0;
      other     of another format, for other algorithms or settings, or past the run's
                steps: the trainer refuses it and keeps it, so a job for it is bound to
                fail;
      resume    the job will continue from it (detail: from which step).
  """
  path = pathlib.Path(folder) / runs.CHECKPOINT_NAME
  if not path.exists():
    return runs.Verdict("missing", path, "no checkpoint")
  try:
    state = read_state(path, arrays=False)
  except ValueError as e:
    return runs.Verdict("corrupt", path,
                        f"{e}; the job moves it aside and trains from step 0")
  problem = resume_problem(state, path, expected)
  if problem:
    return runs.Verdict("other", path, problem[1])
  return runs.Verdict("resume", path, f"resumes from step {state.get('step')}")
