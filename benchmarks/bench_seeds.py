"""K seeds in one process (one vmapped step) vs the same K seeds one after another.

    python benchmarks/bench_seeds.py [--algorithm bfs] [--k 4] [--steps 20]
        [--rounds 2] [--hidden 128] [--batch 32] [--lengths 4,7,11,13,16]
        [--history full] [--seed 0] [--out FILE.json]

What `run_experiment(seed=[s1..sK])` (SEEDS_PER_JOB = K) buys over K separate
runs, per training step, on this machine:

- vmapped: seeds `seed .. seed+K-1` trained by ONE `learner.make_vmapped_train_step`
  call per step, on their batches stacked by `learner.stack_batches` (time-padded
  to the longest of the K) -- the K-seed loop of `experiment.run_experiment`,
  stacking and step rng included.
- sequential: the same K seeds one after another, each with its own
  `learner.Learner` (so its own jitted `Learner.train_step`), as K separate runs.

Both consume the same train batches (each seed's `train_stream.TrainStream`, drawn
once up front), start from the same parameters (`PRNGKey(seed)`) and use the
protocol's optimizer; evaluation is not timed.  Compilation is excluded:
each side first runs one step on every distinct batch shape it will see
(one per train length, in practice), and a compilation during a timed block
is counted in the report (`compilations_in_timed`, expected 0).  Then
`--rounds` rounds of `--steps` steps per seed each, the order of the two
sides alternating between rounds; every step is timed to
`jax.block_until_ready` of its outputs (the vmapped side's batch stacking
included).  Reported: seed-steps/s (K x steps / summed step times) of each
side, `ratio` = vmapped / sequential (> 1: K seeds per job is faster), and
per graph size the median time of one step: a vmapped step (K seeds) and a
sequential seed-step (`ratio_by_nb_nodes` = K x seed-step / vmapped step).  Writes JSON (schema `nar_markov.bench_seeds/2`) and prints a
markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import pathlib
import sys
import time
from typing import Any, Dict, Optional, Sequence

if __package__ in (None, ""):  # run by path: make `benchmarks` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

if __name__ == "__main__":  # before clrs imports tensorflow: no start-up banners
  from nar_markov import quiet  # pylint: disable=g-import-not-at-top
  quiet.setup()

import jax
import numpy as np

from benchmarks import common
from nar_markov import quiet
from nar_markov.config import clrs30
from nar_markov.config import netconfig
from nar_markov.data import batching
from nar_markov.data import train_stream
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib
from nar_markov.store import util

SCHEMA = "nar_markov.bench_seeds/2"  # 2: `machine` as bench.py writes it


_log = functools.partial(common.log, "bench_seeds")


def _shape_key(tree) -> tuple:
  return tuple(np.shape(x) for x in jax.tree_util.tree_leaves(tree))


def run(algorithm: str = "bfs", k: int = 4, steps: int = 20, rounds: int = 2,
        hidden: int = 128, batch: int = 32,
        lengths: Sequence[int] = clrs30.TRAIN_LENGTHS, history: str = "full",
        seed: int = 0) -> Dict[str, Any]:
  """The measurement; returns the JSON report."""
  if k < 1 or steps < 1 or rounds < 1:
    raise ValueError(f"--k, --steps and --rounds must be >= 1, got {k}, {steps}, {rounds}")
  algorithm = clrs30.check_algorithm(algorithm)
  seeds = list(range(seed, seed + k))
  t_start = time.time()

  _log(f"drawing {rounds} x {steps} batches for each of seeds {seeds}")
  streams = [train_stream.TrainStream(algorithm, seed=s, batch_size=batch, lengths=tuple(lengths))
             for s in seeds]
  n_batches = rounds * steps
  batches = [[next(st) for _ in range(n_batches)] for st in streams]  # [seed][step]
  spec = streams[0].spec
  nb_dims = model_lib.nb_dims_of(batches[0][0])
  config = netconfig.NetConfig(hidden_size=hidden, history=history, nb_triplet_fts=8)
  lam = np.float32(0.0)  # the penalty's cost is in the step either way

  def make_net():
    optimizer = learner.make_optimizer(1.5e-3, 10_000, 1.0)  # the protocol's
    return learner.Learner([spec], [nb_dims], config, optimizer)

  # Sequential: K separate runs, each its own Model (its own jit).
  seq = []
  for i, s in enumerate(seeds):
    net = make_net()
    params, opt_state = net.init_state(s, [batches[0][0].features])
    seq.append({"net": net, "params": params, "opt": opt_state, "seed": s,
                "batches": batches[i]})
  # Vmapped: one Model, its K seeds stacked.
  vnet = make_net()
  inits = [vnet.init_state(s, [batches[0][0].features]) for s in seeds]
  vstate = {"params": learner.stack_trees([p for p, _ in inits]),
            "opt": learner.stack_trees([o for _, o in inits])}
  vstep = learner.make_vmapped_train_step(vnet)

  step_times = {"vmapped": [], "sequential": []}  # (nb_nodes, seconds) per step

  def seq_block(run_, step_ids, record=False):
    for t in step_ids:
      t0 = time.time()
      rng = run_["net"].step_key(run_["seed"], t)
      run_["params"], run_["opt"], out = run_["net"].train_step(
          run_["params"], run_["opt"], run_["batches"][t], lam, 0, rng)
      jax.block_until_ready(out)
      if record:
        step_times["sequential"].append((batching.nb_nodes_of(run_["batches"][t]),
                                         time.time() - t0))

  def vmap_block(step_ids, record=False):
    for t in step_ids:
      t0 = time.time()
      stacked, max_length = learner.stack_batches([b[t] for b in batches])
      vstate["params"], vstate["opt"], out = vstep(
          vstate["params"], vstate["opt"], stacked, lam,
          vnet.step_keys(seeds, t), max_length)
      jax.block_until_ready(out)
      if record:
        step_times["vmapped"].append((batching.nb_nodes_of(batches[0][t]), time.time() - t0))

  # Warm-up: one step per distinct batch shape each side will see.
  compiles = common.CompileCounter()
  t0 = time.time()
  for run_ in seq:
    firsts = {}
    for t, b in enumerate(run_["batches"]):
      firsts.setdefault(_shape_key(b), t)
    seq_block(run_, sorted(firsts.values()))
  seq_warm_s, seq_warm_compiles = time.time() - t0, compiles.count
  t0 = time.time()
  firsts = {}
  for t in range(n_batches):
    firsts.setdefault(_shape_key(learner.stack_batches([b[t] for b in batches])[0]), t)
  vmap_block(sorted(firsts.values()))
  vmap_warm_s, vmap_warm_compiles = time.time() - t0, compiles.count - seq_warm_compiles
  _log(f"warm-up: sequential {seq_warm_s:.1f}s ({seq_warm_compiles} compilations), "
       f"vmapped {vmap_warm_s:.1f}s ({vmap_warm_compiles}; "
       f"{len(firsts)} stacked batch shapes)")

  rounds_out = []
  for r in range(rounds):
    step_ids = list(range(r * steps, (r + 1) * steps))
    times = {}
    for side in (("vmapped", "sequential") if r % 2 == 0 else ("sequential", "vmapped")):
      before, n_before = compiles.count, len(step_times[side])
      if side == "vmapped":
        vmap_block(step_ids, record=True)
      else:
        for run_ in seq:
          seq_block(run_, step_ids, record=True)
      times[side] = {"time_s": sum(dt for _, dt in step_times[side][n_before:]),
                     "compilations": compiles.count - before}
    rounds_out.append(times)
    _log(f"round {r + 1}/{rounds}: vmapped {times['vmapped']['time_s']:.2f}s, "
         f"sequential {times['sequential']['time_s']:.2f}s for {k} x {steps} seed-steps")
  compiles.close()

  seed_steps = k * steps * rounds
  totals = {side: sum(x[side]["time_s"] for x in rounds_out)
            for side in ("vmapped", "sequential")}
  rate = {side: seed_steps / totals[side] for side in totals}
  by_nodes = {}
  for n in sorted({n for n, _ in step_times["vmapped"]}):
    v = float(np.median([dt for m, dt in step_times["vmapped"] if m == n]))
    q = float(np.median([dt for m, dt in step_times["sequential"] if m == n]))
    by_nodes[str(n)] = {"vmapped_step_s": v, "sequential_seed_step_s": q,
                        "ratio": k * q / v}
  return {
      "schema": SCHEMA,
      "created": datetime.datetime.now().isoformat(timespec="seconds"),
      "settings": {"algorithm": algorithm, "history": history, "k": k, "seeds": seeds,
                   "steps_per_round": steps, "rounds": rounds, "hidden_size": hidden,
                   "batch_size": batch, "train_lengths": list(streams[0].lengths),
                   "net_impl": getattr(config, "impl", None)},
      "timed_seed_steps": seed_steps,
      "vmapped": {"time_s": totals["vmapped"], "seed_steps_per_s": rate["vmapped"],
                  "warmup_s": vmap_warm_s, "warmup_compilations": vmap_warm_compiles},
      "sequential": {"time_s": totals["sequential"],
                     "seed_steps_per_s": rate["sequential"],
                     "warmup_s": seq_warm_s, "warmup_compilations": seq_warm_compiles},
      "ratio": rate["vmapped"] / rate["sequential"],
      "compilations_in_timed": sum(x[s]["compilations"] for x in rounds_out for s in x),
      "by_nb_nodes": by_nodes,
      "rounds": rounds_out,
      "machine": common.machine_info(),
      "versions": util.package_versions(),
      "wall_time_s": time.time() - t_start,
  }


def markdown_table(report: Dict[str, Any]) -> str:
  s = report["settings"]
  lines = [
      "| algorithm | history | K | hidden | batch | timed steps per seed | "
      "sequential seed-steps/s | vmapped seed-steps/s | ratio |",
      "|---|---|---|---|---|---|---|---|---|",
      f"| {s['algorithm']} | {s['history']} | {s['k']} | {s['hidden_size']} | "
      f"{s['batch_size']} | {s['steps_per_round'] * s['rounds']} | "
      f"{report['sequential']['seed_steps_per_s']:.2f} | "
      f"{report['vmapped']['seed_steps_per_s']:.2f} | {report['ratio']:.3f} |",
      "",
      "| nodes | sequential seed-step (s) | vmapped step, K seeds (s) | ratio |",
      "|---|---|---|---|",
  ]
  for n, row in report["by_nb_nodes"].items():
    lines.append(f"| {n} | {row['sequential_seed_step_s']:.3f} | "
                 f"{row['vmapped_step_s']:.3f} | {row['ratio']:.3f} |")
  return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--algorithm", default="bfs")
  p.add_argument("--k", type=int, default=4, help="seeds (default 4)")
  p.add_argument("--steps", type=int, default=20,
                 help="timed steps per seed in each round (default 20)")
  p.add_argument("--rounds", type=int, default=2,
                 help="timed rounds, alternating which side goes first (default 2)")
  p.add_argument("--hidden", type=int, default=128)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--lengths", type=common.int_list, default=list(clrs30.TRAIN_LENGTHS))
  p.add_argument("--history", default="full", choices=netconfig.HISTORY_POLICIES,
                 help="the net's history policy (baseline: full)")
  p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
  p.add_argument("--out", default=None, help="JSON report path")
  quiet.add_flag(p)
  args = p.parse_args(argv)
  learner.setup_compilation_cache()
  try:
    report = run(algorithm=args.algorithm, k=args.k, steps=args.steps, rounds=args.rounds,
                 hidden=args.hidden, batch=args.batch, lengths=args.lengths,
                 history=args.history, seed=args.seed)
  except ValueError as e:
    print(f"bench_seeds: error: {e}", file=sys.stderr)
    return 2
  if args.out:
    common.write_json(args.out, report)
    _log(f"wrote {args.out}")
  print(markdown_table(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
