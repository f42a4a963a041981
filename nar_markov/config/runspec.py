"""What a run is, importable without jax: its components, label, settings, definition, lambda and tasks.

A run is a label (`run_experiment.model`: the results folder and the table column,
nothing more) and three components, each its own gin configurable: the net
(`NetConfig`, nar_markov/config/netconfig.py: the history policy and the architecture), the
`Protocol` (optimisation, sizes, validation, cadence) and, for G-ForgetNet only, the
`GatePenalty` (lambda and where it comes from).  Everything that says what a run IS --
the label's check, the settings that define it (`run_settings`), its lambda
(`resolve_lambda`) and definition (`run_definition`), their twins read from parsed gin
(`configured`, `*_from_gin`), the `Task` of each algorithm of a job -- lives here, so
that the launcher, ``--status``, ``--dry-run`` and the calibration plan know a sweep's
runs without importing jax, haiku, clrs or TensorFlow.  The entry point that trains
them is nar_markov/training/experiment.py.
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import math
import numbers
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gin
import numpy as np

from nar_markov.config import clrs30
from nar_markov.config import gin_files as config_lib
from nar_markov.config import lambda_heuristic
from nar_markov.config.netconfig import NetConfig
from nar_markov.store import runs

VALIDATION_MODES = clrs30.VALIDATION_MODES

# A multi-task label: one processor trained on a list of algorithms (gin/multitask.gin).
# The suffix keeps multi-task results in folders (and table columns) of their own.
MULTITASK_SUFFIX = "_multitask"
# How a multi-task step updates the shared processor (Protocol.multitask_update).
MULTITASK_UPDATES = ("per_algorithm", "summed")
# A label names a results folder: lower-case letters, digits, underscores.
_LABEL = re.compile(r"[a-z][a-z0-9_]*")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Protocol:
  """How a run trains, validates, tests and checkpoints (gin: ``Protocol.*``).

  The defaults are the paper's protocol, which is dm-clrs examples/run.py's
  (gin/base.gin binds each of them, with the reason):
    train_steps, batch_size, learning_rate, grad_clip_max_norm: Adam with a
      cosine decay from 1.5e-3, batch 32, gradient-norm clipping at 1.0.
    schedule_steps: horizon of the cosine decay in steps; None = train_steps
      (the lambda calibration trains 6,000 steps on the 10,000-step schedule).
    train_lengths: one list for all algorithms, or a dict algorithm -> list.
      Either way the string matchers train at (max * 5) // 4 nodes of their
      list (clrs30.train_lengths).
    validation_mode: 'resample' (run.py: every evaluation draws 2 x 32 x
      multiplier samples with replacement from a pool sampled with the
      training settings at the largest train size) or 'fixed' (that pool, the
      same samples each time); nar_markov.data.validation_pool.ValidationPool.
    multitask_update: several algorithms only.  'per_algorithm' (run.py, the
      default): every step takes one clipped Adam update per algorithm, in
      list order, each on that algorithm's own batch, with the other
      algorithms' encoders/decoders and their Adam moments left untouched
      (dm-clrs `filter_null_grads`); the cosine schedule then spans
      train_steps x len(algorithms) updates.  'summed': one update per step on
      the sum of the algorithms' losses (the named departure, for comparison).
    eval_every_steps, log_every_steps, checkpoint_every_steps: how often (the
      checkpoints on log steps: a multiple of log_every_steps).
      A run also validates at its last step when that ends its schedule
      (train_steps == the horizon), not when it stops short of it (a lambda
      calibration run, which a G-ForgetNet run continues).
    val_max_samples / test_max_samples: evaluate on the first k samples only
      (smoke tests); None = the whole official split.
    val_batch_size / test_batch_size: None (test) picks a size that bounds
      evaluation memory.
    test_every_steps: a diagnostic, off (None) in the paper's protocol: every
      this many steps (a multiple of eval_every_steps) also score the current
      parameters on the test split and record them in result.json's
      curves["test"].  Never used to select anything, so it changes no number
      of a run and is not one of its defining settings; it costs one test
      evaluation each time.  It shows how the test score moves between the
      evaluations that validation could pick (best-validation
      selection once validation saturates at 1.0).
  """
  train_steps: int = 10_000
  batch_size: int = 32
  learning_rate: float = 1.5e-3
  grad_clip_max_norm: float = 1.0
  schedule_steps: Optional[int] = None
  train_lengths: Union[Sequence[int], Mapping[str, Sequence[int]]] = clrs30.TRAIN_LENGTHS
  validation_mode: str = "resample"
  multitask_update: str = "per_algorithm"
  eval_every_steps: int = 50
  log_every_steps: int = 10
  checkpoint_every_steps: int = 500
  val_max_samples: Optional[int] = None
  test_max_samples: Optional[int] = None
  val_batch_size: int = 32
  test_batch_size: Optional[int] = None
  test_every_steps: Optional[int] = None

  def __post_init__(self):
    # The counts that may be None: set, they are counts like the others (a sample cap
    # of 0 would divide by zero in every job).
    optional = {name: getattr(self, name) for name in (
        "schedule_steps", "val_max_samples", "test_max_samples", "test_batch_size")}
    check_protocol(train_steps=self.train_steps, batch_size=self.batch_size,
                   eval_every_steps=self.eval_every_steps,
                   log_every_steps=self.log_every_steps,
                   checkpoint_every_steps=self.checkpoint_every_steps,
                   val_batch_size=self.val_batch_size,
                   learning_rate=self.learning_rate,
                   **{k: v for k, v in optional.items() if v is not None})
    if int(self.checkpoint_every_steps) % int(self.log_every_steps):
      # A checkpoint flushes the losses logged so far: at a step that is no log step it
      # would cut the train curve's windows (and an adaptive lambda measured on them)
      # where a run checkpointed at another cadence does not.
      raise ValueError(f"checkpoint_every_steps ({self.checkpoint_every_steps}) must be a "
                       f"multiple of log_every_steps ({self.log_every_steps})")
    if self.validation_mode not in VALIDATION_MODES:
      raise ValueError(f"unknown validation_mode {self.validation_mode!r}; "
                       f"valid: {VALIDATION_MODES}")
    if self.multitask_update not in MULTITASK_UPDATES:
      raise ValueError(f"unknown multitask_update {self.multitask_update!r}; "
                       f"valid: {MULTITASK_UPDATES}")
    if self.test_every_steps is not None and (
        isinstance(self.test_every_steps, bool) or int(self.test_every_steps) <= 0
        or int(self.test_every_steps) % int(self.eval_every_steps)):
      raise ValueError(
          f"test_every_steps must be None or a positive multiple of eval_every_steps "
          f"({self.eval_every_steps}), got {self.test_every_steps!r}")

  @property
  def horizon(self) -> int:
    """The cosine schedule's horizon in steps."""
    return int(self.schedule_steps or self.train_steps)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class GatePenalty:
  """G-ForgetNet's gate penalty, lambda * sum_i ||g_i(t)|| (paper Eq. 6; gin: ``GatePenalty.*``).

  Bound only where G-ForgetNet needs it: gin/gforget.gin sets
  ``run_experiment.penalty = @GatePenalty()``; without it a run has no penalty
  (the baseline, ForgetNet, and the penalty ablation gin/gforget_nopenalty.gin).

  lambda_gate: None (gin/gforget.gin): read from the algorithm's calibration
    record under the results folder (nar_markov/config/lambda_heuristic.py); a float, or a
    dict algorithm -> float, bound by hand.
  start_step: the first penalised step.  None: where the lambda heuristic's
    reading says (`LambdaHeuristic.reading`: schedule -> the calibration step,
    constant -> 0); an int: from that step, with `lambda_gate` given (the
    calibration's own runs: 0).  Multi-task runs: always 0.

  How strong the penalty is once on (the defaults are the paper's heuristic as
  written: lambda constant from the start step on):
  lambda_scale: lambda is this multiple of the calibrated (or bound) value.
  ramp_steps: 0, a step switch at start_step; N > 0, lambda grows linearly
    from lambda / N at start_step to its full value N steps later.
  adaptive_every_steps: None, lambda constant; N, lambda is measured again
    every N steps after start_step as lambda_scale * L / G over those N steps
    (L the task loss, G the gate term), so that the penalty stays about half of
    the loss as the gate closes -- one reading of "approximately half of the
    total training loss after 6,000 steps".  A multiple of
    Protocol.log_every_steps (measured from the logged losses).
  adaptive_max_scale: the adaptive lambda stays <= this multiple of the
    lambda it started from (G -> 0 would otherwise send it to infinity).
  """
  lambda_gate: Union[None, float, Mapping[str, float]] = None
  start_step: Optional[int] = None
  lambda_scale: float = 1.0
  ramp_steps: int = 0
  adaptive_every_steps: Optional[int] = None
  adaptive_max_scale: float = 100.0

  def __post_init__(self):
    lam = self.lambda_gate
    values = list(lam.values()) if isinstance(lam, Mapping) else [lam]
    if lam is not None and not all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
      raise ValueError("GatePenalty.lambda_gate must be None (read from the calibration "
                       "record), a number, or a dict algorithm -> number, got "
                       f"{self.lambda_gate!r}")
    if self.start_step is not None:
      if isinstance(self.start_step, bool) or int(self.start_step) < 0:
        raise ValueError(f"start_step must be an int >= 0 or None, got {self.start_step!r}")
      if self.lambda_gate is None:
        raise ValueError("GatePenalty.start_step is set: give lambda_gate too "
                         "(the calibration record is read only with start_step None)")
    if not (math.isfinite(float(self.lambda_scale)) and float(self.lambda_scale) > 0):
      raise ValueError(f"GatePenalty.lambda_scale must be > 0, got {self.lambda_scale!r}")
    if isinstance(self.ramp_steps, bool) or int(self.ramp_steps) < 0:
      raise ValueError(f"GatePenalty.ramp_steps must be an int >= 0, got {self.ramp_steps!r}")
    if self.adaptive_every_steps is not None and (
        isinstance(self.adaptive_every_steps, bool) or int(self.adaptive_every_steps) <= 0):
      raise ValueError("GatePenalty.adaptive_every_steps must be None or an int > 0, "
                       f"got {self.adaptive_every_steps!r}")
    if not float(self.adaptive_max_scale) >= 1:
      raise ValueError(f"GatePenalty.adaptive_max_scale must be >= 1, "
                       f"got {self.adaptive_max_scale!r}")

  @property
  def acts_from_start_only(self) -> bool:
    """Whether lambda is one constant value from start_step on (no ramp, no adaptation)."""
    return int(self.ramp_steps) == 0 and self.adaptive_every_steps is None


