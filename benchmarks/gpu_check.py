"""The GPU check: what a job gets, what compiling costs and what a whole run takes on a GPU.

    python benchmarks/gpu_check.py [--rows ROWS] [--budget-s 450] [--out FILE.json] [--tiny]
    python benchmarks/gpu_check.py --cost-figures CHECK.json [--out launch/cost_gpu.json]

One command for a GPU host (docs/running.md, "The GPU check"), every measurement in
fresh processes, the JSON rewritten after each (default `$OUT/gpu_check.json` where
$OUT is set, else ./gpu_check.json; each process's log beside it).  `--rows` lists the
rows, each `name[@lever+lever...]`; the default, DEFAULT_ROWS, fits `--budget-s`
(450 s of rows: under 8 minutes with the start) on an H200 even at the 90 s per
compiled shape measured there before: a row stops where the budget ends, and what it
measured so far (its log's last lines, a run's compilations) is kept.

Rows:
  backend  a `--cluster local` job (launch/executors.make_executor, submitit's
           LocalExecutor): the CUDA_VISIBLE_DEVICES it sees and the backend JAX gives
           it, with slurm_resources.gpus_per_task None (the default) and 1 (the job's
           GPU check must pass; the sweep refuses where the machine shows no GPU).
  compile  ours' train step, bfs at 16 nodes, hidden 128, batch 32 (the step that took
           90.6 s there): compile seconds cold (an empty persistent cache) then warm (a
           second process, the same cache), with the HLO it compiled to
           (benchmarks/compile_drivers.py: kernels, Triton fusions, loops).
  run      a full-protocol ForgetNet binary_search run (gin/forget.gin, 10,000 steps,
           validation every 50, the whole test split) through the sweep's job, cold
           then warm (a new results folder, the same cache): wall time, training and
           evaluation seconds, every compilation.
  steady   ms per train step at 16 nodes, ours against dm-clrs's BaselineModel
           alternating (bench.measure_steady_state) on bfs, binary_search and
           floyd_warshall; each one's warm-up (its compilation) too.
  seeds    K = 8 seeds of bfs in one job (one vmapped step) against the 8 one after
           another (bench_seeds.run), 16 nodes.
  drivers  benchmarks/compile_drivers.py's measurement of ours and dm-clrs's step.
  init     dm-clrs's BaselineModel.init as it ships (not jitted: op by op), the same
           computation jitted, and ours' Learner.init_state (jitted): seconds,
           compilations, what the persistent cache did; cold then warm.
  sampler  dm-clrs's step over its sampler's batches at 16 nodes: per batch the hint
           time (padded to the sampler's running max) and the step's compilations.
  autotune_cache  the compile row's step cold, then compiled again with the cache
           folder's executables removed and XLA's own caches kept (`sub_cache_only`).
`--rows levers` is LEVER_ROWS, the levers below in a second check.
Levers (the environment of a row's processes; `best`: of those the compile row ran,
the one that compiled the cold step fastest; GPU_ONLY_LEVERS are skipped, with the
reason, where the rows' processes get another backend):
  pin        PJRT_NPROC=2, as `import nar_markov` sets it (the default).  XLA's GPU
             client sizes its compile thread pool by the same variable
             (max(PJRT_NPROC, devices) threads), so the pin may slow the GPU compiler.
  nopin      PJRT_NPROC = this machine's CPUs.
  autotune0  XLA_FLAGS --xla_gpu_autotune_level=0 (no autotuning of GEMMs and fusions).
  serial     XLA_FLAGS --xla_gpu_force_compilation_parallelism=1 (one LLVM module).
  notriton   XLA_FLAGS --xla_gpu_enable_triton_gemm=false (cuBLAS for every product).
  nopin_autotune0  both.
  nocmdbuf   XLA_FLAGS --xla_gpu_enable_command_buffer= (no command buffers).
  nofusionautotune  XLA_FLAGS --xla_gpu_experimental_enable_fusion_autotuner=false.
  cache0     jax_persistent_cache_min_compile_time_secs=0 (every compile written;
             set by the worker after the project's 0.5 s).
  xlacaches_all / xlacaches_none  jax_persistent_cache_enable_xla_caches=all / none
             (jax's default: the per-fusion autotune sub-cache only).
`--tiny` runs every row at a CPU-sized scale (hidden 16, batch 4, 4 nodes, K = 2, a
smoke run): what tests/test_gpu_check.py runs, so the check works before a GPU does.
`--cost-figures` turns a check's JSON into the figures `launch/cost.py` estimates a
GPU sweep from (its `cost_gpu.json`).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence, Tuple

if __package__ in (None, ""):  # run by path: make `benchmarks` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SCHEMA = "nar_markov.gpu_check/1"
COST_SCHEMA = "nar_markov.cost_gpu/1"
ROWS = ("backend", "compile", "run", "steady", "seeds", "drivers", "init", "sampler",
        "autotune_cache")
DEFAULT_ROWS = "backend,compile@pin+nopin,run@best"
# The levers' rows, for a second check: most telling first (the budget ends the rest).
LEVER_ROWS = ("compile@nocmdbuf+nofusionautotune,init@cache0,autotune_cache@pin+xlacaches_all,"
              "sampler")
PRESETS = {"default": DEFAULT_ROWS, "levers": LEVER_ROWS}
LEVERS = {
    "pin": {},
    "nopin": {"PJRT_NPROC": str(os.cpu_count() or 1)},
    "autotune0": {"XLA_FLAGS": "--xla_gpu_autotune_level=0"},
    "serial": {"XLA_FLAGS": "--xla_gpu_force_compilation_parallelism=1"},
    "notriton": {"XLA_FLAGS": "--xla_gpu_enable_triton_gemm=false"},
    "nopin_autotune0": {"PJRT_NPROC": str(os.cpu_count() or 1),
                        "XLA_FLAGS": "--xla_gpu_autotune_level=0"},
    # An empty list of command types: no CUDA graphs (command buffers) at all.
    "nocmdbuf": {"XLA_FLAGS": "--xla_gpu_enable_command_buffer="},
    "nofusionautotune": {"XLA_FLAGS": "--xla_gpu_experimental_enable_fusion_autotuner=false"},
    # JAX_* entries are jax options: read by jax at import, and set again by the worker
    # after the project's cache set-up (learner.setup_compilation_cache sets 0.5 s).
    "cache0": {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
    "xlacaches_all": {"JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "all"},
    "xlacaches_none": {"JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "none"},
}
# Levers that change only what XLA:GPU does: skipped, with the reason, where the
# rows' processes get another backend (a GPU flag measures nothing on the CPU).
GPU_ONLY_LEVERS = {"autotune0", "serial", "notriton", "nopin_autotune0", "nocmdbuf",
                   "nofusionautotune", "xlacaches_all", "xlacaches_none"}
# The most seconds one process of a row may take (the budget may leave it less).
ROW_CAP_S = {"backend": 150, "compile": 240, "run": 600, "steady": 600, "seeds": 400,
             "drivers": 400, "init": 180, "sampler": 150, "autotune_cache": 240}
WORKER_STARTED = "[gpu_check worker] started"
WORKER_FINISHED = "[gpu_check worker] finished"
MIN_ROW_S = 20      # a row that would get less is skipped
RUN_ALGORITHM = "binary_search"
STEADY_ALGORITHMS = ("bfs", "binary_search", "floyd_warshall")


def sizes(tiny: bool) -> Dict[str, Any]:
  """The check's scale: the issue's (bfs at 16 nodes, hidden 128, batch 32) or a CPU's."""
  if tiny:
    return {"hidden": 16, "batch": 4, "nb_nodes": 4, "k": 2, "steady_steps": 2,
            "seeds_steps": 2, "rounds": 1, "run_gin": ["gin/forget.gin", "gin/smoke.gin"],
            "run_params": ["Protocol.train_lengths = [4]", "Protocol.train_steps = 4",
                           "Protocol.eval_every_steps = 2", "Protocol.log_every_steps = 2",
                           "Protocol.checkpoint_every_steps = 2"],
            # 11 nodes: the size where seed 0's sampler grows its max within 12 batches
            "steady_algorithms": ["bfs"], "sampler_batches": 12, "sampler_nodes": 11}
  return {"hidden": 128, "batch": 32, "nb_nodes": 16, "k": 8, "steady_steps": 20,
          "seeds_steps": 10, "rounds": 2, "run_gin": ["gin/forget.gin"], "run_params": [],
          "steady_algorithms": list(STEADY_ALGORITHMS), "sampler_batches": 24,
          "sampler_nodes": 16}


