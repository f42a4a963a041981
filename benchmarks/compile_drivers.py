"""What a train step's compile time is made of: ours against dm-clrs's, on this backend.

    python benchmarks/compile_drivers.py [--algorithms bfs] [--nb-nodes 16] [--hidden 128]
        [--batch 32] [--variants ours,ours_noremat,ours_reference,clrs] [--out FILE.json]

For each algorithm, one train batch at `--nb-nodes` (time-bucketed as
nar_markov.data.train_stream.TrainStream pads it) and each variant's jitted train step,
traced, lowered and compiled in this process with JAX's persistent cache off (what each
costs: `trace_s`, `lower_s`, `compile_s`), and what the compiler was given and made of it:

- `jaxpr`: equations of the traced step, nested ones included; the hint-time loop
  (`scan` and its lengths), the per-step `cond` (ours skips finished steps),
  rematerialised blocks (`checkpoint`), custom VJPs.
- `stablehlo_ops`: operations of the lowered module (what XLA starts from).
- `hlo`: the optimized module: instructions (all computations, and the entry's),
  fusions (on GPU each is a kernel), `while` loops and their known trip counts,
  conditionals, products (`dot`), custom calls (on GPU: cuBLAS) and, on GPU, fusions
  emitted by Triton (autotuned); the scratch it allocates (`temp_mib`).

Variants: `ours` (the default net, nar_markov.nets.fastnet, remat on), `ours_noremat`
(NetConfig.remat=False), `ours_reference` (dm-clrs's modules in our learner,
NetConfig.impl='reference'), `clrs` (dm-clrs 2.0.3's BaselineModel's own jitted
feedback step, built as its examples/run.py builds it; benchmarks/bench.py).
`shapes_per_run`: the distinct shapes one run compiles a step for (a train step per
train size, batching.time_bucket leaving one time length per size; the validation and
the test step).  benchmarks/gpu_check.py runs the same measurement on a GPU.
Writes JSON (schema `nar_markov.compile_drivers/1`) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import pathlib
import re
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

from benchmarks import bench
from benchmarks import common
from nar_markov.config import clrs30
from nar_markov.config import netconfig
from nar_markov.data import batching
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib
from nar_markov.store import util

SCHEMA = "nar_markov.compile_drivers/1"
VARIANTS = ("ours", "ours_noremat", "ours_reference", "clrs")
_OURS_CONFIG = {"ours": {}, "ours_noremat": {"remat": False},
                "ours_reference": {"impl": "reference"}}
_HLO_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*\S.*?\s([\w\-]+)\(")
_HLO_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?[\w.\-]+\s.*\{\s*$")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_STABLEHLO_OP = re.compile(r"=\s*\"?(stablehlo|chlo|mhlo|func|sdy)\.[\w.]+")
_LOOP_PRIMITIVES = ("scan", "while", "cond", "checkpoint", "remat", "remat2",
                    "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_jvp_call", "pjit")


def _log(msg: str) -> None:
  common.log("compile_drivers", msg)


def jaxpr_stats(closed_jaxpr) -> Dict[str, Any]:
  """Equations (nested included), loop/branch/remat primitives, and scan lengths."""
  counts: Dict[str, int] = collections.Counter()
  scan_lengths = []

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      counts["eqns"] += 1
      name = eqn.primitive.name
      if name in _LOOP_PRIMITIVES:
        counts[name] += 1
      if name == "scan":
        scan_lengths.append(int(eqn.params["length"]))
      for sub in _sub_jaxprs(eqn.params.values()):
        walk(sub)

  walk(closed_jaxpr.jaxpr)
  return dict(counts, scan_lengths=scan_lengths)


def _sub_jaxprs(values):
  for v in values:
    if hasattr(v, "eqns"):             # a Jaxpr
      yield v
    elif hasattr(v, "jaxpr") and hasattr(v.jaxpr, "eqns"):   # a ClosedJaxpr
      yield v.jaxpr
    elif isinstance(v, (tuple, list)):
      yield from _sub_jaxprs(v)


def hlo_stats(hlo_text: str) -> Dict[str, Any]:
  """Counts of the optimized HLO module's instructions, by what drives compile time."""
  opcodes: Dict[str, int] = collections.Counter()
  entry = computations = 0
  in_entry = False
  for line in hlo_text.splitlines():
    m = _HLO_COMPUTATION.match(line)
    if m and not line[0].isspace():
      computations += 1
      in_entry = bool(m.group(1))
      continue
    m = _HLO_INSTRUCTION.match(line)
    if m:
      opcodes[m.group(1)] += 1
      entry += in_entry
  return {"instructions": sum(opcodes.values()), "entry_instructions": entry,
          "computations": computations, "fusions": opcodes["fusion"],
          "while_loops": opcodes["while"],
          "while_trip_counts": [int(n) for n in _TRIP_COUNT.findall(hlo_text)],
          "conditionals": opcodes["conditional"], "dots": opcodes["dot"],
          "custom_calls": opcodes["custom-call"],
          "triton_fusions": len(re.findall(r'"kind":"__triton', hlo_text)),
          "gemm_calls": len(re.findall(r'custom_call_target="__cublas', hlo_text)),
          "copies": opcodes["copy"]}


