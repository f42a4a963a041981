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
reproduced), else which --max-samples would be. --nodes scores freshly sampled graphs of
each size instead, drawn as the official dataset builder draws a split
(`clrs.build_sampler(alg, seed, num_samples, length=n)`, the test split's sample count
unless --max-samples, then run.py's preprocessing): e.g. how far out of distribution a
model still holds. One line per size; --json writes them all.

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
from typing import Any, Dict, List, Mapping, Optional, Sequence

if __name__ == "__main__":  # before clrs imports tensorflow: no start-up banners
  from nar_markov import quiet  # pylint: disable=g-import-not-at-top
  quiet.setup()

import clrs

from nar_markov.config import clrs30
from nar_markov.config import netconfig
from nar_markov.data import batching
from nar_markov.data import preprocessing
from nar_markov.data import splits
from nar_markov.markov import rule
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib
from nar_markov.probes import measures as measures_lib
from nar_markov.store import params_io
from nar_markov.store import runs
from nar_markov.store import util

# The official test split's seed is 3 (clrs.CLRS30); fresh graphs use another by default.
DEFAULT_SAMPLE_SEED = 4

class RunMismatch(ValueError):
  """The run folder does not fit the request; the CLI reports it as a usage error.

  No algorithm named, another algorithm asked for, a gate measured that the model does
  not have, or a Markov measure of a checkpoint the run did not test.
  """


def load_run(run_dir, algorithm: Optional[str] = None) -> Dict[str, Any]:
  """Reads a run folder's saved model and result.

  Args:
    run_dir: the run folder: params.npz, and result.json if there is one.
    algorithm: the algorithm to score; None: the params' metadata's, else result.json's.

  Returns:
    {"params", "net_config", "meta" (params.npz's), "result" (result.json, or {}),
    "algorithm" (the one to score), "algorithms" (the model's: meta["algorithms"], else
    [algorithm])}.

  Raises:
    RunMismatch: no algorithm is named anywhere, or the model was not trained on it.
    params_io.UnreadableParams: params.npz does not read (a missing one: OSError).
  """
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
  """`num_samples` fresh trajectories of `nb_nodes` nodes, drawn with `seed`.

  Drawn and preprocessed as the official val/test splits are (nar_markov.data.splits):
  `clrs.build_sampler(algorithm, seed, num_samples, length=nb_nodes)`, then run.py's
  preprocessing, `pos` as drawn.

  Raises:
    ValueError: `algorithm` is not a CLRS-30 name.
  """

  sampler, _ = clrs.build_sampler(clrs30.check_algorithm(algorithm), seed=int(seed),
                                  num_samples=int(num_samples), length=int(nb_nodes))
  return preprocessing.preprocess_feedback(algorithm, sampler.next(None))


def build_model(algorithms: Sequence[str], net_config: Dict[str, Any],
                nb_dims: Optional[Any] = None, cache_dir: Optional[str] = None):
  """The `learner.Learner` of a saved run: the net `net_config` describes, over `algorithms`.

  Its optimizer is never stepped.

  Args:
    algorithms: the model's algorithms in algorithm_index order (one for single-task).
    net_config: the NetConfig's fields (params.npz's).
    nb_dims: the metadata's: one dict (single-task) or one per algorithm; None or empty:
      taken from the val splits (`model.nb_dims_of`; dm-clrs's decoders read only the
      categorical features' sizes, which are the same in every split).
    cache_dir: the split cache, for those val splits.

  Raises:
    ValueError: not one nb_dims per algorithm, or a net_config NetConfig refuses.
  """

  algorithms = list(algorithms)
  if isinstance(nb_dims, dict):
    nb_dims = [nb_dims]
  if not nb_dims:
    nb_dims = [model_lib.nb_dims_of(splits.load_split(a, "val", cache_dir=cache_dir))
               for a in algorithms]
  if len(nb_dims) != len(algorithms):
    raise ValueError(f"{len(nb_dims)} nb_dims for {len(algorithms)} algorithms")
  config = netconfig.NetConfig(**net_config)
  # Never stepped: the optimizer is only there because Learner wants one.
  optimizer = learner.make_optimizer(1e-3, 1, 1.0)
  return learner.Learner([preprocessing.get_spec(a) for a in algorithms],
                         [dict(d) for d in nb_dims], config, optimizer,
                         algorithms=list(algorithms))


@dataclasses.dataclass(frozen=True)
class Target:
  """What `evaluate_run` scores.

  Attributes:
    split: the official split scored where `nodes` is empty: "test" or "val".
    nodes: node counts; not empty: freshly sampled graphs of each size instead
      (`sample_graphs`).
    max_samples: the split's first samples scored (None: all of it); with `nodes`, the
      graphs drawn per size (None: the test split's count).
    batch_size: the evaluation batch size; None: `learner.default_test_batch_size`.
    sample_seed: the sampler seed of the `nodes` graphs.
  """
  split: str = "test"
  nodes: Sequence[int] = ()
  max_samples: Optional[int] = None
  batch_size: Optional[int] = None
  sample_seed: int = DEFAULT_SAMPLE_SEED


# What evaluate_run measures beside the score, if asked (nar_markov.probes.measures): each
# hint's per-step accuracy (`hint_accuracy`), the processor's update gate
# (`update_gate_stats`), G-ForgetNet's history gate (`history_gate_stats`), the score with
# the history zeroed (`markov_measure`).
MEASURES = ("hints", "update_gate", "history_gate", "markov")


def evaluate_run(run_dir, target: Target = Target(), measures: Sequence[str] = (), *,
                 algorithm: Optional[str] = None, cache_dir: Optional[str] = None,
                 log=print) -> Dict[str, Any]:
  """Scores a saved run on `target`, with the `measures` asked for.

  Args:
    run_dir: the run folder (`load_run`).
    target: what is scored.
    measures: names from MEASURES: "hints" (`measures.hint_accuracy`), "update_gate",
      "history_gate", "markov" (the tested checkpoint with the history zeroed, judged by
      `rule.markov_in_effect`).
    algorithm: a multi-task model's algorithm to score; None: the run's.
    cache_dir: the split cache.
    log: takes one line per score and measure.

  Returns:
    {"run_dir", "algorithm", "algorithms", "model" and "seed" (params.npz's metadata,
    else result.json's), "step" (the metadata's), "history", "history_scope",
    "result_test_score" (result.json's), "scores": one entry per split or size, with
    "source", "nb_nodes", "seed", "num_samples", "score", "scores", each measure's
    result, and on the test split "as_tested" where `rule.as_the_run_was_tested` says}.

  Raises:
    ValueError: an unknown measure.
    RunMismatch: as `load_run`; "update_gate" for a processor other than triplet_gmpnn;
      "history_gate" for a model without the gated history;
      "markov" for a params.npz that is not the checkpoint the run tested.
  """
  unknown = sorted(set(measures) - set(MEASURES))
  if unknown:
    raise ValueError(f"unknown measures {unknown}; known: {MEASURES}")
  run = load_run(run_dir, algorithm)
  if "history_gate" in measures and run["net_config"].get("history", "gated") != "gated":
    # Checked before any data is built: the gate is measured per split or size.
    raise RunMismatch(f"--history-gate is for G-ForgetNet (the gated history); {run_dir} "
                      f"is a {run['net_config']['history']!r} model")
  processor = run["net_config"].get("processor", "triplet_gmpnn")
  if "update_gate" in measures and processor != "triplet_gmpnn":
    raise RunMismatch(f"--update-gate is for triplet_gmpnn (the processor with an update "
                      f"gate); {run_dir} trained on {processor!r}")
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
  preds, truth = measures_lib.output_predictions(model, params, feedback, index, bs, cap)
  res = measures_lib.score_predictions(preds, truth)
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
    entry["hints"] = measures_lib.hint_accuracy(model, params, feedback, index, bs, cap)
    for name, h in entry["hints"].items():
      log("  " + hint_summary(name, h))
  if "update_gate" in measures:
    g = entry["update_gate"] = measures_lib.update_gate_stats(
        model, params, feedback, index, bs, cap)
    log(f"  update gate u: mean {g['mean']:.3f}, u < 0.1: {g['share_below_0.1']:.3f}, "
        f"u > 0.9: {g['share_above_0.9']:.3f}")
  if "history_gate" in measures:
    g = entry["history_gate"] = measures_lib.history_gate_stats(
        model, params, feedback, index, bs, cap)
    log(f"  history gate: |g| {g['gate_norm']:.3f}, |h(t-1)| {g['history_norm']:.3f}, "
        f"|g*h(t-1)| {g['gated_norm']:.3f} (per sqrt(d)); g < 0.1: "
        f"{g['share_below_0.1']:.3f}, g > 0.9: {g['share_above_0.9']:.3f}; share of "
        "|g*h|^2 in the top " + ", ".join(f"{n}: {v:.3f}" for n, v in g["top_share"].items())
        + " channels")
  if "markov" in measures:
    m = entry["markov"] = measures_lib.markov_measure(
        model, zeroed, params, feedback, index, bs, cap, (preds, truth))
    m["markov_in_effect"] = rule.markov_in_effect(model.config.history_scope, m["delta"],
                                                  m["predictions_changed"], m["gate_norm"])
    log(f"  history zeroed: score {m['score_history_zeroed']:.4f} (as trained "
        f"{m['score']:.4f}, delta {100 * m['delta']:+.2f} points), predictions changed "
        f"{m['predictions_changed']:.4f}; gate norm {m['gate_norm']:.4f}; Markov in effect "
        f"(scope {rule.MARKOV_SCOPE}, |delta| < {100 * rule.MARKOV_MAX_DELTA:g} point, changed < "
        f"{rule.MARKOV_MAX_CHANGED:g}, gate norm < {rule.MARKOV_MAX_GATE_NORM:g}): "
        f"{'yes' if m['markov_in_effect'] else 'no'}")
  return entry


def hint_summary(name: str, entry: Mapping[str, Any], below: float = 0.99) -> str:
  """One line of a `measures.hint_accuracy` entry.

  The hint's overall accuracy, the first step whose accuracy is below `below` ("none"),
  and the accuracy at each tenth of the steps and at the last.
  """
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
  """The command line (module docstring); returns 0.

  Exits with status 2 and one line on stderr for a usage error (argparse), a missing
  params.npz, a replay that is not the run (--record-for), a RunMismatch or an unreadable
  params.npz.
  """
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