# -- the rows, each in its own process ------------------------------------------------


def _progress(path: Optional[str], partial: Dict[str, Any]) -> None:
  """What a row has measured so far, for the parent to keep if the budget ends it."""
  if path:
    tmp = pathlib.Path(path + ".tmp")
    tmp.write_text(json.dumps(partial, default=str))
    tmp.replace(path)


def backend_probe(**kwargs) -> Dict[str, Any]:
  """In a local job (after sweep_spec.Job's GPU check): what it sees."""
  del kwargs
  from nar_markov.training import devices  # pylint: disable=g-import-not-at-top
  return {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
          "device": devices.describe_backend(),
          "compilation_cache": os.environ.get("NAR_MARKOV_JAX_CACHE")}


def row_backend(tiny: bool, work: str, **_) -> Dict[str, Any]:
  from launch import executors  # pylint: disable=g-import-not-at-top
  from launch import cluster  # pylint: disable=g-import-not-at-top
  from launch import sweep_spec  # pylint: disable=g-import-not-at-top
  out = {"visible_gpus": cluster.visible_gpus()}
  for asked in (None, 1):
    results = pathlib.Path(work) / f"results_{asked}"
    key = f"gpus_per_task={asked}"
    kwargs = dict(gin_files=sizes(tiny)["run_gin"],
                  gin_params=[f"slurm_resources.gpus_per_task = {asked}"],
                  results_dir=str(results))
    try:
      executor = executors.make_executor("local", results,
                                      cluster.SlurmResources(gpus_per_task=asked))
    except Exception as e:  # pylint: disable=broad-except  (the sweep's refusal)
      out[key] = {"refused_by_the_sweep": f"{type(e).__name__}: {e}"}
      continue
    job = executor.submit(sweep_spec.Job(backend_probe), kwargs)
    try:
      out[key] = job.result()
    except Exception as e:  # pylint: disable=broad-except  (the job's own failure)
      out[key] = {"job_failed": " ".join(str(e).split())[-600:]}
  return out


