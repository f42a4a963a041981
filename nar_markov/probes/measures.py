"""What a trained net does, measured on a split: its predictions, the Markov measure,
hint accuracy step by step, and its gates.

Each function takes a `learner.Learner`, its parameters, a feedback (a split or fresh
graphs) and the algorithm's index, and runs the net in `learner.evaluate_split`'s
batches, so that its scores are the run's own.  nar_markov.probes.evaluate loads a run
and calls these; the Markov rule they are judged by is nar_markov.markov.rule's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

import clrs
from clrs._src import decoders
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from nar_markov.data import batching
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib


def output_predictions(model, params, feedback, algorithm_index: int, batch_size: int,
                       max_samples: Optional[int] = None):
  """The hard output predictions and the true outputs of the first `max_samples` samples.

  Run in `learner.evaluate_split`'s equal batches, so that scored (`score_predictions`)
  they give its score.

  Returns:
    (predictions {name: clrs.DataPoint}, the true outputs [clrs.DataPoint]), of the
    scored samples only.
  """

  feedback, n_total = batching.at_most(feedback, max_samples)
  nb_batches = -(-n_total // max(1, min(batch_size, n_total)))
  batch_size = -(-n_total // nb_batches)  # equal sub-batches, as evaluate_split's
  parts = []
  for batch, n_valid in batching.eval_batches(feedback, batch_size):
    preds, _ = model.eval_batch(params, batch, algorithm_index, False)
    parts.append(jax.tree_util.tree_map(lambda x, n=n_valid: np.asarray(x)[:n], preds))
  preds = {name: clrs.DataPoint(name=name, location=parts[0][name].location,
                                type_=parts[0][name].type_,
                                data=np.concatenate([p[name].data for p in parts]))
           for name in parts[0]}
  truth = [clrs.DataPoint(name=o.name, location=o.location, type_=o.type_,
                          data=np.asarray(o.data)[:n_total]) for o in feedback.outputs]
  return preds, truth


def score_predictions(preds, truth) -> Dict[str, Any]:
  """clrs.evaluate's score and per-output scores, as learner.evaluate_split reports them."""

  scores = clrs.evaluate(truth, preds)
  return {"score": float(scores["score"]),
          "scores": {k: float(v) for k, v in scores.items() if k != "score"}}


def predictions_changed(a, b) -> float:
  """The share of output predictions that differ between `a` and `b`.

  `a` and `b`: {name: clrs.DataPoint} of the same samples.  A prediction is a node's
  pointer, mask bit or scalar; for MASK_ONE, CATEGORICAL and PERMUTATION_POINTER outputs,
  the argmax over the last axis.
  """

  changed = total = 0
  for name, dp in a.items():
    x, y = np.asarray(dp.data), np.asarray(b[name].data)
    if dp.type_ in (clrs.Type.MASK_ONE, clrs.Type.CATEGORICAL, clrs.Type.PERMUTATION_POINTER):
      x, y = np.argmax(x, -1), np.argmax(y, -1)
    changed += int(np.sum(x != y))
    total += x.size
  return changed / max(total, 1)


def markov_measure(model, zeroed, params, feedback, algorithm_index: int, batch_size: int,
                   max_samples: Optional[int] = None, trained=None) -> Dict[str, Any]:
  """How much the net's outputs on `feedback` depend on h(t-1).

  Args:
    model: the net as trained.
    zeroed: the same net with the history zeroed in every consumer (`rule.zeroed_config`),
      run with the same `params`.
    params, feedback, algorithm_index, batch_size, max_samples: as `output_predictions`.
    trained: `output_predictions` of `model`, if already made.

  Returns:
    {"score", "scores": as trained; "score_history_zeroed", "scores_history_zeroed";
    "delta": the zeroed score minus the trained one; "predictions_changed"
    (`predictions_changed`); "gate_norm": ||what the processor input receives of
    h(t-1)||/sqrt(d) over nodes, the steps t >= 1 each trajectory has, then samples (the
    validation curve's `hidden_norm`; for G-ForgetNet ||g * h(t-1)||)}.
  """

  preds, truth = trained or output_predictions(model, params, feedback, algorithm_index,
                                               batch_size, max_samples)
  z_preds, _ = output_predictions(zeroed, params, feedback, algorithm_index, batch_size,
                                  max_samples)
  as_trained, without = score_predictions(preds, truth), score_predictions(z_preds, truth)
  norm = learner.evaluate_split(model, params, feedback, algorithm_index, batch_size,
                                with_hints=True, max_samples=max_samples)["history_norm"]
  return {"score": as_trained["score"], "scores": as_trained["scores"],
          "score_history_zeroed": without["score"],
          "scores_history_zeroed": without["scores"],
          "delta": without["score"] - as_trained["score"],
          "predictions_changed": predictions_changed(preds, z_preds),
          "gate_norm": float(norm)}


