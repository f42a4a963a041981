"""The paper's training protocol and one result JSON per run.

`run_experiment` is the single gin-configurable entry point: it trains one
model on one algorithm with one seed, keeps the best-validation parameters,
scores them on the OOD test split with `clrs.evaluate`, and writes
``<results_dir>/<model>/<algorithm>/seed<k>/result.json`` (atomically) with
``config.gin`` beside it.  A checkpoint in the same folder makes a killed or
requeued run resume exactly: same step, parameters, optimizer state and data
stream.

Protocol defaults are the paper's (Sec. 5): Adam, cosine decay from 1.5e-3
over 10,000 steps, batch 32, gradient-norm clipping at 1.0 (dm-clrs run.py),
validation every 50 steps.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import pathlib
import pickle
import platform
import sys
import tempfile
import time
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import clrs
import gin
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax

from nar_markov import data
from nar_markov import model as model_lib

# Model name -> history policy.  `gforget_nopenalty` is the paper's penalty
# ablation (lambda = 0); `calibrate` is the lambda=0 run the lambda heuristic
# measures (see nar_markov/calibrate.py).
MODELS = {
    "baseline": "full",
    "forget": "none",
    "gforget": "gated",
    "gforget_nopenalty": "gated",
    "calibrate": "gated",
}
_ZERO_LAMBDA_MODELS = ("gforget_nopenalty", "calibrate")
RESULT_SCHEMA = "nar_markov.result/1"
CHECKPOINT_NAME = "checkpoint.pkl"
RESULT_NAME = "result.json"


def run_dir(results_dir, model: str, algorithm: str, seed: int) -> pathlib.Path:
  return pathlib.Path(results_dir) / model / algorithm / f"seed{int(seed)}"


# -- small utilities -----------------------------------------------------------


def atomic_write_bytes(path: pathlib.Path, payload: bytes) -> None:
  """Write to a temp file in the same folder, fsync, then rename over `path`."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from a shared group
    with os.fdopen(fd, "wb") as f:
      f.write(payload)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


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


def resolve_lambda(lambda_gate: Union[float, Mapping[str, float]], algorithm: str,
                   model: str) -> float:
  """lambda for this run: a float, or a per-algorithm dict (gin/lambdas.gin)."""
  if model in _ZERO_LAMBDA_MODELS or MODELS.get(model) != "gated":
    return 0.0  # no gate, no penalty: lambda is not used
  if isinstance(lambda_gate, Mapping):
    if algorithm not in lambda_gate:
      raise ValueError(
          f"lambda_gate has no value for {algorithm!r}; run the lambda "
          "calibration (README, 'lambda heuristic') or bind "
          "run_experiment.lambda_gate to a float")
    lam = float(lambda_gate[algorithm])
  else:
    lam = float(lambda_gate)
  if not math.isfinite(lam) or lam < 0:
    raise ValueError(f"lambda_gate must be a finite value >= 0, got {lam}")
  return lam


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
    self.config = config
    self.optimizer = optimizer

    def forward(features, algorithm_index, repred, hidden_override=None):
      net = model_lib.Net(self.specs, nb_dims, config)
      return net(features, algorithm_index, repred, hidden_override)

    def init_all(features_list):
      net = model_lib.Net(self.specs, nb_dims, config)
      for k, features in enumerate(features_list):
        net(features, k, repred=False)

    # An rng is only drawn for the Gumbel noise dm-clrs adds to permutation
    # pointers in training (decoders.log_sinkhorn); evaluation uses none.
    self._forward = hk.transform(forward)
    self._init = jax.jit(hk.transform(init_all).init)
    self.train_step = jax.jit(self._train_step, static_argnums=(4,),
                              donate_argnums=(0, 1))
    self.eval_batch = jax.jit(self._eval_batch, static_argnums=(2, 3))

  def init(self, rng_key, features_list):
    return self._init(rng_key, features_list)

  def apply(self, params, features, algorithm_index, repred, hidden_override=None,
            rng_key=None):
    return self._forward.apply(params, rng_key, features, algorithm_index, repred,
                               hidden_override)

  def loss(self, params, feedback, lambda_gate, algorithm_index, rng_key=None):
    out = self.apply(params, feedback.features, algorithm_index, False,
                     rng_key=rng_key)
    return model_lib.compute_losses(feedback, out, lambda_gate)

  def _train_step(self, params, opt_state, feedback, lambda_gate, algorithm_index,
                  rng_key):
    def total(p):
      losses = self.loss(p, feedback, lambda_gate, algorithm_index, rng_key)
      return losses.total, losses
    grads, losses = jax.grad(total, has_aux=True)(params)
    updates, opt_state = self.optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, losses

  def _eval_batch(self, params, feedback, algorithm_index, with_hints: bool):
    """Hard output predictions (+ per-step hint loss and history norm on val)."""
    out = self.apply(params, feedback.features, algorithm_index, True)
    preds = model_lib.postprocess_outputs(self.specs[algorithm_index],
                                          out.output_preds)
    if not with_hints:
      return preds, None
    losses = model_lib.compute_losses(feedback, out, 0.0)
    history_norm = model_lib.mean_history_norm(out, feedback.features.lengths)
    return preds, {"hint_per_step": losses.hint_per_step,
                   "history_norm": history_norm}


