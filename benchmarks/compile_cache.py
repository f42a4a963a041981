"""What JAX's persistent compilation cache saves a sweep's second run of an algorithm.

    python benchmarks/compile_cache.py [--algorithms bfs,insertion_sort,...]
        [--gin gin/forget.gin] [--gin_param BINDING] [--train-steps 5] [--out FILE.json]

For each algorithm, two fresh processes train the same run through the sweep's job
(`sweep_spec.Job(experiment.run_from_gin)`, as `--cluster local` runs it), each with its
own new results folder: the first with an empty cache folder (cold), the second with
the folder the first one filled (warm).  The run is the full protocol's (hidden 128,
batch 32, the five train sizes, validation on run.py's pool, the whole official test
split) cut to `--train-steps` steps (each train size once with the default 5) with
`Protocol.schedule_steps` = 10,000, so that every function it compiles is the one a
10,000-step run compiles (the schedule's horizon is a constant of the train step):
the same compilations as a whole run, which compiles one train step per train size
(one time bucket each, nar_markov.data.batching.time_bucket), the validation and the test step.

Each worker records every backend compilation (`jax.monitoring`'s
'/jax/core/compile/backend_compile_duration': for a cache hit it times the load) and
what jax's compiler said of it (common.CacheLog): a hit, a miss, and why a miss was
not written -- on CPU, a step whose scratch XLA:CPU split into heaps
(NetConfig.xla_heap_mib) cannot be serialised ("Multiple temp buffer allocations
found"), and one compiled in under jax_persistent_cache_min_compile_time_secs (0.5 s)
is not worth it.  Reported per algorithm: compile seconds and wall time of each
process, compile seconds cold / warm, and per function the compilations, seconds,
hits and the reasons for entries not written.  Each is timed in wall seconds and in
CPU seconds (of the process, and of the compiling thread: common.CacheLog), and each
process's CPU seconds in all: on a machine others load, wall seconds stretch with the
load (the machine's load average is recorded before and after each process), CPU
seconds much less, so the ratios cold / warm to read are the CPU ones.
Writes JSON (schema `nar_markov.compile_cache/1`) after every algorithm; a report already
at `--out` with the same settings is resumed (its algorithms are skipped).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Optional, Sequence

if __package__ in (None, ""):  # run by path: make `benchmarks` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

SCHEMA = "nar_markov.compile_cache/1"
DEFAULT_ALGORITHMS = ("bfs", "insertion_sort", "binary_search",
                      "find_maximum_subarray_kadane", "floyd_warshall")
DEFAULT_GIN = ("gin/forget.gin",)
# Every compiled function of a 10,000-step run: its schedule's horizon, one
# validation after the last step and the test pass.
RUN_PARAMS = ("Protocol.schedule_steps = 10000",)
REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_params(train_steps: int) -> list:
  """gin bindings of the cut run: `train_steps` steps, validated at 0 and at the end."""
  return list(RUN_PARAMS) + [f"Protocol.train_steps = {train_steps}",
                             f"Protocol.eval_every_steps = {train_steps}",
                             f"Protocol.log_every_steps = {train_steps}",
                             f"Protocol.checkpoint_every_steps = {train_steps}"]


def worker(algorithm: str, gin_files: Sequence[str], gin_params: Sequence[str],
           results_dir: str) -> Dict[str, Any]:
  """One run in this (fresh) process, as a sweep's job; its compilations."""
  from benchmarks import common  # pylint: disable=g-import-not-at-top  (imports jax)
  from launch import sweep_spec  # pylint: disable=g-import-not-at-top
  from nar_markov.training import experiment  # pylint: disable=g-import-not-at-top
  counter = common.CompileCounter()
  cache_log = common.CacheLog()
  t0, cpu0 = time.perf_counter(), common.cpu_seconds()
  try:
    paths = sweep_spec.Job(experiment.run_from_gin)(dict(
        gin_files=list(gin_files), gin_params=list(gin_params), algorithms=[algorithm],
        seeds=[0], results_dir=results_dir))
  finally:
    wall_s, cpu_s = time.perf_counter() - t0, common.cpu_seconds() - cpu0
    cache_log.close()
    counter.close()
  result = json.loads(pathlib.Path(paths[0]).read_text())
  import jax  # pylint: disable=g-import-not-at-top
  by_function = cache_log.by_function()
  return {"wall_s": wall_s, "cpu_s": cpu_s, "compile_s": counter.seconds,
          "compile_cpu_s": sum(f["cpu_s"] for f in by_function.values()),
          "compile_thread_cpu_s": sum(f["thread_cpu_s"] for f in by_function.values()),
          "compilations": counter.count,
          "trace_s": counter.trace_s, "lower_s": counter.lower_s,
          "cache_dir": jax.config.jax_compilation_cache_dir,
          "by_function": by_function, "records": cache_log.records,
          "train_time_s": result["train_time_s"], "eval_time_s": result["eval_time_s"],
          "steps": result["steps"], "device": result["device"]}


