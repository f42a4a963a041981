"""One processor for many algorithms (paper App. "Multi-task experiments").

The paper follows Ibarz et al. (2022, "A Generalist Neural Algorithmic
Learner"): a single processor -- here with any of the three history policies --
is trained on several CLRS-30 algorithms at once, while every algorithm keeps
its own encoders and decoders.  `model.Net` already builds exactly that from a
list of specs: encoders/decoders are named ``algo_<k>_<feature>``, the
processor (and G-ForgetNet's ``history_gate``) is created once under the same
name for every k, so it is one shared set of parameters.

The training step
  Every step draws one batch of EVERY algorithm and takes ONE optimizer step on
  the sum of the per-algorithm losses, inside one jitted function.  dm-clrs's
  examples/run.py (the code released with Ibarz et al.) instead takes one
  optimizer step per algorithm, in list order, within each step.  We sum
  because:
    * the protocol keeps its meaning: `train_steps` optimizer steps, the cosine
      schedule decays over them and the gradient-norm clip (1.0) bounds each
      update, exactly as in single-task runs.  Sequential steps would make
      `train_steps=10000` mean 10000 x K Adam steps and clip each algorithm's
      update on its own, i.e. a K-times larger step per training step;
    * it is symmetric in the algorithms: with sequential steps the parameters
      that are validated always come right after the last algorithm's update,
      and Adam's moments (beta1 = 0.9) mostly remember the last few algorithms;
    * every parameter gets its true gradient at every step, so no
      "filter null gradients" machinery is needed (dm-clrs must stop Adam from
      moving algorithm k's encoders with the zero gradients of the other
      algorithms' steps: baselines.filter_null_grads).
  The cost: one step holds the activations of all K batches at once (memory
  grows with K) and its XLA program contains all K algorithms.  All streams
  advance in lockstep through their train lengths (5, or 1 for the string
  matchers), so a run compiles that program once per length index -- about
  the same compile work as K per-algorithm programs of 5 shapes each -- plus
  once more whenever one algorithm's batch outgrows its time bucket
  (data.time_bucket; rare).
  We could not check Ibarz et al.'s own update rule beyond the released
  run.py.

Data
  One `data.TrainStream` per algorithm, each built from that algorithm's own
  settings: run.py's sampler kwargs (`data.train_sampler_kwargs`) and train
  lengths (`data.train_lengths`: the string matchers train at (max * 5) // 4
  nodes).  Nothing computed for one algorithm is passed on to the next --
  dm-clrs run.py overwrites its `train_lengths` variable inside the loop over
  algorithms, so every algorithm after a string matcher trains at 20 nodes
  only (tested here: tests/test_multitask.py).  Each stream's seed is derived
  from (seed, algorithm name), so bfs and dfs of one job do not draw the same
  random graphs and a stream does not depend on the order of `algorithms`.

Selection and results
  The shared model is validated on every algorithm's val split every
  `eval_every_steps`; the parameters with the best MEAN val score over the
  algorithms are kept (run.py: first evaluation or a strict improvement of the
  sum), and each algorithm's OOD test split is scored with them.  One result
  JSON per algorithm, in the standard schema, at
  ``run_dir(results_dir, model, algorithm, seed)`` (model e.g.
  ``forget_multitask``), with the extra fields
    multitask_algorithms      the algorithms trained together (in order);
    multitask_val_mean_best   the best mean val score (what selection used).
  In those files `val_best` is the algorithm's own val score at the selected
  step `val_best_step` (the score of the parameters that were tested), the
  train curves are that algorithm's own loss terms, and the times are the
  whole job's.

Resume
  One checkpoint per seed-job, ``<results_dir>/_multitask/<model>/seed<k>/
  checkpoint.pkl`` (a folder name starting with "_" so that launch/status.py
  does not count it as a run), written atomically: step, parameters,
  optimizer state, all streams, curves, the best parameters, and the test
  results already computed.  A job killed at any point resumes exactly; the
  checkpoint is deleted only once every result file has been written.

Entry points
  run_multitask_experiment(...)   gin-configurable (gin/multitask.gin)
  run_multitask_from_gin(gin_files, gin_params, *, seed, results_dir)
  python -m nar_markov.multitask --gin gin/multitask.gin --seed 0 --results results
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import pickle
import sys
import time
import zlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

if __name__ == "__main__":  # before clrs imports tensorflow: no start-up banners
  from nar_markov import quiet  # pylint: disable=g-import-not-at-top
  quiet.setup()

import gin
import jax
import numpy as np
import optax

from nar_markov import data
from nar_markov import devices
from nar_markov import model as model_lib
from nar_markov import params_io
from nar_markov import quiet
from nar_markov import runs
from nar_markov import train

if __name__ == "__main__":
  # `python -m nar_markov.multitask`: run the CLI of the imported module, so that
  # gin knows run_multitask_experiment once (as nar_markov.multitask.*), not
  # also as __main__.* -- which makes every binding of it ambiguous.
  from nar_markov import multitask as _multitask  # pylint: disable=g-import-not-at-top
  sys.exit(_multitask.main())

SUFFIX = "_multitask"
# Multi-task model name -> history policy (the single-task models' policies).
MODELS = {name + SUFFIX: train.MODELS[name]
          for name in ("baseline", "forget", "gforget", "gforget_nopenalty")}
CHECKPOINT_FORMAT = 1
_JOB_DIR = "_multitask"
# Smallest string-matcher size the train needle (1..8 characters) fits in.


def job_dir(results_dir, model: str, seed: int) -> pathlib.Path:
  """Folder of one seed-job's checkpoint and config (not a run folder)."""
  return pathlib.Path(results_dir) / _JOB_DIR / model / f"seed{int(seed)}"