def evaluate_split(model: Model, params, split_feedback, algorithm_index: int,
                   batch_size: int, with_hints: bool,
                   max_samples: Optional[int] = None) -> Dict[str, Any]:
  """clrs.evaluate over a whole split, run in fixed-size sub-batches."""
  n_total = split_feedback.outputs[0].data.shape[0]
  if max_samples is not None:
    n_total = min(n_total, int(max_samples))
    split_feedback = data.take_samples(split_feedback, n_total)
  batch_size = min(batch_size, n_total)
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
                             budget_bytes: float = 512 * 2**20) -> int:
  """Keep one evaluation step's biggest tensor within `budget_bytes`.

  Edge-pointer decoders (floyd_warshall, optimal_bst, matrix_chain_order...)
  build a batch x n^3 x hidden tensor: 4.3 GB at n=64, batch 32.
  """
  per_sample = nb_nodes**2 * hidden_size * 4 * 8
  for _, (stage, loc, t) in spec.items():
    if loc == clrs.Location.EDGE and t == clrs.Type.POINTER:
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


@gin.configurable(denylist=["algorithm", "seed", "results_dir"])
def run_experiment(*,
                   algorithm: str,
                   seed: int,
                   model: str = gin.REQUIRED,
                   results_dir: str = "results",
                   train_steps: int = 10_000,
                   batch_size: int = 32,
                   hidden_size: int = 128,
                   learning_rate: float = 1.5e-3,
                   grad_clip_max_norm: float = 1.0,
                   schedule_steps: Optional[int] = None,
                   lambda_gate: Union[float, Mapping[str, float]] = 0.0,
                   train_lengths: Sequence[int] = data.TRAIN_LENGTHS,
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
                   cache_dir: Optional[str] = None,
                   stop_after_steps: Optional[int] = None,
                   progress: bool = True) -> Dict[str, Any]:
  """Train `model` on `algorithm` with `seed`; write and return the result dict.

  Args (all gin-bindable except algorithm/seed/results_dir, which the sweep sets):
    model: baseline | forget | gforget | gforget_nopenalty | calibrate.
    lambda_gate: G-ForgetNet's penalty weight (Eq. 6): a float, or a dict
      algorithm -> float such as gin/lambdas.gin's LAMBDAS.
    val_max_samples / test_max_samples: evaluate on the first k samples only
      (smoke tests); None = the whole official split.
    test_batch_size: None picks a size that bounds evaluation memory.
    schedule_steps: horizon of the cosine decay; None = train_steps.  The
      lambda calibration trains 6,000 steps on the 10,000-step schedule.
    stop_after_steps: tests only -- stop (as if killed) after this many steps,
      leaving the checkpoint behind and no result.
  """
  setup_compilation_cache()
  algorithm = data.check_algorithm(algorithm)
  if model not in MODELS:
    raise ValueError(f"unknown model {model!r}; valid: {sorted(MODELS)}")
  check_protocol(train_steps=train_steps, batch_size=batch_size,
                 hidden_size=hidden_size, eval_every_steps=eval_every_steps,
                 log_every_steps=log_every_steps,
                 checkpoint_every_steps=checkpoint_every_steps,
                 learning_rate=learning_rate)
  lam = resolve_lambda(lambda_gate, algorithm, model)
  config = model_lib.NetConfig(
      hidden_size=int(hidden_size), history=MODELS[model], processor=processor,
      nb_triplet_fts=nb_triplet_fts, gate_mlp_layers=gate_mlp_layers,
      gate_bias_init=gate_bias_init)

  out_dir = run_dir(results_dir, model, algorithm, seed)
  result_path = out_dir / RESULT_NAME
  if result_path.exists():
    log(f"{result_path} exists; nothing to do")
    return json.loads(result_path.read_text())
  out_dir.mkdir(parents=True, exist_ok=True)
  gin_str = gin.config_str()
  atomic_write_bytes(out_dir / "config.gin", (gin_str or bindings_as_gin("run_experiment", dict(
      model=model, algorithm=algorithm, seed=seed, train_steps=train_steps,
      batch_size=batch_size, hidden_size=hidden_size, learning_rate=learning_rate,
      lambda_gate=lam))).encode())

  # Data: one stream per run; val/test from the cache (official CLRS-30 draws).
  stream = data.TrainStream(algorithm, seed=seed, batch_size=batch_size,
                            lengths=tuple(train_lengths))
  spec = stream.spec
  val = data.load_split(algorithm, "val", cache_dir=cache_dir)
  test = data.load_split(algorithm, "test", cache_dir=cache_dir)
  nb_dims = model_lib.nb_dims_of(val)
  test_nodes = test.features.inputs[0].data.shape[1]
  if test_batch_size is None:
    test_batch_size = default_test_batch_size(spec, test_nodes, hidden_size)

  optimizer = make_optimizer(learning_rate, schedule_steps or train_steps,
                             grad_clip_max_norm)
  net = Model([spec], [nb_dims], config, optimizer)

  ckpt_path = out_dir / CHECKPOINT_NAME
  state = load_checkpoint(ckpt_path)
  if state is not None:
    stream.load_state_dict(state["stream"])
    params, opt_state = state["params"], state["opt_state"]
    log(f"resuming {model}/{algorithm}/seed{seed} from step {state['step']}")
  else:
    init_batch = next(iter(data.eval_batches(val, val_batch_size)))[0]
    params = net.init(jax.random.PRNGKey(seed), [init_batch.features])
    opt_state = optimizer.init(params)
    state = {"step": 0, "best_val": -1.0, "best_step": None, "best_params": None,
             "curves": empty_curves(), "train_time_s": 0.0, "eval_time_s": 0.0,
             "diverged_step": None}
  curves = state["curves"]
  step = state["step"]
  pending = []  # device-side losses since the last log, fetched in one go
  t_train = state["train_time_s"]  # accumulated over resumes
  t_eval = state["eval_time_s"]
  diverged_step = state["diverged_step"]

  def do_eval(step_now):
    nonlocal t_eval
    t0 = time.time()
    res = evaluate_split(net, params, val, 0, val_batch_size, with_hints=True,
                         max_samples=val_max_samples)
    t_eval += time.time() - t0
    curves["val"]["step"].append(step_now)
    curves["val"]["score"].append(res["score"])
    curves["val"]["hidden_norm"].append(res["history_norm"])
    curves["hint_step_loss"]["step"].append(step_now)
    curves["hint_step_loss"]["loss"].append(res["hint_per_step"])
    # dm-clrs run.py keeps the first evaluation and any strict improvement.
    if res["score"] > state["best_val"] or state["best_params"] is None:
      state["best_val"] = res["score"]
      state["best_step"] = step_now
      state["best_params"] = jax.tree_util.tree_map(np.asarray, params)
    return res

  def save_checkpoint():
    state.update(step=step, params=jax.tree_util.tree_map(np.asarray, params),
                 opt_state=jax.tree_util.tree_map(np.asarray, opt_state),
                 stream=stream.state_dict(), curves=curves,
                 train_time_s=t_train, eval_time_s=t_eval,
                 diverged_step=diverged_step)
    atomic_write_bytes(ckpt_path, pickle.dumps(state, protocol=4))

  def flush_pending():
    """Fetch logged losses; returns the first step whose loss is not finite."""
    if not pending:
      return None
    steps_, losses_ = zip(*pending)
    fetched = jax.device_get(list(losses_))
    pending.clear()
    bad = None
    for s, l in zip(steps_, fetched):
      if not np.isfinite(float(l.total)) and bad is None:
        bad = s
    tr = curves["train"]
    tr["step"].append(steps_[-1])
    for key, attr in [("loss", "total"), ("output_loss", "output"),
                      ("hint_loss", "hint"), ("gate_penalty", "gate_penalty"),
                      ("gate_term", "gate_term")]:
      tr[key].append(float(np.mean([float(getattr(l, attr)) for l in fetched])))
    return bad

  if step == 0 and not curves["val"]["step"]:
    do_eval(0)
  stop_at = train_steps if stop_after_steps is None else min(
      train_steps, step + int(stop_after_steps))
  lam_arr = jnp.asarray(lam, jnp.float32)
  base_key = jax.random.PRNGKey(seed + 1)
  last_report = time.time()
  while step < stop_at and diverged_step is None:
    feedback = next(stream)
    t0 = time.time()
    # The step's rng depends on (seed, step) only, so resuming needs no rng state.
    rng_key = jax.random.fold_in(base_key, step)
    params, opt_state, losses = net.train_step(params, opt_state, feedback,
                                               lam_arr, 0, rng_key)
    step += 1
    pending.append((step, losses))
    if (step % log_every_steps == 0 or step == stop_at
        or step % eval_every_steps == 0 or step % checkpoint_every_steps == 0):
      bad = flush_pending()
      t_train += time.time() - t0
      if bad is not None:
        diverged_step = bad
        log(f"non-finite loss at step {bad}: run diverged")
        break
    else:
      t_train += time.time() - t0
    if step % eval_every_steps == 0 or step == train_steps:
      res = do_eval(step)
      if progress and (time.time() - last_report > 10 or step == train_steps):
        last_report = time.time()
        elapsed = t_train
        log(f"{model}/{algorithm}/seed{seed} step {step}/{train_steps} "
             f"loss {curves['train']['loss'][-1]:.4f} val {res['score']:.4f} "
             f"(best {state['best_val']:.4f} @ {state['best_step']}) "
             f"{step / max(elapsed, 1e-9):.2f} steps/s")
    if step % checkpoint_every_steps == 0 and step < train_steps:
      save_checkpoint()

  if diverged_step is None and step < train_steps:
    # Interrupted on purpose (tests): leave the checkpoint, write no result.
    save_checkpoint()
    return {"status": "interrupted", "steps": step}

  train_time = t_train
  eval_time = t_eval
  test_res = None
  if diverged_step is None:
    t0 = time.time()
    test_res = evaluate_split(net, state["best_params"], test, 0, test_batch_size,
                              with_hints=False, max_samples=test_max_samples)
    eval_time += time.time() - t0
  steps_done = step if diverged_step is None else diverged_step
  result = {
      "schema": RESULT_SCHEMA,
      "model": model,
      "history": MODELS[model],
      "algorithm": algorithm,
      "seed": int(seed),
      "status": "done" if diverged_step is None else "diverged",
      "steps": int(steps_done),
      "train_steps": int(train_steps),
      "diverged_step": diverged_step,
      "test_score": None if test_res is None else test_res["score"],
      "test_scores": None if test_res is None else test_res["scores"],
      "val_best": state["best_val"] if state["best_params"] is not None else None,
      "val_best_step": state["best_step"],
      "lambda_gate": lam,
      "hidden_size": int(hidden_size),
      "batch_size": int(batch_size),
      "learning_rate": float(learning_rate),
      "schedule_steps": int(schedule_steps or train_steps),
      "train_lengths": [int(x) for x in train_lengths],
      "curves": curves,
      "wall_time_s": train_time + eval_time,
      "train_time_s": train_time,
      "eval_time_s": eval_time,
      "steps_per_s": steps_done / max(train_time, 1e-9),
      "versions": package_versions(),
      "gin_config": gin_str,
  }
  atomic_write_bytes(result_path, json.dumps(jsonable(result), indent=1).encode())
  if ckpt_path.exists():
    ckpt_path.unlink()
  log(f"wrote {result_path}: status {result['status']}, test "
       f"{result['test_score'] if result['test_score'] is None else round(result['test_score'], 4)}")
  return result


