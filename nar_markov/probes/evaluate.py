"""Score a saved model (`<run>/params.npz`) on a split or on fresh graphs of other sizes.

    python -m nar_markov.probes.evaluate RUN_DIR [--split test|val] [--nodes 64,128]
        [--max-samples N] [--batch-size B] [--sample-seed S] [--algorithm ALG] [--json OUT]
        [--hints] [--update-gate] [--history-gate] [--markov]

RUN_DIR holds `params.npz` (nar_markov.store.params_io: best-validation parameters, net config,
metadata) and the run's `result.json` (algorithm, model, seed). A multi-task model's metadata
lists its `algorithms` (the order of `algorithm_index`); the run folder's algorithm, or
--algorithm, picks the one scored. Without --nodes the official split is scored (default test:
64 nodes, the paper's OOD number), all of it unless --max-samples N. A run was tested on
`Protocol.test_max_samples` of it (all when None): the output says which split, size and
sample count it scored and whether that is how the run was tested (then its test_score is
reproduced), else which --max-samples would be. --nodes scores freshly sampled graphs of each size instead, drawn as the official
dataset builder draws a split (`clrs.build_sampler(alg, seed, num_samples, length=n)`, the
test split's sample count unless --max-samples, then run.py's preprocessing): e.g. how far
out of distribution a model still holds. One line per size; --json writes them all.

--hints also scores the model's hint predictions step by step, as it runs at test time (each
step fed the previous step's own predictions): clrs.evaluate_hints's per-step accuracy of every
hint, over the trajectories that reach that step. It shows where along a trajectory a model
starts to go wrong (error accumulating over the steps, the paper's Appendix C
argument). One line per hint; --json keeps every step.

--update-gate also measures the Triplet-GMPNN processor's own update gate u (dm-clrs: out =
u * ret + (1 - u) * h, with gate bias -3 at initialisation) over every node, feature and step of
the scored graphs: its mean and the shares of u < 0.1 and u > 0.9. In ForgetNet h = 0, so the
gate only scales the processor's output (u * ret); this says what it learned to do with it.

--history-gate (G-ForgetNet) measures its history gate g(t) and what passes it, g * h(t-1): the
mean norms of g, h(t-1) and g * h(t-1) (the paper's gate norm), the shares of gate entries
below 0.1 / above 0.9, and how much of the history that passes the few largest channels carry.
The penalty is on ||g||: this tells a gate that passes little from one shut on most channels
and open on a few large ones.

--markov asks whether the tested net is Markov in effect (docs/design.md): it scores the run's
params.npz, refused unless it is the checkpoint the run tested, as trained and with h(t-1)
replaced by zeros in every consumer (processor input, update residual, decoder: ForgetNet's
forward pass on the same weights), the share of output predictions that change, and the gate
norm there (||what the processor input receives of h(t-1)||/sqrt(d), the validation curve's
hidden_norm). Scored on the test split as the run was tested, it writes <run>/markov.json,
which analysis.verdict reads (`rule.markov_in_effect`: the rule, written before any measurement).
git keeps no params.npz, so a committed run measured on another machine or in another session
is measured on its replay (`python -m nar_markov.tools.replay RUN --results OTHER`): `--markov
--record-for RUN` scores the replay's params.npz and writes the record into RUN, only where
the replay is the run again -- same model, algorithm, seed, tested step and, to the bit, the
same test_score, as on the CPU kind that trained it -- else refuses in one line (exit 2). The
record names the replay it was measured on (`parameters_from`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import clrs
from clrs._src import decoders
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from nar_markov.config import clrs30
from nar_markov.data import batching
from nar_markov.data import preprocessing
from nar_markov.data import splits
from nar_markov.markov import rule
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib
from nar_markov.store import params_io
from nar_markov.store import runs
from nar_markov.store import util

# The official test split's seed is 3 (clrs.CLRS30); fresh graphs use another by default.
DEFAULT_SAMPLE_SEED = 4

class RunMismatch(ValueError):
  """The run folder does not fit the request (no algorithm named, another algorithm asked
  for, a gate measured that the model does not have); the CLI reports it as a usage error."""


def load_run(run_dir, algorithm: Optional[str] = None) -> Dict[str, Any]:
  """params, net_config, meta, result (or {}) of a run folder, the algorithms of the model
  (meta['algorithms'], else the one algorithm) and the one to score (`algorithm`, else
  meta's, else result.json's)."""
  run_dir = pathlib.Path(run_dir)
  params, net_config, meta = params_io.load_params(run_dir / runs.PARAMS_NAME)
  result_path = run_dir / runs.RESULT_NAME
  result = json.loads(result_path.read_text()) if result_path.exists() else {}
  algorithm = algorithm or meta.get("algorithm") or result.get("algorithm")
  if not algorithm:
    raise RunMismatch(f"{run_dir}: neither params.npz's meta nor result.json names the algorithm")
  algorithms = list(meta.get("algorithms") or [algorithm])
  if algorithm not in algorithms:
    raise RunMismatch(f"{run_dir}: the model was trained on {algorithms}, not {algorithm!r}")
  return {"params": params, "net_config": net_config, "meta": meta, "result": result,
          "algorithm": algorithm, "algorithms": algorithms}


def sample_graphs(algorithm: str, nb_nodes: int, num_samples: int, seed: int):
  """`num_samples` fresh trajectories at `nb_nodes`, drawn and preprocessed as the official
  val/test splits are (nar_markov.data.splits), with `seed`."""

  sampler, _ = clrs.build_sampler(clrs30.check_algorithm(algorithm), seed=int(seed),
                                  num_samples=int(num_samples), length=int(nb_nodes))
  return preprocessing.preprocess_feedback(algorithm, sampler.next(None))


def build_model(algorithms: Sequence[str], net_config: Dict[str, Any],
                nb_dims: Optional[Any] = None, cache_dir: Optional[str] = None):
  """The `learner.Learner` of a saved run: the net that `net_config` describes over `algorithms`
  (a list of one for single-task). nb_dims: the metadata's (a dict, or one per algorithm),
  else taken from the val splits as experiment.run_experiment takes them."""

  algorithms = list(algorithms)
  if isinstance(nb_dims, dict):
    nb_dims = [nb_dims]
  if not nb_dims:
    nb_dims = [model_lib.nb_dims_of(splits.load_split(a, "val", cache_dir=cache_dir))
               for a in algorithms]
  if len(nb_dims) != len(algorithms):
    raise ValueError(f"{len(nb_dims)} nb_dims for {len(algorithms)} algorithms")
  config = model_lib.NetConfig(**net_config)
  # Never stepped: the optimizer is only there because Model wants one.
  optimizer = learner.make_optimizer(1e-3, 1, 1.0)
  return learner.Learner([preprocessing.get_spec(a) for a in algorithms],
                         [dict(d) for d in nb_dims], config, optimizer,
                         algorithms=list(algorithms))


@dataclasses.dataclass(frozen=True)
class Target:
  """What `evaluate_run` scores: the official `split` (its first `max_samples`, or all of
  it), or with `nodes` freshly sampled graphs of each size (`max_samples` of them, else the
  test split's count, drawn with `sample_seed`); in batches of `batch_size` (None: bounded
  by memory)."""
  split: str = "test"
  nodes: Sequence[int] = ()
  max_samples: Optional[int] = None
  batch_size: Optional[int] = None
  sample_seed: int = DEFAULT_SAMPLE_SEED


# What evaluate_run measures beside the score, if asked: each hint's per-step accuracy
# (`hint_accuracy`), the processor's update gate (`update_gate_stats`), G-ForgetNet's
# history gate (`history_gate_stats`), the score with the history zeroed (`markov_measure`).
MEASURES = ("hints", "update_gate", "history_gate", "markov")


def evaluate_run(run_dir, target: Target = Target(), measures: Sequence[str] = (), *,
                 algorithm: Optional[str] = None, cache_dir: Optional[str] = None,
                 log=print) -> Dict[str, Any]:
  """Scores of a saved run on `target`, with the `measures` asked for (MEASURES);
  `algorithm`: a multi-task model's algorithm to score (else the run's)."""
  unknown = sorted(set(measures) - set(MEASURES))
  if unknown:
    raise ValueError(f"unknown measures {unknown}; known: {MEASURES}")
  run = load_run(run_dir, algorithm)
  if "history_gate" in measures and run["net_config"].get("history", "gated") != "gated":
    # Checked before any data is built: the gate is measured per split or size.
    raise RunMismatch(f"--history-gate is for G-ForgetNet (the gated history); {run_dir} "
                      f"is a {run['net_config']['history']!r} model")
  zeroed = None
  if "markov" in measures:
    problem = rule.tested_checkpoint_problem(run["meta"], run["result"])
    if problem:
      raise RunMismatch(f"--markov measures the tested checkpoint; {run_dir}: {problem}")
    zeroed = build_model(run["algorithms"], rule.zeroed_config(run["net_config"]),
                         run["meta"].get("nb_dims"), cache_dir)
  model = build_model(run["algorithms"], run["net_config"], run["meta"].get("nb_dims"),
                      cache_dir)
  scores = [_score(model, run, entry, feedback, target, measures, log, zeroed=zeroed)
            for entry, feedback in _targets(run["algorithm"], target, cache_dir)]
  result = run["result"]
  return {
      "run_dir": str(run_dir),
      "algorithm": run["algorithm"],
      "algorithms": run["algorithms"],
      "model": run["meta"].get("model", result.get("model")),
      "seed": run["meta"].get("seed", result.get("seed")),
      "step": run["meta"].get("step"),
      "history": model.config.history,
      "history_scope": model.config.history_scope,
      "result_test_score": result.get("test_score"),
      "scores": scores,
  }


def _targets(algorithm: str, target: Target, cache_dir):
  """(what is scored, its feedback) for each split or size of `target`."""

  if target.nodes:
    num_samples = target.max_samples or splits.split_settings(algorithm, "test")["num_samples"]
    for n in target.nodes:
      yield ({"source": "sampled", "nb_nodes": int(n), "seed": int(target.sample_seed)},
             sample_graphs(algorithm, n, num_samples, target.sample_seed))
    return
  feedback = splits.load_split(algorithm, target.split, cache_dir=cache_dir)
  yield ({"source": target.split, "nb_nodes": batching.nb_nodes_of(feedback),
          "seed": splits.split_settings(algorithm, target.split)["seed"]}, feedback)


def _score(model, run: Mapping[str, Any], entry: Dict[str, Any], feedback, target: Target,
           measures: Sequence[str], log, zeroed=None) -> Dict[str, Any]:
  """`entry` (what is scored) with the score of `run`'s parameters on `feedback`, and
  the `measures`; one line each to `log`. `zeroed`: the net with the history zeroed
  (`rule.zeroed_config`), for "markov"."""

  algorithm, params, cap = run["algorithm"], run["params"], target.max_samples
  index = run["algorithms"].index(algorithm)
  bs = target.batch_size or learner.default_test_batch_size(
      model.specs[index], entry["nb_nodes"], model.config.hidden_size, fast=model.config.fast)
  preds, truth = output_predictions(model, params, feedback, index, bs, cap)
  res = score_predictions(preds, truth)
  size = batching.nb_samples_of(feedback)
  n = min(size, cap or size)
  entry = dict(entry, num_samples=int(n), score=res["score"], scores=res["scores"])
  log(f"{algorithm} {entry['source']} nodes={entry['nb_nodes']} samples={n} "
      f"score={res['score']:.4f}")
  if entry["source"] == "test":
    said = rule.as_the_run_was_tested(run["result"], entry, size)
    if said:
      entry["as_tested"], line = said
      log(line)
  if "hints" in measures:
    entry["hints"] = hint_accuracy(model, params, feedback, index, bs, cap)
    for name, h in entry["hints"].items():
      log("  " + hint_summary(name, h))
  if "update_gate" in measures:
    g = entry["update_gate"] = update_gate_stats(model, params, feedback, index, bs, cap)
    log(f"  update gate u: mean {g['mean']:.3f}, u < 0.1: {g['share_below_0.1']:.3f}, "
        f"u > 0.9: {g['share_above_0.9']:.3f}")
  if "history_gate" in measures:
    g = entry["history_gate"] = history_gate_stats(model, params, feedback, index, bs, cap)
    log(f"  history gate: |g| {g['gate_norm']:.3f}, |h(t-1)| {g['history_norm']:.3f}, "
        f"|g*h(t-1)| {g['gated_norm']:.3f} (per sqrt(d)); g < 0.1: "
        f"{g['share_below_0.1']:.3f}, g > 0.9: {g['share_above_0.9']:.3f}; share of "
        "|g*h|^2 in the top " + ", ".join(f"{n}: {v:.3f}" for n, v in g["top_share"].items())
        + " channels")
  if "markov" in measures:
    m = entry["markov"] = markov_measure(model, zeroed, params, feedback, index, bs, cap,
                                         (preds, truth))
    m["markov_in_effect"] = rule.markov_in_effect(model.config.history_scope, m["delta"],
                                             m["predictions_changed"], m["gate_norm"])
    log(f"  history zeroed: score {m['score_history_zeroed']:.4f} (as trained "
        f"{m['score']:.4f}, delta {100 * m['delta']:+.2f} points), predictions changed "
        f"{m['predictions_changed']:.4f}; gate norm {m['gate_norm']:.4f}; Markov in effect "
        f"(scope {rule.MARKOV_SCOPE}, |delta| < {100 * rule.MARKOV_MAX_DELTA:g} point, changed < "
        f"{rule.MARKOV_MAX_CHANGED:g}, gate norm < {rule.MARKOV_MAX_GATE_NORM:g}): "
        f"{'yes' if m['markov_in_effect'] else 'no'}")
  return entry


def output_predictions(model, params, feedback, algorithm_index: int, batch_size: int,
                       max_samples: Optional[int] = None):
  """(hard output predictions {name: clrs.DataPoint}, the true outputs) of the first
  `max_samples` samples of `feedback`, in learner.evaluate_split's batches: scored
  (`score_predictions`) they give its score."""

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
  """Share of output predictions (a node's pointer, mask bit or scalar; a one-hot's class)
  that differ between two {name: clrs.DataPoint} of the same samples."""

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
  """How much the net's outputs on `feedback` depend on h(t-1): its score as trained
  (`model`), with the history zeroed in every consumer (`zeroed`: `rule.zeroed_config`'s net,
  same `params`), the share of predictions that change, and the gate norm: ||what the
  processor input receives of h(t-1)||/sqrt(d) over nodes, the steps t >= 1 each trajectory
  has, then samples (the validation curve's `hidden_norm`; for G-ForgetNet ||g * h(t-1)||).
  `trained`: `output_predictions` of `model`, if already made."""

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
  """Per-step accuracy of each hint on `feedback`, the model feeding back its own hint
  predictions (repred, as at test time).

  Returns {hint name: {"steps": [t = 1, 2, ...], "accuracy": [...], "samples": [...],
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
  """Mean of the processor's update gate u = sigmoid(gate3(.)) and the shares of u < 0.1
  and u > 0.9 over the nodes, features and steps of `feedback` (padded samples and steps
  past a trajectory's end included), run as at test time.

  Computed with the reference net, whose gate3 is the last hk.Linear the processor calls:
  found by tracing the forward pass abstractly (jax.eval_shape), then intercepted.
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
  """G-ForgetNet's history gate g(t) (Eq. 5) and what passes it, g(t) * h(t-1), over the
  nodes and steps of `feedback` (padded samples and steps past a trajectory's end included),
  run as at test time.

  Returns the means over nodes and steps of ||g||/sqrt(d), ||h(t-1)||/sqrt(d) and
  ||g * h(t-1)||/sqrt(d) (the last is the paper's gate norm, Sec. 5 / Fig. 5); the shares of
  gate entries below 0.1 and above 0.9; and, per hidden channel k, how the history that passes
  is spread: `top_share[n]`, the share of sum (g_k h_k)^2 carried by the n channels that carry
  most, and those channels with the rms of g_k and h_k.  This tells a gate that lets little
  history through from one that is shut on most channels and open on a few large ones (the
  penalty is on ||g||, not on what passes).
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
  order = np.argsort(-gh2, kind="stable")
  total = max(float(gh2.sum()), 1e-30)
  cumulative = np.cumsum(gh2[order]) / total
  return {
      "gate_norm": float(g_norm / count), "history_norm": float(h_norm / count),
      "gated_norm": float(gh_norm / count),
      "share_below_0.1": float(below / (count * d)), "share_above_0.9": float(above / (count * d)),
      "top_share": {str(n): float(cumulative[n - 1]) for n in TOP_CHANNELS if n <= d},
      "top_channels": [{"channel": int(k), "share": float(gh2[k] / total),
                        "rms_g": float(np.sqrt(g2[k] / count)),
                        "rms_h": float(np.sqrt(h2[k] / count))} for k in order[:8]],
      "calls": len(sums),
  }


def hint_summary(name: str, entry: Mapping[str, Any], below: float = 0.99) -> str:
  """One line: the hint's overall accuracy, the first step below `below`, and the
  accuracy at each tenth of the trajectory."""
  steps, acc = entry["steps"], entry["accuracy"]
  first = next((s for s, a in zip(steps, acc) if a < below), None)
  marks = sorted({steps[min(len(steps) - 1, (len(steps) * k) // 10)] for k in range(10)}
                 | {steps[-1]})
  by_step = dict(zip(steps, acc))
  return (f"hint {name}: overall {entry['overall']:.4f}; first step below {below}: "
          f"{first if first is not None else 'none'} of {steps[-1]}; by step "
          + " ".join(f"{s}:{by_step[s]:.3f}" for s in marks))


def _nodes(text: str) -> List[int]:
  try:
    values = [int(x) for x in text.split(",") if x.strip()]
  except ValueError:
    raise argparse.ArgumentTypeError(f"--nodes wants integers like 64,128, not {text!r}")
  if not values or min(values) < 2:
    raise argparse.ArgumentTypeError(f"--nodes wants node counts >= 2, got {text!r}")
  return values


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0],
      formatter_class=argparse.RawDescriptionHelpFormatter,
      epilog=__doc__.split("\n\n", 1)[1])
  parser.add_argument("run_dir", help="a run folder with params.npz (and result.json)")
  parser.add_argument("--split", choices=("test", "val"), default="test")
  parser.add_argument("--algorithm", default=None,
                      help="multi-task model: the algorithm to score (default: the run's)")
  parser.add_argument("--nodes", type=_nodes, default=None,
                      help="comma-separated node counts: score fresh graphs of these sizes")
  parser.add_argument("--max-samples", type=int, default=None,
                      help="score only the first N samples (sampled: draw N)")
  parser.add_argument("--batch-size", type=int, default=None,
                      help="evaluation batch size (default: bounded by memory)")
  parser.add_argument("--sample-seed", type=int, default=DEFAULT_SAMPLE_SEED,
                      help="sampler seed of --nodes graphs")
  parser.add_argument("--cache-dir", default=None, help="CLRS val/test cache folder")
  parser.add_argument("--json", default=None, help="also write the scores to this JSON file")
  parser.add_argument("--hints", action="store_true",
                      help="also score each hint step by step (the model fed its own hints)")
  parser.add_argument("--update-gate", action="store_true",
                      help="also measure the Triplet-GMPNN processor's update gate")
  parser.add_argument("--history-gate", action="store_true",
                      help="also measure G-ForgetNet's history gate and what passes it")
  parser.add_argument("--markov", action="store_true",
                      help="also score the tested checkpoint with h(t-1) zeroed in every "
                      "consumer, with its gate norm; on the test split as the run was tested, "
                      f"write <run>/{runs.MARKOV_NAME}")
  parser.add_argument("--record-for", default=None, metavar="RUN",
                      help=f"with --markov: RUN_DIR is a replay of RUN (a committed run "
                      f"without its {runs.PARAMS_NAME}); write the record into RUN, only if the "
                      "replay reproduced its tested step and test_score to the bit")
  args = parser.parse_args(argv)
  problem = rule.missing_params(args.run_dir)
  if problem:
    parser.exit(2, f"evaluate: error: {problem}\n")
  replay = None
  if args.record_for is not None:
    if not args.markov:
      parser.error("--record-for writes a Markov record: it needs --markov")
    replay = rule.result_of(args.run_dir) or {}
    problem = rule.replay_problem(rule.result_of(args.record_for), replay)
    if problem:
      parser.exit(2, f"evaluate: error: --record-for {args.record_for}: {problem}\n")
  if args.max_samples is not None and args.max_samples < 1:
    parser.error("--max-samples must be >= 1")
  learner.setup_compilation_cache()
  try:
    target = Target(split=args.split, nodes=args.nodes or (), max_samples=args.max_samples,
                    batch_size=args.batch_size, sample_seed=args.sample_seed)
    out = evaluate_run(args.run_dir, target, [m for m in MEASURES if getattr(args, m)],
                       algorithm=args.algorithm, cache_dir=args.cache_dir)
  except (RunMismatch, params_io.UnreadableParams) as e:
    parser.exit(2, f"evaluate: error: {e}\n")
  if args.json:
    runs.atomic_write_bytes(pathlib.Path(args.json),
                            json.dumps(util.jsonable(out), indent=1).encode())
  if args.markov:
    rule.write_markov_record(args.run_dir, out, record_for=args.record_for, replay=replay)
  return 0


if __name__ == "__main__":
  sys.exit(main())