def check_model(model: str) -> str:
  if model not in MODELS:
    hint = (f" (the multi-task version is {model + SUFFIX!r})"
            if model + SUFFIX in MODELS else "")
    raise ValueError(f"unknown multi-task model {model!r}{hint}; valid: "
                     + ", ".join(sorted(MODELS)))
  return model


def check_algorithms(algorithms: Sequence[str]) -> Tuple[str, ...]:
  """`algorithms` as a tuple: non-empty, CLRS-30 names, no duplicates."""
  if isinstance(algorithms, str):
    raise ValueError(f"algorithms must be a list of names, got the string "
                     f"{algorithms!r}")
  algorithms = tuple(algorithms)
  if not algorithms:
    raise ValueError("algorithms is empty: a multi-task run needs at least one "
                     "CLRS-30 algorithm")
  for name in algorithms:
    data.check_algorithm(name)
  duplicates = sorted({a for a in algorithms if algorithms.count(a) > 1})
  if duplicates:
    raise ValueError(f"duplicate algorithms {duplicates}: each algorithm gets "
                     "one set of encoders/decoders, list it once")
  return algorithms


def stream_seed(seed: int, algorithm: str) -> int:
  """Seed of `algorithm`'s train stream in the job with `seed`.

  Keyed by name (crc32 is stable across processes, unlike hash()), so the
  stream is the same whatever the order of the algorithm list.
  """
  entropy = [int(seed), zlib.crc32(data.check_algorithm(algorithm).encode())]
  return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def resolve_train_lengths(train_lengths: Union[Sequence[int],
                                               Mapping[str, Sequence[int]]],
                          algorithm: str) -> Tuple[int, ...]:
  """The train lengths configured for `algorithm` (a list, or a dict alg -> list).

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


def make_train_streams(algorithms: Sequence[str], seed: int, batch_size: int,
                       train_lengths) -> List[data.TrainStream]:
  """One stream per algorithm, each from that algorithm's own settings only."""
  return [data.TrainStream(alg, seed=stream_seed(seed, alg), batch_size=batch_size,
                           lengths=resolve_train_lengths(train_lengths, alg))
          for alg in algorithms]


def make_train_step(net: train.Model, nb_algorithms: int):
  """Jitted step: one optimizer update on sum_k loss_k(batch_k)."""

  def step(params, opt_state, feedbacks, lambdas, rng_key):
    def total(p):
      losses = [net.loss(p, feedbacks[k], lambdas[k], k,
                         jax.random.fold_in(rng_key, k))
                for k in range(nb_algorithms)]
      return sum(l.total for l in losses), losses
    grads, losses = jax.grad(total, has_aux=True)(params)
    updates, opt_state = net.optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, losses

  return jax.jit(step, donate_argnums=(0, 1))


