"""Same-process A/B of ours' scratch in heaps (NetConfig.xla_heap_mib) in the benchmark's train loop.

    python benchmarks/ab_heaps.py binary_search,insertion_sort [--blocks 6] [--out ab.json]

For each algorithm, three trainers from the same seed on the same `bench.ClrsTrainStream`
batches: `heaps` (ours with its compiled step's scratch in heaps of `--heap-mib` MiB,
`NetConfig.xla_heap_mib`), `one` (ours with XLA's one scratch buffer, `xla_heap_mib = 0`; the
same bits, docs/running.md "Scratch in heaps") and `clrs` (dm-clrs's BaselineModel, as
bench.py runs it).  After a warm-up block, `--blocks` blocks of one batch per train size;
each block runs the three in turn, in the orders of ORDERS.  Recorded per trainer: the median
ms and minor page faults per step at each size, the median and mean step, and the
ratios dm-clrs / ours as bench.py reads them.  An algorithm already in `--out` is skipped;
a report measured with other settings is refused.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import pathlib
import resource
import statistics
import sys
import time
from typing import Any, Dict, List

if __package__ in (None, ""):  # run by path: make `benchmarks` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

if __name__ == "__main__":  # before clrs imports tensorflow: no start-up banners
  from nar_markov import quiet  # pylint: disable=g-import-not-at-top
  quiet.setup()

from benchmarks import bench
from benchmarks import common
from nar_markov.config import clrs30
from nar_markov.data import batching
from nar_markov.nets import learner

SCHEMA = "nar_markov.ab_heaps/1"
TRAINERS = ("heaps", "one", "clrs")
# Block b runs the trainers in ORDERS[b % 6].  After the warm-up (which ends with
# "clrs"), every trainer's first (smallest) step follows each other trainer's last
# (largest) one 3 times in 6 blocks, and each trainer runs first, second and third twice.
# A plain rotation did not balance that: "heaps" followed dm-clrs's largest step in 5 of
# 6 blocks, and its small steps read slower (docs/running.md, "Scratch in heaps").
ORDERS = (("heaps", "one", "clrs"), ("one", "clrs", "heaps"), ("clrs", "heaps", "one"),
          ("heaps", "clrs", "one"), ("clrs", "one", "heaps"), ("one", "heaps", "clrs"))


def ab(algorithm: str, blocks: int, hidden: int = 128, batch: int = 32,
       lengths=clrs30.TRAIN_LENGTHS, heap_mib: int = 30) -> Dict[str, Any]:
  """The three trainers' per-size and overall step times, faults and ratios."""
  stream = bench.ClrsTrainStream(algorithm, seed=0, batch_size=batch, lengths=tuple(lengths))
  first = next(stream)
  trainers = {"heaps": bench.OursTrainer(algorithm, hidden, 0, first),
              "one": bench.OursTrainer(algorithm, hidden, 0, first),
              "clrs": bench.ClrsTrainer(stream.spec, hidden, 0, first)}
  # The same net with heaps and with XLA's one buffer, whatever ours' default is:
  # Learner compiles its steps with the config's options.
  for name, mib in (("heaps", heap_mib), ("one", 0)):
    net = trainers[name].net
    trainers[name].net = learner.Learner(
        net.specs, net.nb_dims, dataclasses.replace(net.config, xla_heap_mib=mib),
        net.optimizer, algorithms=net.algorithms)
  if not trainers["heaps"].net.compiler_options:
    raise RuntimeError("needs CPU and a heap size > 0")
  ms: Dict[Any, List[float]] = collections.defaultdict(list)
  faults: Dict[Any, List[int]] = collections.defaultdict(list)

  def run_block(name, block, record):
    for feedback in block:
      prepared = trainers[name].prepare(feedback)
      r0 = resource.getrusage(resource.RUSAGE_SELF)
      t0 = time.perf_counter()
      trainers[name].run(prepared)
      dt = time.perf_counter() - t0
      r1 = resource.getrusage(resource.RUSAGE_SELF)
      if record:
        n = batching.nb_nodes_of(feedback)
        ms[name, n].append(dt * 1e3)
        faults[name, n].append(r1.ru_minflt - r0.ru_minflt)
        ms[name, None].append(dt * 1e3)

  block = [first] + [next(stream) for _ in range(len(stream.lengths) - 1)]
  for name in TRAINERS:
    run_block(name, block, record=False)
  for b in range(blocks):
    block = [next(stream) for _ in stream.lengths]
    for name in ORDERS[b % len(ORDERS)]:
      run_block(name, block, record=True)
    print(f"[ab_heaps] {algorithm}: block {b + 1}/{blocks}", flush=True)
  sizes = sorted({n for _, n in ms if n is not None})
  out: Dict[str, Any] = {"sizes": sizes}
  for name in TRAINERS:
    out[name] = {
        "ms_median_by_nb_nodes": {str(n): statistics.median(ms[name, n]) for n in sizes},
        "faults_median_by_nb_nodes": {str(n): statistics.median(faults[name, n]) for n in sizes},
        "ms_median": statistics.median(ms[name, None]),
        "ms_mean": statistics.fmean(ms[name, None])}
  for name in ("heaps", "one"):
    out[f"ratio_{name}"] = out["clrs"]["ms_median"] / out[name]["ms_median"]
    out[f"ratio_mean_{name}"] = out["clrs"]["ms_mean"] / out[name]["ms_mean"]
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("algorithms", help="comma-separated CLRS-30 names")
  p.add_argument("--blocks", type=int, default=6, help="timed blocks of the train sizes")
  p.add_argument("--hidden", type=int, default=128)
  p.add_argument("--heap-mib", type=int, default=30, help="heap size of the `heaps` trainer")
  p.add_argument("--out", default=None, help="JSON report (resumed per algorithm)")
  args = p.parse_args(argv)
  algorithms = [a for a in args.algorithms.split(",") if a]
  for a in algorithms:
    clrs30.check_algorithm(a)
  report = {"schema": SCHEMA, "machine": common.machine_info(),
            "settings": {"blocks": args.blocks, "hidden": args.hidden, "batch": 32,
                         "heap_mib": args.heap_mib,
                         "command": ["benchmarks/ab_heaps.py"] + list(argv or sys.argv[1:])},
            "algorithms": {}}
  if args.out and pathlib.Path(args.out).exists():
    previous = json.loads(pathlib.Path(args.out).read_text())
    differ = [k for k in ("blocks", "hidden", "batch", "heap_mib")
              if previous.get("settings", {}).get(k) != report["settings"][k]]
    if previous.get("schema") != SCHEMA or differ:
      raise SystemExit(f"{args.out} is not an {SCHEMA} report with these settings "
                       f"({', '.join(differ) or 'schema'} differ); choose another --out")
    report = previous
  for a in algorithms:
    if a in report["algorithms"]:
      print(f"[ab_heaps] {a}: in {args.out} already, skipped")
      continue
    res = ab(a, args.blocks, hidden=args.hidden, heap_mib=args.heap_mib)
    report["algorithms"][a] = res
    print(f"[ab_heaps] {a}: dm-clrs / ours, median step: one buffer "
          f"{res['ratio_one']:.3f}, heaps {res['ratio_heaps']:.3f}; mean step: "
          f"{res['ratio_mean_one']:.3f}, {res['ratio_mean_heaps']:.3f}", flush=True)
    if args.out:
      common.write_json(args.out, report)
  return 0


if __name__ == "__main__":
  sys.exit(main())