def _first_steps(compiled, args) -> Dict[str, Any]:
  """The compiled train step run twice: the first run pays what XLA:GPU does at a first
  execution (recording command buffers), the second is a plain step."""
  import jax  # pylint: disable=g-import-not-at-top
  params, opt_state, batch, lam, _, key = args   # algorithm_index is static: not passed
  out = {}
  for name in ("first_step_s", "second_step_s"):
    t0 = time.perf_counter()
    params, opt_state, losses = compiled(params, opt_state, batch, lam, key)
    jax.block_until_ready((params, opt_state, losses))
    out[name] = time.perf_counter() - t0
  return out


def row_compile(tiny: bool, cache: str, **_) -> Dict[str, Any]:
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from benchmarks import compile_drivers  # pylint: disable=g-import-not-at-top
  from nar_markov.nets import learner  # pylint: disable=g-import-not-at-top
  s = sizes(tiny)
  learner.setup_compilation_cache(cache)
  feedback, spec = compile_drivers.train_batch("bfs", s["nb_nodes"], s["batch"])
  jitted, args = compile_drivers.step_of("ours", "bfs", feedback, spec, s["hidden"])
  log = common.CacheLog()
  try:
    res = compile_drivers.measure(jitted, args, then=lambda c: _first_steps(c, args))
  finally:
    log.close()
  res["cache"] = [r for r in log.records if r["function"] == "jit__train_step"]
  return res


SUB_CACHE_PREFIX = "xla_gpu_"   # jax's names for XLA's caches inside its cache folder


def sub_cache_files(cache: str) -> Dict[str, int]:
  """XLA's own caches in a jax cache folder (jax's `jax_persistent_cache_enable_xla_caches`:
  the per-fusion autotune results, the kernel cache): file -> bytes."""
  root = pathlib.Path(cache)
  out = {}
  for top in sorted(root.glob(SUB_CACHE_PREFIX + "*")) if root.is_dir() else []:
    for f in [top] if top.is_file() else sorted(top.rglob("*")):
      if f.is_file():
        out[str(f.relative_to(root))] = f.stat().st_size
  return out


def keep_only_sub_caches(cache: str) -> Dict[str, Any]:
  """Removes the compiled executables of a jax cache folder, keeps XLA's sub-caches."""
  root = pathlib.Path(cache)
  removed = 0
  for f in sorted(root.iterdir()) if root.is_dir() else []:
    if f.name.startswith(SUB_CACHE_PREFIX):
      continue
    if f.is_dir():
      shutil.rmtree(f)
    else:
      f.unlink()
    removed += 1
  return {"removed_entries": removed, "kept": sub_cache_files(cache)}


def row_autotune_cache(tiny: bool, cache: str, **kwargs) -> Dict[str, Any]:
  """The compile row's step; its cold phase fills the cache folder, then (the parent
  having removed the executables, `keep_only_sub_caches`) a compile with only XLA's
  sub-caches to help: what they save is cold - sub_cache_only."""
  res = row_compile(tiny, cache, **kwargs)
  res["sub_cache"] = sub_cache_files(cache)
  return res


def _init_measure(name: str, fn, cache: Optional[str], progress, done) -> Dict[str, Any]:
  """`fn(seed)` twice (seeds 1, 2), each timed to its results being ready; the first
  call's compilations and what the persistent cache did with them, in a cache folder of
  its own (`cache`/`name`) with the process's in-memory caches emptied before."""
  import jax  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  jax.clear_caches()
  own_folder = False
  if cache:
    try:
      from jax._src import compilation_cache  # pylint: disable=g-import-not-at-top
      reset = compilation_cache.reset_cache
    except (ImportError, AttributeError):   # another jax: the process's one folder
      reset = None
    if reset is not None:
      jax.config.update("jax_compilation_cache_dir", os.path.join(cache, name))
      reset()
      own_folder = True
  counter, log = common.CompileCounter(), common.CacheLog()
  try:
    t0 = time.perf_counter()
    value = jax.block_until_ready(fn(1))
    first_s = time.perf_counter() - t0
  finally:
    log.close()
    counter.close()
  second = common.CompileCounter()
  try:
    t0 = time.perf_counter()
    jax.block_until_ready(fn(2))
    second_s = time.perf_counter() - t0
  finally:
    second.close()
  records = log.records
  done[name] = {
      "first_s": first_s, "second_s": second_s,
      "compilations": counter.count, "compile_s": counter.seconds,
      "cache_hits": sum(r["cache"] == "hit" for r in records),
      "cache_misses": sum(r["cache"] == "miss" for r in records),
      "written": sum(r["written"] is True for r in records),
      "not_written": collections.Counter(re.sub(r"\s*\([\d.]+s\)$", "", r["written"])
                                         for r in records if isinstance(r["written"], str)),
      "compilations_second": second.count, "own_cache_folder": own_folder,
      "parameters": int(sum(x.size for x in jax.tree_util.tree_leaves(value[0]))),
  }
  _progress(progress, {"measured": done})
  return value


def clrs_jitted_init(model):
  """What dm-clrs's BaselineModel.init computes (params, optimizer state, its skeleton),
  as one jitted function of (seed, features)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  def init(seed, features):
    params = model.net_fn.init(jax.random.PRNGKey(seed), features, True, algorithm_index=-1,
                               return_hints=False, return_all_outputs=False)
    return params, model.opt.init(params), model.opt.init(jnp.zeros(1))
  return jax.jit(init)


def _init_jitted(model, features, seed):
  """BaselineModel.init, the same computation jitted (the init row checks it makes the
  same parameters): for rows about what comes after the init."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  if not isinstance(features, list):
    features = [features]
  model.params, model.opt_state, model.opt_state_skeleton = clrs_jitted_init(model)(
      np.int32(seed), features)


