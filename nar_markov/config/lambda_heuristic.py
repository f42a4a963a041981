"""The paper's λ heuristic (App. "Lambda Heuristic"): two readings, the search arithmetic, calibration records.

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
  """How G-ForgetNet's λ is chosen and when its penalty is on (module docstring)."""
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
    """The switch: 6,000 of a 10,000-step schedule."""
    return max(1, int(round(self.calibration_fraction * schedule_steps)))

  def window_steps(self, schedule_steps: int) -> int:
    return max(1, int(round(self.window_fraction * schedule_steps)))

  def penalty_start(self, schedule_steps: int) -> int:
    """First step (0-based) whose loss carries the penalty."""
    return self.calibration_step(schedule_steps) if self.reading == "schedule" else 0


# -- measuring ------------------------------------------------------------------


def measure(result: Mapping[str, Any], end_step: int, window_steps: int) -> Dict[str, Any]:
  """L, G, the penalty P and its share P / (L + P) over (end - window, end].

  From result.json's curves.train (means over each logging window), and the
  gate norm (validation hidden_norm) at the last evaluation up to `end_step`.
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
  """The penalty's share of the total loss had λ been `lam` with m's L and G."""
  p = lam * m["G"]
  return p / (m["L"] + p) if m["L"] + p > 0 else 0.0


# -- the constant reading's search on log λ ----------------------------------------


def _logit(share: float) -> float:
  share = min(max(share, 1e-9), 1 - 1e-9)
  return math.log(share / (1 - share))


def propose_next(trials: Sequence[Mapping[str, float]], band: Tuple[float, float],
                 factor: float = 10.0) -> Optional[float]:
  """The next λ to try, or None when the last trial is in the band.

  `trials`: dicts with 'lambda' > 0 and 'share', in the order tried (share
  None: the trial diverged before the window ended, counted as above the
  band -- its λ was too large to train with).  While every share is above
  the band, λ shrinks by `factor`.  While every share is below it, the search
  climbs towards the largest share (`_climb`): the share λG/(L+λG) need not
  grow with λ, because the penalty shuts the gate and G falls with λ.
  Once bracketed -- a trial below the band and one above -- a secant step in
  (log λ, logit share) between the tightest such pair, or their geometric
  mean where the secant step would not land strictly inside.  Aims at the
  band's middle.  Never proposes a λ already tried (returns None instead:
  the search cannot make progress).
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
  target = 0.5 * (band[0] + band[1])
  measured = [t for t in trials if t["share"] is not None]
  if not measured:
    raise CalibrationError("every search trial diverged before the calibration step")
  return min(measured, key=lambda t: abs(t["share"] - target))


def search(run_trial: Callable[[int, float], Dict[str, Any]], lambda0: float,
           band: Tuple[float, float], max_trials: int, factor: float = 10.0
           ) -> Tuple[List[Dict[str, Any]], Dict[str, Any], bool]:
  """(trials, chosen trial, in band?) of the search started at `lambda0`.

  `run_trial(i, lam)` trains trial i with λ = lam (or reads it back, when
  resuming: trials are deterministic in i) and returns its measurement
  (`measure`'s dict).
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
  return pathlib.Path(results_dir) / CALIBRATION_DIR


def _scoped(name: str, scope: Optional[str]) -> str:
  return name if scope in (None, DEFAULT_SCOPE) else f"{name}-{scope}"


def record_path(results_dir, reading: str, algorithm: str,
                scope: Optional[str] = None) -> pathlib.Path:
  """The record of `algorithm` under `reading`, for nets of history scope `scope`
  (NetConfig.history_scope; None: the default)."""
  if reading not in READINGS:
    raise ValueError(f"unknown λ reading {reading!r}; valid: {READINGS}")
  return calibration_root(results_dir) / _scoped(reading, scope) / f"{algorithm}.json"


def lambda0_results_dir(results_dir, scope: Optional[str] = None) -> pathlib.Path:
  """Where the λ = 0 calibration runs live (shared by both readings)."""
  return calibration_root(results_dir) / "runs" / _scoped("lambda0", scope)


def trial_results_dir(results_dir, algorithm: str, seed: int, trial: int,
                      scope: Optional[str] = None) -> pathlib.Path:
  return (calibration_root(results_dir) / "runs" / _scoped("constant", scope) / algorithm
          / f"seed{int(seed)}" / f"trial{int(trial)}")


def check_results_dir(results_dir) -> pathlib.Path:
  path = pathlib.Path(results_dir).expanduser()
  if path.exists() and not path.is_dir():
    raise CalibrationError(f"--results {path} is a file, not a results folder")
  return path


def atomic_write_json(path: pathlib.Path, obj: Any) -> None:
  runs.atomic_write_bytes(path, json.dumps(obj, indent=1).encode())


def read_record(path: pathlib.Path) -> Optional[Dict[str, Any]]:
  """The record at `path`, None if there is none; CalibrationError if unusable.

  An unreadable record is never overwritten or deleted here: the error names
  the file, and the user decides (move it aside to recalibrate).
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
  """What a record keeps of a run's settings, and must agree on with every run that
  uses it: all but the run's length (the calibration trains to the switch only) and
  `exclude` (runspec.record_settings: the penalty's strength once on)."""
  return {k: v for k, v in settings.items() if k != "train_steps" and k not in exclude}


