"""Which parameters a run keeps and tests: run.py's first best, the last best, the final step.

`test_score` in result.json is the first rule's (dm-clrs run.py's: the first evaluation and
every strict improvement of the mean validation score); the parameters of the other rules are
tested beside it and reported in result.json's "selection", never used to pick anything.
Imports no jax: the training loop hands over host copies of the parameters.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np

RULES = ("first_best", "last_best", "final")


@dataclasses.dataclass
class Selection:
  """One seed's selection state, kept in its checkpoint (`from_state`, `state`)."""
  best_val: float = -1.0                       # the mean validation score at best_step
  best_step: Optional[int] = None
  best_scores: Optional[List[float]] = None    # per algorithm, at best_step
  best_params: Any = None
  last_best_step: Optional[int] = None         # the last step that validates at the best
  last_best_params: Any = None
  test_results: Dict[str, Any] = dataclasses.field(default_factory=dict)  # algorithm -> test
  other_tests: Dict[str, Any] = dataclasses.field(default_factory=dict)   # rule -> its test

  def observe(self, step: int, scores: List[float], host_params: Callable[[], Any]) -> float:
    """Records a validation at `step` and keeps the parameters each rule selects.

    First best (dm-clrs run.py's rule): the first validation and each strict improvement of
    the mean score.  Last best: the last validation whose mean is at least the best.

    Args:
      step: the step validated.
      scores: the validation score of each algorithm.
      host_params: returns the parameters as host arrays; called only when they are kept.

    Returns:
      The mean of `scores`.
    """
    mean = float(np.mean(scores))
    # dm-clrs run.py keeps the first evaluation and any strict improvement
    # (of the sum of the algorithms' scores; the mean selects the same).
    if mean > self.best_val or self.best_params is None:
      self.best_val, self.best_scores, self.best_step = mean, scores, step
      self.best_params = host_params()
    if mean >= self.best_val:
      # Another rule, reported beside run.py's: the last step that validates at the best.
      self.last_best_step = step
      self.last_best_params = (self.best_params if self.best_step == step else host_params())
    return mean

  def test_others(self, final_step: int, final_params,
                  test: Callable[[Any], Dict[str, Any]]) -> None:
    """Tests the parameters of the other rules where they differ from the first best's.

    The rules are "last_best" (the last step that validates at the best) and "final".  A rule
    already tested, without a step or parameters, or at the first best's step is skipped; one
    at the step of a rule already tested reuses that test.

    Args:
      final_step: the last step trained.
      final_params: the parameters there; None for a diverged run.
      test: params -> {algorithm: its test result, with "score"}.
    """
    candidates = {"last_best": (self.last_best_step, self.last_best_params),
                  "final": (final_step, final_params)}
    for rule, (step, params) in candidates.items():
      if rule in self.other_tests or step is None or step == self.best_step or params is None:
        continue
      same = [done for done in self.other_tests.values() if done["step"] == int(step)]
      self.other_tests[rule] = same[0] if same else {"step": int(step), "test": test(params)}

  def record(self, algorithm: str, final_step: Optional[int]) -> Dict[str, Any]:
    """result.json's "selection" of `algorithm`: the test score under each rule.

    Args:
      algorithm: the algorithm.
      final_step: the last step trained; None for a diverged run.

    Returns:
      {"rule": "first_best"} and for each of `RULES` {"step", "test_score"}; a rule at the
      first best's step has its score, a rule not tested a test_score of None.
    """
    test_res = self.test_results.get(algorithm)
    out = {"rule": RULES[0], RULES[0]: {
        "step": self.best_step, "test_score": None if test_res is None else test_res["score"]}}
    for rule, step in {"last_best": self.last_best_step, "final": final_step}.items():
      done = self.other_tests.get(rule)
      if step is not None and step == self.best_step:
        out[rule] = dict(out[RULES[0]])
      elif done is not None:
        out[rule] = {"step": done["step"], "test_score": done["test"][algorithm]["score"]}
      else:
        out[rule] = {"step": step, "test_score": None}
    return out

  def state(self) -> Dict[str, Any]:
    """The selection's entries in a checkpoint.

    Returns:
      best_val, best_step, best_params, best_scores, test_results, last_best_step and
      last_best_params; "selection_tests" (the other rules' tests) only where there is one.
    """
    out = {"best_val": self.best_val, "best_step": self.best_step,
           "best_params": self.best_params, "best_scores": self.best_scores,
           "test_results": self.test_results, "last_best_step": self.last_best_step,
           "last_best_params": self.last_best_params}
    if self.other_tests:
      out["selection_tests"] = self.other_tests
    return out

  @classmethod
  def from_state(cls, state: Mapping[str, Any]) -> "Selection":
    """The selection of a checkpoint's `state` (the keys of `state()`, and its "curves").

    A state without "last_best_step" gets the last-at-best rule from its curves: the first
    best's step and parameters where no later validation reaches the best mean, else None
    (unknown).
    """
    last = (_last_best_of_older_state(state) if "last_best_step" not in state else
            {k: state[k] for k in ("last_best_step", "last_best_params")})
    return cls(best_val=state["best_val"], best_step=state["best_step"],
               best_scores=state["best_scores"], best_params=state["best_params"],
               test_results=dict(state.get("test_results") or {}),
               other_tests=dict(state.get("selection_tests") or {}), **last)


def _last_best_of_older_state(state) -> Dict[str, Any]:
  """The last-at-best selection of a state saved before it was kept: run.py's best
  where no later validation in the curves equals it, else unknown (None)."""
  scores = [c["val"]["score"] for c in state["curves"]]
  steps = state["curves"][0]["val"]["step"]
  at_best = [st for st, *per_task in zip(steps, *scores)
             if state["best_params"] is not None and float(np.mean(per_task)) >= state["best_val"]]
  if at_best and at_best[-1] == state["best_step"]:
    return {"last_best_step": state["best_step"], "last_best_params": state["best_params"]}
  return {"last_best_step": None, "last_best_params": None}