# run_multitask_experiment's arguments that define a run (train.run_settings).
_SETTINGS_ARGS = ("train_steps", "batch_size", "hidden_size", "learning_rate",
                  "grad_clip_max_norm", "schedule_steps", "processor", "nb_triplet_fts",
                  "gate_mlp_layers", "gate_bias_init")


def run_definitions(model: str, algorithms: Sequence[str], lambdas: Mapping[str, float],
                    lengths: Mapping[str, Sequence[int]], **kwargs) -> Dict[str, dict]:
  """algorithm -> what defines its run of this job (nar_markov.runs.check_result):
  model, algorithm, lambda and the settings (train.run_settings, with the
  algorithms trained together); without the seed."""
  return {alg: {"model": model, "algorithm": alg, "lambda_gate": float(lambdas[alg]),
                "settings": dict(train.run_settings(
                    alg, train_lengths=lengths[alg],
                    **{k: kwargs[k] for k in _SETTINGS_ARGS}),
                                 multitask_algorithms=list(algorithms))}
          for alg in algorithms}


def run_definition_from_gin(algorithm: str) -> dict:
  """`run_definitions` of `algorithm` as gin (parsed) would call run_multitask_experiment."""
  import inspect  # pylint: disable=g-import-not-at-top
  from nar_markov import config as config_lib  # pylint: disable=g-import-not-at-top
  kwargs = {}
  for name, param in inspect.signature(run_multitask_experiment).parameters.items():
    try:
      kwargs[name] = config_lib.bound_value(f"run_multitask_experiment.{name}")
    except ValueError:
      kwargs[name] = param.default
  model, algorithms = kwargs["model"], tuple(kwargs["algorithms"])
  history = MODELS[model]
  lambda_gate = kwargs["lambda_gate"]
  lambdas = {alg: (train.resolve_lambda(lambda_gate, alg, model[:-len(SUFFIX)])[0]
                   if history == "gated" and lambda_gate is not None else 0.0)
             for alg in algorithms}
  lengths = {alg: resolve_train_lengths(kwargs["train_lengths"], alg) for alg in algorithms}
  return run_definitions(model, algorithms, lambdas, lengths,
                         **{k: kwargs[k] for k in _SETTINGS_ARGS})[algorithm]