def settings_mismatch(record: Mapping[str, Any], settings: Mapping[str, Any]) -> List[str]:
  """'key: record vs run' for each setting that differs (`settings`: record_settings
  of the run's; keys of either side, a missing one is a default:
  runs.definition_mismatch)."""
  return [f"{key}: record {theirs!r} vs run {ours!r}" for key, theirs, ours in
          runs.definition_mismatch(record, {"settings": record_settings(settings)})]


def load_lambda(results_dir, algorithm: str, heuristic: LambdaHeuristic,
                settings: Mapping[str, Any]) -> Tuple[float, Dict[str, Any]]:
  """(λ, provenance) for a G-ForgetNet run, from its algorithm's record.

  Raises CalibrationError when there is no record (say how to make one), it
  is unreadable, or it was made with other settings or another calibration
  heuristic (reading, step, seeds).
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
  """How result.json names a file of its results folder (a calibration record, the
  state a run continued from): relative to `results_dir`, the folder the run was
  trained into, so that the results read the same on any machine.  A path outside
  that folder stays as it is (`legacy_relpath` maps the older absolute ones)."""
  path, root = pathlib.Path(path), pathlib.Path(results_dir)
  for base in (root, root.resolve()):
    try:
      return path.relative_to(base).as_posix()
    except ValueError:
      pass
  return str(path)


def legacy_relpath(path) -> str:
  """`record_relpath` of a path a result recorded before results named them so:
  absolute, on the machine that trained it, ``<its results folder>/_calibration/...``;
  its part from ``_calibration/`` on.  Any other path comes back as it is."""
  p = pathlib.PurePosixPath(path)
  if p.is_absolute() and CALIBRATION_DIR in p.parts:
    return pathlib.PurePosixPath(*p.parts[p.parts.index(CALIBRATION_DIR):]).as_posix()
  return str(path)


def resolve_recorded(path, results_dir=None) -> pathlib.Path:
  """The file a result names (`record_relpath`'s form or an older absolute one):
  a relative path is under `results_dir`, the folder the run was trained into."""
  path = pathlib.Path(path)
  if path.is_absolute() or results_dir is None:
    return path
  return pathlib.Path(results_dir) / path


def record_heuristic(h: LambdaHeuristic, schedule_steps: int) -> Dict[str, Any]:
  """The heuristic's settings a record is keyed by."""
  out = {"reading": h.reading, "calibration_step": h.calibration_step(schedule_steps),
         "window_steps": h.window_steps(schedule_steps),
         "calibration_seeds": list(h.seeds)}
  if h.reading == "constant":
    out.update(band=list(h.band), max_trials=h.max_trials)
  return out


def continuation_state(record: Mapping[str, Any], entry: Mapping[str, Any]) -> Optional[str]:
  """The saved state at the calibration step that G-ForgetNet's run of `entry`'s seed (an
  item of record["seeds"]) begins with, as the record names it: schedule reading, the
  λ = 0 run's (no penalty before the switch); constant reading, the chosen search trial's,
  when its λ is the record's (the median over seeds may be another seed's)."""
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
  """The calibration state a run of `seed` (λ = `lam` from `penalty_start`; its λ from
  the record `record_info` names, load_lambda's info) continues from, or None.

  It continues only where its training up to the calibration step is that run's:
  schedule reading, penalty off until the calibration step, as in the λ = 0 run;
  constant reading, penalty on from step 0 with the record's λ, one value
  throughout (`lambda_constant`: no ramp, no adaptation), as in the chosen trial
  (continuation_state says which state, and that it exists).  `results_dir`: the
  folder the run trains into, under which a relative record path lies (`resolve_recorded`).
  """
  reading, step = record_info["reading"], int(record_info["calibration_step"])
  if penalty_start != (step if reading == "schedule" else 0):
    return None
  record = read_record(resolve_recorded(record_info["record"], results_dir))
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
  """(reading, algorithm) -> record, or the CalibrationError of an unusable one; the
  reading is `<reading>-<scope>` for a net of another history scope than the default."""
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