# The paper's labels (the tables' columns, analysis/labels.py): what a run under
# one of them must be.  A check, never a lookup -- the net and penalty decide what
# is trained; this keeps a results folder from holding another model than its name.
PAPER_LABELS = {
    "baseline": ("full", False),        # (NetConfig.history, has a GatePenalty)
    "forget": ("none", False),
    "gforget": ("gated", True),
    "gforget_constant": ("gated", True),
    "gforget_nopenalty": ("gated", False),
    "calibrate": ("gated", True),       # the lambda calibration's own runs
}


def check_label(model: Any, net: Optional[NetConfig] = None,
                penalty: Optional["GatePenalty"] = None) -> str:
  """`model`, a run's label (its results folder, its table column), if usable:
  a folder name, and for one of the paper's labels (with or without
  `_multitask`) the history and penalty that label stands for."""
  if model is gin.REQUIRED or not isinstance(model, str) or not _LABEL.fullmatch(model):
    raise ValueError(
        f"run_experiment.model must be a label: lower-case letters, digits and "
        f"underscores, starting with a letter (e.g. 'gforget'), got {model!r}")
  base = model[:-len(MULTITASK_SUFFIX)] if model.endswith(MULTITASK_SUFFIX) else model
  if net is not None and base in PAPER_LABELS:
    history, has_penalty = PAPER_LABELS[base]
    if net.history != history or (penalty is not None) != has_penalty:
      raise ValueError(
          f"label {model!r} is the paper's {base!r}: NetConfig.history = {history!r} "
          f"{'with' if has_penalty else 'without'} a gate penalty, but this run has "
          f"history {net.history!r} {'with' if penalty is not None else 'without'} one "
          "(a model file binds both: gin/baseline.gin, gin/forget.gin, gin/gforget.gin; "
          "another model needs a label of its own)")
  return model