@gin.configurable(denylist=["seed", "results_dir"])
def run_multitask_experiment(*,
                             algorithms: Sequence[str] = gin.REQUIRED,
                             seed: int,
                             model: str = gin.REQUIRED,
                             results_dir: str = "results",
                             train_steps: int = 10_000,
                             batch_size: int = 32,
                             hidden_size: int = 128,
                             learning_rate: float = 1.5e-3,
                             grad_clip_max_norm: float = 1.0,
                             schedule_steps: Optional[int] = None,
                             lambda_gate: Union[None, float, Mapping[str, float]] = None,
                             train_lengths: Union[Sequence[int], Mapping[
                                 str, Sequence[int]]] = data.TRAIN_LENGTHS,
                             validation_mode: str = "resample",
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
                             progress: bool = True) -> Dict[str, Dict[str, Any]]:
  """Train one shared processor on `algorithms`; write one result per algorithm.

  Arguments are train.run_experiment's, except:
    algorithms: the CLRS-30 algorithms trained together (gin: %ALGORITHMS).
    model: baseline_multitask | forget_multitask | gforget_multitask |
      gforget_nopenalty_multitask.
    lambda_gate: gforget_multitask only, bound by hand: a float for all
      algorithms or a dict algorithm -> float, applied from step 0 (the lambda
      heuristic's calibration is single-task; the paper's multi-task
      experiment is ForgetNet vs the baseline).  Ignored (0) for the models
      without a penalty.
    train_lengths: one list for all algorithms, or a dict algorithm -> list.
      Either way the string matchers train at (max * 5) // 4 nodes of THEIR
      list (data.train_lengths).

  Returns:
    algorithm -> result dict (as written to its result.json); a run stopped
    by `stop_after_steps` returns algorithm -> {"status": "interrupted",
    "steps": step} and writes no result.
  """
  # ---- validate everything before touching the disk -------------------------
  model = check_model(model)
  algorithms = check_algorithms(algorithms)
  train.check_protocol(train_steps=train_steps, batch_size=batch_size,
                       hidden_size=hidden_size, eval_every_steps=eval_every_steps,
                       log_every_steps=log_every_steps,
                       checkpoint_every_steps=checkpoint_every_steps,
                       learning_rate=learning_rate)
  history = MODELS[model]
  base_model = model[:-len(SUFFIX)]
  if lambda_gate is None and base_model == "gforget":
    raise ValueError(
        f"{model} needs run_multitask_experiment.lambda_gate bound by hand (a float, "
        "or a dict algorithm -> float): the lambda calibration is single-task")
  lambdas = {alg: (train.resolve_lambda(lambda_gate, alg, base_model)[0]
                   if history == "gated" else 0.0) for alg in algorithms}
  lengths = {alg: resolve_train_lengths(train_lengths, alg) for alg in algorithms}
  config = model_lib.NetConfig(
      hidden_size=int(hidden_size), history=history, processor=processor,
      nb_triplet_fts=nb_triplet_fts, gate_mlp_layers=gate_mlp_layers,
      gate_bias_init=gate_bias_init, impl=impl)

  result_paths = {alg: train.run_dir(results_dir, model, alg, seed) / train.RESULT_NAME
                  for alg in algorithms}
  ckpt_path = job_dir(results_dir, model, seed) / train.CHECKPOINT_NAME
  definitions = run_definitions(
      model, algorithms, lambdas, lengths, train_steps=train_steps, batch_size=batch_size,
      hidden_size=hidden_size, learning_rate=learning_rate,
      grad_clip_max_norm=grad_clip_max_norm, schedule_steps=schedule_steps,
      processor=processor, nb_triplet_fts=nb_triplet_fts, gate_mlp_layers=gate_mlp_layers,
      gate_bias_init=gate_bias_init)
  # Done means verified (nar_markov.runs.check_result), as for single-task runs.
  verdicts = {alg: runs.check_result(p.parent, dict(definitions[alg], seed=int(seed)))
              for alg, p in result_paths.items()}
  runs.refuse_other_settings(verdicts.values())
  if all(v.done for v in verdicts.values()) and not ckpt_path.exists():
    train.log(f"{model}/seed{seed}: all {len(algorithms)} results exist; "  # pylint: disable=protected-access
               "nothing to do")
    return {alg: v.result for alg, v in verdicts.items()}
  with runs.run_lock(ckpt_path.parent):
    for v in verdicts.values():
      if v.state == "corrupt":
        train.log(f"WARNING: {v.path} is corrupt ({v.detail}); moved aside to "  # pylint: disable=protected-access
                  f"{runs.move_aside(v.path)}")
    return _train_multitask(
        model=model, algorithms=algorithms, seed=seed, results_dir=results_dir,
        train_steps=train_steps, batch_size=batch_size, hidden_size=hidden_size,
        learning_rate=learning_rate, grad_clip_max_norm=grad_clip_max_norm,
        schedule_steps=schedule_steps, eval_every_steps=eval_every_steps,
        log_every_steps=log_every_steps, checkpoint_every_steps=checkpoint_every_steps,
        val_max_samples=val_max_samples, test_max_samples=test_max_samples,
        val_batch_size=val_batch_size, test_batch_size=test_batch_size,
        cache_dir=cache_dir, stop_after_steps=stop_after_steps, progress=progress,
        history=history, lambdas=lambdas, lengths=lengths, config=config,
        validation_mode=validation_mode, result_paths=result_paths, ckpt_path=ckpt_path,
        definitions=definitions)


