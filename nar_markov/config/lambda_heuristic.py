"""The paper's λ heuristic (App. "Lambda Heuristic"): its readings and search arithmetic.

The paper picks λ per algorithm "such that the gate penalty makes up approximately
half of the total training loss after 6,000 training steps"; `LambdaHeuristic.reading`
names the two readings: ``schedule`` (default: penalty off until the switch, then
λ = L/G of λ = 0 training just before it) and ``constant`` (λ from step 0, searched on
log λ so that the penalty is about half the loss at the switch).  docs/design.md says
how each works and why ``schedule`` is the default.  This module measures a λ = 0 run and
does the search arithmetic; the records it leads to,
``<results>/_calibration/<reading>[-<scope>]/<algorithm>.json``, are
nar_markov/config/calibration_records.py's.  It trains nothing and imports no jax
(nar_markov.training.calibrate trains).

CLI: python -m nar_markov.training.calibrate --gin gin/gforget.gin --algorithm bfs --results R
     python -m nar_markov.training.calibrate --show --results R
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import gin

READINGS = ("schedule", "constant")


class CalibrationError(ValueError):
  """A calibration record that is missing, unreadable or for other settings."""


@gin.configurable
@dataclasses.dataclass(frozen=True)
class LambdaHeuristic:
  """How G-ForgetNet's λ is chosen and when its penalty is on (gin: ``LambdaHeuristic.*``).

  The readings are the module docstring's; the comments beside the fields say what each
  means.

  Raises:
    ValueError: on construction, for an unknown reading, a calibration_fraction outside
      (0, 1], a window_fraction outside (0, calibration_fraction], a band not
      0 < lo < hi < 1, max_trials < 1, bracket_factor <= 1, or seeds that are not
      distinct ints >= 0 (or none).
  """
  reading: str = "schedule"
  calibration_fraction: float = 0.6     # the paper's 6,000 of 10,000 steps
  window_fraction: float = 0.05         # 500 of 10,000 steps
  seeds: Tuple[int, ...] = (0, 1, 2)    # λ = median over these seeds
  band: Tuple[float, float] = (0.4, 0.6)  # constant reading: the share to reach
  max_trials: int = 8                   # constant reading: search trials per seed
  bracket_factor: float = 10.0          # constant reading: λ step while bracketing
  reuse_calibration_prefix: bool = True  # start from the calibration's state (below)

  def __post_init__(self):
    if self.reading not in READINGS:
      raise ValueError(f"LambdaHeuristic.reading must be one of {READINGS}, "
                       f"got {self.reading!r}")
    if not 0 < self.calibration_fraction <= 1:
      raise ValueError("LambdaHeuristic.calibration_fraction must be in (0, 1], "
                       f"got {self.calibration_fraction}")
    if not 0 < self.window_fraction <= self.calibration_fraction:
      raise ValueError("LambdaHeuristic.window_fraction must be in "
                       f"(0, calibration_fraction], got {self.window_fraction}")
    lo, hi = self.band
    if not 0 < lo < hi < 1:
      raise ValueError(f"LambdaHeuristic.band must be 0 < lo < hi < 1, got {self.band}")
    if self.max_trials < 1 or self.bracket_factor <= 1:
      raise ValueError("LambdaHeuristic.max_trials must be >= 1 and "
                       "bracket_factor > 1")
    seeds = list(self.seeds)
    if (not seeds or len(set(seeds)) != len(seeds)
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds)):
      raise ValueError(f"LambdaHeuristic.seeds must be distinct ints >= 0, got {self.seeds!r}")
    object.__setattr__(self, "seeds", tuple(seeds))
    object.__setattr__(self, "band", (float(lo), float(hi)))

  def calibration_step(self, schedule_steps: int) -> int:
    """The switch: round(calibration_fraction * schedule_steps), at least 1 (6,000 of 10,000)."""
    return max(1, int(round(self.calibration_fraction * schedule_steps)))

  def window_steps(self, schedule_steps: int) -> int:
    """The measurement window's length: round(window_fraction * schedule_steps), at least 1."""
    return max(1, int(round(self.window_fraction * schedule_steps)))

  def penalty_start(self, schedule_steps: int) -> int:
    """The first step (0-based) whose loss carries the penalty: the switch (schedule), else 0."""
    return self.calibration_step(schedule_steps) if self.reading == "schedule" else 0


# -- measuring ------------------------------------------------------------------