def row_init(tiny: bool, cache: str, progress: Optional[str] = None, **_) -> Dict[str, Any]:
  """dm-clrs's BaselineModel.init as it ships (not jitted: op by op), the same work under
  one jax.jit, and ours' Learner.init_state (jitted), bfs at the check's size."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from benchmarks import bench  # pylint: disable=g-import-not-at-top
  from benchmarks import compile_drivers  # pylint: disable=g-import-not-at-top
  from nar_markov.nets import learner  # pylint: disable=g-import-not-at-top
  from nar_markov.nets import model as model_lib  # pylint: disable=g-import-not-at-top
  s = sizes(tiny)
  learner.setup_compilation_cache(cache)
  feedback, spec = compile_drivers.train_batch("bfs", s["nb_nodes"], s["batch"])
  done: Dict[str, Any] = {}
  holder = {}

  def clrs_op_by_op(seed):
    # Building the model runs its init (bench.build_clrs, as run.py does); again: init.
    if "clrs" not in holder:
      holder["clrs"] = bench.build_clrs(spec, feedback, s["hidden"], seed)
    else:
      holder["clrs"].init([feedback.features], seed)
    model = holder["clrs"]
    return model.params, model.opt_state

  def clrs_jitted(seed):
    if "clrs_jit" not in holder:
      holder["clrs_jit"] = clrs_jitted_init(holder["clrs"])
    return holder["clrs_jit"](np.int32(seed), [feedback.features])[:2]

  def ours_jitted(seed):
    if "ours" not in holder:
      holder["ours_batch"] = bench.ours_batch("bfs", feedback)
      holder["ours"] = bench.ours_model("bfs", model_lib.nb_dims_of(feedback), s["hidden"])
    return holder["ours"].init_state(seed, [holder["ours_batch"].features])

  eager = _init_measure("clrs_op_by_op", clrs_op_by_op, cache, progress, done)
  jitted = _init_measure("clrs_jitted", clrs_jitted, cache, progress, done)
  done["clrs_jitted"]["max_abs_diff_to_op_by_op"] = float(max(
      float(jnp.max(jnp.abs(jnp.asarray(a, jnp.float32) - jnp.asarray(b, jnp.float32))))
      for a, b in zip(jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(jitted))))
  _init_measure("ours_jitted", ours_jitted, cache, progress, done)
  return done


def row_sampler(tiny: bool, progress: Optional[str] = None, **_) -> Dict[str, Any]:
  """dm-clrs's training loop as run.py runs it, at one train size: its sampler pads the
  hints to its running max_steps, so its jitted step compiles again whenever that grows.
  Per batch: the hint time, the step's compilations and seconds; beside it the time
  length ours would pad the batch to (batching.time_bucket). The persistent cache is off;
  the model is initialised by its init's computation jitted (`_init_jitted`)."""
  from benchmarks import bench  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from nar_markov.data import batching  # pylint: disable=g-import-not-at-top
  s = sizes(tiny)
  bench.disable_persistent_cache()
  algorithm, step_fn = "bfs", bench.TRAIN_STEP_FUNCTION["clrs"]
  stream = bench.ClrsTrainStream(algorithm, seed=0, batch_size=s["batch"],
                                 lengths=(s["sampler_nodes"],))
  first = next(stream)
  import clrs  # pylint: disable=g-import-not-at-top
  from unittest import mock  # pylint: disable=g-import-not-at-top
  with mock.patch.object(clrs.models.BaselineModel, "init", _init_jitted):
    trainer = bench.ClrsTrainer(stream.spec, s["hidden"], 0, first)   # not its 44 s init
  counter = common.CompileCounter()
  batches = []
  try:
    for i in range(s["sampler_batches"]):
      feedback = first if i == 0 else next(stream)
      prepared = trainer.prepare(feedback)
      before = list(counter.by_function.get(step_fn, [0, 0.0]))
      t0 = time.perf_counter()
      trainer.run(prepared)
      step_s = time.perf_counter() - t0
      after = counter.by_function.get(step_fn, [0, 0.0])
      hint = bench.hint_time(feedback)
      batches.append({"batch": i, "hint_time": hint,
                      "max_length": int(max(feedback.features.lengths)),
                      "step_compilations": int(after[0] - before[0]),
                      "step_compile_s": float(after[1] - before[1]), "step_s": step_s,
                      "ours_hint_time": batching.time_bucket(algorithm, s["sampler_nodes"], hint)})
      _progress(progress, {"batches": batches})
  finally:
    counter.close()
  return {"algorithm": algorithm, "nb_nodes": s["sampler_nodes"], "batches": batches,
          "step_compilations": sum(b["step_compilations"] for b in batches),
          "step_compile_s": sum(b["step_compile_s"] for b in batches),
          "hint_times": sorted({b["hint_time"] for b in batches}),
          "ours_hint_times": sorted({b["ours_hint_time"] for b in batches})}