def _run_worker(algorithm: str, gin_files, gin_params, cache_dir: str,
                results_dir: str) -> Dict[str, Any]:
  out = pathlib.Path(results_dir) / "worker.json"
  env = dict(os.environ, NAR_MARKOV_JAX_CACHE=cache_dir)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker",
         "--algorithms", algorithm, "--worker-results", results_dir, "--worker-out", str(out)]
  for f in gin_files:
    cmd += ["--gin", f]
  for p in gin_params:
    cmd += ["--gin_param", p]
  load = list(os.getloadavg())
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, env=env, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, check=False)
  if proc.returncode != 0 or not out.exists():
    raise RuntimeError(f"compile_cache worker for {algorithm} failed (exit "
                       f"{proc.returncode}); see its stderr above")
  res = json.loads(out.read_text())
  res.update(process_s=time.perf_counter() - t0, loadavg=load, loadavg_end=list(os.getloadavg()))
  return res


def measure(algorithm: str, gin_files, gin_params) -> Dict[str, Any]:
  """Cold then warm, in fresh processes sharing one new cache folder."""
  with tempfile.TemporaryDirectory(prefix="nar_markov_cache_") as tmp:
    cache = str(pathlib.Path(tmp) / "jax_cache")
    res = {}
    for which in ("cold", "warm"):
      results = pathlib.Path(tmp) / which
      results.mkdir()
      res[which] = _run_worker(algorithm, gin_files, gin_params, cache, str(results))
      _log(f"{algorithm}: {which}: {res[which]['compile_s']:.1f} s compiling "
           f"({res[which]['compile_cpu_s']:.1f} CPU s, {res[which]['compilations']} "
           f"compilations), wall {res[which]['wall_s']:.1f} s ({res[which]['cpu_s']:.1f} CPU s)")
    res["cache_entries"] = len(list(pathlib.Path(cache).glob("*")))
  for key in ("compile_s", "compile_cpu_s", "compile_thread_cpu_s", "wall_s", "cpu_s"):
    res[f"ratio_{key}"] = res["cold"][key] / max(res["warm"][key], 1e-9)
  res["saved_compile_s"] = res["cold"]["compile_s"] - res["warm"]["compile_s"]
  res["saved_compile_cpu_s"] = res["cold"]["compile_cpu_s"] - res["warm"]["compile_cpu_s"]
  res["missed_warm"] = missed(res["warm"]["by_function"])
  return res


