"""The learner: one net's pure train and evaluation functions, jitted once per shape.

`Learner` wraps nar_markov.nets.model.Net (or the fast net computing the same function)
over one or more algorithms: initial state, the optimizer step (dm-clrs run.py's
Adam with cosine decay and clipping), evaluation batches; `evaluate_split` scores a
split with `clrs.evaluate`.  The steps that train K seeds at once (`jax.vmap`) and
several algorithms with one summed update are built here too.  The training loop
(nar_markov.training.train) drives these; it holds no jax function of its own.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from typing import Any, Dict, Optional, Sequence

import clrs
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax

from nar_markov.config import netconfig
from nar_markov.data import batching
from nar_markov.data import preprocessing
from nar_markov.data import split_cache
from nar_markov.nets import fastnet
from nar_markov.nets import model as model_lib


def make_optimizer(learning_rate: float, train_steps: int,
                   grad_clip_max_norm: float) -> optax.GradientTransformation:
  """Adam with cosine decay (paper Sec. 5) after global-norm clipping (run.py).

  Args:
    learning_rate: the initial rate, decayed to 0 along a cosine.
    train_steps: the decay's horizon in optimizer updates (at least 1).
    grad_clip_max_norm: the global-norm clip; <= 0: no clipping.
  """
  schedule = optax.cosine_decay_schedule(init_value=learning_rate,
                                         decay_steps=max(1, train_steps))
  chain = []
  if grad_clip_max_norm > 0:
    chain.append(optax.clip_by_global_norm(grad_clip_max_norm))
  chain += [optax.scale_by_adam(), optax.scale_by_schedule(lambda s: -schedule(s))]
  return optax.chain(*chain)


# XLA:CPU serialises an executable with one scratch buffer only, so JAX's persistent
# cache cannot store a step whose scratch was split into heaps (compiler_options):
# such a step is compiled in each process, and the failed write is expected.
warnings.filterwarnings(
    "ignore", message="Error writing persistent compilation cache entry.*"
    "Multiple temp buffer allocations found", category=UserWarning)


def compiler_options(config: netconfig.NetConfig) -> Optional[Dict[str, Any]]:
  """The XLA compiler options of the net's jitted train and eval steps.

  Returns:
    On the CPU backend with `config.xla_heap_mib` set: their scratch in heaps of at most
    that many MiB (NetConfig.xla_heap_mib says why).  None (XLA's defaults) on other
    backends or with 0 or None.  A step whose scratch is split into heaps is not kept in
    JAX's persistent compilation cache (XLA:CPU serialises one scratch buffer only): it
    is compiled in each process.
  """
  if not config.xla_heap_mib or jax.default_backend() != "cpu":
    return None
  return {"xla_multiheap_size_constraint_per_heap": int(config.xla_heap_mib) * 2**20}


class Learner:
  """The pure train and evaluation functions of one net over one or more algorithms.

  The net is `fastnet.FastNet` where `config.fast`, else `model.Net`; its parameters are
  always created by `model.Net`, so a seed gives the same initial parameters under either.

  Attributes:
    train_step: jitted `(params, opt_state, feedback, lambda_gate, algorithm_index,
      rng_key, max_length=None)` -> `(params, opt_state, model.Losses)`: one optimizer
      step (algorithm_index static; params and opt_state donated).  With several
      algorithms the other algorithms' modules keep their values (`keep_other_algorithms`).
    eval_batch: jitted `(params, feedback, algorithm_index, with_hints)` -> (hard output
      predictions, with `with_hints` {"hint_per_step", "history_norm"} else None);
      algorithm_index and with_hints static.
    compiler_options: the steps' XLA options (`compiler_options`).

  Args:
    specs_: the algorithms' specs (`preprocessing.get_spec`), in algorithm_index order.
    nb_dims: per spec, each feature's last-axis size (`model.nb_dims_of`).
    config: the NetConfig.
    optimizer: the optax optimizer (`make_optimizer`).
    algorithms: the specs' names, if known: checked against the specs, and the fast net
      then scans no further than their `nar_markov.config.clrs30.trajectory_bound`.

  Raises:
    ValueError: `algorithms` whose specs are not `specs_`.
  """

  def __init__(self, specs_, nb_dims, config: netconfig.NetConfig,
               optimizer: optax.GradientTransformation,
               algorithms: Optional[Sequence[str]] = None):
    self.specs = list(specs_)
    self.nb_dims = list(nb_dims)
    self.config = config
    self.optimizer = optimizer
    self.algorithms = None if algorithms is None else list(algorithms)
    if (self.algorithms is not None
        and [preprocessing.get_spec(a) for a in self.algorithms] != self.specs):
      raise ValueError(f"algorithms {self.algorithms} do not match the specs given")

    if config.fast:
      net_cls = functools.partial(fastnet.FastNet, algorithms=self.algorithms)
    else:
      net_cls = model_lib.Net

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
    # shape are an XLA compilation apiece.
    def init_state(seed, features_list):
      params = init_params(jax.random.PRNGKey(seed), features_list)
      return params, self.optimizer.init(params)

    def step_key(seed, step):
      return jax.random.fold_in(jax.random.PRNGKey(seed + 1), step)

    self._init_state = jax.jit(init_state)
    self._step_key = jax.jit(step_key)
    self._step_keys = jax.jit(jax.vmap(step_key, in_axes=(0, None)))
    self.compiler_options = compiler_options(config)
    self.train_step = jax.jit(self._train_step, static_argnums=(4,),
                              donate_argnums=(0, 1),
                              compiler_options=self.compiler_options)
    self.eval_batch = jax.jit(self._eval_batch, static_argnums=(2, 3),
                              compiler_options=self.compiler_options)

  def init(self, rng_key, features_list):
    """The initial parameters from `rng_key`, the net built on `features_list`.

    `features_list`: one clrs.Features per algorithm, in algorithm_index order.
    """
    return self._init(rng_key, features_list)

  def restore_opt_state(self, params, leaves: Sequence[Any]):
    """The optimizer state for `params`, rebuilt from its leaves as a checkpoint saved them.

    Args:
      params: the parameters (the state's structure is the optimizer's for them).
      leaves: the state's leaves, in tree order.

    Raises:
      ValueError: not as many leaves as the optimizer's state has.
    """
    template = jax.eval_shape(self.optimizer.init, params)
    treedef = jax.tree_util.tree_structure(template)
    if treedef.num_leaves != len(leaves):
      raise ValueError(f"checkpoint holds {len(leaves)} optimizer-state arrays, this "
                       f"optimizer has {treedef.num_leaves}")
    return jax.tree_util.tree_unflatten(treedef, [np.asarray(x) for x in leaves])

  def init_state(self, seed: int, features_list):
    """(params, opt_state) of a run of `seed`, in one compiled call.

    params = `init(PRNGKey(seed), features_list)`; opt_state the optimizer's initial state.
    """
    return self._init_state(np.int32(seed), features_list)

  def step_key(self, seed: int, step: int):
    """The rng of train step `step` of a run: fold_in(PRNGKey(seed + 1), step)."""
    return self._step_key(np.int32(seed), np.int32(step))

  def step_keys(self, seeds: Sequence[int], step: int):
    """[K, 2]: `step_key` of each seed, in one call (the same bits)."""
    return self._step_keys(np.asarray(seeds, np.int32), np.int32(step))

  def apply(self, params, features, algorithm_index, repred, hidden_override=None,
            rng_key=None, max_length=None, collect_hints=True):
    """The net's forward pass (`model.NetOutput`) with `params` on `features`.

    Args:
      params: the parameters.
      features: a batch's clrs.Features of algorithm `algorithm_index`.
      algorithm_index: which algorithm.
      repred: True at evaluation (dm-clrs's flag).
      hidden_override: tests only: the h(t-1) fed to each step (`model.Net.__call__`).
      rng_key: the rng of the permutation pointers' Gumbel noise in training; None at
        evaluation.
      max_length, collect_hints: the fast net's (`fastnet.FastNet.__call__`).
    """
    return self._forward.apply(params, rng_key, features, algorithm_index, repred,
                               hidden_override, max_length, collect_hints)

  def loss(self, params, feedback, lambda_gate, algorithm_index, rng_key=None,
           max_length=None):
    """`model.compute_losses` of a training forward pass (repred False) on `feedback`."""
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
  """`new`, with every module of another algorithm than `algorithm_index` as it is in `old`.

  dm-clrs's `filter_null_grads`: an update for one algorithm leaves the other algorithms'
  encoders and decoders, and their Adam moments, as they were.  A leaf is algorithm j's
  where a dict key on its path contains haiku's `algo_<j>_` name; shared modules (the
  processor, the history gate) and global state (Adam's count) take `new`.

  Args:
    new, old: parameters, or optimizer states holding per-parameter trees, of one
      structure.
    algorithm_index: the algorithm just updated.
  """
  def pick(path, n, o):
    for key in path:
      name = getattr(key, "key", None)
      if isinstance(name, str):
        m = _ALGORITHM_MODULE.search(name)
        if m and int(m.group(1)) != algorithm_index:
          return o
    return n
  return jax.tree_util.tree_map_with_path(pick, new, old)


def evaluate_split(model: Learner, params, split_feedback, algorithm_index: int,
                   batch_size: int, with_hints: bool,
                   max_samples: Optional[int] = None) -> Dict[str, Any]:
  """Scores `model` with `params` on a split with clrs.evaluate, in equal batches.

  The first `max_samples` samples (None: all) run in equal batches of at most
  `batch_size` (32 samples at batch_size 30: two batches of 16); the last is filled up
  with repeated samples (`batching.eval_batches`), whose predictions are not scored.

  Args:
    model: the Learner.
    params: its parameters.
    split_feedback: the (preprocessed) split.
    algorithm_index: which algorithm of the model.
    batch_size: the largest batch.
    with_hints: also the per-step hint loss and the history norm.
    max_samples: a cap on the samples scored.

  Returns:
    {"score": clrs.evaluate's score, "scores": its score per output}, and with
    `with_hints`: "hint_per_step", per step the batches' `Losses.hint_per_step` averaged
    with their valid samples as weights (a filled-up batch's own loss includes its
    repeated samples), and "history_norm", the mean over the samples of
    `model.mean_history_norm`.
  """
  split_feedback, n_total = batching.at_most(split_feedback, max_samples)
  # Equal sub-batches: 32 samples at a cap of 30 run as 2 x 16, not 30 + 30
  # (the last batch is padded with duplicates up to the batch size).
  nb_batches = -(-n_total // max(1, min(batch_size, n_total)))
  batch_size = -(-n_total // nb_batches)
  preds_parts, hint_steps, norms, counts = [], [], [], []
  for batch, n_valid in batching.eval_batches(split_feedback, batch_size):
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


def default_test_batch_size(spec, nb_nodes: int, hidden_size: int,
                             budget_bytes: float = 128 * 2**20,
                             fast: bool = True) -> int:
  """An evaluation batch size that keeps one step's biggest tensors within `budget_bytes`.

  Per sample: eight [N, N, H] float32 tensors (the fast net's biggest), or, with the
  reference net (`fast` False) on a spec with an edge pointer, dm-clrs's edge-pointer
  decoder's [N, N, N, H] float32 tensor (4.3 GB at N = 64, batch 32).  Small batches are
  also faster on CPU (tensors that stay in cache, fewer page faults).

  Returns:
    budget_bytes // (bytes per sample), clamped to [1, 32].
  """
  per_sample = nb_nodes**2 * hidden_size * 4 * 8
  for _, (stage, loc, t) in spec.items():
    if not fast and loc == clrs.Location.EDGE and t == clrs.Type.POINTER:
      per_sample = nb_nodes**3 * hidden_size * 4
  return int(max(1, min(32, budget_bytes // per_sample)))


def setup_compilation_cache(path: Optional[str] = None) -> Optional[str]:
  """Turns on JAX's persistent compilation cache (XLA compiles dominate short runs).

  Where it turns the cache on, only compiles of 0.5 s or more are stored.  Takes effect
  only before the process's first compilation; a cache folder set already (by an earlier
  call) is kept.

  Args:
    path: the cache folder; None: $NAR_MARKOV_JAX_CACHE, else
      `<split cache dir>/jax-<jax version>` (`split_cache.resolve_cache_dir`).  "" or
      "off": no cache.

  Returns:
    The cache folder in use, or None for "" or "off" (which turns off no cache that is
    on already).
  """
  if path is None:
    path = os.environ.get("NAR_MARKOV_JAX_CACHE")
  if path is None:
    path = str(split_cache.resolve_cache_dir() / f"jax-{jax.__version__}")
  if path in ("", "off"):
    return None
  if jax.config.jax_compilation_cache_dir is None:
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
  return jax.config.jax_compilation_cache_dir


def make_summed_train_step(net: Learner, nb_algorithms: int):
  """The jitted train step of multitask_update='summed': one update on sum_k loss_k(batch_k).

  Call: `(params, opt_state, feedbacks, lambdas, rng_key)` -> `(params, opt_state,
  losses)`, with one batch, λ and `model.Losses` per algorithm, in algorithm_index order;
  algorithm k's rng is fold_in(rng_key, k).  Parameters and optimizer state are donated.
  """

  def step(params, opt_state, feedbacks, lambdas, rng_key):
    def total(p):
      losses = [net.loss(p, feedbacks[k], lambdas[k], k, jax.random.fold_in(rng_key, k))
                for k in range(nb_algorithms)]
      return sum(l.total for l in losses), losses
    grads, losses = jax.grad(total, has_aux=True)(params)
    updates, opt_state = net.optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, losses

  return jax.jit(step, donate_argnums=(0, 1), compiler_options=net.compiler_options)


def make_vmapped_train_step(net: Learner, algorithm_index: int = 0,
                            per_seed_lambda: bool = False):
  """K seeds' optimizer steps of algorithm `algorithm_index` as one jitted computation.

  `jax.vmap` of `Learner.train_step`'s function over a leading seed axis of params,
  optimizer state, batch and rng key; `max_length` is shared, unbatched: a scalar (the
  longest trajectory over all K batches, `stack_batches`) keeps the fast net's skip of
  finished steps a real branch, where a batched one would turn into a select that
  computes both sides.  Parameters and optimizer state are donated.

  Args:
    net: the Learner.
    algorithm_index: the algorithm trained.
    per_seed_lambda: `lambda_gate` is [K], one per seed (an adaptive λ); False: one
      scalar for all.

  Returns:
    The step: `(params, opt_state, batch, lambda_gate, rng_keys, max_length)` ->
    `(params, opt_state, losses)`, all with the leading K axis.
  """
  def step(params, opt_state, feedback, lambda_gate, rng_key, max_length):
    return net._train_step(params, opt_state, feedback, lambda_gate,  # pylint: disable=protected-access
                           algorithm_index, rng_key, max_length)
  lambda_axis = 0 if per_seed_lambda else None
  return jax.jit(jax.vmap(step, in_axes=(0, 0, 0, lambda_axis, 0, None)),
                 donate_argnums=(0, 1), compiler_options=net.compiler_options)


def stack_trees(trees: Sequence[Any]):
  """K pytrees of one structure as one with a leading K axis (jax arrays, on the device)."""
  return jax.tree_util.tree_map(lambda *xs: jnp.asarray(np.stack([np.asarray(x) for x in xs])),
                                *trees)


def tree_index(tree, i: int):
  """Seed `i`'s slice of a stacked pytree, as numpy arrays (for a tree on the host)."""
  return jax.tree_util.tree_map(lambda x: np.asarray(x[i]), tree)


def stack_batches(feedbacks: Sequence[clrs.Feedback]):
  """K seeds' train batches of one step as one batch with a leading K axis.

  The batches have the same graph size (lockstep streams) but may differ in hint time
  length (each stream's time bucket); all are zero-padded to the longest, which changes no
  number (outputs freeze after a trajectory's end, hint losses are masked).

  Returns:
    (the stacked batch, numpy; max_length: the longest trajectory of all K batches, an
    int32 scalar).

  Raises:
    ValueError: the padded batches differ in shape (graph sizes out of step).
  """
  T = max(int(fb.features.hints[0].data.shape[0]) for fb in feedbacks)
  padded = [batching.pad_time(fb, T) for fb in feedbacks]
  shapes = {tuple(np.shape(x) for x in jax.tree_util.tree_leaves(fb)) for fb in padded}
  if len(shapes) != 1:
    raise ValueError("the seeds' train batches of one step differ in shape (graph "
                     f"sizes out of step?): {sorted(shapes)}")
  stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *padded)
  max_length = np.int32(max(int(np.max(fb.features.lengths)) for fb in feedbacks))
  return stacked, max_length