def row_run(tiny: bool, cache: str, work: str, progress: Optional[str] = None,
            **_) -> Dict[str, Any]:
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from launch import sweep_spec  # pylint: disable=g-import-not-at-top
  from nar_markov.training import experiment  # pylint: disable=g-import-not-at-top
  s = sizes(tiny)
  os.environ["NAR_MARKOV_JAX_CACHE"] = cache
  counter, log = common.CompileCounter(), common.CacheLog()
  t0 = time.perf_counter()

  def note(*_args, **_kwargs):
    _progress(progress, {"compilations": counter.count, "compile_s": counter.seconds,
                         "elapsed_s": time.perf_counter() - t0})
  import jax  # pylint: disable=g-import-not-at-top
  jax.monitoring.register_event_duration_secs_listener(note)
  try:
    paths = sweep_spec.Job(experiment.run_from_gin)(dict(
        gin_files=s["run_gin"], gin_params=list(s["run_params"]),
        algorithms=[RUN_ALGORITHM], seeds=[0], results_dir=str(pathlib.Path(work) / "results")))
  finally:
    wall_s = time.perf_counter() - t0
    jax.monitoring.unregister_event_duration_listener(note)
    log.close()
    counter.close()
  result = json.loads(pathlib.Path(paths[0]).read_text())
  return {"wall_s": wall_s, "compile_s": counter.seconds, "compilations": counter.count,
          "by_function": log.by_function(), "train_time_s": result["train_time_s"],
          "eval_time_s": result["eval_time_s"], "steps": result["steps"],
          "steps_per_s": result["steps_per_s"], "test_score": result["test_score"],
          "device": result["device"], "settings": result["settings"]}


def row_steady(tiny: bool, cache: str, **_) -> Dict[str, Any]:
  from benchmarks import bench  # pylint: disable=g-import-not-at-top
  from nar_markov.nets import learner  # pylint: disable=g-import-not-at-top
  s = sizes(tiny)
  learner.setup_compilation_cache(cache)
  out = {}
  for algorithm in s["steady_algorithms"]:
    r = bench.measure_steady_state(algorithm, steps=s["steady_steps"], hidden=s["hidden"],
                                   batch=s["batch"], lengths=[s["nb_nodes"]])
    out[algorithm] = {impl: {"ms_per_step": 1e3 * r[impl]["step_s_median"],
                             "warmup_s": r[impl]["warmup_s"],
                             "timed_steps": r[impl]["timed_steps"]}
                      for impl in ("ours", "clrs")}
    out[algorithm]["ratio"] = r["ratio"]
  return out


def row_seeds(tiny: bool, cache: str, **_) -> Dict[str, Any]:
  from benchmarks import bench_seeds  # pylint: disable=g-import-not-at-top
  from nar_markov.nets import learner  # pylint: disable=g-import-not-at-top
  s = sizes(tiny)
  learner.setup_compilation_cache(cache)
  return bench_seeds.run("bfs", k=s["k"], steps=s["seeds_steps"], rounds=s["rounds"],
                         hidden=s["hidden"], batch=s["batch"], lengths=[s["nb_nodes"]])


def row_drivers(tiny: bool, **_) -> Dict[str, Any]:
  from benchmarks import bench  # pylint: disable=g-import-not-at-top
  from benchmarks import compile_drivers  # pylint: disable=g-import-not-at-top
  s = sizes(tiny)
  bench.disable_persistent_cache()
  return compile_drivers.drivers("bfs", nb_nodes=s["nb_nodes"], hidden=s["hidden"],
                                 batch=s["batch"], variants=("ours", "clrs"))


ROW_FUNCTIONS = {"backend": row_backend, "compile": row_compile, "run": row_run,
                 "steady": row_steady, "seeds": row_seeds, "drivers": row_drivers,
                 "init": row_init, "sampler": row_sampler,
                 "autotune_cache": row_autotune_cache}
PHASES = {"compile": ("cold", "warm"), "run": ("cold", "warm"), "init": ("cold", "warm"),
          "autotune_cache": ("cold", "sub_cache_only")}


def jax_options(lever: str) -> Dict[str, Any]:
  """The jax options a lever sets (its JAX_* entries), typed as jax.config.update wants."""
  out = {}
  for key, value in LEVERS[lever].items():
    if key.startswith("JAX_"):
      try:
        out[key.lower()] = float(value)
      except ValueError:
        out[key.lower()] = value
  return out


def worker(row: str, out: str, lever: str = "pin", **kwargs) -> int:
  """One row's process: its result (or its error) in `out`."""
  import nar_markov  # pylint: disable=g-import-not-at-top,unused-import  (pins, before jax)
  import jax  # pylint: disable=g-import-not-at-top
  options = jax_options(lever)
  try:
    if options and kwargs.get("cache"):
      # The project's set-up would put its own minimum back (learner.setup_compilation_cache
      # acts once per process): it runs first, the lever's options after it.
      from nar_markov.nets import learner  # pylint: disable=g-import-not-at-top
      learner.setup_compilation_cache(kwargs["cache"])
    for key, value in options.items():
      jax.config.update(key, value)
    result = ROW_FUNCTIONS[row](progress=out + ".progress", **kwargs)
    payload = {"status": "ok", "result": result}
  except Exception as e:  # pylint: disable=broad-except  (recorded, the next row goes on)
    traceback.print_exc()
    payload = {"status": "error", "error": f"{type(e).__name__}: {' '.join(str(e).split())}"[:2000]}
  payload["process"] = {"backend": jax.default_backend(),
                        "devices": [str(d) for d in jax.devices()],
                        "PJRT_NPROC": os.environ.get("PJRT_NPROC"),
                        "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
                        "jax_options": {k: getattr(jax.config, k, None) for k in options}}
  pathlib.Path(out).write_text(json.dumps(payload, default=str))
  print(f"{WORKER_FINISHED}: {row} {payload['status']}", flush=True)
  return 0


