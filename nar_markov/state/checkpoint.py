"""A seed's training state, typed, and its checkpoint: saving, resuming, continuing a calibration.

`SeedState` is everything of one seed's training except its parameters, optimizer state
and data streams, which travel beside it.  On disk it is the dict `state_files.write_state`
stores (no pickle), format `state_files.CHECKPOINT_FORMAT`; `SeedState.from_state` also
reads such dicts that lack the entries of λ adaptation and of the last-at-best selection.  A G-ForgetNet run whose λ
comes from a calibration record starts from that calibration's saved state (`resume`;
calibration_records.continuation says which).  Imports no jax.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Sequence

from nar_markov.config import calibration_records
from nar_markov.config import runspec
from nar_markov.state.lambda_schedule import LambdaSchedule
from nar_markov.state.selection import Selection
from nar_markov.store import archive
from nar_markov.store import state_files
from nar_markov.store import util



def empty_curves() -> Dict[str, Dict[str, list]]:
  """One algorithm's curves before its first step (result.json's "curves")."""
  return {
      "train": {"step": [], "loss": [], "output_loss": [], "hint_loss": [],
                "gate_penalty": [], "gate_term": []},
      "val": {"step": [], "score": [], "hidden_norm": []},
      "hint_step_loss": {"step": [], "loss": []},
  }


@dataclasses.dataclass
class SeedState:
  """One seed's training state but its arrays: where it is, what it logged, what it keeps."""
  algorithms: List[str]
  definitions: List[Dict[str, Any]]   # what this seed's checkpoints are of (one per algorithm)
  curves: List[Dict[str, Any]]        # one per algorithm
  selection: Selection
  lambdas: LambdaSchedule
  step: int = 0
  train_time_s: float = 0.0           # accumulated over resumes
  eval_time_s: float = 0.0
  diverged_step: Optional[int] = None
  continued_from: Optional[str] = None  # the calibration state this run started from

  @classmethod
  def new(cls, algorithms: Sequence[str], definitions: List[Dict[str, Any]]) -> "SeedState":
    """A seed's state before its first step: empty curves, no selection, no λ adapted.

    Args:
      algorithms: the job's algorithms, in the net's order.
      definitions: their run definitions (with the seed), one per algorithm.
    """
    return cls(algorithms=list(algorithms), definitions=definitions,
               curves=[empty_curves() for _ in algorithms], selection=Selection(),
               lambdas=LambdaSchedule.start(len(algorithms)))

  def to_state(self, params, opt_leaves: Sequence[Any], streams: Sequence[Any]) -> Dict[str, Any]:
    """The dict a checkpoint stores: this state and the arrays that travel beside it.

    Args:
      params: the parameters.
      opt_leaves: the optimizer state's leaves.
      streams: each train stream's state dict.

    Returns:
      A dict for `state_files.write_state`, format `state_files.CHECKPOINT_FORMAT`;
      "continued_from" only where set.
    """
    out = {"format": state_files.CHECKPOINT_FORMAT, "algorithms": self.algorithms,
           "step": self.step,
           **self.selection.state(), "curves": self.curves, "train_time_s": self.train_time_s,
           "eval_time_s": self.eval_time_s, "diverged_step": self.diverged_step,
           "definitions": self.definitions, "lambda_now": self.lambdas.now,
           "lambda_updates": self.lambdas.updates, "params": params,
           "opt_state": list(opt_leaves), "streams": list(streams)}
    if self.continued_from is not None:
      out["continued_from"] = self.continued_from
    return out

  @classmethod
  def from_state(cls, state: Mapping[str, Any]) -> "SeedState":
    """A checkpoint's dict (`to_state`'s layout) as a SeedState, without params, opt_state, streams.

    A dict without "lambda_now" or "lambda_updates" reads as no λ adapted; one without the
    last-at-best selection gets it from its curves (`Selection.from_state`).
    """
    n = len(state["algorithms"])
    lambdas = LambdaSchedule(now=list(state.get("lambda_now") or [None] * n),
                             updates=list(state.get("lambda_updates") or [[] for _ in range(n)]))
    return cls(algorithms=list(state["algorithms"]), definitions=state.get("definitions"),
               curves=state["curves"], selection=Selection.from_state(state), lambdas=lambdas,
               step=state["step"], train_time_s=state["train_time_s"],
               eval_time_s=state["eval_time_s"], diverged_step=state["diverged_step"],
               continued_from=state.get("continued_from"))


@dataclasses.dataclass
class Saved:
  """A checkpoint read back: the state, and what travels beside it."""
  state: SeedState
  params: Any
  opt_leaves: List[Any]   # the optimizer state's leaves (Learner.restore_opt_state)
  streams: List[Any]      # each train stream's state_dict


def save(path: pathlib.Path, state: SeedState, params, opt_leaves, streams) -> None:
  """Writes a checkpoint (or a calibration's final state) atomically (`state_files.write_state`).

  Args:
    path: the file.
    state: the seed's state.
    params: the parameters.
    opt_leaves: the optimizer state's leaves.
    streams: each train stream's state dict.
  """
  state_files.write_state(path, state.to_state(params, opt_leaves, streams))


def load(path: pathlib.Path) -> Optional[Dict[str, Any]]:
  """The state dict saved at `path`, read without executing code (`state_files.read_state`).

  Returns:
    The dict; None where there is no file, or where it does not read (cut short by a kill):
    then it is moved aside (`archive.move_aside`, kept), a warning is logged, and the run
    starts from step 0.
  """
  if not path.exists():
    return None
  try:
    return state_files.read_state(path)
  except ValueError as e:  # a checkpoint cut short by a kill: start over, loudly
    util.log(f"WARNING: unreadable checkpoint {path} ({e}); moved aside to "
             f"{archive.move_aside(path)}; starting from step 0")
    return None


