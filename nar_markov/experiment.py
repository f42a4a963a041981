"""What a run is, importable without jax: the run_experiment configurable, model labels, settings, lambda.

`run_experiment` is the gin-configurable entry point of every run (gin/base.gin binds
`run_experiment.*`); it checks and resolves its arguments here and trains with
nar_markov.train (imported only then).  Everything that says what a run IS -- the model
labels and their history policies, the settings that define a run (`run_settings`), its
lambda (`resolve_lambda`) and definition (`run_definition`), the seeds and algorithms of a
job -- lives here, so that the launcher, ``--status``, ``--dry-run`` and the calibration
plan know a sweep's runs without importing jax, haiku, clrs or TensorFlow.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import math
import pathlib
import zlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gin
import numpy as np

from nar_markov import calibrate as calibrate_lib
from nar_markov import clrs30
from nar_markov import runs

# nar_markov.data.ValidationPool's modes (kept equal there).
VALIDATION_MODES = ("resample", "fixed")
run_dir = runs.run_dir

# Model name -> history policy.  `gforget_constant` is G-ForgetNet under the
# other reading of the lambda heuristic (gin/gforget_constant.gin);
# `gforget_nopenalty` is the paper's penalty ablation (lambda = 0);
# `calibrate` is a calibration run of the lambda heuristic, trained with the
# lambda it is given from step 0 (nar_markov/calibrate.py).
MODELS = {
    "baseline": "full",
    "forget": "none",
    "gforget": "gated",
    "gforget_constant": "gated",
    "gforget_nopenalty": "gated",
    "calibrate": "gated",
}
# A multi-task label: one processor trained on a list of algorithms (gin/multitask.gin).
MULTITASK_SUFFIX = "_multitask"
MODELS.update({name + MULTITASK_SUFFIX: MODELS[name]
               for name in ("baseline", "forget", "gforget", "gforget_nopenalty")})
_ZERO_LAMBDA_MODELS = ("gforget_nopenalty",)
# How a multi-task step updates the shared processor (run_experiment).
MULTITASK_UPDATES = ("per_algorithm", "summed")

def resolve_lambda(lambda_gate: Union[None, float, Mapping[str, float]],
                   algorithm: str, model: str, *, results_dir=None,
                   heuristic: Optional[calibrate_lib.LambdaHeuristic] = None,
                   settings: Optional[Mapping[str, Any]] = None
                   ) -> Tuple[float, int, Optional[Dict[str, Any]]]:
  """(lambda, first penalised step, provenance) of a run.

  No gate or the penalty ablation: (0, 0, None).  A calibration run
  (`calibrate`): the float it is given, from step 0.  G-ForgetNet: the
  penalty starts where the heuristic's reading says (schedule: at the
  calibration step; constant: at 0) and lambda is, in this order, a float
  bound by hand, a per-algorithm dict bound in gin, or -- `lambda_gate=None`,
  gin/gforget.gin's default -- read from the algorithm's calibration record
  under `results_dir` (nar_markov/calibrate.py).
  """
  if model in _ZERO_LAMBDA_MODELS or MODELS.get(model) != "gated":
    return 0.0, 0, None  # no gate, no penalty: lambda is not used
  if model == "calibrate":
    return _check_lambda(0.0 if lambda_gate is None else lambda_gate), 0, {
        "source": "calibration run"}
  h = heuristic or calibrate_lib.LambdaHeuristic()
  schedule_steps = int((settings or {}).get("schedule_steps") or 0)
  start = h.penalty_start(schedule_steps) if schedule_steps else 0
  info = {"reading": h.reading, "penalty_start_step": start}
  if lambda_gate is None:
    if results_dir is None or settings is None:
      raise ValueError("lambda_gate is None (read it from the calibration record) "
                       "but no results_dir/settings to find the record with")
    lam, provenance = calibrate_lib.load_lambda(results_dir, algorithm, h, settings)
    return _check_lambda(lam), start, {
        **provenance, **info, "reuse_calibration_prefix": h.reuse_calibration_prefix}
  if isinstance(lambda_gate, Mapping):
    if algorithm not in lambda_gate:
      raise ValueError(
          f"lambda_gate has no value for {algorithm!r}; bind "
          "run_experiment.lambda_gate = None to read it from the calibration "
          "record, or to a float")
    lam = _check_lambda(lambda_gate[algorithm])
    return lam, start, {"source": "gin table", "lambda": lam, **info}
  lam = _check_lambda(lambda_gate)
  return lam, start, {"source": "bound by hand", "lambda": lam, **info}


def _check_lambda(value) -> float:
  lam = float(value)
  if not math.isfinite(lam) or lam < 0:
    raise ValueError(f"lambda_gate must be a finite value >= 0, got {lam}")
  return lam


# What defines a run's training, beside its algorithm and seed (result.json
# "settings"; what a calibration record must agree on, nar_markov/calibrate.py).
_SETTINGS_ARGS = ("train_steps", "batch_size", "hidden_size", "learning_rate",
                  "grad_clip_max_norm", "schedule_steps", "train_lengths",
                  "processor", "nb_triplet_fts", "gate_mlp_layers", "gate_bias_init")


def run_settings(algorithm: str, **kwargs) -> Dict[str, Any]:
  """The defining settings of a run of `algorithm` with run_experiment's `kwargs`."""
  out = {"algorithm": algorithm}
  for key in _SETTINGS_ARGS:
    out[key] = kwargs[key]
  out["schedule_steps"] = int(out["schedule_steps"] or out["train_steps"])
  out["train_lengths"] = [int(n) for n in clrs30.train_lengths(algorithm, out["train_lengths"])]
  for key in ("learning_rate", "grad_clip_max_norm", "gate_bias_init"):
    out[key] = float(out[key])
  return out