# -- the parent: rows in turn, within the budget -----------------------------------------


def parse_rows(text: str) -> List[Tuple[str, List[str]]]:
  """'backend,compile@pin+nopin,run@best' -> [(row, levers)]; ValueError naming a bad one.

  A preset's name (PRESETS: 'default', 'levers') stands for its rows."""
  out = []
  text = ",".join(PRESETS.get(i.strip(), i) for i in text.split(","))
  for item in [i.strip() for i in text.split(",") if i.strip()]:
    row, _, levers = item.partition("@")
    if row not in ROWS:
      raise ValueError(f"unknown row {row!r}; rows: {', '.join(ROWS)}")
    names = [l for l in levers.split("+") if l] or ["pin"]
    bad = [l for l in names if l not in LEVERS and l != "best"]
    if bad:
      raise ValueError(f"unknown lever(s) {bad} in {item!r}; levers: "
                       f"{', '.join(LEVERS)}, best")
    out.append((row, names))
  if not out:
    raise ValueError("no rows given")
  return out


def lever_env(lever: str) -> Dict[str, str]:
  """This process's environment with `lever` applied, the package's pin left to decide."""
  env = {k: v for k, v in os.environ.items() if k not in ("PJRT_NPROC", "NPROC")}
  for key, value in LEVERS[lever].items():
    env[key] = f"{env[key]} {value}" if key == "XLA_FLAGS" and env.get(key) else value
  env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + (
      [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  return env


def best_lever(report: Dict[str, Any]) -> str:
  """The lever whose cold compile row compiled fastest ('pin' if none did)."""
  cold = [(e["result"]["compile_s"], e["lever"]) for e in report["rows"]
          if e["row"] == "compile" and e["phase"] == "cold" and e["status"] == "ok"]
  return min(cold)[1] if cold else "pin"


def _tail(path: pathlib.Path, lines: int = 25) -> List[str]:
  try:
    return path.read_text(errors="replace").splitlines()[-lines:]
  except OSError:
    return []


def spawn(row: str, lever: str, phase: str, timeout_s: float, *, tiny: bool, cache: str,
          work: str, logs: pathlib.Path) -> Dict[str, Any]:
  """One row's process, killed (its whole process group) at `timeout_s`."""
  name = f"{row}-{lever}-{phase}"
  out = pathlib.Path(work) / f"{name}.json"
  log = logs / f"{name}.log"
  cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", row,
         "--worker-out", str(out), "--worker-cache", cache, "--worker-dir", work,
         "--worker-lever", lever]
  if tiny:
    cmd.append("--tiny")
  t0 = time.perf_counter()
  killed = False
  with open(log, "w") as f:
    proc = subprocess.Popen(cmd, env=lever_env(lever), cwd=REPO_ROOT, stdout=f,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
      proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      killed = True
      proc.wait()
  entry = {"row": row, "lever": lever, "phase": phase, "env": LEVERS[lever],
           "seconds": time.perf_counter() - t0, "log": str(log), "killed_by_cap": killed}
  if out.exists():
    entry.update(json.loads(out.read_text()))
  else:
    entry["status"] = "timeout" if killed else "error"
    entry["timeout_s"] = timeout_s
    progress = pathlib.Path(str(out) + ".progress")
    if progress.exists():
      entry["partial"] = json.loads(progress.read_text())
  if entry["status"] != "ok":
    entry["log_tail"] = _tail(log)
  return entry


def plan(rows: List[Tuple[str, List[str]]]):
  """(row, lever or 'best', phase) in the order they run."""
  for row, levers in rows:
    for lever in (["pin"] if row == "backend" else levers):
      for phase in PHASES.get(row, ("once",)):
        yield row, lever, phase


def run_check(rows_text: str, *, budget_s: float, tiny: bool, out: pathlib.Path,
              argv: Sequence[str] = ()) -> Dict[str, Any]:
  rows = parse_rows(rows_text)
  logs = out.parent / (out.stem + "_logs")
  logs.mkdir(parents=True, exist_ok=True)
  report = {"schema": SCHEMA, "tiny": tiny,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": host_info(), "settings": dict(sizes(tiny), rows=rows_text,
                                                  budget_s=budget_s, command=list(argv)),
            "rows": []}
  t_start = time.perf_counter()
  with tempfile.TemporaryDirectory(prefix="nar_markov_gpu_check_") as root:
    for row, lever, phase in plan(rows):
      if lever == "best":
        lever = best_lever(report)
      left = budget_s - (time.perf_counter() - t_start)
      if left < MIN_ROW_S:
        report["rows"].append({"row": row, "lever": lever, "phase": phase,
                               "status": "skipped", "why": f"budget: {left:.0f} s left"})
        _save(out, report)
        continue
      if lever in GPU_ONLY_LEVERS and row != "backend":
        if "backend_probe" not in report:
          report["backend_probe"] = probe_backend()
          _log(f"the rows' processes get jax backend {report['backend_probe']['backend']}")
        backend = report["backend_probe"]["backend"]
        if backend is not None and backend != "gpu":
          report["rows"].append({
              "row": row, "lever": lever, "phase": phase, "env": LEVERS[lever],
              "status": "skipped",
              "why": f"GPU-only lever: this host's processes get jax backend {backend}"})
          _save(out, report)
          continue
      # A cold phase starts from an empty cache folder, its warm phase reuses it; the
      # rows without phases use the compile row's folder of the same lever.
      cache = os.path.join(root, f"cache-{lever}-{row if row in PHASES else 'compile'}")
      work = os.path.join(root, f"{row}-{lever}-{phase}")
      os.makedirs(work)
      before = keep_only_sub_caches(cache) if phase == "sub_cache_only" else None
      _log(f"{row} ({lever}, {phase}): up to {min(ROW_CAP_S[row], left):.0f} s")
      entry = spawn(row, lever, phase, min(ROW_CAP_S[row], left), tiny=tiny, cache=cache,
                    work=work, logs=logs)
      if before is not None:
        entry["cache_before"] = before
      _log(f"{row} ({lever}, {phase}): {entry['status']} in {entry['seconds']:.1f} s")
      report["rows"].append(entry)
      _save(out, report)
  report["total_s"] = time.perf_counter() - t_start
  _save(out, report)
  return report


def probe_backend(timeout_s: float = 120) -> Dict[str, Any]:
  """The jax backend a row's process gets here (one short process, the default lever's
  environment); backend None where it could not tell."""
  t0 = time.perf_counter()
  try:
    proc = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"],
                          env=lever_env("pin"), cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout_s, check=False)
    lines = proc.stdout.split()
    backend = lines[-1] if proc.returncode == 0 and lines else None
    why = None if backend else proc.stderr[-500:]
  except subprocess.TimeoutExpired:
    backend, why = None, f"no answer in {timeout_s:.0f} s"
  return {"backend": backend, "seconds": time.perf_counter() - t0, "error": why}


