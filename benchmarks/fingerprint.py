"""Bit-level fingerprints of training and evaluation, to show that a speed change is exact.

    python benchmarks/fingerprint.py [--algorithms bfs,dfs,...] [--histories full,none,gated]
        [--steps 6] [--out fp.json]
    python benchmarks/fingerprint.py --compare a.json b.json

For each algorithm and history policy: a tiny net (hidden 16, 4 triplet features,
batch 4, train sizes 4 and 7; string matchers 20) trained `--steps` steps from seed 0
with the default `learner.Learner` step, then validation (with hint losses) and a
test-style pass (without) on 8 fresh samples of the largest size, in batches of 4.  Recorded: the
SHA-256 of every loss, parameter and prediction as stored bytes, so two runs agree
only where every bit does.  Run it on two checkouts (PYTHONPATH) and `--compare`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys
from typing import Any, Dict, Optional, Sequence

if __package__ in (None, ""):  # run by path: make `benchmarks` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

if __name__ == "__main__":  # before clrs imports tensorflow: no start-up banners
  from nar_markov import quiet  # pylint: disable=g-import-not-at-top
  quiet.setup()

import jax
import numpy as np

from benchmarks import common
from nar_markov.config import clrs30
from nar_markov.config import netconfig
from nar_markov.data import batching
from nar_markov.data import train_stream
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib

SCHEMA = "nar_markov.fingerprint/1"
HIDDEN = 16
NB_TRIPLET_FTS = 4
BATCH = 4
EVAL_SAMPLES = 8
EVAL_BATCH = 4
LAMBDA_GATE = 0.1


def _digest(tree) -> str:
  h = hashlib.sha256()
  for leaf in jax.tree_util.tree_leaves(tree):
    a = np.ascontiguousarray(np.asarray(leaf))
    h.update(str((a.dtype, a.shape)).encode())
    h.update(a.tobytes())
  return h.hexdigest()[:16]


def fingerprint(algorithm: str, history: str, steps: int) -> Dict[str, Any]:
  lengths = (16,) if algorithm in clrs30.STRING_MATCHERS else (4, 7)
  stream = train_stream.TrainStream(algorithm, seed=0, batch_size=BATCH, lengths=lengths)
  batches = [next(stream) for _ in range(steps)]
  config = netconfig.NetConfig(hidden_size=HIDDEN, nb_triplet_fts=NB_TRIPLET_FTS,
                               history=history)
  net = learner.Learner([stream.spec], [model_lib.nb_dims_of(batches[0])], config,
                        learner.make_optimizer(1e-3, 100, 1.0), algorithms=[algorithm])
  params, opt_state = net.init_state(0, [batches[0].features])
  losses = []
  for step, feedback in enumerate(batches):
    params, opt_state, l = net.train_step(params, opt_state, feedback,
                                          np.float32(LAMBDA_GATE), 0,
                                          net.step_key(0, step))
    losses.append(jax.device_get(l))
  # Evaluation samples: 8 fresh graphs at the largest size, time-padded as a
  # split is (evaluate_split's batches keep the whole time axis).
  val = next(train_stream.TrainStream(algorithm, seed=1, batch_size=EVAL_SAMPLES,
                                      lengths=lengths[-1:]))
  out = {"losses": _digest(losses), "params": _digest(params),
         "loss_last": float(losses[-1].total)}
  for name, with_hints in (("val", True), ("test_style", False)):
    res = learner.evaluate_split(net, params, val, 0, EVAL_BATCH, with_hints,
                                 max_samples=EVAL_SAMPLES)
    out[name] = _digest([np.float64(res["score"])] + [
        np.asarray(res[k]) for k in ("hint_per_step", "history_norm") if k in res])
    out[name + "_score"] = res["score"]
  # Predictions themselves, not only their score.
  batch, _ = next(batching.eval_batches(val, EVAL_BATCH))
  for with_hints in (True, False):
    preds, extras = net.eval_batch(params, batch, 0, with_hints)
    out[f"preds_hints_{with_hints}"] = _digest([preds, extras])
  return out


def compare(a: Dict[str, Any], b: Dict[str, Any]) -> int:
  bad = 0
  for key in sorted(set(a["runs"]) | set(b["runs"])):
    ra, rb = a["runs"].get(key), b["runs"].get(key)
    if ra is None or rb is None:
      print(f"{key}: only in one file")
      bad += 1
      continue
    diff = [k for k in ra if not k.endswith("_score") and k != "loss_last"
            and ra[k] != rb.get(k)]
    print(f"{key}: {'identical' if not diff else 'DIFFERS in ' + ', '.join(diff)}")
    bad += bool(diff)
  print(f"{len(a['runs'])} vs {len(b['runs'])} runs, {bad} differ")
  return 1 if bad else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
  p = argparse.ArgumentParser(prog="python benchmarks/fingerprint.py",
                              description=__doc__.splitlines()[0])
  p.add_argument("--algorithms", default=",".join(clrs30.ALGORITHMS))
  p.add_argument("--histories", default="full,none,gated")
  p.add_argument("--steps", type=int, default=6)
  p.add_argument("--out", default=None)
  p.add_argument("--compare", nargs=2, metavar=("A", "B"))
  args = p.parse_args(argv)
  if args.compare:
    a, b = (json.loads(pathlib.Path(f).read_text()) for f in args.compare)
    return compare(a, b)
  report = {"schema": SCHEMA, "machine": common.machine_info(), "runs": {}}
  for algorithm in [a for a in args.algorithms.split(",") if a]:
    for history in [h for h in args.histories.split(",") if h]:
      key = f"{algorithm}/{history}"
      report["runs"][key] = fingerprint(algorithm, history, args.steps)
      common.log("fingerprint", f"{key}: {report['runs'][key]}")
      if args.out:
        common.write_json(args.out, report)
  return 0


if __name__ == "__main__":
  sys.exit(main())