def _train_multitask(*, model, algorithms, seed, results_dir, train_steps, batch_size,
                     hidden_size, learning_rate, grad_clip_max_norm, schedule_steps,
                     eval_every_steps, log_every_steps, checkpoint_every_steps,
                     val_max_samples, test_max_samples, val_batch_size,
                     test_batch_size, cache_dir, stop_after_steps, progress, history,
                     lambdas, lengths, config, validation_mode, result_paths,
                     ckpt_path, definitions) -> Dict[str, Dict[str, Any]]:
  """run_multitask_experiment's training (its job lock held)."""

  state = train.load_checkpoint(ckpt_path)  # pylint: disable=protected-access
  if state is not None and list(state["algorithms"]) != list(algorithms):
    raise ValueError(
        f"checkpoint {ckpt_path} is for algorithms {state['algorithms']}, this "
        f"run is on {list(algorithms)}; remove it or use another results_dir")

  train.setup_compilation_cache()
  gin_str = gin.config_str()
  config_gin = (gin_str or train.bindings_as_gin("run_multitask_experiment", dict(
      model=model, algorithms=list(algorithms), seed=seed,
      train_steps=train_steps, batch_size=batch_size, hidden_size=hidden_size,
      learning_rate=learning_rate, lambda_gate=lambdas,
      train_lengths=lengths))).encode()
  train.atomic_write_bytes(ckpt_path.parent / "config.gin", config_gin)

  # ---- data and model ------------------------------------------------------------
  streams = make_train_streams(algorithms, seed, batch_size, lengths)
  specs = [s.spec for s in streams]
  # Validation as run.py (nar_markov.data.ValidationPool), one pool per algorithm.
  vals = [data.ValidationPool(alg, seed=stream_seed(seed, alg), lengths=lengths[alg],
                              mode=validation_mode)
          for alg in algorithms]
  tests = [data.load_split(alg, "test", cache_dir=cache_dir) for alg in algorithms]
  nb_dims = [model_lib.nb_dims_of(t) for t in tests]
  test_batch_sizes = [
      int(test_batch_size) if test_batch_size is not None else
      train.default_test_batch_size(  # pylint: disable=protected-access
          spec, data.nb_nodes_of(test), hidden_size, fast=config.fast)
      for spec, test in zip(specs, tests)]
  optimizer = train.make_optimizer(learning_rate, schedule_steps or train_steps,
                                   grad_clip_max_norm)
  net = train.Model(specs, nb_dims, config, optimizer)
  train_step = make_train_step(net, len(algorithms))

  if state is not None:
    for stream, stream_state in zip(streams, state["streams"]):
      stream.load_state_dict(stream_state)
    params, opt_state = state["params"], state["opt_state"]
    train.log(f"resuming {model}/seed{seed} ({len(algorithms)} algorithms) "  # pylint: disable=protected-access
               f"from step {state['step']}")
  else:
    init_features = [next(iter(data.eval_batches(v.draw(0), val_batch_size)))[0].features
                     for v in vals]
    params, opt_state = net.init_state(seed, init_features)
    state = {"format": CHECKPOINT_FORMAT, "model": model,
             "algorithms": list(algorithms), "seed": int(seed), "step": 0,
             "best_val_mean": -1.0, "best_step": None, "best_params": None,
             "best_val_scores": None,
             "curves": {alg: train.empty_curves() for alg in algorithms},  # pylint: disable=protected-access
             "train_time_s": 0.0, "eval_time_s": 0.0, "diverged_step": None,
             "test_results": {}}
  curves = state["curves"]
  step = state["step"]
  pending = []  # (step, device-side losses of every algorithm) since last log
  t_train = state["train_time_s"]
  t_eval = state["eval_time_s"]
  diverged_step = state["diverged_step"]

  def do_eval(step_now):
    nonlocal t_eval
    t0 = time.time()
    scores = {}
    for k, alg in enumerate(algorithms):
      res = train.evaluate_split(net, params, vals[k].draw(step_now), k, val_batch_size,
                                 with_hints=True, max_samples=val_max_samples)
      c = curves[alg]
      c["val"]["step"].append(step_now)
      c["val"]["score"].append(res["score"])
      c["val"]["hidden_norm"].append(res["history_norm"])
      c["hint_step_loss"]["step"].append(step_now)
      c["hint_step_loss"]["loss"].append(res["hint_per_step"])
      scores[alg] = res["score"]
    t_eval += time.time() - t0
    mean = float(np.mean(list(scores.values())))
    # run.py: keep the first evaluation and any strict improvement of the mean.
    if mean > state["best_val_mean"] or state["best_params"] is None:
      state.update(best_val_mean=mean, best_step=step_now, best_val_scores=scores,
                   best_params=jax.tree_util.tree_map(np.asarray, params))
    return mean

  def save_checkpoint():
    state.update(step=step, params=jax.tree_util.tree_map(np.asarray, params),
                 opt_state=jax.tree_util.tree_map(np.asarray, opt_state),
                 streams=[s.state_dict() for s in streams], curves=curves,
                 train_time_s=t_train, eval_time_s=t_eval,
                 diverged_step=diverged_step)
    train.atomic_write_bytes(ckpt_path, pickle.dumps(state, protocol=4))

  def flush_pending():
    """Log the mean loss terms per algorithm; first step with a non-finite sum."""
    if not pending:
      return None
    steps_, losses_ = zip(*pending)
    fetched = jax.device_get(list(losses_))
    pending.clear()
    bad = None
    for s, per_alg in zip(steps_, fetched):
      if bad is None and not np.isfinite(sum(float(l.total) for l in per_alg)):
        bad = s
    for k, alg in enumerate(algorithms):
      tr = curves[alg]["train"]
      tr["step"].append(steps_[-1])
      for key, attr in [("loss", "total"), ("output_loss", "output"),
                        ("hint_loss", "hint"), ("gate_penalty", "gate_penalty"),
                        ("gate_term", "gate_term")]:
        tr[key].append(float(np.mean([float(getattr(per_alg[k], attr))
                                      for per_alg in fetched])))
    return bad

  if step == 0 and not curves[algorithms[0]]["val"]["step"]:
    do_eval(0)
  stop_at = train_steps if stop_after_steps is None else min(
      train_steps, step + int(stop_after_steps))
  lambda_arr = np.asarray([lambdas[alg] for alg in algorithms], np.float32)
  last_report = time.time()
  while step < stop_at and diverged_step is None:
    feedbacks = tuple(next(s) for s in streams)
    t0 = time.time()
    # The step's rng depends on (seed, step) only: resuming needs no rng state.
    rng_key = net.step_key(seed, step)
    params, opt_state, losses = train_step(params, opt_state, feedbacks,
                                           lambda_arr, rng_key)
    step += 1
    pending.append((step, losses))
    if (step % log_every_steps == 0 or step == stop_at
        or step % eval_every_steps == 0 or step % checkpoint_every_steps == 0):
      bad = flush_pending()
      t_train += time.time() - t0
      if bad is not None:
        diverged_step = bad
        train.log(f"non-finite loss at step {bad}: run diverged")  # pylint: disable=protected-access
        break
    else:
      t_train += time.time() - t0
    if step % eval_every_steps == 0 or step == train_steps:
      mean = do_eval(step)
      if progress and (time.time() - last_report > 10 or step == train_steps):
        last_report = time.time()
        losses_now = ", ".join(f"{alg} {curves[alg]['train']['loss'][-1]:.3f}"
                               for alg in algorithms)
        train.log(  # pylint: disable=protected-access
            f"{model}/seed{seed} step {step}/{train_steps} loss [{losses_now}] "
            f"mean val {mean:.4f} (best {state['best_val_mean']:.4f} @ "
            f"{state['best_step']}) {step / max(t_train, 1e-9):.2f} steps/s")
    if step % checkpoint_every_steps == 0 or step == train_steps:
      # Also at the end, so a kill during the (long) test evaluation loses
      # no training.
      save_checkpoint()

  if diverged_step is None and step < train_steps:
    save_checkpoint()  # interrupted on purpose (tests): no result
    return {alg: {"status": "interrupted", "steps": step} for alg in algorithms}

  # ---- OOD test of the best parameters, one algorithm at a time -------------------
  test_results = state["test_results"]
  # A diverged run is tested too, on its best validation parameters (run.py
  # never drops a seed); it keeps its status.
  if state["best_params"] is not None:
    for k, alg in enumerate(algorithms):
      if alg in test_results:
        continue
      t0 = time.time()
      test_results[alg] = train.evaluate_split(
          net, state["best_params"], tests[k], k, test_batch_sizes[k],
          with_hints=False, max_samples=test_max_samples)
      t_eval += time.time() - t0
      save_checkpoint()  # a kill here keeps the algorithms already tested

  steps_done = step if diverged_step is None else diverged_step
  has_best = state["best_params"] is not None
  results = {}
  for k, alg in enumerate(algorithms):
    test_res = test_results.get(alg)
    result = {
        "schema": train.RESULT_SCHEMA,
        "model": model,
        "history": history,
        "algorithm": alg,
        "seed": int(seed),
        "status": "done" if diverged_step is None else "diverged",
        "steps": int(steps_done),
        "train_steps": int(train_steps),
        "diverged_step": diverged_step,
        "test_score": None if test_res is None else test_res["score"],
        "test_scores": None if test_res is None else test_res["scores"],
        "val_best": state["best_val_scores"][alg] if has_best else None,
        "val_best_step": state["best_step"],
        "lambda_gate": lambdas[alg],
        "hidden_size": int(hidden_size),
        "batch_size": int(batch_size),
        "learning_rate": float(learning_rate),
        "schedule_steps": int(schedule_steps or train_steps),
        "train_lengths": list(lengths[alg]),
        "lambda_reading": None,
        "penalty_start_step": 0,
        "settings": definitions[alg]["settings"],
        "multitask_algorithms": list(algorithms),
        "multitask_val_mean_best": state["best_val_mean"] if has_best else None,
        "curves": curves[alg],
        "wall_time_s": t_train + t_eval,
        "train_time_s": t_train,
        "eval_time_s": t_eval,
        "steps_per_s": steps_done / max(t_train, 1e-9),
        "versions": train.package_versions(),
        "device": devices.describe_backend(),
        "gin_config": gin_str,
    }
    out_dir = result_paths[alg].parent
    train.atomic_write_bytes(out_dir / "config.gin", config_gin)
    if has_best:
      # The shared model's best parameters, beside each algorithm's result.
      params_io.save_params(
          out_dir / train.PARAMS_NAME, state["best_params"], dataclasses.asdict(config),
          {"algorithm": alg, "algorithms": list(algorithms), "nb_dims": nb_dims,
           "model": model, "seed": int(seed), "step": state["best_step"]})
    train.atomic_write_bytes(result_paths[alg], json.dumps(
        train.jsonable(result), indent=1).encode())  # pylint: disable=protected-access
    results[alg] = result
  ckpt_path.unlink(missing_ok=True)  # only now: every result file is on disk
  train.log(  # pylint: disable=protected-access
      f"wrote {len(results)} results of {model}/seed{seed}: " + ", ".join(
          f"{alg} {'diverged' if r['test_score'] is None else round(r['test_score'], 4)}"
          for alg, r in results.items()))
  return results


