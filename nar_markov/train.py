"""The paper's training protocol and one result JSON per run.

`run_experiment` is the single gin-configurable entry point: it trains one
model on one algorithm with one seed, keeps the best-validation parameters,
scores them on the OOD test split with `clrs.evaluate`, and writes
``<results_dir>/<model>/<algorithm>/seed<k>/result.json`` (atomically) with
``config.gin`` beside it.  A checkpoint in the same folder makes a killed or
requeued run resume exactly: same step, parameters, optimizer state and data
stream -- only the run it was written for (its `run_definition`; a mismatch
is an error naming the settings).  A run is done when nar_markov.runs says so
(its result reads back with this run's definition); while it trains it holds
its folder's lock, so a second process training it is refused.  Given a list of K seeds, it trains them in one process with one
`jax.vmap`-ed step for all K, each seed keeping its own stream, checkpoint
and result.json (K-seed mode; `run_experiment`'s docstring, SEEDS_PER_JOB).

Protocol defaults are the paper's (Sec. 5): Adam, cosine decay from 1.5e-3
over 10,000 steps, batch 32, gradient-norm clipping at 1.0 (dm-clrs run.py),
validation every 50 steps.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import importlib.metadata
import json
import math
import os
import pathlib
import platform
import re
import sys
import time
import zlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import clrs
import gin
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax

from nar_markov import calibrate as calibrate_lib
from nar_markov import data
from nar_markov import devices
from nar_markov import fastnet
from nar_markov import model as model_lib
from nar_markov import params_io
from nar_markov import runs

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
# Checkpoint format of the one loop (lists per algorithm); `upgrade_checkpoint`.
CHECKPOINT_FORMAT = 2
# The results format is nar_markov.runs's (no jax there); these names stay here too.
RESULT_SCHEMA = runs.RESULT_SCHEMA
CHECKPOINT_NAME = runs.CHECKPOINT_NAME
FINAL_STATE_NAME = runs.FINAL_STATE_NAME
RESULT_NAME = runs.RESULT_NAME
PARAMS_NAME = runs.PARAMS_NAME
run_dir = runs.run_dir
atomic_write_bytes = runs.atomic_write_bytes


# -- small utilities -----------------------------------------------------------


def _finite_or_none(x):
  x = float(x)
  return x if math.isfinite(x) else None


def jsonable(obj):
  if isinstance(obj, dict):
    return {str(k): jsonable(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [jsonable(v) for v in obj]
  if isinstance(obj, (np.floating, float)):
    return _finite_or_none(obj)
  if isinstance(obj, (np.integer,)):
    return int(obj)
  if isinstance(obj, np.ndarray):
    return jsonable(obj.tolist())
  return obj


def package_versions() -> Dict[str, str]:
  versions = {"python": platform.python_version()}
  for key, dist in [("jax", "jax"), ("jaxlib", "jaxlib"), ("haiku", "dm-haiku"),
                    ("optax", "optax"), ("clrs", "dm-clrs"), ("gin", "gin-config"),
                    ("numpy", "numpy"), ("nar_markov", "nar_markov")]:
    try:
      versions[key] = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
      versions[key] = "not installed"
  return versions


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
  out["train_lengths"] = [int(n) for n in data.train_lengths(algorithm, out["train_lengths"])]
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


def make_optimizer(learning_rate: float, train_steps: int,
                   grad_clip_max_norm: float) -> optax.GradientTransformation:
  """Adam with cosine decay (paper Sec. 5) after global-norm clipping (run.py)."""
  schedule = optax.cosine_decay_schedule(init_value=learning_rate,
                                         decay_steps=max(1, train_steps))
  chain = []
  if grad_clip_max_norm > 0:
    chain.append(optax.clip_by_global_norm(grad_clip_max_norm))
  chain += [optax.scale_by_adam(), optax.scale_by_schedule(lambda s: -schedule(s))]
  return optax.chain(*chain)


# -- the model wrapper: pure functions, jitted once per shape ---------------------


class Model:
  """Pure train/eval functions of one Net over one or more algorithms."""

  def __init__(self, specs_, nb_dims, config: model_lib.NetConfig,
               optimizer: optax.GradientTransformation):
    self.specs = list(specs_)
    self.nb_dims = list(nb_dims)
    self.config = config
    self.optimizer = optimizer

    net_cls = fastnet.FastNet if config.fast else model_lib.Net

    def forward(features, algorithm_index, repred, hidden_override=None,
                max_length=None, collect_hints=True):
      net = net_cls(self.specs, nb_dims, config)
      return net(features, algorithm_index, repred, hidden_override,
                 max_length=max_length, collect_hints=collect_hints)

    def init_all(features_list):
      # Parameters are created by the reference net under either impl: the
      # two have the same parameters, but FastNet creates some in another
      # order (outputs decoded after the scan), and haiku draws one init key
      # per parameter in creation order.  So a seed means the same initial
      # parameters whichever impl trains them.
      net = model_lib.Net(self.specs, nb_dims, config)
      for k, features in enumerate(features_list):
        net(features, k, repred=False)

    # An rng is only drawn for the Gumbel noise dm-clrs adds to permutation
    # pointers in training (decoders.log_sinkhorn); evaluation uses none.
    self._forward = hk.transform(forward)
    init_params = hk.transform(init_all).init
    self._init = jax.jit(init_params)

    # Run start-up and per-step keys in one compiled function each: done
    # eagerly, PRNGKey, fold_in and the optimizer's zeros_like per parameter
    # shape are an XLA compilation apiece (issue 6's compile budget).
    def init_state(seed, features_list):
      params = init_params(jax.random.PRNGKey(seed), features_list)
      return params, self.optimizer.init(params)

    def step_key(seed, step):
      return jax.random.fold_in(jax.random.PRNGKey(seed + 1), step)

    self._init_state = jax.jit(init_state)
    self._step_key = jax.jit(step_key)
    self._step_keys = jax.jit(jax.vmap(step_key, in_axes=(0, None)))
    self.train_step = jax.jit(self._train_step, static_argnums=(4,),
                              donate_argnums=(0, 1))
    self.eval_batch = jax.jit(self._eval_batch, static_argnums=(2, 3))

  def init(self, rng_key, features_list):
    return self._init(rng_key, features_list)

  def restore_opt_state(self, params, leaves: Sequence[Any]):
    """The optimizer state whose leaves a checkpoint saved (in tree order)."""
    template = jax.eval_shape(self.optimizer.init, params)
    treedef = jax.tree_util.tree_structure(template)
    if treedef.num_leaves != len(leaves):
      raise ValueError(f"checkpoint holds {len(leaves)} optimizer-state arrays, this "
                       f"optimizer has {treedef.num_leaves}")
    return jax.tree_util.tree_unflatten(treedef, [np.asarray(x) for x in leaves])

  def init_state(self, seed: int, features_list):
    """(params, opt_state) of a run: params = init(PRNGKey(seed), ...)."""
    return self._init_state(np.int32(seed), features_list)

  def step_key(self, seed: int, step: int):
    """The rng of train step `step` of a run: fold_in(PRNGKey(seed + 1), step)."""
    return self._step_key(np.int32(seed), np.int32(step))

  def step_keys(self, seeds: Sequence[int], step: int):
    """[K, 2]: `step_key` of each seed, in one call (the same bits)."""
    return self._step_keys(np.asarray(seeds, np.int32), np.int32(step))

  def apply(self, params, features, algorithm_index, repred, hidden_override=None,
            rng_key=None, max_length=None, collect_hints=True):
    return self._forward.apply(params, rng_key, features, algorithm_index, repred,
                               hidden_override, max_length, collect_hints)

  def loss(self, params, feedback, lambda_gate, algorithm_index, rng_key=None,
           max_length=None):
    out = self.apply(params, feedback.features, algorithm_index, False,
                     rng_key=rng_key, max_length=max_length)
    return model_lib.compute_losses(feedback, out, lambda_gate)

  def _train_step(self, params, opt_state, feedback, lambda_gate, algorithm_index,
                  rng_key, max_length=None):
    """One optimizer step. `max_length` (int32 scalar, optional): an upper bound
    on `feedback.features.lengths`; K-seed training passes the max over all
    seeds, unbatched, so that skipping finished steps stays a real branch
    under `jax.vmap`. None: the batch's own max."""
    def total(p):
      losses = self.loss(p, feedback, lambda_gate, algorithm_index, rng_key,
                         max_length)
      return losses.total, losses
    grads, losses = jax.grad(total, has_aux=True)(params)
    updates, new_opt_state = self.optimizer.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    if len(self.specs) > 1:
      # dm-clrs `filter_null_grads`: an update for one algorithm leaves the
      # other algorithms' encoders/decoders and their Adam moments as they
      # were (their gradients are zero; Adam would still move them by momentum).
      new_params = keep_other_algorithms(new_params, params, algorithm_index)
      new_opt_state = keep_other_algorithms(new_opt_state, opt_state, algorithm_index)
    return new_params, new_opt_state, losses

  def _eval_batch(self, params, feedback, algorithm_index, with_hints: bool):
    """Hard output predictions (+ per-step hint loss and history norm on val)."""
    out = self.apply(params, feedback.features, algorithm_index, True,
                     collect_hints=with_hints)
    preds = model_lib.postprocess_outputs(self.specs[algorithm_index],
                                          out.output_preds)
    if not with_hints:
      return preds, None
    losses = model_lib.compute_losses(feedback, out, 0.0)
    history_norm = model_lib.mean_history_norm(out, feedback.features.lengths)
    return preds, {"hint_per_step": losses.hint_per_step,
                   "history_norm": history_norm}