def empty_curves():
  return {
      "train": {"step": [], "loss": [], "output_loss": [], "hint_loss": [],
                "gate_penalty": [], "gate_term": []},
      "val": {"step": [], "score": [], "hidden_norm": []},
      "hint_step_loss": {"step": [], "loss": []},
  }


def load_checkpoint(path: pathlib.Path):
  if not path.exists():
    return None
  try:
    with open(path, "rb") as f:
      return pickle.load(f)
  except Exception as e:  # a checkpoint cut short by a kill: start over, loudly
    log(f"WARNING: unreadable checkpoint {path} ({e!r}); starting from step 0")
    return None


def bindings_as_gin(configurable: str, arguments: Mapping[str, Any]) -> str:
  """config.gin for runs started from Python without gin: the call's arguments."""
  lines = [f"# {configurable} called without gin; its arguments:"]
  lines += [f"{configurable}.{k} = {v!r}" for k, v in arguments.items()]
  return "\n".join(lines) + "\n"


def run_from_gin(gin_files: Sequence[str], gin_params: Sequence[str], *,
                 algorithm: str, seed: int, results_dir: str) -> str:
  """Parse gin afresh in this process, run one experiment, return result path."""
  from nar_markov import config as config_lib  # pylint: disable=g-import-not-at-top
  config_lib.parse_gin(gin_files, gin_params)
  run_experiment(algorithm=algorithm, seed=int(seed), results_dir=results_dir)
  model = gin.query_parameter("run_experiment.model")
  return str(run_dir(results_dir, model, algorithm, seed) / RESULT_NAME)