def measure(result: Mapping[str, Any], end_step: int, window_steps: int) -> Dict[str, Any]:
  """L, G, the penalty P and its share P / (L + P) over (end_step - window_steps, end_step].

  From result.json's curves.train (each entry a mean over its logging window), averaged
  over the window's entries: L the task loss (output plus hint loss), G the gate term,
  P the penalty.  The gate norm is the validation hidden_norm at the last evaluation up to
  `end_step`.

  Args:
    result: a run's parsed result.json.
    end_step: the window's last step.
    window_steps: its length in steps.

  Returns:
    {"L", "G", "P", "share" (0.0 where L + P <= 0), "gate_norm" (None without an
    evaluation), "window": [start, end], "steps": the steps trained, "status"}.

  Raises:
    CalibrationError: no train entries in the window, or a null (non-finite) loss there.
  """
  train = result["curves"]["train"]
  idx = [i for i, s in enumerate(train["step"]) if end_step - window_steps < s <= end_step]
  if not idx:
    raise CalibrationError(f"no training-curve entries in steps ({end_step - window_steps}, "
                           f"{end_step}] (run trained {result.get('steps')} steps)")
  task = [train["output_loss"][i] + train["hint_loss"][i]
          if None not in (train["output_loss"][i], train["hint_loss"][i]) else None
          for i in idx]
  gate = [train["gate_term"][i] for i in idx]
  penalty = [train["gate_penalty"][i] for i in idx]
  if any(x is None for x in task + gate + penalty):
    raise CalibrationError("non-finite losses in the calibration window")
  big_l, big_g, big_p = (sum(x) / len(x) for x in (task, gate, penalty))
  val = result["curves"]["val"]
  norms = [n for s, n in zip(val["step"], val["hidden_norm"]) if s <= end_step]
  return {"L": big_l, "G": big_g, "P": big_p,
          "share": big_p / (big_l + big_p) if big_l + big_p > 0 else 0.0,
          "gate_norm": norms[-1] if norms else None,
          "window": [end_step - window_steps, end_step],
          "steps": int(result.get("steps", end_step)),
          "status": result.get("status")}


def share_with(lam: float, m: Mapping[str, float]) -> float:
  """The penalty's share of the total loss had λ been `lam`, with m's L and G (0.0 if no loss)."""
  p = lam * m["G"]
  return p / (m["L"] + p) if m["L"] + p > 0 else 0.0


# -- the constant reading's search on log λ ----------------------------------------


def _logit(share: float) -> float:
  share = min(max(share, 1e-9), 1 - 1e-9)
  return math.log(share / (1 - share))


def propose_next(trials: Sequence[Mapping[str, float]], band: Tuple[float, float],
                 factor: float = 10.0) -> Optional[float]:
  """The next λ to try in the constant reading's search on log λ, or None to stop.

  While every share is above the band, λ shrinks by `factor`.  While every share is below
  it, the search climbs towards the largest share (`_climb`): the share λG/(L+λG) need not
  grow with λ, because the penalty shuts the gate and G falls with λ.  Once bracketed -- a
  trial below the band and one above -- a secant step in (log λ, logit share) between the
  largest λ below and the nearest trial above (on its larger-λ side where there is one), or
  their geometric mean where the secant step would not land strictly inside.  Aims at the
  band's middle.

  Args:
    trials: dicts with "lambda" > 0 and "share", in the order tried; a share of None (the
      trial diverged before the window ended) counts as above the band: its λ was too
      large to train with.
    band: (lo, hi), the shares to reach.
    factor: the λ step while bracketing or climbing.

  Returns:
    The next λ; None when the last trial is in the band, when the climb has found the
    largest share below the band, or when the proposal was tried already (the search
    cannot make progress).

  Raises:
    ValueError: `trials` is empty.
  """
  lo, hi = band
  if not trials:
    raise ValueError("propose_next needs at least one trial")
  last = trials[-1]["share"]
  if last is not None and lo <= last <= hi:
    return None
  below = [t for t in trials if t["share"] is not None and t["share"] < lo]
  above = [t for t in trials if t["share"] is None or t["share"] > hi]
  if not above:
    nxt = _climb(trials, factor)
    if nxt is None:
      return None
  elif not below:
    nxt = min(t["lambda"] for t in trials) / factor
  else:
    a = max(below, key=lambda t: t["lambda"])   # largest λ still below
    candidates = [t for t in above if t["lambda"] > a["lambda"]]
    b = (min(candidates, key=lambda t: t["lambda"]) if candidates
         else min(above, key=lambda t: abs(math.log(t["lambda"] / a["lambda"]))))
    xa, xb = math.log(a["lambda"]), math.log(b["lambda"])
    ya, yb = _logit(a["share"]), _logit(1.0 if b["share"] is None else b["share"])
    target = _logit(0.5 * (lo + hi))
    x = None
    if yb != ya:
      x = xa + (target - ya) * (xb - xa) / (yb - ya)
    lo_x, hi_x = min(xa, xb), max(xa, xb)
    margin = 0.05 * (hi_x - lo_x)
    if x is None or not lo_x + margin < x < hi_x - margin:
      x = 0.5 * (xa + xb)
    nxt = math.exp(x)
  if any(abs(nxt - t["lambda"]) <= 1e-9 * t["lambda"] for t in trials):
    return None
  return nxt