def unused_components(model: str, net: NetConfig, penalty: Optional["GatePenalty"]
                      ) -> Dict[str, str]:
  """What a run of `model` with `net` and `penalty` never reads: a configurable's name, or
  'Configurable.parameter', -> why (the launcher refuses a binding on them).  Without a
  gate penalty: GatePenalty and LambdaHeuristic; a multi-task label: LambdaHeuristic (its
  lambda is bound by hand, from step 0); a history other than 'gated': the gate's
  NetConfig fields; 'full' history: NetConfig.history_scope; a single-task label:
  Protocol.multitask_update."""
  out = {}
  history = f"this model ({model}) has NetConfig.history = {net.history!r}"
  if penalty is None:
    why = f"this model ({model}) has no gate penalty (run_experiment.penalty is None)"
    out.update(GatePenalty=why, LambdaHeuristic=why)
  multitask = model.endswith(MULTITASK_SUFFIX)
  if multitask:
    out["LambdaHeuristic"] = (f"this model ({model}) is multi-task: its lambda is bound by "
                              "hand and on from step 0, no heuristic reads it")
  else:
    out["Protocol.multitask_update"] = f"this model ({model}) is single-task"
  if net.history != "gated":
    out["NetConfig.gate_mlp_layers"] = out["NetConfig.gate_bias_init"] = history + " (no gate)"
  if net.history == "full":
    out["NetConfig.history_scope"] = history + " (every consumer sees h(t-1) anyway)"
  return out