def measure(jitted, args, then=None) -> Dict[str, Any]:
  """Trace, lower and compile `jitted` at `args`; what each took (wall seconds, and the
  CPU seconds of the process and of this thread: a loaded machine stretches the
  first) and what each made.  `then(compiled)`, if given, returns more entries (e.g.
  timed runs of the compiled step)."""
  out, clocks = {}, (time.perf_counter, time.process_time, time.thread_time)
  staged = jitted
  for stage in ("trace", "lower", "compile"):
    t0 = [c() for c in clocks]
    staged = jitted.trace(*args) if stage == "trace" else getattr(staged, stage)()
    t1 = [c() for c in clocks]
    out.update({f"{stage}_s": t1[0] - t0[0], f"{stage}_cpu_s": t1[1] - t0[1],
                f"{stage}_thread_cpu_s": t1[2] - t0[2]})
    if stage == "trace":
      out["jaxpr"] = jaxpr_stats(staged.jaxpr)
    elif stage == "lower":
      out["stablehlo_ops"] = len(_STABLEHLO_OP.findall(staged.as_text()))
  out["hlo"] = hlo_stats(staged.as_text())
  try:
    out["hlo"]["temp_mib"] = staged.memory_analysis().temp_size_in_bytes / 2**20
  except Exception:  # pylint: disable=broad-except  (not every backend reports it)
    out["hlo"]["temp_mib"] = None
  if then is not None:
    out.update(then(staged))
  return out


def train_batch(algorithm: str, nb_nodes: int, batch: int, seed: int = 0):
  """One clrs-padded train batch at `nb_nodes` (bench.ClrsTrainStream's first)."""
  stream = bench.ClrsTrainStream(algorithm, seed=seed, batch_size=batch, lengths=(nb_nodes,))
  return next(stream), stream.spec


def step_of(variant: str, algorithm: str, feedback, spec, hidden: int, seed: int = 0):
  """(jitted train step, its arguments) of one variant."""
  if variant == "clrs":
    model = bench.ClrsTrainer(spec, hidden, seed, feedback).model
    args = (model._device_params, jax.random.PRNGKey(seed), feedback,  # pylint: disable=protected-access
            model._device_opt_state, 0)  # pylint: disable=protected-access
    return model.jitted_feedback, args
  config = netconfig.NetConfig(hidden_size=int(hidden), history="full",
                               nb_triplet_fts=bench.NB_TRIPLET_FTS,
                               **_OURS_CONFIG[variant])
  optimizer = learner.make_optimizer(bench.LEARNING_RATE, bench.PROTOCOL_TRAIN_STEPS,
                                     bench.GRAD_CLIP_MAX_NORM)
  batch = bench.ours_batch(algorithm, feedback)
  net = learner.Learner([spec], [model_lib.nb_dims_of(feedback)], config, optimizer,
                        algorithms=[algorithm])
  params, opt_state = net.init_state(seed, [batch.features])
  args = (params, opt_state, batch, np.float32(0.0), 0, net.step_key(seed, 0))
  return net.train_step, args


def shapes_per_run(algorithm: str, lengths: Sequence[int] = clrs30.TRAIN_LENGTHS) -> Dict[str, Any]:
  """The train shapes (nodes, hint time) a run compiles, and its evaluation steps."""
  sizes = clrs30.train_lengths(algorithm, lengths)
  measured = clrs30.trajectory_lengths()[algorithm]["train_T"]  # pylint: disable=protected-access
  train = [[int(n), batching.time_bucket(algorithm, n, int(measured.get(str(n), n)))]
           for n in sizes]
  return {"train": train, "eval": ["validation", "test"], "total": len(train) + 2}