def gin_arguments(*names: str, **overrides) -> Dict[str, Any]:
  """run_experiment's arguments `names` as gin (parsed) and `overrides` would call it."""
  import inspect  # pylint: disable=g-import-not-at-top
  from nar_markov import config as config_lib  # pylint: disable=g-import-not-at-top
  params = inspect.signature(run_experiment).parameters
  out = {}
  for name in names:
    if name in overrides:
      out[name] = overrides[name]
      continue
    try:
      out[name] = config_lib.bound_value(f"run_experiment.{name}")
    except ValueError:
      out[name] = params[name].default
  return out


def run_settings_from_gin(algorithm: str, **overrides) -> Dict[str, Any]:
  """`run_settings` of run_experiment as gin (parsed) and `overrides` would call it."""
  return run_settings(algorithm, **gin_arguments(*_SETTINGS_ARGS, **overrides))


def run_definition(model: str, algorithm: str, settings: Mapping[str, Any],
                   lam: Optional[float], penalty_start: int,
                   lambda_info: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
  """What defines a run (without its seed): the model label, the settings and
  lambda -- its value (None: not known yet, not compared), the heuristic's
  reading and the first penalised step.  result.json holds each of these keys;
  checkpoints keep the dict (key "definition").  A G-ForgetNet run whose
  lambda came from a calibration record is defined by the record's lambda.
  Compared by nar_markov.runs.check_result / definition_mismatch."""
  out = {"model": model, "algorithm": algorithm, "settings": dict(settings),
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
  from nar_markov import config as config_lib  # pylint: disable=g-import-not-at-top
  model = config_lib.bound_value("run_experiment.model")
  lambda_gate = gin_arguments("lambda_gate")["lambda_gate"]
  if model.endswith(MULTITASK_SUFFIX):
    args = gin_arguments(*_SETTINGS_ARGS, "multitask_update")
    tasks = _make_tasks(model, list(algorithms or [algorithm]), lambda_gate, results_dir,
                        args.pop("train_lengths"), args.pop("multitask_update"), **args)
    return next(t.definition for t in tasks if t.algorithm == algorithm)
  settings = run_settings_from_gin(algorithm)
  try:
    lam, start, info = resolve_lambda(lambda_gate, algorithm, model,
                                      results_dir=results_dir, settings=settings)
  except calibrate_lib.CalibrationError:
    h = calibrate_lib.LambdaHeuristic()
    lam, start, info = None, h.penalty_start(settings["schedule_steps"]), {"reading": h.reading}
  return run_definition(model, algorithm, settings, lam, start, info)


def check_protocol(*, learning_rate: float, **counts: int) -> None:
  """One clear error for a protocol value that cannot work (counts must be > 0)."""
  for name, value in counts.items():
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


def stream_seed(seed: int, algorithm: str, algorithms: Sequence[str]) -> int:
  """Seed of `algorithm`'s train stream and validation pool in a job of `algorithms`.

  One algorithm: the run's seed (single-task runs).  Several: keyed by name
  (crc32 is stable across processes, unlike hash()), so that algorithms with
  the same sampler (bfs and dfs: the same graphs) get different data, and
  the data do not depend on the order of the list.  run.py draws its
  per-algorithm sampler seeds from one RandomState in list order instead.
  """
  if len(algorithms) == 1:
    return int(seed)
  entropy = [int(seed), zlib.crc32(clrs30.check_algorithm(algorithm).encode())]
  return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def resolve_train_lengths(train_lengths: Union[Sequence[int], Mapping[str, Sequence[int]]],
                          algorithm: str) -> Tuple[int, ...]:
  """The train lengths configured for `algorithm` (one list, or a dict alg -> list).

  The string matchers' rule ((max * 5) // 4 nodes) is applied later, by the
  algorithm's own stream (data.train_lengths), never to this value.
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
class _Task:
  """One algorithm of a job: its index in the net, lambda and run definition."""
  index: int
  algorithm: str
  lengths: Tuple[int, ...]
  lam: float
  penalty_start: int                  # first step whose loss has lam * G
  lambda_info: Optional[Dict[str, Any]]  # result.json's lambda_calibration
  settings: Dict[str, Any]            # run_settings: result.json's settings
  definition: Dict[str, Any]          # run_definition: what a checkpoint must agree on
  test: Any = None
  test_batch_size: int = 32


def _make_tasks(model: str, algorithms: Sequence[str], lambda_gate, results_dir,
                train_lengths, multitask_update: str, **settings_args) -> List[_Task]:
  """The `_Task` of each algorithm: settings, lambda and definition.

  A multi-task label trains one processor on all `algorithms`; its settings
  name them (and the update rule), and G-ForgetNet's lambda is bound by hand
  and on from step 0 (the heuristic's calibration is single-task).
  """
  multitask = model.endswith(MULTITASK_SUFFIX)
  tasks = []
  for k, alg in enumerate(algorithms):
    lengths = resolve_train_lengths(train_lengths, alg)
    settings = run_settings(alg, train_lengths=lengths, **settings_args)
    if multitask:
      settings.update(multitask_algorithms=list(algorithms),
                      multitask_update=multitask_update)
      base = model[:-len(MULTITASK_SUFFIX)]
      if MODELS[model] == "gated" and base not in _ZERO_LAMBDA_MODELS and lambda_gate is None:
        raise ValueError(
            f"{model} needs run_experiment.lambda_gate bound by hand (a float, or a dict "
            "algorithm -> float): the lambda heuristic's calibration is single-task")
      lam = resolve_lambda(lambda_gate, alg, base)[0]
      start, info = 0, None
    else:
      lam, start, info = resolve_lambda(lambda_gate, alg, model, results_dir=results_dir,
                                        settings=settings)
    tasks.append(_Task(index=k, algorithm=alg, lengths=lengths, lam=lam,
                       penalty_start=start, lambda_info=info, settings=settings,
                       definition=run_definition(model, alg, settings, lam, start, info)))
  return tasks


def job_folder(results_dir, model: str, algorithms: Sequence[str], seed: int) -> pathlib.Path:
  """Where the job of `seed` keeps its checkpoint: the run folder of its one
  algorithm, or for several the multi-task job folder (runs.multitask_job_dir)."""
  if len(algorithms) == 1:
    return run_dir(results_dir, model, algorithms[0], seed)
  return runs.multitask_job_dir(results_dir, model, seed)


@gin.configurable(denylist=["algorithm", "seed", "results_dir"])
def run_experiment(*,
                   algorithm: Union[str, Sequence[str]],
                   seed: Union[int, Sequence[int]],
                   model: str = gin.REQUIRED,
                   results_dir: str = "results",
                   train_steps: int = 10_000,
                   batch_size: int = 32,
                   hidden_size: int = 128,
                   learning_rate: float = 1.5e-3,
                   grad_clip_max_norm: float = 1.0,
                   schedule_steps: Optional[int] = None,
                   lambda_gate: Union[None, float, Mapping[str, float]] = None,
                   train_lengths: Union[Sequence[int], Mapping[str, Sequence[int]]] =
                   clrs30.TRAIN_LENGTHS,
                   validation_mode: str = "resample",
                   multitask_update: str = "per_algorithm",
                   eval_every_steps: int = 50,
                   log_every_steps: int = 10,
                   checkpoint_every_steps: int = 500,
                   val_max_samples: Optional[int] = None,
                   test_max_samples: Optional[int] = None,
                   val_batch_size: int = 32,
                   test_batch_size: Optional[int] = None,
                   processor: str = "triplet_gmpnn",
                   nb_triplet_fts: int = 8,
                   gate_mlp_layers: int = 2,
                   gate_bias_init: float = 0.0,
                   impl: str = "auto",
                   cache_dir: Optional[str] = None,
                   stop_after_steps: Optional[int] = None,
                   save_final_state: bool = False,
                   progress: bool = True) -> Any:
  """Train `model` on `algorithm` with `seed`; write and return the result dict(s).

  The one training loop, as dm-clrs's run.py: a job trains a LIST of
  algorithms with one processor (single-task is a list of one) for one or
  more seeds.

  Args (all gin-bindable except algorithm/seed/results_dir, which the sweep sets):
    algorithm: one CLRS-30 name -> a single-task run; a list -> one processor
      trained on all of them (per-algorithm encoders and decoders, paper App.
      "Multi-task experiments"), which needs a multi-task label
      (`<model>_multitask`, gin/multitask.gin).  One result.json per
      algorithm either way, under <results_dir>/<model>/<algorithm>/seed<k>/.
    seed: one seed -> returns one run's result (one algorithm) or a dict
      algorithm -> result (a list).  A sequence of K distinct seeds -> a list
      of those, in order.  One algorithm: the K seeds train together, one
      vmapped step (K-seed mode, below); several: one seed after the other.
    model: baseline | forget | gforget | gforget_constant | gforget_nopenalty |
      calibrate, or <one of the first four>_multitask -- a label of the results
      folder; its history policy is MODELS[model].
    lambda_gate: G-ForgetNet's penalty weight (Eq. 6).  None (gin/gforget.gin):
      read from the algorithm's calibration record under `results_dir`
      (nar_markov/calibrate.py); a float, or a dict algorithm -> float, bound
      by hand.  When the penalty is on is the lambda heuristic's reading
      (`LambdaHeuristic.reading`: schedule -> from the calibration step,
      constant -> from step 0); see `resolve_lambda`.  Multi-task: bound by
      hand, on from step 0.
    train_lengths: one list for all algorithms, or a dict algorithm -> list.
      Either way the string matchers train at (max * 5) // 4 nodes of their
      list (data.train_lengths).
    validation_mode: 'resample' (dm-clrs run.py: every evaluation draws
      2 x 32 x multiplier samples with replacement from a pool sampled with
      the training settings at the largest train size, random pos) or 'fixed'
      (that pool, the same samples each time); nar_markov.data.ValidationPool.
    multitask_update: several algorithms only.  'per_algorithm' (dm-clrs
      run.py, the default): every training step takes one clipped Adam update
      per algorithm, in list order, each on that algorithm's own batch, with
      the other algorithms' encoders/decoders and their Adam moments left
      untouched (dm-clrs `filter_null_grads`); the cosine schedule then spans
      train_steps x len(algorithms) updates.  'summed': one update per step on
      the sum of the algorithms' losses (the named departure, for comparison).
      The processor is validated on every algorithm's val split; the
      parameters with the best MEAN val score are tested (run.py keeps the
      best sum).
    val_max_samples / test_max_samples: evaluate on the first k samples only
      (smoke tests); None = the whole official split.
    test_batch_size: None picks a size that bounds evaluation memory.
    schedule_steps: horizon of the cosine decay in steps; None = train_steps.
      The lambda calibration trains 6,000 steps on the 10,000-step schedule.
    impl: how the net is computed: 'auto'/'fast' (nar_markov.fastnet) or
      'reference' (dm-clrs's modules as they are; same function and
      parameters, slower).
    stop_after_steps: tests only -- stop (as if killed) after this many steps,
      leaving the checkpoint behind and no result.
    save_final_state: keep the state at the last step as FINAL_STATE_NAME
      beside result.json (the lambda calibration's lambda = 0 runs: G-ForgetNet
      under the schedule reading continues from it).

  K-seed mode (`seed=[s1, ..., sK]` with one algorithm, what the sweep runs
  with SEEDS_PER_JOB=K): one optimizer step of all K seeds is ONE XLA
  computation, `jax.vmap` of `Model._train_step` over parameters, optimizer
  state, batch and step rng (`make_vmapped_train_step`).  Everything else
  stays per seed and is exactly what K separate runs do (`_SeedRun`): its own
  data stream, initial parameters, step rng, validation, best parameters,
  checkpoint (the same format: a run can be resumed either way), divergence
  and result.json.  So each seed's result equals its separate run's up to
  float reassociation in XLA's batched kernels (tests/test_multiseed.py).
  The K batches of a step have the same graph size (the streams cycle the
  train lengths in lockstep) and are zero-padded on the time axis to the
  longest of the K, which changes no number.  Seeds resumed from checkpoints
  at different steps are trained group by group.  `train_time_s` of a K-seed
  run is the job's training wall time, shared by its K seeds.

  Done-ness, for every seed: a seed whose results all read back with this
  call's definition (nar_markov.runs.check_result) is skipped; a result with
  other settings is an error (nothing trained); a corrupt one is moved aside
  and the seed trained again; a seed another process is training (its lock)
  is an error, runs.LockHeld.  A diverged seed gets its "diverged" results
  at once, tested on its best validation parameters, and the others go on.
  """
  from nar_markov import train  # pylint: disable=g-import-not-at-top  (jax: only to train)
  return train.run(**arguments_of(locals()))


def arguments_of(frame_locals: Mapping[str, Any]) -> Dict[str, Any]:
  """run_experiment's arguments, from its locals at entry."""
  return {k: frame_locals[k] for k in inspect.signature(run_experiment).parameters}