def resolve_lambda(penalty: Optional[GatePenalty], algorithm: str, *, results_dir=None,
                   heuristic: Optional[lambda_heuristic.LambdaHeuristic] = None,
                   settings: Optional[Mapping[str, Any]] = None
                   ) -> Tuple[float, int, Optional[Dict[str, Any]]]:
  """(lambda, first penalised step, provenance) of a single-task run.

  No penalty: (0, 0, None).  A penalty with a start step (the calibration's
  runs): its lambda from that step.  G-ForgetNet: the penalty starts where the
  heuristic's reading says (schedule: at the calibration step; constant: at 0)
  and lambda is, in this order, a float bound by hand, a per-algorithm dict
  bound in gin, or -- `lambda_gate=None`, gin/gforget.gin's default -- read
  from the algorithm's calibration record under `results_dir`
  (nar_markov/config/lambda_heuristic.py).
  """
  if penalty is None:
    return 0.0, 0, None
  lam, start, info = _resolve_unscaled(penalty, algorithm, results_dir, heuristic, settings)
  scale = float(penalty.lambda_scale)
  if scale != 1.0:
    info = dict(info, lambda_scale=scale, lambda_unscaled=lam)
  return _check_lambda(scale * lam), start, info


def _resolve_unscaled(penalty: GatePenalty, algorithm: str, results_dir, heuristic,
                      settings) -> Tuple[float, int, Dict[str, Any]]:
  """resolve_lambda before GatePenalty.lambda_scale."""
  if penalty.start_step is not None:
    lam = _lambda_of(penalty.lambda_gate, algorithm)
    return lam, int(penalty.start_step), {
        "source": "bound by hand", "lambda": lam, "penalty_start_step": int(penalty.start_step)}
  h = heuristic or lambda_heuristic.LambdaHeuristic()
  schedule_steps = int((settings or {}).get("schedule_steps") or 0)
  start = h.penalty_start(schedule_steps) if schedule_steps else 0
  info = {"reading": h.reading, "penalty_start_step": start}
  if penalty.lambda_gate is None:
    if results_dir is None or settings is None:
      raise ValueError("GatePenalty.lambda_gate is None (read it from the calibration "
                       "record) but no results_dir/settings to find the record with")
    lam, provenance = lambda_heuristic.load_lambda(results_dir, algorithm, h,
                                                   record_settings(settings))
    return _check_lambda(lam), start, {
        **provenance, **info, "reuse_calibration_prefix": h.reuse_calibration_prefix}
  lam = _lambda_of(penalty.lambda_gate, algorithm)
  source = "gin table" if isinstance(penalty.lambda_gate, Mapping) else "bound by hand"
  return lam, start, {"source": source, "lambda": lam, **info}