def drivers(algorithm: str, *, nb_nodes: int, hidden: int, batch: int,
            variants: Sequence[str] = VARIANTS, seed: int = 0) -> Dict[str, Any]:
  """Every variant's measurement at one train batch of `algorithm`."""
  feedback, spec = train_batch(algorithm, nb_nodes, batch, seed)
  out = {"nb_nodes": nb_nodes, "hint_time_clrs": bench.hint_time(feedback),
         "hint_time_ours": bench.hint_time(bench.ours_batch(algorithm, feedback)),
         "max_length": int(np.max(feedback.features.lengths)),
         "shapes_per_run": shapes_per_run(algorithm), "variants": {}}
  for variant in variants:
    jitted, args = step_of(variant, algorithm, feedback, spec, hidden, seed)
    out["variants"][variant] = res = measure(jitted, args)
    _log(f"{algorithm} n={nb_nodes} {variant}: compile {res['compile_s']:.1f} s "
         f"({res['compile_cpu_s']:.1f} CPU s), "
         f"{res['hlo']['instructions']} HLO instructions, {res['hlo']['fusions']} fusions")
  return out


def markdown_table(report: Dict[str, Any]) -> str:
  rows = ["| algorithm | variant | trace s | lower s | compile s (CPU s) | jaxpr eqns | scans "
          "| StableHLO ops | HLO instructions | fusions | while (trips) | dots "
          "| custom calls | temp MiB |", "|" + "---|" * 14]
  for algorithm, r in report["algorithms"].items():
    for variant, v in r["variants"].items():
      h = v["hlo"]
      trips = ",".join(str(t) for t in h["while_trip_counts"]) or "-"
      temp = "n/a" if h["temp_mib"] is None else f"{h['temp_mib']:.1f}"
      rows.append(
          f"| {algorithm} | {variant} | {v['trace_s']:.2f} | {v['lower_s']:.2f} "
          f"| {v['compile_s']:.2f} ({v['compile_cpu_s']:.2f}) | {v['jaxpr']['eqns']} | {v['jaxpr'].get('scan', 0)} "
          f"| {v['stablehlo_ops']} | {h['instructions']} | {h['fusions']} "
          f"| {h['while_loops']} ({trips}) | {h['dots']} | {h['custom_calls']} | {temp} |")
  return "\n".join(rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  p = argparse.ArgumentParser(prog="python benchmarks/compile_drivers.py",
                              description=__doc__.split("\n")[0])
  p.add_argument("--algorithms", default="bfs")
  p.add_argument("--nb-nodes", type=int, default=16)
  p.add_argument("--hidden", type=int, default=128)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--variants", default=",".join(VARIANTS))
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", default=None, help="JSON report path")
  args = p.parse_args(argv)
  variants = [v.strip() for v in args.variants.split(",") if v.strip()]
  try:
    algorithms = [clrs30.check_algorithm(a.strip()) for a in args.algorithms.split(",")]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
      raise ValueError(f"unknown variants {unknown}; valid: {', '.join(VARIANTS)}")
  except ValueError as e:
    print(f"compile_drivers.py: error: {e}", file=sys.stderr)
    return 2
  bench.disable_persistent_cache()
  report = {"schema": SCHEMA,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": common.machine_info(), "versions": util.package_versions(),
            "settings": {"nb_nodes": args.nb_nodes, "hidden": args.hidden,
                         "batch": args.batch, "variants": variants, "seed": args.seed,
                         "ours_compiler_options": learner.compiler_options(
                             netconfig.NetConfig()),
                         "command": ["python", "benchmarks/compile_drivers.py"] + argv},
            "algorithms": {}}
  for algorithm in algorithms:
    report["algorithms"][algorithm] = drivers(
        algorithm, nb_nodes=args.nb_nodes, hidden=args.hidden, batch=args.batch,
        variants=variants, seed=args.seed)
    report["algorithms"][algorithm]["loadavg_end"] = list(os.getloadavg())
    if args.out:
      common.write_json(args.out, report)
  print(markdown_table(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