def missed(by_function: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
  """The functions a warm run compiled again, with their seconds and why the cold run
  did not write them."""
  return {name: {"compilations": f["misses"], "seconds": f["seconds"], "cpu_s": f["cpu_s"],
                 "not_written": f["not_written"]}
          for name, f in by_function.items() if f["misses"]}


def _log(msg: str) -> None:
  print(f"[compile_cache] {msg}", file=sys.stderr, flush=True)


def markdown_table(report: Dict[str, Any]) -> str:
  rows = ["| algorithm | cold compile CPU s | warm compile CPU s | cold / warm "
          "| cold compile s | warm compile s | cold / warm | cold CPU s of the run "
          "| warm CPU s of the run | compiled again when warm (CPU s) |",
          "|---|---|---|---|---|---|---|---|---|---|"]
  for algorithm, r in report["algorithms"].items():
    again = ", ".join(f"{name} x{f['compilations']} ({f['cpu_s']:.1f})"
                      for name, f in sorted(r["missed_warm"].items(),
                                            key=lambda kv: -kv[1]["cpu_s"]))
    c, w = r["cold"], r["warm"]
    rows.append(f"| {algorithm} | {c['compile_cpu_s']:.1f} | {w['compile_cpu_s']:.1f} "
                f"| {r['ratio_compile_cpu_s']:.2f} | {c['compile_s']:.1f} | {w['compile_s']:.1f} "
                f"| {r['ratio_compile_s']:.2f} | {c['cpu_s']:.1f} | {w['cpu_s']:.1f} "
                f"| {again or 'none'} |")
  return "\n".join(rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  p = argparse.ArgumentParser(prog="python benchmarks/compile_cache.py",
                              description=__doc__.split("\n")[0])
  p.add_argument("--algorithms", default=",".join(DEFAULT_ALGORITHMS))
  p.add_argument("--gin", action="append", default=None, metavar="FILE",
                 help=f"gin files of the run (default: {' '.join(DEFAULT_GIN)})")
  p.add_argument("--gin_param", action="append", default=[], metavar="BINDING",
                 help="more bindings, after the cut run's own")
  p.add_argument("--train-steps", type=int, default=5,
                 help="steps of the cut run (5: each train size once)")
  p.add_argument("--out", default=None, help="JSON report path")
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--worker-results", help=argparse.SUPPRESS)
  p.add_argument("--worker-out", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  gin_files = args.gin or list(DEFAULT_GIN)
  algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
  if args.worker:
    from nar_markov import quiet  # pylint: disable=g-import-not-at-top
    quiet.setup()
    from benchmarks import common  # pylint: disable=g-import-not-at-top
    common.write_json(args.worker_out, worker(algorithm=algorithms[0], gin_files=gin_files,
                                              gin_params=args.gin_param,
                                              results_dir=args.worker_results), indent=None)
    return 0
  from nar_markov.config import clrs30  # pylint: disable=g-import-not-at-top  (no jax)
  try:
    algorithms = [clrs30.check_algorithm(a) for a in algorithms]
  except ValueError as e:
    print(f"compile_cache.py: error: {e}", file=sys.stderr)
    return 2
  gin_params = run_params(args.train_steps) + list(args.gin_param)
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from nar_markov.store import util  # pylint: disable=g-import-not-at-top
  report = {"schema": SCHEMA,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": common.machine_info(), "versions": util.package_versions(),
            "settings": {"gin": gin_files, "gin_params": gin_params,
                         "train_steps": args.train_steps,
                         "command": ["python", "benchmarks/compile_cache.py"] + argv},
            "algorithms": {}}
  if args.out and pathlib.Path(args.out).exists():  # resumed: its algorithms are kept
    previous = json.loads(pathlib.Path(args.out).read_text())
    if previous["settings"]["gin_params"] != gin_params or previous["settings"]["gin"] != gin_files:
      print(f"compile_cache.py: error: {args.out} was measured with other settings; "
            "choose another --out", file=sys.stderr)
      return 2
    report["algorithms"], report["date"] = previous["algorithms"], previous["date"]
  for algorithm in algorithms:
    if algorithm in report["algorithms"]:
      continue
    report["algorithms"][algorithm] = measure(algorithm, gin_files, gin_params)
    if args.out:
      common.write_json(args.out, report)
  print(markdown_table(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