def _lambda_of(lambda_gate: Union[float, Mapping[str, float]], algorithm: str) -> float:
  """A lambda bound by hand: a float, or `algorithm`'s entry of a dict."""
  if isinstance(lambda_gate, Mapping):
    if algorithm not in lambda_gate:
      raise ValueError(
          f"GatePenalty.lambda_gate has no value for {algorithm!r}; bind it to None "
          "to read it from the calibration record, or to a float")
    return _check_lambda(lambda_gate[algorithm])
  if lambda_gate is None:
    raise ValueError("GatePenalty.lambda_gate is None here: bind a float, or a dict "
                     "algorithm -> float")
  return _check_lambda(lambda_gate)


def _check_lambda(value) -> float:
  lam = float(value)
  if not math.isfinite(lam) or lam < 0:
    raise ValueError(f"lambda_gate must be a finite value >= 0, got {lam}")
  return lam


# What defines a run, beside its algorithm, seed and lambda (result.json "settings";
# what a result or checkpoint must agree on to count as the same run): every field of
# the settings objects below, except those that cannot change a recorded number --
# the checkpoint cadence (on log steps: a resumed run is the same run, to the byte),
# the diagnostic test curve (never selects), the multi-task update rule (recorded for
# multi-task runs only), where XLA places a step's scratch (xla_heap_mib: the same
# bits), and the history policy and GatePenalty's lambda and start step (the
# definition's own keys, run_definition).
_SETTINGS_OF = {"Protocol": Protocol, "NetConfig": NetConfig, "GatePenalty": GatePenalty}
_NOT_DEFINING = {"checkpoint_every_steps", "test_every_steps", "multitask_update",
                 "xla_heap_mib", "lambda_gate", "start_step", "history"}
# Always in "settings", default or not (what results have recorded from the start);
# any other defining field is recorded only where it differs from its default, so a
# result recorded before that field existed reads as the default.
ALWAYS_RECORDED = ("train_steps", "batch_size", "learning_rate", "grad_clip_max_norm",
                   "schedule_steps", "train_lengths", "hidden_size", "processor",
                   "nb_triplet_fts", "gate_mlp_layers", "gate_bias_init")
# GatePenalty's fields: how strong the penalty is once on, not what is calibrated.
PENALTY_SETTINGS = tuple(f.name for f in dataclasses.fields(GatePenalty)
                         if f.name not in _NOT_DEFINING)


def defining_fields() -> Dict[str, Tuple[str, ...]]:
  """Settings object -> its fields that define a run (the complement of _NOT_DEFINING)."""
  return {name: tuple(f.name for f in dataclasses.fields(cls) if f.name not in _NOT_DEFINING)
          for name, cls in _SETTINGS_OF.items()}


