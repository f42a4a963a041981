"""Same-process A/B of our train step: as trained, without remat, without time buckets.

    python benchmarks/ab_variants.py binary_search,segments_intersect [--reps 8]

For each algorithm, one `bench.ClrsTrainStream` batch per train size and three
learners from the same seed: `default` (what training runs: `bench.ours_batch`'s
time bucket, `NetConfig.remat` on), `noremat` (remat off) and `exactT` (the batch
as dm-clrs pads it, to the sampler's running max, not to `nar_markov.data.batching.time_bucket`).
Steps alternate between the three (the order flips every round); prints the median
ms per size and their sum over one cycle.  A measurement of what each would cost,
not a check that they compute the same (benchmarks/fingerprint.py is that).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import statistics
import sys
import time

if __package__ in (None, ""):  # run by path: make `benchmarks` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

if __name__ == "__main__":  # before clrs imports tensorflow: no start-up banners
  from nar_markov import quiet  # pylint: disable=g-import-not-at-top
  quiet.setup()

import jax
import numpy as np

from benchmarks import bench
from nar_markov.config import clrs30
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib

VARIANTS = ("default", "noremat", "exactT")


def _learner(name: str, algorithm: str, nb_dims, hidden: int) -> learner.Learner:
  net = bench.ours_model(algorithm, nb_dims, hidden)
  if name != "noremat":
    return net
  return learner.Learner(net.specs, [nb_dims], dataclasses.replace(net.config, remat=False),
                         net.optimizer, algorithms=net.algorithms)


def ab(algorithm: str, reps: int, hidden: int = 128, batch: int = 32,
       lengths=clrs30.TRAIN_LENGTHS):
  """{variant: [median ms per train size]}."""
  stream = bench.ClrsTrainStream(algorithm, seed=0, batch_size=batch, lengths=tuple(lengths))
  drawn = [next(stream) for _ in stream.lengths]
  nb_dims = model_lib.nb_dims_of(drawn[0])
  runs = {}
  for name in VARIANTS:
    net = _learner(name, algorithm, nb_dims, hidden)
    params, opt_state = net.init_state(0, [bench.ours_batch(algorithm, drawn[0]).features])
    batches = [fb if name == "exactT" else bench.ours_batch(algorithm, fb) for fb in drawn]
    runs[name] = [net, params, opt_state, batches]
  times = {name: [[] for _ in drawn] for name in VARIANTS}
  lam = np.float32(0.0)
  for r in range(reps + 1):  # round 0 compiles
    for name in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
      net, params, opt_state, batches = runs[name]
      for i, feedback in enumerate(batches):
        t0 = time.perf_counter()
        params, opt_state, losses = net.train_step(params, opt_state, feedback, lam, 0,
                                                   net.step_key(0, r))
        jax.block_until_ready((params, opt_state, losses))
        if r:
          times[name][i].append(time.perf_counter() - t0)
      runs[name][1:3] = [params, opt_state]
  return {name: [1e3 * statistics.median(t) for t in times[name]] for name in VARIANTS}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python benchmarks/ab_variants.py",
                              description=__doc__.splitlines()[0])
  p.add_argument("algorithms")
  p.add_argument("--reps", type=int, default=8)
  args = p.parse_args(argv)
  bench.disable_persistent_cache()
  for algorithm in args.algorithms.split(","):
    for name, ms in ab(algorithm, args.reps).items():
      print(f"{algorithm} {name}: ms per size {', '.join(f'{x:.1f}' for x in ms)}; "
            f"cycle {sum(ms):.1f}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