def run_multitask_from_gin(gin_files: Sequence[str], gin_params: Sequence[str], *,
                           seed: int, results_dir: str) -> List[str]:
  """Parse gin afresh, run one multi-task seed-job, return its result paths."""
  from nar_markov import config as config_lib  # pylint: disable=g-import-not-at-top
  config_lib.parse_gin(gin_files, gin_params)
  results = run_multitask_experiment(seed=int(seed), results_dir=results_dir)
  model = gin.query_parameter("run_multitask_experiment.model")
  return [str(train.run_dir(results_dir, model, alg, seed) / train.RESULT_NAME)
          for alg in results]


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m nar_markov.multitask",
      description="One multi-task seed-job: a shared processor on several "
                  "CLRS-30 algorithms (gin/multitask.gin).")
  parser.add_argument("--gin", action="append", default=[],
                      help="gin file (repeatable); default gin/multitask.gin")
  parser.add_argument("--gin_param", action="append", default=[],
                      help="gin binding (repeatable)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--results", default="results")
  quiet.add_flag(parser)
  args = parser.parse_args(argv)
  paths = run_multitask_from_gin(args.gin or ["gin/multitask.gin"], args.gin_param,
                                 seed=args.seed, results_dir=args.results)
  print("\n".join(paths))
  return 0

