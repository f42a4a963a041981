"""Where a training step's time goes, per stage: encode, process, decode, loss, backward.

    python benchmarks/profile_step.py --algorithms bridges,dfs [--impl ours,clrs]
        [--hidden 128] [--batch 32] [--lengths 4,7,11,13,16] [--reps 2] [--out prof.json]

For each algorithm and train size, one batch of `bench.ClrsTrainStream` (ours gets
it time-bucketed, as in training) runs `--reps` times under `jax.profiler`, after
one untimed run.  Every XLA:CPU thunk the trace records is attributed to a stage by
the `op_name` its HLO instruction carries: the fast net's named scopes (`encode`,
`history`, `process` with `triplet` and `message_mlp`, `decode`, `feedback` for the
soft hints fed back) and this script's `loss` and `optimizer`; dm-clrs's by its
haiku module names (`_enc_`, `mpnn_aggr_clrs_processor`, `_dec_`).  `fwd`, `remat`
(the forward recomputed in the backward pass) and `bwd` are told apart by
`rematted_computation` and `transpose(`.  XLA-inserted ops without an op_name are
`unnamed` (loop-carry copies, mostly).  The step time is the sum over the sizes of
one cycle divided by their number (what a run sees); `busy_ms` sums thunk times
(they may overlap on two threads), `wall_ms` is the step's wall time under the
profiler and `untraced_ms` the fastest of `--reps` steps without it (the profiler
adds a cost per thunk); around those, `minor_faults`, `sys_ms` and `user_ms` per
step count the pages the step touches fresh and the CPU time on both threads (the
settings record `GLIBC_TUNABLES`, which changes how glibc hands memory back).  With
both impls, `ceiling` says how far ours can get (`ceiling()`).

`matmul_limit_gflops` times the message MLP's [B*N*N, H] x [H, H] product alone
in this process, per size (the algorithm's: at its largest size): the message MLP's
achieved rate over it says how close that stage is to the machine's limit.  The
step's matrix products outside the remat (`products_ms`, `products_wall_ms`) are a
second floor: a rewrite that changes no committed number keeps each at its shape.
`products_gflop` counts their arithmetic (`product_flops`, from the HLO's shapes) and
`products_peak_ms` is the time it takes at `peak_gflops`, a large product on both
cores: the machine's compute limit, under which no step with those products can go.  The
other thunks are passes over memory: `rest_mb` counts the bytes they read and write
(`thunk_bytes`, from the HLO's shapes), `rest_gbps` their rate while they run, and
`stream_limit_gbps` the rate of a plain elementwise pass in a loop in this process (both
cores, warm buffers the size of one [B, N, N, H] tensor; `dram_limit_gbps` over arrays
larger than the caches): `ceiling()`'s `ratio_stream_ceiling` (`ratio_dram_ceiling`) is
dm-clrs's step over ours' products plus that rest at the one rate (the other).  Timings
share the CPU with whatever else runs; the impls take turns size by size (which goes
first alternating), so that the machine's drift over minutes falls on both.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import pathlib
import re
import resource
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

if __package__ in (None, ""):  # run by path: make `benchmarks` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

if __name__ == "__main__":  # before clrs imports tensorflow: no start-up banners
  from nar_markov import quiet  # pylint: disable=g-import-not-at-top
  quiet.setup()

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks import bench
from benchmarks import common
from nar_markov.config import clrs30
from nar_markov.data import batching
from nar_markov.nets import model as model_lib

SCHEMA = "nar_markov.profile/1"
STAGES = ("encode", "history", "triplet", "message_mlp", "process", "decode",
          "feedback", "loss", "optimizer", "other", "unnamed")
PHASES = ("fwd", "remat", "bwd")
# Thunks that only run others (their time is their body's, counted there).
_CONTAINER_OPCODES = {"while", "conditional", "call"}
# Thunks by duration: a step whose busy time sits in thunks of a few microseconds is
# bound by per-op overhead (launching thousands of small kernels), not by arithmetic.
DURATION_BUCKETS = ("<10us", "10-100us", ">=100us")

_log = lambda msg: common.log("profile", msg)
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*\S.*?\s([\w\-]+)\(")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_SHAPE = re.compile(r"\b(pred|[suf](?:8|16|32|64)|bf16)\[([\d,]*)\]")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
          "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_HEAD = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([\w\-]+)\((.*)$")
# Ops that move no data of their own inside a fusion.
_VIEWS = {"bitcast", "reshape", "get-tuple-element"}


def instruction_table(hlo_text: str) -> Dict[str, Tuple[str, str]]:
  """name -> (opcode, op_name) of every instruction of an optimized HLO module."""
  table = {}
  for line in hlo_text.splitlines():
    m = _INSTRUCTION.match(line)
    if not m:
      continue
    op = _OP_NAME.search(line)
    table[m.group(1)] = (m.group(2), op.group(1) if op else "")
  return table


def _instructions(hlo_text: str, pattern: re.Pattern):
  """(computation, match, line) for each instruction line `pattern` matches."""
  current = None
  for line in hlo_text.splitlines():
    m = _COMPUTATION.match(line)
    if m and not line[0].isspace():
      current = m.group(1)
    elif m := pattern.match(line):
      yield current, m, line


_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")


def _dims(hlo_type: str) -> List[int]:
  return [int(d) for d in _SHAPE.search(hlo_type).group(2).split(",") if d]


def product_flops(hlo_text: str) -> Dict[str, float]:
  """name -> FLOPs of one call, for each instruction that is a matrix product: a `dot`,
  or a fusion whose computation holds one (XLA:CPU's `ynn_fusion`s are a dot alone or a
  reduction).  Two FLOPs per output element and contracted index of each dot (a
  fusion: of the dots it holds)."""
  found = list(_instructions(hlo_text, _HEAD))
  types = {m.group(2): m.group(3) for _, m, _ in found}
  in_body, fusions, flops = collections.defaultdict(float), {}, {}
  for current, m, line in found:
    name, opcode = m.group(2), m.group(4)
    if opcode == "dot":
      lhs = _dims(types[_operands(m.group(5))[0]])
      axes = [int(a) for a in _CONTRACTING.search(line).group(1).split(",") if a]
      flops[name] = 2.0 * np.prod(_dims(m.group(3))) * np.prod([lhs[a] for a in axes])
      in_body[current] += flops[name]
    elif opcode == "fusion" and (calls := _CALLS.search(line)):
      fusions[name] = calls.group(1)
  flops.update({name: in_body[body] for name, body in fusions.items() if body in in_body})
  return flops


def _nbytes(hlo_type: str) -> int:
  """Bytes of an HLO type: an array or a tuple of arrays."""
  return sum(_BYTES.get(dtype, 4) * int(np.prod([int(d) for d in dims.split(",") if d]))
             for dtype, dims in _SHAPE.findall(hlo_type))


def _operands(rest: str) -> List[str]:
  """The %names inside the opcode's parentheses (rest starts after its '(')."""
  depth = 1
  for i, ch in enumerate(rest):
    depth += {"(": 1, ")": -1}.get(ch, 0)
    if depth == 0:
      return re.findall(r"%([\w.\-]+)", rest[:i])
  return re.findall(r"%([\w.\-]+)", rest)


def thunk_bytes(hlo_text: str) -> Dict[str, int]:
  """name -> bytes one call reads and writes, for every instruction outside fusions.

  From the shapes: a fusion reads each parameter once (only the slice, where a
  parameter is only sliced) and writes its root (only the update, where the root is
  a dynamic-update-slice, which XLA does in place); a copy, slice or concatenate
  reads and writes its result's size; other thunks read their operands and write
  their result.  A lower bound where a pass reads a value twice (a fusion that
  recomputes a broadcast operand, a reduction's second sweep)."""
  ins, body = {}, collections.defaultdict(list)
  for current, m, line in _instructions(hlo_text, _HEAD):
    calls = _CALLS.search(line)
    ins[m.group(2)] = (m.group(3), m.group(4), _operands(m.group(5)), bool(m.group(1)),
                       calls.group(1) if calls else None)
    body[current].append(m.group(2))

  def size(name):
    return _nbytes(ins[name][0]) if name in ins else 0

  def read(name, users):  # what a fusion reads of one of its values
    total = 0
    for user, pos in users.get(name, ()):
      opcode = ins[user][1]
      if opcode in ("slice", "dynamic-slice") and pos == 0:
        total += size(user)
      elif opcode == "dynamic-update-slice" and pos == 0:
        continue
      elif opcode in _VIEWS:
        total += read(user, users)
      else:
        return size(name)
    return total if users.get(name) else size(name)

  def written(name):  # what a fusion's root writes
    _, opcode, operands, _, _ = ins[name]
    if opcode == "dynamic-update-slice":
      return size(operands[1])
    if opcode == "tuple":
      return sum(written(o) for o in operands)
    if opcode in _VIEWS and operands:
      return written(operands[0])
    return size(name)

  fused = {c for (_, _, _, _, c) in ins.values() if c}
  out = {}
  for comp, names in body.items():
    if comp in fused:
      continue
    for name in names:
      hlo_type, opcode, operands, _, calls = ins[name]
      if opcode == "fusion" and calls in body:
        users = collections.defaultdict(list)
        for inner in body[calls]:
          for pos, o in enumerate(ins[inner][2]):
            users[o].append((inner, pos))
        params = [i for i in body[calls] if ins[i][1] == "parameter"]
        root = next(i for i in body[calls] if ins[i][3])
        out[name] = sum(read(p, users) for p in params) + written(root)
      elif opcode == "dynamic-update-slice":
        out[name] = 2 * size(operands[1])
      elif opcode in ("copy", "slice", "dynamic-slice", "concatenate", "transpose"):
        out[name] = 2 * _nbytes(hlo_type)
      else:
        out[name] = _nbytes(hlo_type) + sum(size(o) for o in operands)
  return out


def classify(op_name: str, impl: str) -> Tuple[str, str]:
  """(stage, phase) of one instruction, from its op_name."""
  if not op_name:
    return "unnamed", "fwd"
  phase = ("remat" if "rematted_computation" in op_name else
           "bwd" if "transpose(" in op_name else "fwd")
  if impl == "ours":
    for stage in ("optimizer", "loss", "message_mlp", "triplet", "encode",
                  "history", "process", "decode", "feedback"):
      if re.search(rf"(^|[/(]){stage}([/)]|$)", op_name):
        return stage, phase
    return "other", phase
  if "clip_by_global_norm" in op_name or "scale_by_adam" in op_name or "/apply_updates" in op_name:
    return "optimizer", phase
  if "_enc_" in op_name:
    return "encode", phase
  if "mpnn_aggr_clrs_processor" in op_name:
    return ("message_mlp" if re.search(r"/mlp(/|$)", op_name) else "process"), phase
  if "_dec_" in op_name:
    return "decode", phase
  return "other", phase


def _trace_events(logdir: str) -> List[Dict[str, Any]]:
  path, = pathlib.Path(logdir).glob("**/*.trace.json.gz")
  with gzip.open(path) as f:
    return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def duration_bucket(us: float) -> str:
  """Which of DURATION_BUCKETS a thunk of `us` microseconds falls in."""
  return "<10us" if us < 10 else "10-100us" if us < 100 else ">=100us"


def covered_us(spans: Sequence[Tuple[float, float]]) -> float:
  """How long at least one of the (start, end) spans runs: their union's length."""
  covered, end = 0.0, float("-inf")
  for a, b in sorted(spans):
    if b > end:
      covered += b - max(a, end)
      end = b
  return covered


def _timed(run) -> float:
  t0 = time.perf_counter()
  run()
  return time.perf_counter() - t0


def untraced(run, reps: int) -> Dict[str, float]:
  """The fastest of `reps` calls of `run` without the profiler, and per call: the
  minor page faults (pages the kernel maps fresh, zeroed, on first touch), kernel
  and user CPU time (both threads), from getrusage around the calls."""
  before = resource.getrusage(resource.RUSAGE_SELF)
  times = [_timed(run) for _ in range(reps)]
  after = resource.getrusage(resource.RUSAGE_SELF)
  return {"untraced_ms": 1e3 * min(times),
          "minor_faults": (after.ru_minflt - before.ru_minflt) / reps,
          "sys_ms": 1e3 * (after.ru_stime - before.ru_stime) / reps,
          "user_ms": 1e3 * (after.ru_utime - before.ru_utime) / reps}


def profile_calls(run, hlo_text: str, impl: str, reps: int) -> Dict[str, Any]:
  """Stage x phase milliseconds per call of `run` (already compiled and warm)."""
  table = instruction_table(hlo_text)
  flops = product_flops(hlo_text)
  products = set(flops)
  nbytes = thunk_bytes(hlo_text)
  logdir = tempfile.mkdtemp(prefix="nar_markov_profile_")
  try:
    jax.profiler.start_trace(logdir)
    wall = [_timed(run) for _ in range(reps)]
    jax.profiler.stop_trace()
    events = _trace_events(logdir)
  finally:
    shutil.rmtree(logdir, ignore_errors=True)
  ms = collections.defaultdict(float)
  by_op = collections.defaultdict(float)
  by_duration = collections.defaultdict(float)
  products_ms = dict.fromkeys(PHASES, 0.0)
  products_gflop = dict.fromkeys(PHASES, 0.0)
  product_spans = []
  rest_ms = rest_bytes = 0.0
  nb_thunks = 0
  for e in events:
    entry = table.get(e["name"])
    if entry is None or entry[0] in _CONTAINER_OPCODES:
      continue
    stage, phase = classify(entry[1], impl)
    per_call_ms = e["dur"] / 1e3 / reps
    ms[f"{stage}/{phase}"] += per_call_ms
    by_op[e["name"]] += per_call_ms
    by_duration[duration_bucket(e["dur"])] += per_call_ms
    if e["name"] in products:
      products_ms[phase] += per_call_ms
      products_gflop[phase] += flops.get(e["name"], 0.0) / 1e9 / reps
      if phase != "remat":
        product_spans.append((e["ts"], e["ts"] + e["dur"]))
    else:
      rest_ms += per_call_ms
      rest_bytes += nbytes.get(e["name"], 0) / reps
    nb_thunks += 1
  top = sorted(by_op.items(), key=lambda kv: -kv[1])[:15]
  return {"ms": dict(ms), "busy_ms": sum(ms.values()),
          "wall_ms": 1e3 * float(np.median(wall)),
          "thunks": nb_thunks / reps, "products_ms": products_ms,
          "products_gflop": products_gflop,
          "products_wall_ms": covered_us(product_spans) / 1e3 / reps,
          "rest_ms": rest_ms, "rest_mb": rest_bytes / 1e6,
          "rest_gbps": rest_bytes / 1e6 / rest_ms if rest_ms else None,
          "busy_ms_by_duration": {b: by_duration.get(b, 0.0) for b in DURATION_BUCKETS},
          "top_ops": [{"name": n, "ms": v, "opcode": table[n][0],
                       "op_name": table[n][1][-160:]} for n, v in top]}


def _ours_step(net):
  """Learner._train_step with named scopes for the loss and the optimizer."""
  def step(params, opt_state, feedback, rng_key):
    def total(p):
      out = net.apply(p, feedback.features, 0, False, rng_key=rng_key)
      with jax.named_scope("loss"):
        losses = model_lib.compute_losses(feedback, out, 0.0)
      return losses.total, losses
    grads, losses = jax.grad(total, has_aux=True)(params)
    with jax.named_scope("optimizer"):
      updates, opt_state = net.optimizer.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
    return params, opt_state, losses
  return jax.jit(step, compiler_options=net.compiler_options)


def profile_size(impl: str, algorithm: str, feedback, spec, hidden: int,
                 reps: int, seed: int = 0) -> Dict[str, Any]:
  if impl == "ours":
    trainer = bench.OursTrainer(algorithm, hidden, seed, feedback)
    batch = bench.ours_batch(algorithm, feedback)
    key = trainer.net.step_key(seed, 0)
    args = (trainer.params, trainer.opt_state, batch, key)
    compiled = _ours_step(trainer.net).lower(*args).compile()
    run = lambda: jax.block_until_ready(compiled(*args))
  else:
    trainer = bench.ClrsTrainer(spec, hidden, seed, feedback)
    model = trainer.model
    key = jax.random.PRNGKey(seed)
    args = (model._device_params, key, feedback, model._device_opt_state, 0)  # pylint: disable=protected-access
    # BaselineModel's own jitted step; not donated here, so it can be rerun.
    compiled = jax.jit(model._feedback, static_argnums=4).lower(*args).compile()  # pylint: disable=protected-access
    run = lambda: jax.block_until_ready(compiled(*args[:4]))
  run()
  res = profile_calls(run, compiled.as_text(), impl, reps)
  res.update(untraced(run, reps))
  res["hint_time"] = bench.hint_time(batch if impl == "ours" else feedback)
  res["max_length"] = int(np.max(feedback.features.lengths))
  return res


def matmul_limit_gflops(rows: int, hidden: int, reps: int = 50) -> float:
  """GFLOP/s of one [rows, H] x [H, H] product here and now: the fastest of `reps`
  calls in a row.  A sub-millisecond product called a few times after other work reads
  up to half its rate (the fastest of 5 read 211-239 GFLOP/s at [3872, 128] where 50
  read 384-444, AMD EPYC, 2026-11-28): the threads that run it are still waking."""
  x = jnp.ones((rows, hidden), jnp.float32)
  w = jnp.ones((hidden, hidden), jnp.float32)
  f = jax.jit(jnp.dot)
  run = lambda: f(x, w).block_until_ready()
  run()
  return 2.0 * rows * hidden * hidden / min(_timed(run) for _ in range(reps)) / 1e9


def peak_gflops(size: int = 2048, reps: int = 5) -> float:
  """GFLOP/s of one [size, size] x [size, size] product here and now, on both cores:
  the machine's compute limit as XLA:CPU reaches it (a step's products, all smaller,
  run at most at this rate)."""
  x = jnp.ones((size, size), jnp.float32)
  f = jax.jit(jnp.dot)
  run = lambda: f(x, x).block_until_ready()
  run()
  return 2.0 * size**3 / min(_timed(run) for _ in range(reps)) / 1e9


# A pass over 64 MiB arrays (three of them): larger than this machine's caches.
DRAM_ELEMENTS = 16 * 2**20


def stream_limit_gbps(elements: int, reps: int = 20) -> float:
  """GB/s of a plain elementwise pass (x * c + b over `elements` floats: two reads and a
  write each) in an XLA loop here and now: warm buffers, no allocation, the pass as
  fast as XLA:CPU runs one (both cores).  The rate the step's other passes could reach
  at best, for tensors of that size."""
  iters = max(4, int(2e8 // (12 * elements)))  # about 200 MB moved per call
  x = jnp.ones((elements,), jnp.float32)
  b = jnp.ones((elements,), jnp.float32)
  f = jax.jit(lambda x, b: jax.lax.fori_loop(0, iters, lambda i, y: y * 0.999 + b, x))
  run = lambda: f(x, b).block_until_ready()
  run()
  return 12.0 * elements * iters / min(_timed(run) for _ in range(reps)) / 1e9


def message_mlp_products(batch: int, nb_nodes: int, hidden: int, steps: int) -> float:
  """FLOPs of the message MLP's products in one train step: two forward, four
  backward (vjps.message_mlp_max), each [B*N*N, H] x [H, H], per step."""
  return 6 * 2.0 * batch * nb_nodes**2 * hidden**2 * steps


def _processor_steps(res: Dict[str, Any]) -> int:
  """Processor calls in a step: one per trajectory step but the last, and the first
  step's always (a batch of one-step trajectories still runs it)."""
  return max(1, res["max_length"] - 1)


def summarize(per_size: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
  """Mean over the sizes of one cycle: stage x phase ms per step, and shares."""
  n = len(per_size)
  ms = collections.defaultdict(float)
  for res in per_size.values():
    for k, v in res["ms"].items():
      ms[k] += v / n
  busy = sum(ms.values())
  by_duration = {b: sum(r["busy_ms_by_duration"][b] for r in per_size.values()) / n
                 for b in DURATION_BUCKETS}
  stages = {}
  for stage in STAGES:
    row = {phase: ms.get(f"{stage}/{phase}", 0.0) for phase in PHASES}
    row["total"] = sum(row.values())
    row["share"] = row["total"] / busy if busy else 0.0
    stages[stage] = row
  mean = lambda key: sum(r[key] for r in per_size.values()) / n
  return {"stages": stages, "busy_ms": busy,
          "wall_ms": mean("wall_ms"), "untraced_ms": mean("untraced_ms"),
          "minor_faults": mean("minor_faults"),
          "first_touch_mb": mean("minor_faults") * resource.getpagesize() / 2**20,
          "sys_ms": mean("sys_ms"), "user_ms": mean("user_ms"),
          "thunks": mean("thunks"), "rest_mb": mean("rest_mb"),
          "rest_gbps": (sum(r["rest_mb"] for r in per_size.values())
                        / max(sum(r["rest_ms"] for r in per_size.values()), 1e-9)),
          "busy_share_by_duration": {b: v / busy if busy else 0.0
                                     for b, v in by_duration.items()}}


def markdown(report: Dict[str, Any]) -> str:
  lines = []
  for algorithm, by_impl in report["algorithms"].items():
    if "ceiling" in by_impl:
      c = by_impl["ceiling"]
      lines.append(f"\n{algorithm}: dm-clrs / ours {c['ratio_now_cycle']:.2f} over a cycle "
                   f"(n = {c['median_size']}: {c['ratio_now_median_size']:.2f}); ceiling "
                   f"{c['ratio_ceiling_cycle']:.2f} (n = {c['median_size']}: "
                   f"{c['ratio_ceiling_median_size']:.2f}); the message MLP at the "
                   f"product's rate is {c['at_limit_share_cycle']:.0%} of our step; "
                   f"its products outside the remat {c['products_share_cycle']:.0%} "
                   f"(ceiling over them {c['ratio_products_ceiling_cycle']:.2f}, n = "
                   f"{c['median_size']}: {c['ratio_products_ceiling_median_size']:.2f}); "
                   f"with the rest at the stream rate {c['stream_share_cycle']:.0%} "
                   f"(ceiling {c['ratio_stream_ceiling_cycle']:.2f}, n = "
                   f"{c['median_size']}: {c['ratio_stream_ceiling_median_size']:.2f}; "
                   f"from memory {c['ratio_dram_ceiling_cycle']:.2f}, n = "
                   f"{c['median_size']}: {c['ratio_dram_ceiling_median_size']:.2f})")
      lines.append(f"{algorithm}: the products' FLOPs at the machine's peak are "
                   f"{c['peak_share_cycle']:.0%} of our step over a cycle (n = "
                   f"{c['median_size']}: {c['peak_share_median_size']:.0%}; dm-clrs's "
                   f"{c['clrs_peak_share_cycle']:.0%}); our products run at "
                   f"{c['products_of_peak_cycle']:.0%} of peak; dm-clrs's step over "
                   f"them at peak {c['ratio_peak_ceiling_cycle']:.2f} (n = "
                   f"{c['median_size']}: {c['ratio_peak_ceiling_median_size']:.2f})")
    for impl, res in ((i, r) for i, r in by_impl.items() if i != "ceiling"):
      s = res["summary"]
      lines.append(f"\n{algorithm} / {impl}: {s['wall_ms']:.0f} ms wall, "
                   f"{s['busy_ms']:.0f} ms busy per step (mean over sizes "
                   f"{', '.join(res['per_size'])})")
      cpu = s["sys_ms"] + s["user_ms"]
      lines.append(f"{s['minor_faults']:.0f} minor page faults per step "
                   f"({s['first_touch_mb']:.0f} MB touched fresh); kernel time "
                   f"{s['sys_ms']:.1f} of {cpu:.1f} ms CPU per step "
                   f"({s['sys_ms'] / cpu if cpu else 0:.0%}), untraced step "
                   f"{s['untraced_ms']:.1f} ms")
      lines.append(f"{s['thunks']:.0f} thunks per step; busy time in thunks of "
                   + ", ".join(f"{b}: {v:.0%}"
                               for b, v in s["busy_share_by_duration"].items()))
      if "stream_limit_gbps" in res:
        lines.append(f"other passes: {s['rest_mb']:.0f} MB per step at "
                     f"{s['rest_gbps']:.1f} GB/s while they run, against "
                     f"{res['stream_limit_gbps']:.1f} GB/s for a plain pass here "
                     f"({res['dram_limit_gbps']:.1f} GB/s from memory)")
      if "message_mlp_gflops" in res:
        lines.append(f"message MLP products {res['message_mlp_gflops']:.1f} GFLOP/s "
                     f"vs {res['matmul_limit_gflops']:.1f} GFLOP/s for the product "
                     f"alone ({res['message_mlp_gflops'] / res['matmul_limit_gflops']:.0%})")
      lines.append("| stage | fwd ms | remat ms | bwd ms | total ms | share |")
      lines.append("|---|---|---|---|---|---|")
      for stage, row in s["stages"].items():
        if row["total"] > 0:
          lines.append(f"| {stage} | {row['fwd']:.1f} | {row['remat']:.1f} | "
                       f"{row['bwd']:.1f} | {row['total']:.1f} | {row['share']:.1%} |")
  return "\n".join(lines)


def profile_algorithm(algorithm: str, impls: Sequence[str], hidden: int, batch: int,
                      lengths: Sequence[int], reps: int, seed: int) -> Dict[str, Any]:
  stream = bench.ClrsTrainStream(algorithm, seed=seed, batch_size=batch,
                                 lengths=tuple(lengths))
  feedbacks = [next(stream) for _ in stream.lengths]
  # The impls take turns per size, which goes first alternating, as bench.py's loop
  # does: this machine's speed drifts by 30-50 % over minutes (both impls' steps
  # at once, 2026-11-28), and one impl profiled whole before the other read
  # jarvis_march's median-size ratio as 2.11 where alternating steps read 1.4-1.6.
  by_impl = {impl: {} for impl in impls}
  sizes = []
  for feedback in feedbacks:
    n = batching.nb_nodes_of(feedback)
    if n not in sizes:  # one size for all train lengths (segments_intersect: 4 nodes)
      sizes.append(n)
      turn = impls if len(sizes) % 2 else list(reversed(impls))
      for impl in turn:
        by_impl[impl][str(n)] = profile_size(impl, algorithm, feedback, stream.spec,
                                             hidden, reps, seed)
        _log(f"{algorithm} {impl} n={n}: {by_impl[impl][str(n)]['wall_ms']:.0f} ms wall")
  out = {}
  peak = peak_gflops()
  for impl in impls:
    per_size = by_impl[impl]
    res = {"per_size": per_size, "summary": summarize(per_size), "peak_gflops": peak}
    for r in per_size.values():
      # The step's arithmetic at the machine's limit: its products' FLOPs (ours'
      # outside the remat, which an exact step can do without) at the peak rate.
      r["products_peak_ms"] = 1e3 * (r["products_gflop"]["fwd"]
                                     + r["products_gflop"]["bwd"]) / peak
    if impl == "ours":
      dram = stream_limit_gbps(DRAM_ELEMENTS)
      for n, r in per_size.items():
        r["mlp_flops"] = message_mlp_products(batch, int(n), hidden, _processor_steps(r))
        r["matmul_limit_gflops"] = matmul_limit_gflops(batch * int(n) ** 2, hidden)
        r["mlp_floor_ms"] = 1e3 * r["mlp_flops"] / (r["matmul_limit_gflops"] * 1e9)
        r["stream_limit_gbps"] = stream_limit_gbps(batch * int(n) ** 2 * hidden)
        r["rest_stream_ms"] = r["rest_mb"] / r["stream_limit_gbps"]
        r["dram_limit_gbps"] = dram
        r["rest_dram_ms"] = r["rest_mb"] / dram
      flops = sum(r["mlp_flops"] for r in per_size.values()) / len(per_size)
      mlp_ms = res["summary"]["stages"]["message_mlp"]["total"]
      res["message_mlp_gflops"] = flops / (mlp_ms / 1e3) / 1e9 if mlp_ms else None
      res["matmul_limit_gflops"] = per_size[max(per_size, key=int)]["matmul_limit_gflops"]
      res["stream_limit_gbps"] = per_size[max(per_size, key=int)]["stream_limit_gbps"]
      res["dram_limit_gbps"] = dram
    out[impl] = res
  if "ours" in out and "clrs" in out:
    out["ceiling"] = ceiling(out["ours"]["per_size"], out["clrs"]["per_size"])
  return out


def ceiling(ours: Dict[str, Dict[str, Any]], clrs: Dict[str, Dict[str, Any]]
            ) -> Dict[str, Any]:
  """How far ours can get, from two floors under ours' step.

  The message MLP's six products are work dm-clrs does too and that no rewrite here
  removes, so ours' step takes at least their FLOPs at the rate of the product alone
  (`mlp_floor_ms`); dm-clrs's step over that floor is the highest ratio ours could
  reach (`ratio_ceiling`), and `at_limit_share` is the floor's share of ours' step.

  An exact rewrite (one that changes no committed number) keeps every matrix product
  at its shape, hence its kernel and its time: the products of ours' step outside the
  remat (which only recomputes), timed in the step (`products_wall_ms`: the time at
  least one of them runs, so two that overlap on the two cores count once), are a
  second floor, as long as XLA overlaps them no more than it does now.
  `ratio_products_ceiling` is dm-clrs's step over it, `products_share` its share of
  ours' step, `clrs_products_share` the share of all products in dm-clrs's.

  The rest of ours' step is passes over memory.  Were each of them as fast as a plain
  elementwise pass can be here (`rest_stream_ms`: their bytes at `stream_limit_gbps`),
  the step would take the products' time plus that, if the two still did not
  overlap (`_stream_floor`): `ratio_stream_ceiling` is dm-clrs's step over it,
  `stream_share` its share of ours' step (how much of the step is at one of the
  machine's two limits).  The step's tensors do not all stay in cache;
  `ratio_dram_ceiling` is the same with the rest at the rate of a pass over tensors far
  larger than the caches (`dram_limit_gbps`): lower, and nearer what a pass over data
  from memory can do.

  The strictest floor is the products' arithmetic at the machine's peak
  (`products_peak_ms`): `peak_share` is the share of ours' step it would take
  (`clrs_peak_share` dm-clrs's), `ratio_peak_ceiling` dm-clrs's step over it, and
  `products_of_peak` the rate ours' products run at now, as a share of the peak.

  Per size, and over the sizes as the benchmark reads them: the median size (its
  median ratio) and the sum over one cycle (its mean ratio)."""
  sizes = sorted(ours, key=int)
  clrs_products = {n: sum(clrs[n]["products_ms"].values()) for n in sizes}
  per_size = {n: {"ratio_now": clrs[n]["untraced_ms"] / ours[n]["untraced_ms"],
                  "ratio_ceiling": clrs[n]["untraced_ms"] / ours[n]["mlp_floor_ms"],
                  "at_limit_share": ours[n]["mlp_floor_ms"] / ours[n]["untraced_ms"],
                  "ratio_products_ceiling": (clrs[n]["untraced_ms"]
                                             / ours[n]["products_wall_ms"]),
                  "products_share": ours[n]["products_wall_ms"] / ours[n]["untraced_ms"],
                  "clrs_products_share": clrs_products[n] / clrs[n]["untraced_ms"],
                  "ratio_stream_ceiling": clrs[n]["untraced_ms"] / _stream_floor(ours[n]),
                  "stream_share": _stream_floor(ours[n]) / ours[n]["untraced_ms"],
                  "ratio_dram_ceiling": (clrs[n]["untraced_ms"]
                                         / _stream_floor(ours[n], "rest_dram_ms")),
                  "peak_share": ours[n]["products_peak_ms"] / ours[n]["untraced_ms"],
                  "clrs_peak_share": clrs[n]["products_peak_ms"] / clrs[n]["untraced_ms"],
                  "ratio_peak_ceiling": (clrs[n]["untraced_ms"]
                                         / ours[n]["products_peak_ms"]),
                  "products_of_peak": (ours[n]["products_peak_ms"]
                                       / ours[n]["products_wall_ms"])}
              for n in sizes}
  mid = sizes[len(sizes) // 2]
  total = lambda runs, key: sum(runs[n][key] for n in sizes)
  return {"per_size": per_size, "median_size": mid, **{
      f"{k}_median_size": v for k, v in per_size[mid].items()},
          "ratio_now_cycle": total(clrs, "untraced_ms") / total(ours, "untraced_ms"),
          "ratio_ceiling_cycle": total(clrs, "untraced_ms") / total(ours, "mlp_floor_ms"),
          "at_limit_share_cycle": total(ours, "mlp_floor_ms") / total(ours, "untraced_ms"),
          "ratio_products_ceiling_cycle": (total(clrs, "untraced_ms")
                                           / total(ours, "products_wall_ms")),
          "products_share_cycle": (total(ours, "products_wall_ms")
                                   / total(ours, "untraced_ms")),
          "clrs_products_share_cycle": (sum(clrs_products.values())
                                        / total(clrs, "untraced_ms")),
          "ratio_stream_ceiling_cycle": (total(clrs, "untraced_ms")
                                         / sum(_stream_floor(ours[n]) for n in sizes)),
          "stream_share_cycle": (sum(_stream_floor(ours[n]) for n in sizes)
                                 / total(ours, "untraced_ms")),
          "ratio_dram_ceiling_cycle": (total(clrs, "untraced_ms") / sum(
              _stream_floor(ours[n], "rest_dram_ms") for n in sizes)),
          "peak_share_cycle": (total(ours, "products_peak_ms")
                               / total(ours, "untraced_ms")),
          "clrs_peak_share_cycle": (total(clrs, "products_peak_ms")
                                    / total(clrs, "untraced_ms")),
          "ratio_peak_ceiling_cycle": (total(clrs, "untraced_ms")
                                       / total(ours, "products_peak_ms")),
          "products_of_peak_cycle": (total(ours, "products_peak_ms")
                                     / total(ours, "products_wall_ms"))}


def _stream_floor(run: Dict[str, Any], rest: str = "rest_stream_ms") -> float:
  """ms of one untraced step's products (outside the remat) and its other passes at the
  stream rate (`rest_dram_ms`: at the rate from memory).  Both are timed under the
  profiler, so they are taken as a share of the traced step's wall time (same calls)
  and applied to the untraced step: this machine's speed drifts between the two."""
  return run["untraced_ms"] * (run["products_wall_ms"] + run[rest]) / run["wall_ms"]


def main(argv: Optional[Sequence[str]] = None) -> int:
  p = argparse.ArgumentParser(prog="python benchmarks/profile_step.py",
                              description=__doc__.splitlines()[0])
  p.add_argument("--algorithms", default="bridges")
  p.add_argument("--impl", default="ours", help="ours, clrs or ours,clrs")
  p.add_argument("--hidden", type=int, default=128)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--lengths", type=common.int_list, default=list(clrs30.TRAIN_LENGTHS))
  p.add_argument("--reps", type=int, default=2)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", default=None)
  args = p.parse_args(argv)
  bench.disable_persistent_cache()
  report = {"schema": SCHEMA, "machine": common.machine_info(),
            "settings": {"hidden": args.hidden, "batch": args.batch,
                         "lengths": args.lengths, "reps": args.reps,
                         # glibc's allocator settings change the page faults.
                         "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")},
            "algorithms": {}}
  for algorithm in [a for a in args.algorithms.split(",") if a]:
    report["algorithms"][algorithm] = profile_algorithm(
        algorithm, [i for i in args.impl.split(",") if i], args.hidden, args.batch,
        args.lengths, args.reps, args.seed)
    if args.out:
      common.write_json(args.out, report)
  print(markdown(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