def hint_accuracy(model, params, feedback, algorithm_index: int, batch_size: int,
                  max_samples: Optional[int] = None) -> Dict[str, Any]:
  """The per-step accuracy of each hint on the first `max_samples` samples of `feedback`.

  The model feeds back its own hint predictions (repred, as at test time).

  Returns:
    {hint name: {"steps": [t = 1, 2, ...], "accuracy": [...], "samples": [...],
    "overall": float}}: at step t, clrs.evaluate_hints's score of the hint predicted for
    step t over the trajectories longer than t ("samples" of them); "overall" is
    clrs.evaluate_hints's, the steps weighted by those counts.
  """

  spec = model.specs[algorithm_index]
  feedback, n_total = batching.at_most(feedback, max_samples)

  @jax.jit
  def hint_logits(params, features):
    return model.apply(params, features, algorithm_index, True, collect_hints=True).hint_preds

  # Batches keep the split's full time axis (batching.eval_batches), so their predictions
  # join into the whole split's, scored in one clrs.evaluate_hints call: its MASK score is
  # an F1, which a mean over batches would not reproduce.
  parts = []
  for batch, n_valid in batching.eval_batches(feedback, min(batch_size, n_total)):
    logits = jax.device_get(hint_logits(params, batch.features))
    parts.append({k: np.asarray(v)[:, :n_valid] for k, v in logits.items()})
  logits = {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}
  nb_steps = next(iter(logits.values())).shape[0]
  preds = []
  for t in range(nb_steps):
    hard = decoders.postprocess(
        spec, {k: v[t] for k, v in logits.items()},
        sinkhorn_temperature=model_lib.SINKHORN_TEMPERATURE,
        sinkhorn_steps=model_lib.SINKHORN_STEPS_HINTS, hard=True)
    preds.append({k: clrs.DataPoint(name=d.name, location=d.location, type_=d.type_,
                                    data=np.asarray(d.data)) for k, d in hard.items()})
  lengths = np.asarray(feedback.features.lengths)
  hints = tuple(clrs.DataPoint(name=h.name, location=h.location, type_=h.type_,
                               data=np.asarray(h.data)) for h in feedback.features.hints)
  evals = clrs.evaluate_hints(hints, lengths, preds)
  steps = [t + 1 for t in range(nb_steps) if np.any(t + 1 < lengths)]
  return {h.name: {"steps": steps,
                   "accuracy": [float(evals[h.name + "_along_time"][t - 1]) for t in steps],
                   "samples": [int(np.sum(t < lengths)) for t in steps],
                   "overall": float(evals[h.name])}
          for h in hints}


def _run_intercepted(model, params, feedback, algorithm_index: int, batch_size: int,
                     max_samples: Optional[int], interceptor, trace=None) -> None:
  """Run the reference net (dm-clrs's modules; the same parameters) over `feedback` as at
  test time, inside haiku's method `interceptor` (which records through jax callbacks).
  `trace`, if given, is an interceptor for a first, abstract pass (jax.eval_shape: no
  computation) before `interceptor` is traced, e.g. to learn the order of the calls."""

  ref = learner.Learner(model.specs, model.nb_dims,
                    dataclasses.replace(model.config, impl="reference"), model.optimizer)
  feedback, n_total = batching.at_most(feedback, max_samples)

  def outputs(params, features, interceptor):
    with hk.experimental.intercept_methods(interceptor):
      return ref.apply(params, features, algorithm_index, True,
                       collect_hints=False).output_preds

  batches = [b for b, _ in batching.eval_batches(feedback, min(batch_size, n_total))]
  if trace is not None:
    jax.eval_shape(lambda p, f: outputs(p, f, trace), params, batches[0].features)
  run = jax.jit(lambda p, f: outputs(p, f, interceptor))
  for batch in batches:
    jax.block_until_ready(run(params, batch.features))


def update_gate_stats(model, params, feedback, algorithm_index: int, batch_size: int,
                      max_samples: Optional[int] = None) -> Dict[str, float]:
  """The processor's update gate u = sigmoid(gate3(.)) on `feedback`, run as at test time.

  Over the nodes, features and steps of the first `max_samples` samples (the repeated
  samples that fill up the last batch, and the steps past a trajectory's end, included).
  Computed with the reference net, whose gate3 is the last hk.Linear the processor calls:
  found by tracing the forward pass abstractly (jax.eval_shape), then intercepted.

  Returns:
    {"module": gate3's haiku name, "mean": the mean of u, "share_below_0.1",
    "share_above_0.9": the shares of u < 0.1 and u > 0.9, "calls": the gate's calls
    recorded}.

  Raises:
    ValueError: a processor other than triplet_gmpnn, or no processor Linear found.
  """

  if model.config.processor != "triplet_gmpnn":
    raise ValueError(f"--update-gate is for triplet_gmpnn, not {model.config.processor!r}")
  called, stats = [], []

  def trace_names(next_f, args, kwargs, context):
    if context.method_name == "__call__" and isinstance(context.module, hk.Linear):
      called.append(context.module.module_name)
    return next_f(*args, **kwargs)

  def gate3():
    names = [n for n in called if "processor" in n]
    if not names:
      raise ValueError("no processor Linear found to intercept")
    return names[-1]

  def record(next_f, args, kwargs, context):
    out = next_f(*args, **kwargs)
    if context.method_name == "__call__" and context.module.module_name == gate3():
      u = jax.nn.sigmoid(out)
      jax.debug.callback(lambda *v: stats.append([float(x) for x in v]),
                         jnp.mean(u), jnp.mean(u < 0.1), jnp.mean(u > 0.9), u.size)
    return out

  _run_intercepted(model, params, feedback, algorithm_index, batch_size, max_samples, record,
                   trace=trace_names)
  a = np.asarray(stats)
  w = a[:, 3] / a[:, 3].sum()
  return {"module": gate3(), "mean": float(w @ a[:, 0]), "share_below_0.1": float(w @ a[:, 1]),
          "share_above_0.9": float(w @ a[:, 2]), "calls": int(len(a))}