def check_resume(state: Mapping[str, Any], path: pathlib.Path,
                 expected: Sequence[Mapping[str, Any]]) -> None:
  """Refuses a checkpoint written for another job; the checkpoint is kept either way.

  A checkpoint that records no definitions is resumed unchecked (a warning is logged),
  unless its step is past the run's train_steps.  A recorded definition without a "history"
  key is compared as if it had the expected one.

  Args:
    state: the checkpoint's dict (`load`).
    path: its file, for the messages.
    expected: the job's definitions, one per algorithm, with the seed.

  Raises:
    ValueError: a format other than `state_files.CHECKPOINT_FORMAT`, other algorithms, a
      step past train_steps (no definitions recorded), or definitions that differ (the
      message names them).
  """
  problem = state_files.resume_problem(state, path, expected)
  if problem:
    kind, message = problem
    raise ValueError(message + _ADVICE[kind])
  if state.get("definitions") is None:  # written before checkpoints recorded their settings
    util.log(f"WARNING: {path} records no settings (an older checkpoint); resuming "
             "without checking them")


# What the refusal of each kind (`state_files.resume_problem`) tells the user to do.
_KEPT = "; the checkpoint is kept: use another results_dir or move it aside"
_ADVICE = {"format": _KEPT, "steps": _KEPT,
           "algorithms": "; remove it or use another results_dir",
           "definitions": (". The checkpoint is kept (not resumed, not overwritten): use "
                           "another results_dir, or move it aside to train this run from "
                           "step 0")}


def calibration_prefix(tasks: Sequence[runspec.Task], seed: int,
                       results_dir) -> Optional[calibration_records.Continuation]:
  """The calibration run's saved state that this seed's training continues from, if any.

  Only a single-task job whose λ comes from a calibration record, with the heuristic's
  reuse_calibration_prefix on, continues one; `calibration_records.continuation` decides
  whether and from which state.

  Args:
    tasks: the job's tasks.
    seed: the seed.
    results_dir: the folder the job trains into (a relative record path lies under it).

  Returns:
    The `calibration_records.Continuation`, or None.
  """
  if len(tasks) != 1:
    return None
  task = tasks[0]
  info = task.lambda_info
  if (not info or info.get("source") != "calibration record"
      or not info.get("reuse_calibration_prefix")):
    return None
  return calibration_records.continuation(
      info, seed, lam=task.lam, penalty_start=task.penalty_start,
      lambda_constant=task.penalty is None or task.penalty.acts_from_start_only,
      results_dir=results_dir)


def _from_prefix(prefix: calibration_records.Continuation, task: runspec.Task,
                 expected: Mapping[str, Any], name: str) -> Dict[str, Any]:
  """The calibration run's state at `prefix`, checked to be this run's first steps."""
  state = load(prefix.state)
  if state is None or state["step"] != prefix.step:
    raise ValueError(f"{prefix.state} does not hold the state at step {prefix.step}")
  # A calibration run of this seed, model `calibrate` (nar_markov/training/calibrate.py):
  # this run's settings and data trained to the calibration step with prefix.lam.
  # At lambda = 0 (schedule reading) the calibration run's penalty settings did nothing.
  recorded = state.get("definitions")
  if recorded and prefix.lam == 0:
    state = dict(state, definitions=[task.as_calibrated(d) for d in recorded])
  check_resume(state, prefix.state, [dict(
      expected, model="calibrate", lambda_gate=prefix.lam,
      lambda_reading=None, penalty_start_step=0,
      settings=dict(task.calibration_settings, train_steps=prefix.step))])
  util.log(f"{name}: continuing the calibration run's training (lambda = "
           f"{prefix.lam:.6g} from step 0) at step {prefix.step} ({prefix.state}): the "
           "same seed, data, schedule and penalty up to there, so the same training")
  return dict(state, continued_from=str(prefix.state))


def resume(path: pathlib.Path, tasks: Sequence[runspec.Task], seed: int,
           definitions: List[Dict[str, Any]], results_dir, name: str) -> Optional[Saved]:
  """Where seed `seed` of a job starts: its checkpoint, else a calibration prefix, else None.

  Args:
    path: the job's checkpoint file (an unreadable one is moved aside: `load`).
    tasks: the job's tasks.
    seed: the seed.
    definitions: the job's definitions, one per task, with the seed; the returned state
      records them.
    results_dir: the folder the job trains into.
    name: the run's name, for the log.

  Returns:
    The `Saved` state with its params, optimizer leaves and streams; None: from scratch.

  Raises:
    ValueError: the checkpoint or the calibration state is not this job's (`check_resume`),
      or the calibration state is missing or not at the calibration step.
  """
  state = load(path)
  if state is not None:
    check_resume(state, path, definitions)
    util.log(f"resuming {name} from step {state['step']}")
  else:
    prefix = calibration_prefix(tasks, seed, results_dir)
    if prefix is None:
      return None
    state = _from_prefix(prefix, tasks[0], definitions[0], name)
  typed = SeedState.from_state(state)
  typed.definitions = definitions
  return Saved(state=typed, params=state["params"], opt_leaves=state["opt_state"],
               streams=state["streams"])