def run_settings(algorithm: str, protocol: Protocol, net: NetConfig,
                 train_lengths: Optional[Sequence[int]] = None,
                 penalty: Optional[GatePenalty] = None) -> Dict[str, Any]:
  """The defining settings of a run of `algorithm` (train_lengths: its own,
  else the protocol's, which must then be one list)."""
  out = {"algorithm": algorithm}
  for obj in (protocol, net, penalty if penalty is not None else GatePenalty(0.0)):
    for f in dataclasses.fields(obj):
      value = getattr(obj, f.name)
      if f.name not in _NOT_DEFINING and (f.name in ALWAYS_RECORDED or not runs.same_value(
          value, f.default)):
        out[f.name] = value
  if train_lengths is not None:
    out["train_lengths"] = train_lengths
  out["schedule_steps"] = protocol.horizon
  out["train_lengths"] = [int(n) for n in clrs30.train_lengths(algorithm, out["train_lengths"])]
  for key in ("learning_rate", "grad_clip_max_norm", "gate_bias_init", "lambda_scale",
              "adaptive_max_scale"):
    if key in out:
      out[key] = float(out[key])
  return out


def record_settings(settings: Mapping[str, Any]) -> Dict[str, Any]:
  """What a lambda calibration record keeps of a run's settings
  (lambda_heuristic.record_settings): not the penalty's strength once on."""
  return lambda_heuristic.record_settings(settings, exclude=PENALTY_SETTINGS)


def configured(**given) -> Dict[str, Any]:
  """run_experiment's label and components as gin (parsed) would call it:
  model, net, protocol and penalty -- `given` ones as they are, the others
  from the gin bindings (and the configurables' defaults).  No jax."""
  out = {}
  # run_experiment's own defaults for these (None: the component's gin bindings).
  for name, default in (("model", gin.REQUIRED), ("net", None), ("protocol", None),
                        ("penalty", None)):
    if name in given:
      out[name] = given[name]
      continue
    try:
      bound = config_lib.bound_value(f"run_experiment.{name}")
    except ValueError:  # nothing bound
      out[name] = default
      continue
    # deepcopy evaluates a configurable reference (`@GatePenalty()`) as gin would; its
    # ValueError (a bad GatePenalty.* value) is the caller's.
    out[name] = copy.deepcopy(bound)
  out["net"] = out["net"] if out["net"] is not None else NetConfig()
  out["protocol"] = out["protocol"] if out["protocol"] is not None else Protocol()
  return out


def run_settings_from_gin(algorithm: str, **given) -> Dict[str, Any]:
  """`run_settings` of `algorithm` with the components gin (parsed) would use."""
  c = configured(**given)
  lengths = resolve_train_lengths(c["protocol"].train_lengths, algorithm)
  return run_settings(algorithm, c["protocol"], c["net"], lengths, c["penalty"])


def run_definition(model: str, algorithm: str, settings: Mapping[str, Any],
                   lam: Optional[float], penalty_start: int,
                   lambda_info: Optional[Mapping[str, Any]], history: str) -> Dict[str, Any]:
  """What defines a run (without its seed): the model label, its history policy, the
  settings and lambda -- its value (None: not known yet, not compared), the
  heuristic's reading and the first penalised step.  result.json holds each of these
  keys; checkpoints keep the dict (key "definition").  A G-ForgetNet run whose
  lambda came from a calibration record is defined by the record's lambda.
  Compared by nar_markov.store.runs.check_result / definition_mismatch."""
  out = {"model": model, "algorithm": algorithm, "history": history,
         "settings": dict(settings),
         "lambda_reading": (lambda_info or {}).get("reading"),
         "penalty_start_step": int(penalty_start)}
  if lam is not None:
    out["lambda_gate"] = float(lam)
  return out