def _climb(trials: Sequence[Mapping[str, float]], factor: float) -> Optional[float]:
  """All trials below the band: the next λ towards the largest share.

  Ordered by λ: the largest share at the largest λ -> λ grows by `factor` (the
  share still grows with λ); at the smallest λ -> it shrinks by `factor` (the
  gate shuts faster than λ grows, as in insertion_sort's reduced-budget search,
  results/lambda_readings_1500); between two trials -> the share peaks between
  them: the geometric mean of the best and its farther neighbour in log λ, a
  bisection of the wider side.  None when both sides are at most half of
  log(factor) wide: the peak is found, and it lies below the band.
  """
  pts = sorted(trials, key=lambda t: t["lambda"])
  best = max(range(len(pts)), key=lambda i: (pts[i]["share"], -i))
  if best == len(pts) - 1:
    return pts[-1]["lambda"] * factor
  if best == 0:
    return pts[0]["lambda"] / factor
  x = math.log(pts[best]["lambda"])
  left, right = math.log(pts[best - 1]["lambda"]), math.log(pts[best + 1]["lambda"])
  other = left if x - left >= right - x else right
  if abs(other - x) <= 0.5 * math.log(factor) * (1 + 1e-9):
    return None  # each trial costs a run to the calibration step: a √factor grid will do
  return math.exp(0.5 * (x + other))


def closest_trial(trials: Sequence[Mapping[str, float]],
                  band: Tuple[float, float]) -> Mapping[str, float]:
  """The trial whose share is nearest the band's middle, among those that did not diverge.

  Raises:
    CalibrationError: every trial diverged (no share).
  """
  target = 0.5 * (band[0] + band[1])
  measured = [t for t in trials if t["share"] is not None]
  if not measured:
    raise CalibrationError("every search trial diverged before the calibration step")
  return min(measured, key=lambda t: abs(t["share"] - target))


def search(run_trial: Callable[[int, float], Dict[str, Any]], lambda0: float,
           band: Tuple[float, float], max_trials: int, factor: float = 10.0
           ) -> Tuple[List[Dict[str, Any]], Dict[str, Any], bool]:
  """The constant reading's search on log λ from `lambda0` (`propose_next`).

  Args:
    run_trial: `run_trial(i, lam)` trains trial i with λ = lam (or reads it back, when
      resuming: trials are deterministic in i) and returns its measurement (`measure`'s
      dict).
    lambda0: the first λ, > 0 and finite.
    band: (lo, hi), the shares to reach.
    max_trials: the most trials to run.
    factor: `propose_next`'s λ step.

  Returns:
    (the trials, each its measurement with "trial" and "lambda"; the chosen trial; whether
    it is in the band): the last trial where it is in the band, else `closest_trial`.

  Raises:
    CalibrationError: `lambda0` is not > 0 and finite, or every trial diverged.
  """
  if not lambda0 > 0 or not math.isfinite(lambda0):
    raise CalibrationError(f"the search needs a starting λ > 0, got {lambda0}")
  trials: List[Dict[str, Any]] = []
  lam = float(lambda0)
  for i in range(int(max_trials)):
    trials.append(dict(run_trial(i, lam), trial=i, **{"lambda": lam}))
    nxt = propose_next(trials, band, factor)
    if nxt is None:
      break
    lam = nxt
  last = trials[-1]
  if last["share"] is not None and band[0] <= last["share"] <= band[1]:
    return trials, last, True
  return trials, dict(closest_trial(trials, band)), False