def host_info() -> Dict[str, Any]:
  """The host, without importing jax in this process (each row's process reports its own)."""
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  versions = {}
  for name in ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin", "dm-haiku",
               "dm-clrs", "optax", "submitit"):
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      pass
  gpus = None
  if shutil.which("nvidia-smi"):
    gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                          check=False).stdout.splitlines()
  return {"cpu_count": os.cpu_count(), "loadavg": list(os.getloadavg()),
          "nvidia_smi": gpus, "versions": versions, "python": sys.version.split()[0]}


def _save(out: pathlib.Path, report: Dict[str, Any]) -> None:
  tmp = out.with_name(out.name + ".tmp")
  tmp.write_text(json.dumps(report, indent=1, default=str))
  tmp.replace(out)


def _log(msg: str) -> None:
  print(f"[gpu_check] {msg}", file=sys.stderr, flush=True)


def summary(report: Dict[str, Any]) -> str:
  """One line per row: what it measured."""
  lines = []
  for e in report["rows"]:
    head = f"{e['row']:<8} {e['lever']:<16} {e['phase']:<5} {e['status']:<8}"
    r = e.get("result") or {}
    if e["status"] != "ok":
      what = e.get("why") or e.get("error") or str(e.get("partial", ""))
    elif e["row"] == "backend":
      what = "; ".join(f"{k}: " + (v.get("refused_by_the_sweep") or v.get("job_failed")
                                   or f"CUDA_VISIBLE_DEVICES={v['CUDA_VISIBLE_DEVICES']!r} "
                                      f"{v['device']['backend']} {v['device']['device_kind']}")
                       for k, v in r.items() if k.startswith("gpus_per_task"))
    elif e["row"] in ("compile", "autotune_cache"):
      what = (f"compile {r['compile_s']:.1f} s, first step {r['first_step_s']:.2f} s, "
              f"{r['hlo']['fusions']} fusions, {r['hlo']['instructions']} HLO instructions")
      if e["row"] == "autotune_cache":
        what += f", sub-cache {sum(r['sub_cache'].values()) / 2**20:.1f} MiB"
    elif e["row"] == "init":
      what = "; ".join(f"{k} {v['first_s']:.1f} s ({v['compilations']} compilations, "
                       f"{v['cache_hits']} hits)" for k, v in r.items())
    elif e["row"] == "sampler":
      what = (f"dm-clrs's step compiled {r['step_compilations']} times in "
              f"{len(r['batches'])} batches ({r['step_compile_s']:.1f} s), hint times "
              f"{r['hint_times']}; ours pads them to {r['ours_hint_times']}")
    elif e["row"] == "run":
      what = (f"wall {r['wall_s']:.0f} s (compile {r['compile_s']:.0f} s in "
              f"{r['compilations']}, train {r['train_time_s']:.0f} s, eval "
              f"{r['eval_time_s']:.0f} s), test {r['test_score']}")
    elif e["row"] == "steady":
      what = "; ".join(f"{a}: ours {v['ours']['ms_per_step']:.1f} ms, clrs "
                       f"{v['clrs']['ms_per_step']:.1f} ms" for a, v in r.items())
    elif e["row"] == "seeds":
      what = f"vmapped / sequential seed-steps/s: {r.get('ratio', float('nan')):.2f}"
    else:
      what = "; ".join(f"{k}: {v['compile_s']:.1f} s" for k, v in r["variants"].items())
    lines.append(f"{head} {e.get('seconds', 0):7.1f} s  {what}")
  return "\n".join(lines)