TOP_CHANNELS = (1, 2, 4, 8, 16)


def history_gate_stats(model, params, feedback, algorithm_index: int, batch_size: int,
                       max_samples: Optional[int] = None) -> Dict[str, Any]:
  """G-ForgetNet's history gate g(t) (Eq. 5) and what passes it, g(t) * h(t-1), on `feedback`.

  Over the nodes and steps of the first `max_samples` samples, run as at test time (the
  repeated samples that fill up the last batch, and the steps past a trajectory's end,
  included).  This tells a gate that lets little history through from one that is shut on
  most channels and open on a few large ones (the penalty is on ||g||, not on what
  passes).

  Returns:
    {"gate_norm", "history_norm", "gated_norm": the means over nodes and steps of
    ||g||/sqrt(d), ||h(t-1)||/sqrt(d) and ||g * h(t-1)||/sqrt(d) (the last is the paper's
    gate norm, Sec. 5 / Fig. 5); "share_below_0.1", "share_above_0.9": the shares of gate
    entries; "top_share": {n: the share of sum_k (g_k h_k)^2 carried by the n channels k
    that carry most} for n in TOP_CHANNELS up to d; "top_channels": the 8 channels that
    carry most, each with its share and the rms of g_k and h_k; "channels": every
    channel's "share", "rms_g" and "rms_h" as lists in channel order (a run continued from
    another keeps its channels: the two compare channel by channel); "gate_history_rank":
    the Spearman rank correlation over channels of rms_g with rms_h (negative: the gate is
    shut more on the channels where h(t-1) is large); "calls": the gate's calls recorded}.

  Raises:
    ValueError: a net without the gated history.
  """

  if model.config.history != "gated":
    raise ValueError(f"--history-gate is for the gated history (G-ForgetNet), not "
                     f"{model.config.history!r}")
  sums = []

  def record(next_f, args, kwargs, context):
    g = next_f(*args, **kwargs)
    if context.method_name == "__call__" and isinstance(context.module, model_lib.HistoryGate):
      h = args[1]                                  # [B, N, d]: h(t-1)
      d = h.shape[-1]
      norms = [jnp.sum(jnp.linalg.norm(x, axis=-1)) / np.sqrt(d) for x in (g, h, g * h)]
      per_channel = [jnp.sum(x, axis=(0, 1)) for x in ((g * h) ** 2, g ** 2, h ** 2)]
      jax.debug.callback(lambda *v: sums.append([np.asarray(x, np.float64) for x in v]),
                         *norms, jnp.sum(g < 0.1), jnp.sum(g > 0.9), *per_channel,
                         g.shape[0] * g.shape[1])
    return g

  _run_intercepted(model, params, feedback, algorithm_index, batch_size, max_samples, record)
  (g_norm, h_norm, gh_norm, below, above, gh2, g2, h2, count) = [
      sum(s[i] for s in sums) for i in range(len(sums[0]))]
  d = gh2.shape[0]
  rms_g, rms_h = np.sqrt(g2 / count), np.sqrt(h2 / count)
  order = np.argsort(-gh2, kind="stable")
  total = max(float(gh2.sum()), 1e-30)
  cumulative = np.cumsum(gh2[order]) / total
  return {
      "gate_norm": float(g_norm / count), "history_norm": float(h_norm / count),
      "gated_norm": float(gh_norm / count),
      "share_below_0.1": float(below / (count * d)), "share_above_0.9": float(above / (count * d)),
      "top_share": {str(n): float(cumulative[n - 1]) for n in TOP_CHANNELS if n <= d},
      "top_channels": [{"channel": int(k), "share": float(gh2[k] / total),
                        "rms_g": float(rms_g[k]), "rms_h": float(rms_h[k])}
                       for k in order[:8]],
      "channels": {"share": [float(v) for v in gh2 / total],
                   "rms_g": [float(v) for v in rms_g], "rms_h": [float(v) for v in rms_h]},
      "gate_history_rank": rank_correlation(rms_g, rms_h),
      "calls": len(sums),
  }


def rank_correlation(x, y) -> float:
  """Spearman's rank correlation of two equal-length sequences (ties ranked by position:
  the per-channel rms it is used on are continuous); 0.0 where either is constant."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if np.ptp(x) == 0 or np.ptp(y) == 0:
    return 0.0
  rx, ry = (np.argsort(np.argsort(v, kind="stable"), kind="stable") for v in (x, y))
  return float(np.corrcoef(rx, ry)[0, 1])
