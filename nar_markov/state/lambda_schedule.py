"""The gate penalty's weight at each training step of one seed: its start, ramp and adaptation.

What a task's penalty is -- λ, the first penalised step, `GatePenalty.ramp_steps` and
`adaptive_every_steps` -- is resolved before training (nar_markov/config/runspec.py); this is
how it acts step by step, and the λ that adapted so far, which a checkpoint keeps so
that a resumed run weighs its steps as a run from scratch does.  Imports no jax.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Mapping, Optional, Sequence

import numpy as np

from nar_markov.config import runspec
from nar_markov.store import util


@dataclasses.dataclass
class LambdaSchedule:
  """One seed's λ per algorithm: `now`, the adapted λ (None: as resolved), and
  `updates`, [step, λ, L, G] each time it adapted (result.json's lambda_updates)."""
  now: List[Optional[float]]
  updates: List[List[List[float]]]

  @classmethod
  def start(cls, nb_algorithms: int) -> "LambdaSchedule":
    """A schedule for `nb_algorithms` algorithms with no λ adapted yet."""
    return cls([None] * nb_algorithms, [[] for _ in range(nb_algorithms)])

  def at(self, task: runspec.Task, step: int) -> np.float32:
    """The penalty weight of `task` at train step `step` (0-based).

    0 before `task.penalty_start`; from there the task's λ (as adapted, else `task.lam`),
    times min(1, (step - penalty_start + 1) / ramp_steps) where `GatePenalty.ramp_steps` > 0.

    Returns:
      The weight, a numpy float32 scalar.
    """
    if step < task.penalty_start:
      # A numpy scalar: no eager conversion to compile, one compiled step for both.
      return np.float32(0.0)
    lam = self.now[task.index]
    lam = task.lam if lam is None else lam
    ramp = 0 if task.penalty is None else int(task.penalty.ramp_steps)
    if ramp:
      lam *= min(1.0, (step - task.penalty_start + 1) / ramp)
    return np.float32(lam)

  def adapt(self, tasks: Sequence[runspec.Task], step: int,
            curves: Sequence[Mapping[str, Any]], name: str) -> None:
    """Adapts the λ of each task whose `GatePenalty.adaptive_every_steps` is due at `step`.

    Due N = adaptive_every_steps steps after the task's last update (or its penalty start),
    for a task with a penalty and λ != 0: λ = lambda_scale * L / G over the train entries
    logged in (due - N, step] (L: output plus hint loss, G: gate term; their means), capped
    at adaptive_max_scale times the task's resolved λ (the cap also where G is not > 0).  Each
    update is logged and appended to `updates`; without logged entries nothing changes.

    Args:
      tasks: the job's tasks.
      step: the step just trained; its losses are already in `curves`.
      curves: the curves, one per algorithm (indexed by `task.index`).
      name: the run's name, for the log.
    """
    for task in tasks:
      p = task.penalty
      if p is None or p.adaptive_every_steps is None or task.lam == 0:
        continue
      every, k = int(p.adaptive_every_steps), task.index
      updates = self.updates[k]
      due = (updates[-1][0] if updates else task.penalty_start) + every
      if step < due:
        continue
      train = curves[k]["train"]
      idx = [i for i, st in enumerate(train["step"]) if due - every < st <= step]
      if not idx:
        continue
      task_loss = np.mean([train["output_loss"][i] + train["hint_loss"][i] for i in idx])
      gate = np.mean([train["gate_term"][i] for i in idx])
      cap = float(p.adaptive_max_scale) * task.lam
      lam = cap if not gate > 0 else min(cap, float(p.lambda_scale) * task_loss / gate)
      self.now[k] = lam
      updates.append([step, lam, float(task_loss), float(gate)])
      util.log(f"{name}: step {step}: lambda = {lam:.6g} (L {task_loss:.4g}, G {gate:.4g})")
