"""What a run is, importable without jax: its settings, definition, lambda and tasks.

A run is an `Experiment` (nar_markov/config/components.py: the label and the
components, made from parsed gin by `components.resolve`).  Everything that says what
a run IS -- the settings that define it (`run_settings`, `settings_of`), its lambda
(`resolve_lambda`) and definition (`run_definition`, `definition_of`), the `Task` of
each algorithm of a job -- lives here, so that the launcher, ``--status``,
``--dry-run``, the calibration plan, replay and the job itself know a run without
importing jax, haiku, clrs or TensorFlow.  The entry point that trains them is
nar_markov/training/experiment.py.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from nar_markov.config import clrs30
from nar_markov.config import components
from nar_markov.config import calibration_records
from nar_markov.config import lambda_heuristic
from nar_markov.config.netconfig import NetConfig
from nar_markov.store import definitions

def resolve_lambda(penalty: Optional[components.GatePenalty], algorithm: str, *, results_dir=None,
                   heuristic: Optional[lambda_heuristic.LambdaHeuristic] = None,
                   settings: Optional[Mapping[str, Any]] = None
                   ) -> Tuple[float, int, Optional[Dict[str, Any]]]:
  """λ, the first penalised step and λ's provenance for a single-task run.

  Args:
    penalty: the run's GatePenalty; None: no penalty.
    algorithm: the algorithm.
    results_dir: the folder the calibration record lies under (where λ is read from it).
    heuristic: the λ heuristic; None: `LambdaHeuristic()` (gin's).
    settings: the run's settings (`run_settings`): their "schedule_steps" place the
      penalty's start; needed where λ is read from a record.

  Returns:
    (λ, start, provenance: result.json's lambda_calibration).  No penalty: (0.0, 0,
    None).  A penalty with a start_step (the calibration's own runs): its bound λ from
    that step.  Otherwise the penalty starts where the heuristic's reading says
    (`LambdaHeuristic.penalty_start`: schedule, the calibration step; constant, 0; 0
    without "schedule_steps") and λ is the bound float, `algorithm`'s entry of a bound
    dict, or with lambda_gate None (gin/gforget.gin's default) the calibration record's
    (`calibration_records.load_lambda`).  λ is then multiplied by lambda_scale (the
    provenance then also has lambda_scale and lambda_unscaled).

  Raises:
    ValueError: a λ that is not finite and >= 0, a dict without `algorithm`, or λ to be
      read from a record without results_dir or settings.
    lambda_heuristic.CalibrationError: the record is missing, unusable or made with
      other settings (a ValueError too).
  """
  if penalty is None:
    return 0.0, 0, None
  lam, start, info = _resolve_unscaled(penalty, algorithm, results_dir, heuristic, settings)
  scale = float(penalty.lambda_scale)
  if scale != 1.0:
    info = dict(info, lambda_scale=scale, lambda_unscaled=lam)
  return _check_lambda(scale * lam), start, info


def _resolve_unscaled(penalty: components.GatePenalty, algorithm: str, results_dir, heuristic,
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
    lam, provenance = calibration_records.load_lambda(results_dir, algorithm, h,
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
_SETTINGS_OF = {"Protocol": components.Protocol, "NetConfig": NetConfig,
                "GatePenalty": components.GatePenalty}
_NOT_DEFINING = {"checkpoint_every_steps", "test_every_steps", "multitask_update",
                 "xla_heap_mib", "lambda_gate", "start_step", "history"}
# Always in "settings", default or not (what results have recorded from the start);
# any other defining field is recorded only where it differs from its default, so a
# result recorded before that field existed reads as the default.
ALWAYS_RECORDED = ("train_steps", "batch_size", "learning_rate", "grad_clip_max_norm",
                   "schedule_steps", "train_lengths", "hidden_size", "processor",
                   "nb_triplet_fts", "gate_mlp_layers", "gate_bias_init")
# GatePenalty's fields: how strong the penalty is once on, not what is calibrated.
PENALTY_SETTINGS = tuple(f.name for f in dataclasses.fields(components.GatePenalty)
                         if f.name not in _NOT_DEFINING)


def defining_fields() -> Dict[str, Tuple[str, ...]]:
  """Settings object -> its fields that define a run (the complement of _NOT_DEFINING)."""
  return {name: tuple(f.name for f in dataclasses.fields(cls) if f.name not in _NOT_DEFINING)
          for name, cls in _SETTINGS_OF.items()}


def run_settings(algorithm: str, protocol: components.Protocol, net: NetConfig,
                 train_lengths: Optional[Sequence[int]] = None,
                 penalty: Optional[components.GatePenalty] = None) -> Dict[str, Any]:
  """The settings that define a run of `algorithm` (result.json's "settings").

  "algorithm", then every field of `protocol`, `net` and `penalty` (None:
  GatePenalty(0.0)'s) but the non-defining ones: those in `ALWAYS_RECORDED` always, the
  others only where they differ from their defaults.  "schedule_steps" is the protocol's
  horizon; "train_lengths" the algorithm's own (`clrs30.train_lengths`: the string
  matchers' rule applied), as ints; the float fields as floats.

  Args:
    algorithm, protocol, net, penalty: the run's.
    train_lengths: the run's configured lengths; None: the protocol's, which must then
      be one list.
  """
  out = {"algorithm": algorithm}
  for obj in (protocol, net, penalty if penalty is not None else components.GatePenalty(0.0)):
    for f in dataclasses.fields(obj):
      value = getattr(obj, f.name)
      if f.name not in _NOT_DEFINING and (f.name in ALWAYS_RECORDED or not definitions.same_value(
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
  """What a λ calibration record keeps of a run's settings (`calibration_records.record_settings`).

  All but "train_steps" and the penalty's strength once on (`PENALTY_SETTINGS`).
  """
  return calibration_records.record_settings(settings, exclude=PENALTY_SETTINGS)


def settings_of(algorithm: str, experiment: components.Experiment) -> Dict[str, Any]:
  """`run_settings` of a run of `algorithm` with `experiment`'s components.

  Raises:
    ValueError: the protocol's train lengths do not work for `algorithm`
      (`resolve_train_lengths`).
  """
  lengths = resolve_train_lengths(experiment.protocol.train_lengths, algorithm)
  return run_settings(algorithm, experiment.protocol, experiment.net, lengths,
                      experiment.penalty)


def run_definition(model: str, algorithm: str, settings: Mapping[str, Any],
                   lam: Optional[float], penalty_start: int,
                   lambda_info: Optional[Mapping[str, Any]], history: str) -> Dict[str, Any]:
  """What defines a run, without its seed.

  Compared by `runs.check_result` (`definitions.definition_mismatch`).  result.json holds each of
  its keys; checkpoints keep the dict (key "definition").  A G-ForgetNet run whose λ came
  from a calibration record is defined by the record's λ.

  Returns:
    {"model", "algorithm", "history", "settings", "lambda_reading" (the heuristic's
    reading in `lambda_info`, else None), "penalty_start_step", and "lambda_gate" where
    `lam` is not None (None: not known yet, not compared)}.
  """
  out = {"model": model, "algorithm": algorithm, "history": history,
         "settings": dict(settings),
         "lambda_reading": (lambda_info or {}).get("reading"),
         "penalty_start_step": int(penalty_start)}
  if lam is not None:
    out["lambda_gate"] = float(lam)
  return out


def definition_of(algorithm: str, experiment: components.Experiment, results_dir,
                  algorithms: Optional[Sequence[str]] = None) -> Dict[str, Any]:
  """`run_definition` of `experiment` on `algorithm`, alone or (multi-task) with `algorithms`.

  Where λ is to come from a calibration record that does not exist yet or cannot be used
  (the sweep reports that itself), it is left out (not compared), and the start step and
  reading are the heuristic's (gin's `LambdaHeuristic()`).

  Raises:
    ValueError: what `settings_of`, `make_tasks` and `resolve_lambda` raise, except a
      CalibrationError (λ then left out).
  """
  if experiment.multitask:
    tasks = make_tasks(experiment.model, list(algorithms or [algorithm]), experiment.penalty,
                       results_dir, experiment.protocol, experiment.net)
    return next(t.definition for t in tasks if t.algorithm == algorithm)
  settings = settings_of(algorithm, experiment)
  try:
    lam, start, info = resolve_lambda(experiment.penalty, algorithm,
                                      results_dir=results_dir, settings=settings)
  except lambda_heuristic.CalibrationError:
    h = lambda_heuristic.LambdaHeuristic()
    lam, start, info = None, h.penalty_start(settings["schedule_steps"]), {"reading": h.reading}
  return run_definition(experiment.model, algorithm, settings, lam, start, info,
                        experiment.net.history)


def needs_calibration(penalty: Optional[components.GatePenalty]) -> bool:
  """Whether runs with `penalty` read lambda from a calibration record."""
  return (penalty is not None and penalty.lambda_gate is None
          and penalty.start_step is None)


def check_seeds(seed: Union[int, Sequence[int]]) -> List[int]:
  """`seed` (one int, or a sequence of K distinct ints) as a list of ints.

  Raises:
    ValueError: no seeds, a seed that is not an int >= 0 (a bool is not), or duplicates.
  """
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
  return [int(s) for s in seeds]


def check_algorithms(algorithm: Union[str, Sequence[str]]) -> List[str]:
  """`algorithm` (one name, or a list trained together by one processor) as a list of
  CLRS-30 names.

  Raises:
    ValueError: no algorithm, one that is not a CLRS-30 name, or duplicates.
  """
  algorithms = [algorithm] if isinstance(algorithm, str) else list(algorithm)
  if not algorithms:
    raise ValueError("algorithm: an empty list; give at least one CLRS-30 algorithm")
  algorithms = [clrs30.check_algorithm(a) for a in algorithms]
  duplicates = sorted({a for a in algorithms if algorithms.count(a) > 1})
  if duplicates:
    raise ValueError(f"duplicate algorithms {duplicates}: each algorithm gets one set "
                     "of encoders/decoders, list it once")
  return algorithms


def resolve_train_lengths(train_lengths: Union[Sequence[int], Mapping[str, Sequence[int]]],
                          algorithm: str) -> Tuple[int, ...]:
  """The train lengths configured for `algorithm`, as a tuple of ints.

  The string matchers' rule ((max * 5) // 4 nodes) is applied later, by the algorithm's
  own stream (clrs30.train_lengths), never to this value.

  Args:
    train_lengths: one list for all algorithms, or a dict algorithm -> list.
    algorithm: the algorithm.

  Raises:
    ValueError: a dict without `algorithm`, lengths that are empty or not positive, or
      lengths `clrs30.train_lengths` refuses (too short for a string matcher).
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
  """One algorithm of a job: its index in the net, lambda and run definition (`make_tasks`).

  `test` and `test_batch_size` are set by the training loop: the test split and its
  evaluation batch size.
  """
  index: int
  algorithm: str
  lengths: Tuple[int, ...]
  lam: float
  penalty_start: int                  # first step whose loss has lam * G
  lambda_info: Optional[Dict[str, Any]]  # result.json's lambda_calibration
  penalty: Optional[components.GatePenalty]      # its ramp and adaptation (None: no penalty)
  settings: Dict[str, Any]            # run_settings: result.json's settings
  calibration_settings: Dict[str, Any]  # record_settings: what its calibration had
  definition: Dict[str, Any]          # run_definition: what a checkpoint must agree on
  test: Any = None
  test_batch_size: int = 32

  @staticmethod
  def as_calibrated(definition: Mapping[str, Any]) -> Dict[str, Any]:
    """A calibration run's `definition` with only the settings its record keeps and train_steps.

    The settings are `record_settings`'s: trained at λ = 0, a calibration run was not
    touched by its penalty settings (GatePenalty's, as the sweep's gin bound them), and a
    G-ForgetNet run that continues from it (`calibration_records.continuation`) may have
    others (gforget and gforget_adaptive share one calibration).
    """
    settings = definition.get("settings") or {}
    return dict(definition, settings=dict(record_settings(settings),
                                          train_steps=settings.get("train_steps")))


def make_tasks(model: str, algorithms: Sequence[str], penalty: Optional[components.GatePenalty],
                results_dir, protocol: components.Protocol, net: NetConfig) -> List[Task]:
  """The `Task` of each algorithm, in order: settings, lambda and definition.

  A multi-task label trains one processor on all `algorithms`; its settings name them
  (and the update rule), and G-ForgetNet's lambda is bound by hand and on from step 0
  (the heuristic's calibration is single-task).

  Raises:
    ValueError: a multi-task label whose penalty would read λ from a calibration record;
      what `resolve_train_lengths` and `resolve_lambda` raise.
  """
  multitask = model.endswith(components.MULTITASK_SUFFIX)
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
  """What run_experiment checked and resolved, handed to the training loop (`train.run`).

  The tasks (one per algorithm), the seeds, where results go and the gin text written
  beside them.
  """
  tasks: List["Task"]
  seeds: List[int]
  model: str
  results_dir: str
  net: NetConfig
  protocol: components.Protocol
  gin_str: str
  save_final_state: bool

  @property
  def multitask(self) -> bool:
    """Whether the label is a multi-task one (`<label>_multitask`)."""
    return self.model.endswith(components.MULTITASK_SUFFIX)