# -- what launch/cost.py reads -------------------------------------------------------


def cost_figures(report: Dict[str, Any], source: str) -> Dict[str, Any]:
  """A check's measurements as launch/cost.py's GPU figures (its cost_gpu.json).

  ValueError unless the check ran on a GPU and holds what the model needs: a cold and
  a warm compile row, a whole run, and ours' step at 16 nodes (steady; else the run's
  own steps per second).
  """
  def ok(row, phase=None):
    return [e for e in report["rows"] if e["row"] == row and e["status"] == "ok"
            and (phase is None or e["phase"] == phase)]
  runs = {e["phase"]: e["result"] for e in ok("run")}
  compiles = {e["phase"]: e["result"]["compile_s"] for e in ok("compile")
              if e["lever"] == (ok("run")[0]["lever"] if ok("run") else "pin")}
  if "cold" not in runs or set(compiles) != {"cold", "warm"}:
    raise ValueError("the check needs a cold and a warm run row and compile row of one "
                     "lever, all ok")
  device = runs["cold"]["device"]
  if device["backend"] == "cpu" and not report.get("tiny"):
    raise ValueError("the check ran on the CPU: no GPU figures in it")
  steps = {a: v["ours"]["ms_per_step"] / 1e3 for e in ok("steady") for a, v in e["result"].items()}
  if not steps:
    steps = {RUN_ALGORITHM: 1.0 / runs["cold"]["steps_per_s"]}
  lever = ok("run")[0]["lever"]
  return {
      "schema": COST_SCHEMA,
      "what": ("GPU figures behind launch/cost.py's estimates of a sweep that asks "
               "for GPUs, from one benchmarks/gpu_check.py report"),
      "source": source, "date": report["date"], "device_kind": device["device_kind"],
      "lever": {"name": lever, "env": LEVERS[lever]},
      "train_step_s_at_16_nodes": steps,
      "compile_s_per_shape": compiles,
      "whole_run": {"algorithm": RUN_ALGORITHM, "model": "forget",
                    "settings": runs["cold"]["settings"],
                    "wall_s": {p: r["wall_s"] for p, r in runs.items()},
                    "train_time_s": runs["cold"]["train_time_s"],
                    "eval_time_s": runs["cold"]["eval_time_s"]},
  }


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  p = argparse.ArgumentParser(prog="python benchmarks/gpu_check.py",
                              description=__doc__.split("\n")[0])
  p.add_argument("--rows", default=DEFAULT_ROWS,
                 help=f"rows, each name[@lever+lever], or a preset ({', '.join(PRESETS)}); "
                      f"rows: {', '.join(ROWS)}; levers: {', '.join(LEVERS)}, best "
                      f"(default: {DEFAULT_ROWS}; levers: {LEVER_ROWS})")
  p.add_argument("--budget-s", type=float, default=450.0,
                 help="seconds for all rows; a row stops where it ends (default 450)")
  p.add_argument("--tiny", action="store_true", help="a CPU-sized check (tests)")
  p.add_argument("--out", default=None,
                 help="JSON path (default: $OUT/gpu_check.json, else ./gpu_check.json)")
  p.add_argument("--cost-figures", metavar="CHECK_JSON", default=None,
                 help="write the GPU figures of launch/cost.py from a check's JSON "
                      "to --out (default: stdout)")
  p.add_argument("--worker", choices=ROWS, help=argparse.SUPPRESS)
  p.add_argument("--worker-out", help=argparse.SUPPRESS)
  p.add_argument("--worker-cache", help=argparse.SUPPRESS)
  p.add_argument("--worker-dir", help=argparse.SUPPRESS)
  p.add_argument("--worker-lever", default="pin", choices=LEVERS, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.worker:
    print(f"{WORKER_STARTED}: {args.worker} ({args.worker_lever}), pid {os.getpid()}",
          flush=True)
    from nar_markov import quiet  # pylint: disable=g-import-not-at-top
    quiet.setup()
    return worker(args.worker, args.worker_out, lever=args.worker_lever, tiny=args.tiny,
                  cache=args.worker_cache, work=args.worker_dir)
  if args.cost_figures:
    try:
      figures = cost_figures(json.loads(pathlib.Path(args.cost_figures).read_text()),
                             args.cost_figures)
    except (OSError, ValueError, KeyError) as e:
      print(f"gpu_check.py: error: {args.cost_figures}: {e}", file=sys.stderr)
      return 2
    text = json.dumps(figures, indent=1) + "\n"
    if args.out:
      pathlib.Path(args.out).write_text(text)
    else:
      print(text, end="")
    return 0
  try:
    parse_rows(args.rows)
  except ValueError as e:
    print(f"gpu_check.py: error: --rows: {e}", file=sys.stderr)
    return 2
  out = pathlib.Path(args.out or os.path.join(os.environ.get("OUT", "."), "gpu_check.json"))
  out.parent.mkdir(parents=True, exist_ok=True)
  report = run_check(args.rows, budget_s=args.budget_s, tiny=args.tiny, out=out,
                     argv=["python", "benchmarks/gpu_check.py"] + argv)
  print(summary(report))
  _log(f"wrote {out} in {report['total_s']:.0f} s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
