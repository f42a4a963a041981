"""The paper's λ heuristic (App. "Lambda Heuristic"): its readings, search arithmetic, records.

The paper picks λ per algorithm "such that the gate penalty makes up approximately
half of the total training loss after 6,000 training steps"; `LambdaHeuristic.reading`
names the two readings: ``schedule`` (default: penalty off until the switch, then
λ = L/G of λ = 0 training just before it) and ``constant`` (λ from step 0, searched on
log λ so that the penalty is about half the loss at the switch).  docs/design.md says
how each works and why ``schedule`` is the default.  This module owns the records,
``<results>/_calibration/<reading>[-<scope>]/<algorithm>.json`` (every measurement and
the settings it was made with; λ is the median over ``seeds``), and the search
arithmetic; it trains nothing and imports no jax (nar_markov.training.calibrate trains).

CLI: python -m nar_markov.training.calibrate --gin gin/gforget.gin --algorithm bfs --results R
     python -m nar_markov.training.calibrate --show --results R
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import gin

from nar_markov.store import runs

READINGS = ("schedule", "constant")
RECORD_SCHEMA = "nar_markov.lambda_calibration/1"
CALIBRATION_DIR = "_calibration"
# The net's history scope a record was made under names its folder, so that records
# (and λ = 0 runs) of several scopes can share a results folder; the default scope's
# are where they have always been.
DEFAULT_SCOPE = "processor_decoder"


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


# -- records ---------------------------------------------------------------------


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
      missing on one side as None (`runs.definition_mismatch`).
  """
  return [f"{key}: record {theirs!r} vs run {ours!r}" for key, theirs, ours in
          runs.definition_mismatch(record, {"settings": record_settings(settings)})]


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
    if runs.normalize(record.get(key)) != runs.normalize(value):
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
  path = continuation_state(record, entry) if entry is not None else None
  if not path or not pathlib.Path(path).exists():
    return None
  return Continuation(pathlib.Path(path), step, 0.0 if reading == "schedule" else float(lam))


# -- calibrating an algorithm ------------------------------------------------------


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
