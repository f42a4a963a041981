"""A run's label and components, and the one resolver that makes them from parsed gin.

A run is a label (`run_experiment.model`: the results folder and the table column,
nothing more) and three components, each its own gin configurable: the net
(`NetConfig`, nar_markov/config/netconfig.py: the history policy and the architecture),
the `Protocol` (optimisation, sizes, validation, cadence) and, for G-ForgetNet only, the
`GatePenalty` (lambda and where it comes from).  `resolve` turns the parsed gin (and a
caller's own components) into a checked `Experiment`: what the launcher (plans,
--dry-run, --status, cost), replay, the lambda calibration and the job each call, so
that all of them know a run from the same call.  Nothing reads gin's bindings back.
No jax, haiku, clrs or TensorFlow here.  What a run's settings, definition, lambda and
tasks are, made from an `Experiment`, is nar_markov/config/runspec.py's.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import gin
import numpy as np

from nar_markov.config import clrs30
from nar_markov.config.netconfig import NetConfig

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
  (gin/base.gin binds each of them, with the reason).

  Attributes:
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

  Raises:
    ValueError: on construction, for a count that is not an int > 0 (the optional ones
      where set), a learning_rate not > 0, checkpoint_every_steps not a multiple of
      log_every_steps, an unknown validation_mode or multitask_update, or a
      test_every_steps that is not None or a positive multiple of eval_every_steps.
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
  lambda_scale, ramp_steps, adaptive_every_steps and adaptive_max_scale say how strong
  the penalty is once on; their defaults are the paper's heuristic as written: lambda
  constant from the start step on.

  Attributes:
    lambda_gate: None (gin/gforget.gin): read from the algorithm's calibration record
      under the results folder (nar_markov/config/lambda_heuristic.py); a float, or a
      dict algorithm -> float, bound by hand.
    start_step: the first penalised step.  None: where the lambda heuristic's reading
      says (`LambdaHeuristic.reading`: schedule -> the calibration step, constant -> 0);
      an int: from that step, with `lambda_gate` given (the calibration's own runs: 0).
      Multi-task runs: always 0.
    lambda_scale: lambda is this multiple of the calibrated (or bound) value.
    ramp_steps: 0, a step switch at start_step; N > 0, lambda grows linearly from
      lambda / N at start_step to its full value N steps later.
    adaptive_every_steps: None, lambda constant; N, lambda is measured again every N
      steps after start_step as lambda_scale * L / G over those N steps (L the task loss,
      G the gate term), so that the penalty stays about half of the loss as the gate
      closes -- one reading of "approximately half of the total training loss after 6,000
      steps".  A multiple of Protocol.log_every_steps (measured from the logged losses).
    adaptive_max_scale: the adaptive lambda stays <= this multiple of the lambda it
      started from (G -> 0 would otherwise send it to infinity).

  Raises:
    ValueError: on construction, for a lambda_gate that is not None, a number or a dict
      of numbers; a start_step that is not an int >= 0, or one set with lambda_gate None;
      a lambda_scale not finite and > 0; a ramp_steps not an int >= 0; an
      adaptive_every_steps not None or an int > 0; an adaptive_max_scale < 1.
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
  """`model`, a run's label (its results folder, its table column), if it is usable.

  Raises:
    ValueError: it is not set, or not a folder name (lower-case letters, digits and
      underscores, from a letter); or, given `net`, it is one of the paper's labels
      (`PAPER_LABELS`, with or without `_multitask`) and the run has another history or
      penalty than that label stands for.
  """
  if model is None:
    raise ValueError("the model's label is not set in the gin files (run_experiment.model)")
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
  """What a run of `model` with `net` and `penalty` never reads.

  The launcher refuses a binding on them.

  Returns:
    {a configurable's name, or "Configurable.parameter": why}: GatePenalty and
    LambdaHeuristic without a gate penalty; LambdaHeuristic for a multi-task label (its
    lambda is bound by hand, from step 0); Protocol.multitask_update for a single-task
    one; the gate's NetConfig fields for a history other than 'gated';
    NetConfig.history_scope for the 'full' history.
  """
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


@dataclasses.dataclass(frozen=True)
class Experiment:
  """A run's label and components, typed and checked: what `resolve` returns.

  Attributes:
    model: the label (the results folder, the table column; `check_label`).
    net, protocol: the `NetConfig` and `Protocol`.
    penalty: the `GatePenalty`, or None (no gate penalty).
    save_final_state: keep the last step's state beside result.json (the lambda
      calibration's runs, which G-ForgetNet continues).

  Raises:
    TypeError: on construction, for a net, protocol or penalty of another type.
    ValueError: a label that is not usable with these components (`check_label`), or a
      penalty without the gated history.
  """
  model: str
  net: NetConfig
  protocol: Protocol
  penalty: Optional[GatePenalty] = None
  save_final_state: bool = False

  def __post_init__(self):
    for name, kind in (("net", NetConfig), ("protocol", Protocol), ("penalty", GatePenalty)):
      value = getattr(self, name)
      if not isinstance(value, kind) and not (name == "penalty" and value is None):
        raise TypeError(f"run_experiment.{name} must be a {kind.__name__}"
                        f"{' or None' if name == 'penalty' else ''}, got {value!r}")
    check_label(self.model, self.net, self.penalty)
    if self.penalty is not None and self.net.history != "gated":
      raise ValueError(f"a gate penalty needs the gated history (NetConfig.history = "
                       f"'gated'), not {self.net.history!r}")

  @property
  def multitask(self) -> bool:
    """Whether the label is a multi-task one (`<label>_multitask`)."""
    return self.model.endswith(MULTITASK_SUFFIX)


@gin.configurable("run_experiment")
def _experiment(model: Optional[str] = None, net: Optional[NetConfig] = None,
                protocol: Optional[Protocol] = None, penalty: Optional[GatePenalty] = None,
                save_final_state: bool = False) -> Dict[str, Any]:
  """The gin configurable ``run_experiment.*`` (the name every config.gin binds): the
  components unchecked; net and protocol None are the configurables' own
  (``NetConfig.*``, ``Protocol.*``)."""
  return dict(model=model, net=net if net is not None else NetConfig(),
              protocol=protocol if protocol is not None else Protocol(),
              penalty=penalty, save_final_state=save_final_state)


def unchecked(**given) -> Dict[str, Any]:
  """The label and components gin makes, with the `given` keywords over its bindings, unchecked.

  For a caller that replaces some of them (the lambda calibration's runs) before
  `Experiment` checks the whole.

  Args:
    **given: any of model, net, protocol, penalty, save_final_state.

  Returns:
    {"model", "net", "protocol", "penalty", "save_final_state"}; net and protocol not
    bound: the configurables' own (``NetConfig.*``, ``Protocol.*``).

  Raises:
    TypeError: a keyword that is no component.
  """
  unknown = set(given) - {f.name for f in dataclasses.fields(Experiment)}
  if unknown:
    raise TypeError(f"unknown run components {sorted(unknown)}")
  return _experiment(**given)


def resolve(**given) -> Experiment:
  """The one resolver: the run's checked `Experiment` from the parsed gin.

  The `given` keywords go over gin's bindings (`unchecked`).  No jax; what the launcher
  (plans, --dry-run, --status, cost), replay and the job each call.

  Raises:
    ValueError: a label that is missing or does not fit the components, or a component
      value that cannot work.
    TypeError: a component of the wrong type, or a keyword that is no component.
  """
  c = unchecked(**given)
  return Experiment(**dict(c, save_final_state=bool(c["save_final_state"])))


def check_protocol(*, learning_rate: float, **counts: int) -> None:
  """Raises one clear error for a protocol value that cannot work.

  Raises:
    ValueError: one of `counts` is not an int (a bool is not) or not > 0, or
      `learning_rate` is not > 0.
  """
  for name, value in counts.items():
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
      raise ValueError(f"{name} must be an int, got {value!r}")
    if int(value) <= 0:
      raise ValueError(f"{name} must be > 0, got {value}")
  if not learning_rate > 0:
    raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