_ALGORITHM_MODULE = re.compile(r"algo_(\d+)_")


def keep_other_algorithms(new, old, algorithm_index: int):
  """`new` (parameters, or optimizer state holding per-parameter trees), where
  every module of ANOTHER algorithm (haiku name `algo_<j>_...`, j !=
  `algorithm_index`) keeps its value in `old`.  Shared modules (the processor,
  the history gate) and global state (Adam's count) take `new`: dm-clrs
  `filter_null_grads`."""
  def pick(path, n, o):
    for key in path:
      name = getattr(key, "key", None)
      if isinstance(name, str):
        m = _ALGORITHM_MODULE.search(name)
        if m and int(m.group(1)) != algorithm_index:
          return o
    return n
  return jax.tree_util.tree_map_with_path(pick, new, old)


def evaluate_split(model: Model, params, split_feedback, algorithm_index: int,
                   batch_size: int, with_hints: bool,
                   max_samples: Optional[int] = None) -> Dict[str, Any]:
  """clrs.evaluate over a whole split, run in fixed-size sub-batches."""
  n_total = split_feedback.outputs[0].data.shape[0]
  if max_samples is not None:
    n_total = min(n_total, int(max_samples))
    split_feedback = data.take_samples(split_feedback, n_total)
  # Equal sub-batches: 32 samples at a cap of 30 run as 2 x 16, not 30 + 30
  # (the last batch is padded with duplicates up to the batch size).
  nb_batches = -(-n_total // max(1, min(batch_size, n_total)))
  batch_size = -(-n_total // nb_batches)
  preds_parts, hint_steps, norms, counts = [], [], [], []
  for batch, n_valid in data.eval_batches(split_feedback, batch_size):
    preds, extras = model.eval_batch(params, batch, algorithm_index, with_hints)
    preds_parts.append(jax.tree_util.tree_map(lambda x: np.asarray(x)[:n_valid], preds))
    if extras is not None:
      # Weighted by valid samples; padded duplicates are dropped from scoring.
      hint_steps.append(np.asarray(extras["hint_per_step"]) * n_valid)
      norms.append(np.asarray(extras["history_norm"])[:n_valid])
      counts.append(n_valid)
  preds = {}
  for name in preds_parts[0]:
    dps = [p[name] for p in preds_parts]
    preds[name] = clrs.DataPoint(
        name=name, location=dps[0].location, type_=dps[0].type_,
        data=np.concatenate([np.asarray(d.data) for d in dps], axis=0))
  outputs = [_slice_dp(o, n_total) for o in split_feedback.outputs]
  scores = clrs.evaluate(outputs, preds)
  result = {"score": float(scores["score"]),
            "scores": {k: float(v) for k, v in scores.items() if k != "score"}}
  if with_hints:
    width = max(len(h) for h in hint_steps)
    padded = [np.pad(h, (0, width - len(h))) for h in hint_steps]
    result["hint_per_step"] = (np.sum(padded, axis=0) / sum(counts)).tolist()
    result["history_norm"] = float(np.mean(np.concatenate(norms)))
  return result


def _slice_dp(dp, n):
  return clrs.DataPoint(name=dp.name, location=dp.location, type_=dp.type_,
                        data=np.asarray(dp.data)[:n])


# -- the run ---------------------------------------------------------------------


def default_test_batch_size(spec, nb_nodes: int, hidden_size: int,
                             budget_bytes: float = 128 * 2**20,
                             fast: bool = True) -> int:
  """Keep one evaluation step's biggest tensors within `budget_bytes`.

  Small sub-batches are also faster on CPU: floyd_warshall's test split
  (32 graphs of 64 nodes) took 168 s in one batch of 32 and 32 s in batches
  of 8 (tensors that stay in cache, fewer page faults).

  The fast net's are [B, N, N, H] (a few of them); dm-clrs's edge-pointer
  decoders (floyd_warshall, optimal_bst, matrix_chain_order... with
  `impl='reference'`) build a batch x n^3 x hidden tensor: 4.3 GB at n = 64,
  batch 32.
  """
  per_sample = nb_nodes**2 * hidden_size * 4 * 8
  for _, (stage, loc, t) in spec.items():
    if not fast and loc == clrs.Location.EDGE and t == clrs.Type.POINTER:
      per_sample = nb_nodes**3 * hidden_size * 4
  return int(max(1, min(32, budget_bytes // per_sample)))


def check_protocol(*, learning_rate: float, **counts: int) -> None:
  """One clear error for a protocol value that cannot work (counts must be > 0)."""
  for name, value in counts.items():
    if int(value) <= 0:
      raise ValueError(f"{name} must be > 0, got {value}")
  if not learning_rate > 0:
    raise ValueError(f"learning_rate must be > 0, got {learning_rate}")


def setup_compilation_cache(path: Optional[str] = None) -> Optional[str]:
  """Turn on JAX's persistent compilation cache (XLA compiles dominate short runs).

  Order: `path`, $NAR_MARKOV_JAX_CACHE, <data cache dir>/jax. An empty string
  or "off" disables it. Must run before the process's first compilation to
  take effect; later calls are no-ops.
  """
  if path is None:
    path = os.environ.get("NAR_MARKOV_JAX_CACHE")
  if path is None:
    path = str(data.resolve_cache_dir() / f"jax-{jax.__version__}")
  if path in ("", "off"):
    return None
  if jax.config.jax_compilation_cache_dir is None:
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
  return jax.config.jax_compilation_cache_dir


def log(msg: str) -> None:
  print(f"[nar_markov] {msg}", file=sys.stderr, flush=True)


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
  algorithms = [data.check_algorithm(a) for a in algorithms]
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
  entropy = [int(seed), zlib.crc32(data.check_algorithm(algorithm).encode())]
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
    data.train_lengths(algorithm, lengths)  # raises for too-short string matchers
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
                   data.TRAIN_LENGTHS,
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
  setup_compilation_cache()
  seeds, one_seed = check_seeds(seed)
  algorithms, one_alg = check_algorithms(algorithm)
  if model not in MODELS:
    raise ValueError(f"unknown model {model!r}; valid: {sorted(MODELS)}")
  if len(algorithms) > 1 and not model.endswith(MULTITASK_SUFFIX):
    raise ValueError(
        f"{len(algorithms)} algorithms train one shared processor: use a multi-task "
        f"label ({model + MULTITASK_SUFFIX!r}, gin/multitask.gin), not {model!r}")
  check_protocol(train_steps=train_steps, batch_size=batch_size,
                 hidden_size=hidden_size, eval_every_steps=eval_every_steps,
                 log_every_steps=log_every_steps,
                 checkpoint_every_steps=checkpoint_every_steps,
                 learning_rate=learning_rate)
  if validation_mode not in data.VALIDATION_MODES:
    raise ValueError(f"unknown validation_mode {validation_mode!r}; "
                     f"valid: {data.VALIDATION_MODES}")
  if multitask_update not in MULTITASK_UPDATES:
    raise ValueError(f"unknown multitask_update {multitask_update!r}; "
                     f"valid: {MULTITASK_UPDATES}")
  tasks = _make_tasks(
      model, algorithms, lambda_gate, results_dir, train_lengths, multitask_update,
      train_steps=train_steps, batch_size=batch_size, hidden_size=hidden_size,
      learning_rate=learning_rate, grad_clip_max_norm=grad_clip_max_norm,
      schedule_steps=schedule_steps, processor=processor, nb_triplet_fts=nb_triplet_fts,
      gate_mlp_layers=gate_mlp_layers, gate_bias_init=gate_bias_init)
  config = model_lib.NetConfig(
      hidden_size=int(hidden_size), history=MODELS[model], processor=processor,
      nb_triplet_fts=nb_triplet_fts, gate_mlp_layers=gate_mlp_layers,
      gate_bias_init=gate_bias_init, impl=impl)

  def verdicts_of(s):
    return [runs.check_result(run_dir(results_dir, model, t.algorithm, s),
                              dict(t.definition, seed=s)) for t in tasks]

  results: Dict[int, List[Dict[str, Any]]] = {}
  # Done means verified (nar_markov.runs.check_result): a result with other
  # settings is refused before anything is touched; a corrupt one is moved
  # aside and the seed trained again.
  verdicts = {s: verdicts_of(s) for s in seeds}
  runs.refuse_other_settings([v for vs in verdicts.values() for v in vs])
  with contextlib.ExitStack() as locks:
    todo = []
    for s in seeds:
      if not all(v.done for v in verdicts[s]):
        # One trainer per job: a second process is refused (runs.run_lock);
        # then look again -- the other may have finished in between.
        locks.enter_context(runs.run_lock(job_folder(results_dir, model, algorithms, s)))
        verdicts[s] = verdicts_of(s)
      if all(v.done for v in verdicts[s]):
        for v in verdicts[s]:
          log(f"{v.path} exists ({v.state}, settings verified); nothing to do")
        results[s] = [v.result for v in verdicts[s]]
        continue
      for v in verdicts[s]:
        if v.state == "other":
          raise ValueError(f"{v.path}: {v.detail}; not retrained, not overwritten")
        if v.state == "corrupt":
          log(f"WARNING: {v.path} is corrupt ({v.detail}); moved aside to "
              f"{runs.move_aside(v.path)}; training the run again")
      todo.append(s)
    if todo:
      job = _make_job(
          tasks, model=model, config=config, results_dir=results_dir,
          train_steps=train_steps, batch_size=batch_size, hidden_size=hidden_size,
          learning_rate=learning_rate, grad_clip_max_norm=grad_clip_max_norm,
          schedule_steps=schedule_steps, validation_mode=validation_mode,
          multitask_update=multitask_update, eval_every_steps=eval_every_steps,
          log_every_steps=log_every_steps, checkpoint_every_steps=checkpoint_every_steps,
          val_max_samples=val_max_samples, test_max_samples=test_max_samples,
          val_batch_size=val_batch_size, test_batch_size=test_batch_size,
          cache_dir=cache_dir, stop_after_steps=stop_after_steps,
          save_final_state=save_final_state, progress=progress)
      results.update(_train_seeds(job, todo, results_dir))

  def shaped(per_task):
    return per_task[0] if one_alg else dict(zip(algorithms, per_task))
  ordered = [shaped(results[s]) for s in seeds]
  return ordered[0] if one_seed else ordered


def _make_job(tasks: List[_Task], *, model, config, results_dir, train_steps, batch_size,
              hidden_size, learning_rate, grad_clip_max_norm, schedule_steps,
              validation_mode, multitask_update, eval_every_steps, log_every_steps,
              checkpoint_every_steps, val_max_samples, test_max_samples, val_batch_size,
              test_batch_size, cache_dir, stop_after_steps, save_final_state,
              progress) -> "_Job":
  """What the seeds of one run_experiment call share: net, optimizer, test splits."""
  specs = [data.get_spec(t.algorithm) for t in tasks]
  nb_dims = []
  for t, spec in zip(tasks, specs):
    t.test = data.load_split(t.algorithm, "test", cache_dir=cache_dir)
    nb_dims.append(model_lib.nb_dims_of(t.test))
    t.test_batch_size = int(test_batch_size) if test_batch_size is not None else (
        default_test_batch_size(spec, data.nb_nodes_of(t.test), hidden_size,
                                fast=config.fast))
  summed = multitask_update == "summed" and len(tasks) > 1
  updates_per_step = 1 if summed else len(tasks)
  optimizer = make_optimizer(learning_rate,
                             (schedule_steps or train_steps) * updates_per_step,
                             grad_clip_max_norm)
  net = Model(specs, nb_dims, config, optimizer)
  return _Job(
      model=model, tasks=tasks, multitask=model.endswith(MULTITASK_SUFFIX),
      summed_step=make_summed_train_step(net, len(tasks)) if summed else None,
      save_final_state=bool(save_final_state), net=net, optimizer=optimizer,
      train_steps=int(train_steps), eval_every_steps=int(eval_every_steps),
      log_every_steps=int(log_every_steps),
      checkpoint_every_steps=int(checkpoint_every_steps),
      val_batch_size=int(val_batch_size), val_max_samples=val_max_samples,
      test_max_samples=test_max_samples, stop_after_steps=stop_after_steps,
      progress=progress, gin_str=gin.config_str(), validation_mode=validation_mode,
      multitask_update=multitask_update, batch_size=int(batch_size))


def _train_seeds(job: "_Job", todo: Sequence[int], results_dir) -> Dict[int, List[Dict]]:
  """run_experiment's training of the seeds `todo` (their locks held): seed ->
  its results, one per algorithm."""
  algorithms = [t.algorithm for t in job.tasks]
  by_step: Dict[int, List[Tuple[_SeedRun, Any, Any]]] = {}
  for s in todo:
    out_dirs = [run_dir(results_dir, job.model, a, s) for a in algorithms]
    for out_dir in out_dirs:
      out_dir.mkdir(parents=True, exist_ok=True)
      atomic_write_bytes(out_dir / "config.gin", (job.gin_str or bindings_as_gin(
          "run_experiment", dict(
              model=job.model, algorithm=algorithms if job.multitask else algorithms[0],
              seed=s, **{k: job.tasks[0].settings[k] for k in (
                  "train_steps", "batch_size", "hidden_size", "learning_rate")},
              lambda_gate=(job.tasks[0].lam if len(job.tasks) == 1 else
                           {t.algorithm: t.lam for t in job.tasks})))).encode())
    # Data: one train stream and one validation pool per algorithm and seed,
    # as run.py; the test splits from the cache (the official draw).
    streams = [data.TrainStream(t.algorithm, seed=stream_seed(s, t.algorithm, algorithms),
                                batch_size=job.batch_size, lengths=t.lengths)
               for t in job.tasks]
    vals = [data.ValidationPool(t.algorithm, seed=stream_seed(s, t.algorithm, algorithms),
                                lengths=t.lengths, mode=job.validation_mode)
            for t in job.tasks]
    run = _SeedRun(job, s, job_folder(results_dir, job.model, algorithms, s), out_dirs,
                   streams, vals)
    params, opt_state = run.start()
    by_step.setdefault(run.step, []).append((run, params, opt_state))
  if len(by_step) > 1 and len(job.tasks) == 1:
    # A K-seed step needs its seeds at the same step (one schedule value,
    # one graph size); this only happens when some seeds ran elsewhere.
    log("checkpoints at different steps (" + ", ".join(
        f"step {k}: seeds {[r.seed for r, _, _ in g]}" for k, g in sorted(by_step.items()))
        + "); training the groups one after the other")
  results = {}
  for group in by_step.values():
    if len(group) == 1 or len(job.tasks) > 1:
      # Several algorithms: the vmapped step is single-task; seeds one by one.
      for run, params, opt_state in group:
        results[run.seed] = _train_single(job, run, params, opt_state)
    else:
      results.update(_train_vmapped(job, group))
  return results


def make_summed_train_step(net: Model, nb_algorithms: int):
  """multitask_update='summed': one optimizer update on sum_k loss_k(batch_k)."""

  def step(params, opt_state, feedbacks, lambdas, rng_key):
    def total(p):
      losses = [net.loss(p, feedbacks[k], lambdas[k], k, jax.random.fold_in(rng_key, k))
                for k in range(nb_algorithms)]
      return sum(l.total for l in losses), losses
    grads, losses = jax.grad(total, has_aux=True)(params)
    updates, opt_state = net.optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, losses

  return jax.jit(step, donate_argnums=(0, 1))


@dataclasses.dataclass
class _Job:
  """What the seeds of one run_experiment call share."""
  model: str
  tasks: List[_Task]
  multitask: bool                     # a *_multitask label (result fields)
  summed_step: Any                    # multitask_update='summed' with >1 algorithm
  save_final_state: bool
  net: Model
  optimizer: optax.GradientTransformation
  train_steps: int
  eval_every_steps: int
  log_every_steps: int
  checkpoint_every_steps: int
  val_batch_size: int
  val_max_samples: Optional[int]
  test_max_samples: Optional[int]
  stop_after_steps: Optional[int]
  progress: bool
  gin_str: str
  validation_mode: str
  multitask_update: str
  batch_size: int

  def lambda_at(self, task: _Task, step: int) -> np.float32:
    """The penalty weight of train step `step` (0-based): the heuristic's reading."""
    # A numpy scalar: no eager conversion to compile, one compiled step for both.
    return np.float32(task.lam if step >= task.penalty_start else 0.0)

  def stop_at(self, step: int) -> int:
    if self.stop_after_steps is None:
      return self.train_steps
    return min(self.train_steps, step + int(self.stop_after_steps))

  # The loop's cadence, the same for every seed of the job.
  def flush_due(self, step: int, stop_at: int) -> bool:
    return (step % self.log_every_steps == 0 or step == stop_at
            or step % self.eval_every_steps == 0
            or step % self.checkpoint_every_steps == 0)

  def eval_due(self, step: int) -> bool:
    return step % self.eval_every_steps == 0 or step == self.train_steps

  def checkpoint_due(self, step: int) -> bool:
    return step % self.checkpoint_every_steps == 0 and step < self.train_steps

  def train_step(self, seed: int, step: int, params, opt_state, feedbacks):
    """One training step of one seed: (params, opt_state, losses per algorithm)."""
    if self.summed_step is not None:
      lambdas = np.asarray([self.lambda_at(t, step) for t in self.tasks], np.float32)
      return self.summed_step(params, opt_state, tuple(feedbacks), lambdas,
                              self.net.step_key(seed, step))
    losses = []
    n = len(self.tasks)
    for task, feedback in zip(self.tasks, feedbacks):
      # The update's rng depends on (seed, update index) only, so resuming needs
      # no rng state: fold_in(PRNGKey(seed + 1), step * n + k), one compiled function.
      rng_key = self.net.step_key(seed, step * n + task.index)
      params, opt_state, l = self.net.train_step(params, opt_state, feedback,
                                                 self.lambda_at(task, step), task.index,
                                                 rng_key)
      losses.append(l)
    return params, opt_state, losses


class _SeedRun:
  """One seed's bookkeeping: folders, data streams, checkpoint state, curves,
  pending losses, divergence and its result.json files (one per algorithm).

  Everything of a seed except its parameters and optimizer state, which the
  training loop holds: one seed's arrays (`_train_single`), or K seeds'
  stacked on a leading axis (`_train_vmapped`), which hands this object its
  seed's slice when it evaluates or checkpoints.
  """

  def __init__(self, job: _Job, seed: int, job_dir: pathlib.Path,
               out_dirs: Sequence[pathlib.Path], streams: Sequence[data.TrainStream],
               vals: Sequence[data.ValidationPool]):
    self.job = job
    self.seed = int(seed)
    self.out_dirs = list(out_dirs)
    self.streams = list(streams)
    self.vals = list(vals)
    self.ckpt_path = job_dir / CHECKPOINT_NAME
    self.pending = []  # (step, device-side losses per algorithm) since the last flush
    self.last_report = time.time()

  @property
  def name(self) -> str:
    if len(self.job.tasks) == 1:
      return f"{self.job.model}/{self.job.tasks[0].algorithm}/seed{self.seed}"
    return f"{self.job.model}/seed{self.seed} ({len(self.job.tasks)} algorithms)"

  @property
  def definitions(self) -> List[Dict[str, Any]]:
    return [dict(t.definition, seed=self.seed) for t in self.job.tasks]

  def start(self):
    """Resume from the checkpoint, or initialise; returns (params, opt_state)."""
    job = self.job
    state = load_checkpoint(self.ckpt_path)
    if state is not None:
      self.check_resume(state, self.ckpt_path, self.definitions)
    prefix = None if state is not None else self.calibration_prefix()
    if prefix is not None:
      task = job.tasks[0]
      state = load_checkpoint(prefix)
      if state is None or state["step"] != task.penalty_start:
        raise ValueError(f"{prefix} does not hold the state at step {task.penalty_start}")
      # The lambda = 0 calibration run of this seed: this run's settings but
      # trained to the switch (train_steps), as model `calibrate` without
      # penalty (nar_markov/calibrate.py).
      self.check_resume(state, prefix, [dict(
          self.definitions[0], model="calibrate", lambda_gate=0.0, lambda_reading=None,
          penalty_start_step=0, settings=dict(task.settings,
                                              train_steps=task.penalty_start))])
      log(f"{self.name}: continuing the lambda = 0 calibration run's training from "
          f"step {state['step']} ({prefix}): the same seed, data and schedule, and "
          "no penalty before the switch, so the same training")
      state["continued_from"] = str(prefix)
    if state is not None:
      for stream, stream_state in zip(self.streams, state["streams"]):
        stream.load_state_dict(stream_state)
      params = state["params"]
      opt_state = job.net.restore_opt_state(params, state["opt_state"])
      if prefix is None:
        log(f"resuming {self.name} from step {state['step']}")
    else:
      init_features = [next(iter(data.eval_batches(v.draw(0), job.val_batch_size)))[0]
                       .features for v in self.vals]
      # = net.init(PRNGKey(seed), ...) and optimizer.init, in one compilation.
      params, opt_state = job.net.init_state(self.seed, init_features)
      state = {"format": CHECKPOINT_FORMAT, "algorithms": [t.algorithm for t in job.tasks],
               "step": 0, "best_val": -1.0, "best_step": None, "best_params": None,
               "best_scores": None, "curves": [empty_curves() for _ in job.tasks],
               "train_time_s": 0.0, "eval_time_s": 0.0, "diverged_step": None,
               "test_results": {}}
    state["definitions"] = self.definitions  # what this seed's checkpoints are of
    self.state = state
    self.curves = state["curves"]
    self.step = state["step"]
    self.t_train = state["train_time_s"]  # accumulated over resumes
    self.t_eval = state["eval_time_s"]
    self.diverged_step = state["diverged_step"]
    if self.step == 0 and not self.curves[0]["val"]["step"]:
      self.evaluate(params, 0)
    return params, opt_state

  def check_resume(self, state, path: pathlib.Path,
                   expected: Sequence[Mapping[str, Any]]) -> None:
    """A checkpoint continues only the job it was written for; a mismatch is
    an error that names the settings, and the checkpoint is kept."""
    recorded = state.get("definitions")
    if state.get("algorithms") != [d["algorithm"] for d in expected]:
      raise ValueError(
          f"checkpoint {path} is for algorithms {state.get('algorithms')}, this run is "
          f"on {[d['algorithm'] for d in expected]}; remove it or use another results_dir")
    if recorded is None:  # written before checkpoints recorded their settings
      log(f"WARNING: {path} records no settings (an older checkpoint); resuming "
          "without checking them")
      if state["step"] > expected[0]["settings"]["train_steps"]:
        raise ValueError(f"checkpoint {path} is at step {state['step']}, this run has "
                         f"train_steps={expected[0]['settings']['train_steps']}; the "
                         "checkpoint is kept: use another results_dir or move it aside")
      return
    diffs = [d for r, e in zip(recorded, expected) for d in runs.definition_mismatch(r, e)]
    if diffs:
      raise ValueError(
          f"checkpoint {path} was written with "
          + ", ".join(f"{k}={a!r}" for k, a, _ in diffs) + "; this run has "
          + ", ".join(f"{k}={b!r}" for k, _, b in diffs)
          + ". The checkpoint is kept (not resumed, not overwritten): use another "
          "results_dir, or move it aside to train this run from step 0")

  def calibration_prefix(self) -> Optional[pathlib.Path]:
    """Schedule reading: the lambda = 0 calibration run of this seed, saved at
    the switch, which is this run's training up to there (calibrate.py)."""
    if len(self.job.tasks) != 1:
      return None
    task = self.job.tasks[0]
    info = task.lambda_info
    if (not info or info.get("source") != "calibration record"
        or info.get("reading") != "schedule" or not info.get("reuse_calibration_prefix")
        or task.penalty_start <= 0):
      return None
    return calibrate_lib.prefix_state(info, self.seed)

  def evaluate(self, params, step_now: int) -> float:
    """Validate on every algorithm's pool; returns the mean score (selection)."""
    job, state = self.job, self.state
    t0 = time.time()
    scores = []
    for task, val, curves in zip(job.tasks, self.vals, self.curves):
      res = evaluate_split(job.net, params, val.draw(step_now), task.index,
                           job.val_batch_size, with_hints=True,
                           max_samples=job.val_max_samples)
      curves["val"]["step"].append(step_now)
      curves["val"]["score"].append(res["score"])
      curves["val"]["hidden_norm"].append(res["history_norm"])
      curves["hint_step_loss"]["step"].append(step_now)
      curves["hint_step_loss"]["loss"].append(res["hint_per_step"])
      scores.append(res["score"])
    self.t_eval += time.time() - t0
    mean = float(np.mean(scores))
    # dm-clrs run.py keeps the first evaluation and any strict improvement
    # (of the sum of the algorithms' scores; the mean selects the same).
    if mean > state["best_val"] or state["best_params"] is None:
      state["best_val"] = mean
      state["best_scores"] = scores
      state["best_step"] = step_now
      state["best_params"] = jax.tree_util.tree_map(np.asarray, params)
    return mean

  def report(self, score: float) -> None:
    job = self.job
    if job.progress and (time.time() - self.last_report > 10
                         or self.step == job.train_steps):
      self.last_report = time.time()
      losses = [c["train"]["loss"][-1] for c in self.curves]
      loss = (f"loss {losses[0]:.4f} val" if len(losses) == 1 else
              "loss [" + ", ".join(f"{t.algorithm} {l:.3f}" for t, l in
                                   zip(job.tasks, losses)) + "] mean val")
      log(f"{self.name} step {self.step}/{job.train_steps} {loss} {score:.4f} "
          f"(best {self.state['best_val']:.4f} @ {self.state['best_step']}) "
          f"{self.step / max(self.t_train, 1e-9):.2f} steps/s")

  def save_checkpoint(self, params, opt_state, path: Optional[pathlib.Path] = None) -> None:
    self.state.update(step=self.step, params=jax.tree_util.tree_map(np.asarray, params),
                      opt_state=jax.tree_util.tree_map(np.asarray, opt_state),
                      streams=[s.state_dict() for s in self.streams], curves=self.curves,
                      train_time_s=self.t_train, eval_time_s=self.t_eval,
                      diverged_step=self.diverged_step)
    # The optimizer state as its leaves (optax's named tuples are rebuilt on
    # load from the optimizer: Model.restore_opt_state); no pickle.
    runs.write_state(path or self.ckpt_path, dict(
        self.state, opt_state=jax.tree_util.tree_leaves(self.state["opt_state"])))

  def flush(self) -> Optional[int]:
    """Fetch this seed's pending losses; see `record`."""
    if not self.pending:
      return None
    steps, losses = zip(*self.pending)
    self.pending.clear()
    return self.record(steps, jax.device_get(list(losses)))

  def record(self, steps: Sequence[int], fetched: Sequence[Sequence[Any]]) -> Optional[int]:
    """Log one window of fetched losses (per step, one per algorithm); returns
    the first step with a non-finite loss of any algorithm."""
    bad = None
    for s, per_task in zip(steps, fetched):
      if bad is None and not all(np.isfinite(float(l.total)) for l in per_task):
        bad = s
    for k, curves in enumerate(self.curves):
      tr = curves["train"]
      tr["step"].append(steps[-1])
      for key, attr in [("loss", "total"), ("output_loss", "output"),
                        ("hint_loss", "hint"), ("gate_penalty", "gate_penalty"),
                        ("gate_term", "gate_term")]:
        tr[key].append(float(np.mean([float(getattr(l[k], attr)) for l in fetched])))
    return bad

  def diverge(self, step: int) -> None:
    self.diverged_step = step
    log(f"{self.name}: non-finite loss at step {step}: run diverged")

  def end(self, params, opt_state) -> List[Dict[str, Any]]:
    """After the loop: the results, or (stopped early on purpose) the checkpoint."""
    if self.diverged_step is None and self.step < self.job.train_steps:
      # Interrupted on purpose (tests): leave the checkpoint, write no result.
      self.save_checkpoint(params, opt_state)
      return [{"status": "interrupted", "steps": self.step} for _ in self.job.tasks]
    if self.diverged_step is None:
      # Checkpointed at the end too: a kill while testing loses no training.
      self.save_checkpoint(params, opt_state)
      if self.job.save_final_state:
        self.save_checkpoint(params, opt_state, self.out_dirs[0] / FINAL_STATE_NAME)
    return self.finish(params, opt_state)

  def finish(self, params=None, opt_state=None) -> List[Dict[str, Any]]:
    """Score the best parameters on test; write one result.json per algorithm.

    A diverged run is tested too, on its best validation parameters (from
    before the divergence), and keeps its status: dm-clrs run.py never drops
    a seed, so neither does the analysis.  Algorithm by algorithm, with a
    checkpoint after each (given `params`): a kill keeps those tested.
    """
    job, state = self.job, self.state
    tested = state.setdefault("test_results", {})
    if state["best_params"] is not None:
      for task in job.tasks:
        if task.algorithm in tested:
          continue
        t0 = time.time()
        tested[task.algorithm] = evaluate_split(
            job.net, state["best_params"], task.test, task.index, task.test_batch_size,
            with_hints=False, max_samples=job.test_max_samples)
        self.t_eval += time.time() - t0
        if params is not None and len(job.tasks) > 1:
          self.save_checkpoint(params, opt_state)
    results = [self.result_of(task, tested.get(task.algorithm)) for task in job.tasks]
    for task, out_dir, result in zip(job.tasks, self.out_dirs, results):
      if state["best_params"] is not None:
        # The best-validation parameters, kept: python -m nar_markov.evaluate <run dir>.
        meta = {"algorithm": task.algorithm, "model": job.model, "seed": self.seed,
                "step": state["best_step"], "val_score": state["best_scores"][task.index],
                "test_score": result["test_score"], "lambda_gate": task.lam,
                "nb_dims": job.net.nb_dims[task.index]}
        if len(job.tasks) > 1:
          meta.update(algorithms=[t.algorithm for t in job.tasks], nb_dims=job.net.nb_dims)
        params_io.save_params(out_dir / PARAMS_NAME, state["best_params"],
                              dataclasses.asdict(job.net.config), meta)
      atomic_write_bytes(out_dir / RESULT_NAME,
                         json.dumps(jsonable(result), indent=1).encode())
    self.ckpt_path.unlink(missing_ok=True)  # only now: every result file is on disk
    for out_dir, result in zip(self.out_dirs, results):
      score = result["test_score"]
      log(f"wrote {out_dir / RESULT_NAME}: status {result['status']}, test "
          f"{score if score is None else round(score, 4)}")
    return results

  def result_of(self, task: _Task, test_res: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The result record of one algorithm (schema: nar_markov.runs)."""
    job, state = self.job, self.state
    steps_done = self.step if self.diverged_step is None else self.diverged_step
    has_best = state["best_params"] is not None
    result = {
        "schema": RESULT_SCHEMA,
        "model": job.model,
        "history": MODELS[job.model],
        "algorithm": task.algorithm,
        "seed": self.seed,
        "status": "done" if self.diverged_step is None else "diverged",
        "steps": int(steps_done),
        "train_steps": job.train_steps,
        "diverged_step": self.diverged_step,
        "test_score": None if test_res is None else test_res["score"],
        "test_scores": None if test_res is None else test_res["scores"],
        "val_best": state["best_scores"][task.index] if has_best else None,
        "val_best_step": state["best_step"],
        "lambda_gate": task.lam,
        "lambda_reading": (task.lambda_info or {}).get("reading"),
        "penalty_start_step": task.penalty_start,
        "lambda_calibration": (None if task.lambda_info is None else dict(
            task.lambda_info, **({"continued_from": state["continued_from"]}
                                 if state.get("continued_from") else {}))),
        "hidden_size": task.settings["hidden_size"],
        "batch_size": task.settings["batch_size"],
        "learning_rate": task.settings["learning_rate"],
        "schedule_steps": task.settings["schedule_steps"],
        "train_lengths": task.settings["train_lengths"],
        "validation_mode": job.validation_mode,
        "settings": task.settings,
        "curves": self.curves[task.index],
        "wall_time_s": self.t_train + self.t_eval,
        "train_time_s": self.t_train,
        "eval_time_s": self.t_eval,
        "steps_per_s": steps_done / max(self.t_train, 1e-9),
        "versions": package_versions(),
        "device": devices.describe_backend(),
        "gin_config": job.gin_str,
    }
    if job.multitask:
      result.update(multitask_algorithms=[t.algorithm for t in job.tasks],
                    multitask_update=job.multitask_update,
                    multitask_val_mean_best=state["best_val"] if has_best else None)
    return result


def _train_single(job: _Job, run: _SeedRun, params, opt_state) -> List[Dict[str, Any]]:
  """One seed, `Model.train_step` (jitted per shape) per algorithm: the K = 1 path."""
  stop_at = job.stop_at(run.step)
  while run.step < stop_at and run.diverged_step is None:
    feedbacks = [next(stream) for stream in run.streams]
    t0 = time.time()
    params, opt_state, losses = job.train_step(run.seed, run.step, params, opt_state,
                                               feedbacks)
    run.step += 1
    run.pending.append((run.step, losses))
    if job.flush_due(run.step, stop_at):
      bad = run.flush()
      run.t_train += time.time() - t0
      if bad is not None:
        run.diverge(bad)
        break
    else:
      run.t_train += time.time() - t0
    if job.eval_due(run.step):
      run.report(run.evaluate(params, run.step))
    if job.checkpoint_due(run.step):
      run.save_checkpoint(params, opt_state)
  return run.end(params, opt_state)


def make_vmapped_train_step(net: Model, algorithm_index: int = 0):
  """K seeds' optimizer steps as one jitted computation.

  `jax.vmap` of `Model._train_step` over a leading seed axis of params,
  optimizer state, batch and rng key; `lambda_gate` and `max_length` are
  shared, unbatched: a scalar `max_length` (the longest trajectory over all
  K batches) keeps the model's skip of finished time steps a real branch,
  where a batched one would turn into a select that computes both sides.
  Parameters and optimizer state are donated, as `Model.train_step` does.
  Call: `(params, opt_state, batch, lambda_gate, rng_keys, max_length)` ->
  `(params, opt_state, losses)`, all with the leading K axis.
  """
  def step(params, opt_state, feedback, lambda_gate, rng_key, max_length):
    return net._train_step(params, opt_state, feedback, lambda_gate,  # pylint: disable=protected-access
                           algorithm_index, rng_key, max_length)
  return jax.jit(jax.vmap(step, in_axes=(0, 0, 0, None, 0, None)),
                 donate_argnums=(0, 1))


def stack_trees(trees: Sequence[Any]):
  """K pytrees of the same structure -> one with a leading K axis (on device)."""
  return jax.tree_util.tree_map(lambda *xs: jnp.asarray(np.stack([np.asarray(x) for x in xs])),
                                *trees)


def tree_index(tree, i: int):
  """Seed `i`'s slice of a stacked pytree already on the host (numpy)."""
  return jax.tree_util.tree_map(lambda x: np.asarray(x[i]), tree)


def stack_batches(feedbacks: Sequence[clrs.Feedback]):
  """K seeds' train batches of one step -> (stacked batch, max_length).

  The batches have the same graph size (lockstep streams) but may differ in
  hint time length (each stream's time bucket); all are zero-padded to the
  longest, which changes no number (outputs freeze after a trajectory's end,
  hint losses are masked).  `max_length`: the longest trajectory of all K
  batches, an int32 scalar.
  """
  T = max(int(fb.features.hints[0].data.shape[0]) for fb in feedbacks)
  padded = [data.pad_time(fb, T) for fb in feedbacks]
  shapes = {tuple(np.shape(x) for x in jax.tree_util.tree_leaves(fb)) for fb in padded}
  if len(shapes) != 1:
    raise ValueError("the seeds' train batches of one step differ in shape (graph "
                     f"sizes out of step?): {sorted(shapes)}")
  stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *padded)
  max_length = np.int32(max(int(np.max(fb.features.lengths)) for fb in feedbacks))
  return stacked, max_length


def _train_vmapped(job: _Job, group) -> Dict[int, List[Dict[str, Any]]]:
  """K >= 2 seeds at the same step, one vmapped step for all (K-seed mode).

  `group`: (run, params, opt_state) per seed.  The cadence (log, eval,
  checkpoint) is the single path's; each seed's losses are fetched, checked
  and logged by its own `_SeedRun`, which also evaluates and checkpoints its
  slice of the stacked parameters.
  """
  active = [run for run, _, _ in group]
  step = active[0].step
  stop_at = job.stop_at(step)
  params = stack_trees([p for _, p, _ in group])
  opt_state = stack_trees([o for _, _, o in group])
  vstep = make_vmapped_train_step(job.net)
  pending = []  # (step, stacked device-side losses) since the last flush
  results = {}
  log(f"{job.model}/{job.tasks[0].algorithm}: training seeds {[r.seed for r in active]} "
      f"together (one vmapped step) from step {step}")
  while step < stop_at and active:
    feedbacks = [next(run.streams[0]) for run in active]
    t0 = time.time()
    batch, max_length = stack_batches(feedbacks)
    params, opt_state, losses = vstep(params, opt_state, batch,
                                      job.lambda_at(job.tasks[0], step),
                                      job.net.step_keys([r.seed for r in active], step),
                                      max_length)
    step += 1
    pending.append((step, losses))
    bad = [None] * len(active)
    if job.flush_due(step, stop_at):
      steps, stacked = zip(*pending)
      pending.clear()
      fetched = jax.device_get(list(stacked))
      bad = [run.record(steps, [[tree_index(l, i)] for l in fetched])
             for i, run in enumerate(active)]
    dt = time.time() - t0
    for run in active:
      run.step = step
      run.t_train += dt  # the job's wall time: shared by its seeds
    if any(b is not None for b in bad):
      # As a separate run: it ends here with status "diverged"; the other
      # seeds go on without it (one compilation for the smaller K).
      keep = []
      for i, (run, b) in enumerate(zip(active, bad)):
        if b is None:
          keep.append(i)
        else:
          run.diverge(b)
          results[run.seed] = run.finish()
      active = [active[i] for i in keep]
      if not active:
        break
      idx = np.asarray(keep)
      params, opt_state = jax.tree_util.tree_map(
          lambda x: x[idx], (params, opt_state))
    if job.eval_due(step) or job.checkpoint_due(step):
      host_params = jax.device_get(params)
      if job.eval_due(step):
        for i, run in enumerate(active):
          run.report(run.evaluate(tree_index(host_params, i), step))
      if job.checkpoint_due(step):
        host_opt = jax.device_get(opt_state)
        for i, run in enumerate(active):
          run.save_checkpoint(tree_index(host_params, i), tree_index(host_opt, i))
  if active:
    host_params, host_opt = jax.device_get((params, opt_state))
    for i, run in enumerate(active):
      results[run.seed] = run.end(tree_index(host_params, i), tree_index(host_opt, i))
  return results


def empty_curves():
  return {
      "train": {"step": [], "loss": [], "output_loss": [], "hint_loss": [],
                "gate_penalty": [], "gate_term": []},
      "val": {"step": [], "score": [], "hidden_norm": []},
      "hint_step_loss": {"step": [], "loss": []},
  }


def load_checkpoint(path: pathlib.Path):
  """The training state saved at `path` (runs.read_state: no code is executed
  on load); None where there is none, or it was cut short by a kill."""
  if not path.exists():
    return None
  try:
    return runs.read_state(path)
  except ValueError as e:  # a checkpoint cut short by a kill: start over, loudly
    log(f"WARNING: unreadable checkpoint {path} ({e}); starting from step 0")
    return None


def bindings_as_gin(configurable: str, arguments: Mapping[str, Any]) -> str:
  """config.gin for runs started from Python without gin: the call's arguments."""
  lines = [f"# {configurable} called without gin; its arguments:"]
  lines += [f"{configurable}.{k} = {v!r}" for k, v in arguments.items()]
  return "\n".join(lines) + "\n"


def run_from_gin(gin_files: Sequence[str], gin_params: Sequence[str], *,
                 algorithms: Sequence[str], seeds: Sequence[int], results_dir: str,
                 multitask: bool = False) -> List[str]:
  """Parse gin afresh in this process, train one job, return its result paths.

  One job: `seeds` of one algorithm (K-seed mode when K > 1), or with
  `multitask` one processor on all `algorithms` for each seed.
  """
  from nar_markov import config as config_lib  # pylint: disable=g-import-not-at-top
  config_lib.parse_gin(gin_files, gin_params)
  algorithms, seeds = list(algorithms), [int(s) for s in seeds]
  if not multitask and len(algorithms) != 1:
    raise ValueError(f"a single-task job trains one algorithm, got {algorithms}")
  run_experiment(algorithm=algorithms if multitask else algorithms[0], seed=seeds,
                 results_dir=results_dir)
  model = gin.query_parameter("run_experiment.model")
  return [str(run_dir(results_dir, model, a, s) / RESULT_NAME)
          for s in seeds for a in algorithms]