def run_definition_from_gin(algorithm: str, results_dir,
                            algorithms: Optional[Sequence[str]] = None) -> Dict[str, Any]:
  """`run_definition` of run_experiment as gin (parsed) would call it, for
  `algorithm` trained alone or (multi-task label) with `algorithms`.

  Lambda from a calibration record that does not exist yet (or cannot be
  used: the sweep reports that itself) is left out: not compared.
  """
  c = configured()
  model = check_label(c["model"])
  if model.endswith(MULTITASK_SUFFIX):
    tasks = make_tasks(model, list(algorithms or [algorithm]), c["penalty"], results_dir,
                        c["protocol"], c["net"])
    return next(t.definition for t in tasks if t.algorithm == algorithm)
  settings = run_settings_from_gin(algorithm, net=c["net"], protocol=c["protocol"])
  try:
    lam, start, info = resolve_lambda(c["penalty"], algorithm,
                                      results_dir=results_dir, settings=settings)
  except lambda_heuristic.CalibrationError:
    h = lambda_heuristic.LambdaHeuristic()
    lam, start, info = None, h.penalty_start(settings["schedule_steps"]), {"reading": h.reading}
  return run_definition(model, algorithm, settings, lam, start, info, c["net"].history)


def needs_calibration(penalty: Optional[GatePenalty]) -> bool:
  """Whether runs with `penalty` read lambda from a calibration record."""
  return (penalty is not None and penalty.lambda_gate is None
          and penalty.start_step is None)


def check_protocol(*, learning_rate: float, **counts: int) -> None:
  """One clear error for a protocol value that cannot work (counts must be > 0)."""
  for name, value in counts.items():
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
      raise ValueError(f"{name} must be an int, got {value!r}")
    if int(value) <= 0:
      raise ValueError(f"{name} must be > 0, got {value}")
  if not learning_rate > 0:
    raise ValueError(f"learning_rate must be > 0, got {learning_rate}")


def check_seeds(seed: Union[int, Sequence[int]]) -> Tuple[List[int], bool]:
  """`seed` (one int, or a sequence of K distinct ints) as a list of ints >= 0,
  and whether it was a single int (then run_experiment returns one dict)."""
  one = not isinstance(seed, collections.abc.Sequence) or isinstance(seed, (str, bytes))
  seeds = [seed] if one else list(seed)
  if not seeds:
    raise ValueError("seed: an empty sequence (K = 0 seeds); give at least one seed")
  bad = [s for s in seeds
         if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0]
  if bad:
    raise ValueError(f"seeds must be ints >= 0, got {bad!r}")
  if len(set(int(s) for s in seeds)) != len(seeds):
    raise ValueError(f"seeds must be distinct, got {seeds!r}")
  return [int(s) for s in seeds], one


def check_algorithms(algorithm: Union[str, Sequence[str]]) -> Tuple[List[str], bool]:
  """`algorithm` (one name, or a list trained together by one processor) as a
  list of CLRS-30 names without duplicates, and whether it was a single name."""
  one = isinstance(algorithm, str)
  algorithms = [algorithm] if one else list(algorithm)
  if not algorithms:
    raise ValueError("algorithm: an empty list; give at least one CLRS-30 algorithm")
  algorithms = [clrs30.check_algorithm(a) for a in algorithms]
  duplicates = sorted({a for a in algorithms if algorithms.count(a) > 1})
  if duplicates:
    raise ValueError(f"duplicate algorithms {duplicates}: each algorithm gets one set "
                     "of encoders/decoders, list it once")
  return algorithms, one


def resolve_train_lengths(train_lengths: Union[Sequence[int], Mapping[str, Sequence[int]]],
                          algorithm: str) -> Tuple[int, ...]:
  """The train lengths configured for `algorithm` (one list, or a dict alg -> list).

  The string matchers' rule ((max * 5) // 4 nodes) is applied later, by the
  algorithm's own stream (clrs30.train_lengths), never to this value.
  """
  if isinstance(train_lengths, Mapping):
    if algorithm not in train_lengths:
      raise ValueError(f"train_lengths has no entry for {algorithm!r}; give "
                       "every algorithm one, or one list for all")
    train_lengths = train_lengths[algorithm]
  lengths = tuple(int(n) for n in train_lengths)
  if not lengths or min(lengths) <= 0:
    raise ValueError(f"train_lengths of {algorithm!r} must be positive node "
                     f"counts, got {list(lengths)}")
  try:
    clrs30.train_lengths(algorithm, lengths)  # raises for too-short string matchers
  except ValueError as e:
    raise ValueError(f"{e}; give it its own lengths, e.g. train_lengths = "
                     "{'" + algorithm + "': [16], ...}") from None
  return lengths


