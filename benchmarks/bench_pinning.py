"""Runs per hour on this machine: one job on all cores vs one job pinned to each core.

    python benchmarks/bench_pinning.py --gin gin/forget.gin [--gin_param B ...]
        [--algorithm insertion_sort] [--steps 200] [--rounds 2] [--out FILE.json]

Each job is a real training run (`experiment.run_experiment` under the given gin
files, in its own process, into a fresh results folder, the data and compilation
caches warmed by a first, untimed job).  Two ways to train two runs:

- shared: the two runs one after another, each process free to use every core
  (XLA's default intra-op threading);
- pinned: the two runs at the same time, each process pinned to one core
  (`taskset -c k`) with XLA single-threaded.

Rounds alternate the two orders.  Reported per round and mode: the wall time
of the pair (process start to the second result), the summed `train_time_s`
of the two runs, and runs per hour = 2 * 3600 / pair wall time; `ratio` =
pinned / shared runs per hour (> 1: pinning one job per core finishes more).
Writes JSON (schema `nar_markov.bench_pinning/1`) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

REPO = pathlib.Path(__file__).resolve().parents[1]
SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def log(msg: str) -> None:
  print(f"[bench_pinning] {msg}", file=sys.stderr, flush=True)


def worker(gin_files: Sequence[str], gin_params: Sequence[str], algorithm: str,
           seed: int, results_dir: str) -> None:
  """One training run in this process; prints its result's timings as one JSON line."""
  from nar_markov.config import gin_files as config_lib  # pylint: disable=g-import-not-at-top
  from nar_markov.training import experiment  # pylint: disable=g-import-not-at-top
  config_lib.parse_gin(gin_files, gin_params)
  result = experiment.run_experiment(algorithm=algorithm, seed=seed,
                                     results_dir=results_dir)[algorithm][seed]
  print(json.dumps({"train_time_s": result["train_time_s"],
                    "eval_time_s": result["eval_time_s"], "steps": result["steps"]}))


def _command(args, seed: int, results_dir: str) -> List[str]:
  cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker",
         "--algorithm", args.algorithm, "--seed", str(seed), "--results", results_dir]
  for g in args.gin:
    cmd += ["--gin", g]
  for p in args.gin_param + [f"Protocol.train_steps={args.steps}",
                             f"Protocol.checkpoint_every_steps={args.steps}"]:
    cmd += ["--gin_param", p]
  return cmd


def _run_pair(args, mode: str, workdir: pathlib.Path) -> Dict[str, Any]:
  """Two runs (seeds 0 and 1) in `mode`; their timings and the pair's wall time."""
  results = tempfile.mkdtemp(dir=workdir, prefix=f"{mode}-")
  env = dict(os.environ, PYTHONPATH=str(REPO))
  t0 = time.time()
  if mode == "shared":
    outs = [subprocess.run(_command(args, s, results), cwd=REPO, env=env, check=True,
                           capture_output=True, text=True).stdout for s in (0, 1)]
  else:
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + SINGLE_THREAD_XLA).strip()
    procs = [subprocess.Popen(["taskset", "-c", str(core)] + _command(args, s, results),
                              cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for core, s in ((0, 0), (1, 1))]
    outs = []
    for p in procs:
      out, err = p.communicate()
      if p.returncode:
        raise RuntimeError(f"pinned worker failed: {err[-2000:]}")
      outs.append(out)
  wall = time.time() - t0
  runs_ = [json.loads(o.strip().splitlines()[-1]) for o in outs]
  return {"mode": mode, "pair_wall_s": wall, "runs_per_hour": 2 * 3600 / wall,
          "train_time_s": [r["train_time_s"] for r in runs_],
          "eval_time_s": [r["eval_time_s"] for r in runs_]}


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--gin", action="append", default=[])
  parser.add_argument("--gin_param", action="append", default=[])
  parser.add_argument("--algorithm", default="insertion_sort")
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--out", default=None)
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--results", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if not args.gin:
    parser.error("give at least one --gin file (a model file, e.g. gin/forget.gin)")
  if args.worker:
    worker(args.gin, args.gin_param, args.algorithm, args.seed, args.results)
    return 0
  if (os.cpu_count() or 1) < 2:
    parser.error("needs at least 2 cores")
  with tempfile.TemporaryDirectory(prefix="bench_pinning-") as tmp:
    workdir = pathlib.Path(tmp)
    log("warming the data and compilation caches (one untimed run)")
    subprocess.run(_command(args, 0, str(workdir / "warm")), cwd=REPO, check=True,
                   capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    rows = []
    for r in range(args.rounds):
      for mode in (("shared", "pinned") if r % 2 == 0 else ("pinned", "shared")):
        row = _run_pair(args, mode, workdir)
        row["round"] = r
        rows.append(row)
        log(f"round {r} {mode}: pair {row['pair_wall_s']:.1f} s, "
            f"{row['runs_per_hour']:.2f} runs/h")
  per_mode = {m: statistics.median(r["runs_per_hour"] for r in rows if r["mode"] == m)
              for m in ("shared", "pinned")}
  report = {"schema": "nar_markov.bench_pinning/1",
            "created": datetime.datetime.now().isoformat(timespec="seconds"),
            "gin": args.gin, "gin_param": args.gin_param, "algorithm": args.algorithm,
            "steps": args.steps, "cpu_count": os.cpu_count(), "loadavg": os.getloadavg(),
            "rounds": rows, "median_runs_per_hour": per_mode,
            "ratio": per_mode["pinned"] / per_mode["shared"]}
  print("| mode | runs/h (median) | pair wall s (per round) |\n|---|---|---|")
  for m in ("shared", "pinned"):
    walls = ", ".join(f"{r['pair_wall_s']:.0f}" for r in rows if r["mode"] == m)
    print(f"| {m} | {per_mode[m]:.2f} | {walls} |")
  print(f"\nratio pinned / shared: {report['ratio']:.2f}")
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