@dataclasses.dataclass
class Task:
  """One algorithm of a job: its index in the net, lambda and run definition."""
  index: int
  algorithm: str
  lengths: Tuple[int, ...]
  lam: float
  penalty_start: int                  # first step whose loss has lam * G
  lambda_info: Optional[Dict[str, Any]]  # result.json's lambda_calibration
  penalty: Optional[GatePenalty]      # its ramp and adaptation (None: no penalty)
  settings: Dict[str, Any]            # run_settings: result.json's settings
  calibration_settings: Dict[str, Any]  # record_settings: what its calibration had
  definition: Dict[str, Any]          # run_definition: what a checkpoint must agree on
  test: Any = None
  test_batch_size: int = 32

  @staticmethod
  def as_calibrated(definition: Mapping[str, Any]) -> Dict[str, Any]:
    """A calibration run's `definition` with only the settings its record keeps
    (record_settings) and its length: trained at lambda = 0, it was not touched by
    its penalty settings (GatePenalty's, as the sweep's gin bound them), and a
    G-ForgetNet run that continues from it (lambda_heuristic.continuation) may
    have others (gforget and gforget_adaptive share one calibration)."""
    settings = definition.get("settings") or {}
    return dict(definition, settings=dict(record_settings(settings),
                                          train_steps=settings.get("train_steps")))


def make_tasks(model: str, algorithms: Sequence[str], penalty: Optional[GatePenalty],
                results_dir, protocol: Protocol, net: NetConfig) -> List[Task]:
  """The `Task` of each algorithm: settings, lambda and definition.

  A multi-task label trains one processor on all `algorithms`; its settings
  name them (and the update rule), and G-ForgetNet's lambda is bound by hand
  and on from step 0 (the heuristic's calibration is single-task).
  """
  multitask = model.endswith(MULTITASK_SUFFIX)
  if multitask and needs_calibration(penalty):
    raise ValueError(
        f"{model} needs GatePenalty.lambda_gate bound by hand (a float, or a dict "
        "algorithm -> float): the lambda heuristic's calibration is single-task")
  tasks = []
  for k, alg in enumerate(algorithms):
    lengths = resolve_train_lengths(protocol.train_lengths, alg)
    settings = run_settings(alg, protocol, net, lengths, penalty)
    if multitask:
      settings.update(multitask_algorithms=list(algorithms),
                      multitask_update=protocol.multitask_update)
      lam = 0.0 if penalty is None else _check_lambda(
          penalty.lambda_scale * _lambda_of(penalty.lambda_gate, alg))
      start, info = 0, None
    else:
      lam, start, info = resolve_lambda(penalty, alg, results_dir=results_dir,
                                        settings=settings)
    tasks.append(Task(index=k, algorithm=alg, lengths=lengths, lam=lam,
                       penalty_start=start, lambda_info=info, penalty=penalty,
                       settings=settings, calibration_settings=record_settings(settings),
                       definition=run_definition(model, alg, settings, lam, start, info,
                                                  net.history)))
  return tasks


@dataclasses.dataclass(frozen=True)
class Resolved:
  """What run_experiment checked and resolved, handed to the training loop
  (nar_markov.training.train.run): the tasks (one per algorithm), the seeds, where results
  go and the gin text written beside them, and how the caller wants them back
  (`one_seed`, `one_alg`: a dict rather than a list)."""
  tasks: List["Task"]
  seeds: List[int]
  one_seed: bool
  one_alg: bool
  model: str
  results_dir: str
  net: NetConfig
  protocol: Protocol
  gin_str: str
  save_final_state: bool

  @property
  def multitask(self) -> bool:
    return self.model.endswith(MULTITASK_SUFFIX)
