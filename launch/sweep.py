#!/usr/bin/env python
"""Launch a sweep (model x ALGORITHMS x SEEDS from gin) as one Slurm job array.

  python launch/sweep.py --gin gin/baseline.gin
  python launch/sweep.py --gin gin/forget.gin --gin_param "ALGORITHMS=['bfs','dfs']" \
      --gin_param "SEEDS=[0,1]" --results results
  python launch/sweep.py --gin gin/baseline.gin --gin gin/smoke.gin --cluster local
  python launch/sweep.py --gin gin/gforget.gin --dry-run
  python launch/sweep.py --status --results results [--gin gin/baseline.gin]

Runs that are done are skipped -- done means verified (nar_markov.runs.check_result,
the same test --status and the trainer use): a result.json that reads back with
the schema, a final status and the settings these gin files ask for -- as are
runs whose last job is still queued or running; the rest go out as ONE submitit
job array (resources: `slurm_resources.*` in gin, nar_markov/cluster.py).
A corrupt result.json is moved aside (result.json.corrupt-<timestamp>) and its
run trained again.  Results made with other settings (another budget, hidden
size, lambda, or an older version that recorded none) stop the sweep with a
list (exit 2, nothing submitted); --archive-mismatched moves those run folders
to <results>/_archive/<timestamp>/ and trains them again.

One sweep at a time per results folder: a sweep holds <results>/_sweeps/.lock
while it plans, writes its manifest (before submitting: the planned runs, then
their job ids) and submits; a second sweep waits for it, then sees the first
one's runs as queued or running and submits nothing twice.  With --cluster
local the lock is released once the manifest is written; the runs then train
one after another while the sweep lives, and count as queued meanwhile.

G-ForgetNet (gin/gforget.gin: lambda from calibration records) runs in two
stages from the one command: first one lambda-calibration job per algorithm
that has no record under --results yet (nar_markov/lambda_heuristic.py, calibrate.py), then the
G-ForgetNet runs; on Slurm each algorithm's G-ForgetNet tasks wait for its
calibration (`--dependency=afterok:<calibration task>`), locally the
calibrations run first.  --dry-run and --status show both stages; a record
that is unreadable or was made with other settings stops the sweep.  Every submission writes
``<results>/_sweeps/<timestamp>.json`` (job ids, runs, log paths) for --status.
Bad input (unknown algorithm, missing gin file, unknown binding, ...) exits
with code 2 before anything is submitted.

SEEDS_PER_JOB = K > 1 (gin macro, gin/base.gin): the runs to submit of each
(model, algorithm) go out in jobs of up to K seeds, trained together in one
process with one vmapped step (nar_markov.experiment.run_experiment, K-seed mode);
--dry-run lists the jobs.

--cluster auto: slurm if `sbatch` is on PATH, else local.  local: the runs one
after another on this machine, each in its own process (submitit
LocalExecutor).  debug: in this process (submitit DebugExecutor; pdb on error).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script: `python launch/sweep.py`
  sys.path.insert(0, str(REPO_ROOT))

from launch import status as status_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from nar_markov import quiet  # pylint: disable=g-import-not-at-top,wrong-import-position


class UsageError(Exception):
  """Bad input: reported as one line, exit code 2, nothing submitted."""


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--gin", action="append", default=[], metavar="FILE",
                 help="gin file (repeatable; relative to the cwd or the repo root)")
  p.add_argument("--gin_param", action="append", default=[], metavar="BINDING",
                 help="gin binding, e.g. \"SEEDS=[0,1]\" (repeatable; after the files)")
  p.add_argument("--cluster", choices=("auto", "slurm", "local", "debug"),
                 default="auto")
  p.add_argument("--results", default="results", metavar="DIR",
                 help="results root (default: ./results)")
  p.add_argument("--dry-run", action="store_true",
                 help="list the runs to submit and those skipped; submit nothing")
  p.add_argument("--status", action="store_true",
                 help="report done/diverged/running/failed/missing/corrupt/other per "
                      "model x algorithm")
  p.add_argument("--archive-mismatched", action="store_true",
                 help="move results made with other settings to <results>/_archive/ "
                      "and train those runs again (without it the sweep refuses them)")
  quiet.add_flag(p)
  return p.parse_args(argv)


def pick_cluster(name: str) -> str:
  if name == "auto":
    return "slurm" if shutil.which("sbatch") else "local"
  if name == "slurm" and shutil.which("sbatch") is None:
    raise UsageError("--cluster slurm: `sbatch` is not on PATH "
                     "(use --cluster local, or start Slurm: launch/local_slurm.sh start)")
  return name


def expand(gin_files, gin_params, results_dir):
  """cluster.expand_runs with bad input turned into UsageError."""
  from nar_markov import cluster  # pylint: disable=g-import-not-at-top
  if not gin_files:
    raise UsageError("no gin file given (--gin FILE, e.g. --gin gin/baseline.gin)")
  try:
    return cluster.expand_runs(gin_files, gin_params, results_dir)
  except (ValueError, FileNotFoundError) as e:
    raise UsageError(str(e)) from e


def in_flight(results_dir, runs) -> dict:
  """Runs (by key) whose last job is still queued/running -> that job's state."""
  jobs = status_lib.latest_jobs(status_lib.read_manifests(results_dir))
  keys = {(r.model, r.algorithm, r.seed) for r in runs}
  slurm = {k: j for k, j in jobs.items() if k in keys and j.get("cluster") == "slurm"}
  out = {}
  if slurm:
    try:
      queue = status_lib.squeue_states(j["job_id"] for j in slurm.values())
    except status_lib.SchedulerUnavailable:
      queue = {}
    for k, j in slurm.items():
      if str(j["job_id"]) in queue:
        out[k] = f"job {j['job_id']} {queue[str(j['job_id'])].lower()}"
  for k, j in jobs.items():
    if k in keys and j.get("cluster") == "local" and status_lib.local_job_alive(
        str(j.get("job_id"))):
      out[k] = f"local job {j['job_id']} running"
    elif k in keys and not j.get("job_id") and status_lib.planned_state(j):
      out[k] = status_lib.planned_state(j)
  return out


def in_flight_calibrations(results_dir, calibs) -> Dict[str, tuple]:
  """Calibrations (by algorithm) whose last job is still queued/running ->
  (job id, description)."""
  wanted = {(c.reading, c.algorithm) for c in calibs}
  last = {}
  for m in status_lib.read_manifests(results_dir):
    for j in m.get("calibration_jobs", []):
      key = (j.get("reading"), j.get("algorithm"))
      if key in wanted:
        last[key] = dict(j, cluster=m.get("cluster"), sweep=m.get("sweep"))
  out = {}
  for key, j in list(last.items()):
    if not j.get("job_id"):  # planned, not submitted yet
      del last[key]
      if status_lib.planned_state(j):
        out[key[1]] = (None, status_lib.planned_state(j))
  slurm = {k: j for k, j in last.items() if j["cluster"] == "slurm"}
  if slurm:
    try:
      queue = status_lib.squeue_states(j["job_id"] for j in slurm.values())
    except status_lib.SchedulerUnavailable:
      queue = {}
    for (_, alg), j in slurm.items():
      if str(j["job_id"]) in queue:
        out[alg] = (str(j["job_id"]), f"job {j['job_id']} {queue[str(j['job_id'])].lower()}")
  for (_, alg), j in last.items():
    if j["cluster"] == "local" and status_lib.local_job_alive(str(j.get("job_id"))):
      out[alg] = (str(j["job_id"]), f"local job {j['job_id']} running")
  return out


def _log_folder(results_dir) -> pathlib.Path:
  return pathlib.Path(results_dir) / status_lib.LOG_DIR / "%j"


def make_executor(cluster_name: str, results_dir, resources: dict):
  import submitit  # pylint: disable=g-import-not-at-top
  folder = _log_folder(results_dir)
  # Jobs start in other directories and may not see an editable install.
  pythonpath = f"export PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}"
  if cluster_name == "slurm":
    params = dict(resources)
    executor = submitit.AutoExecutor(
        folder=folder, cluster="slurm",
        slurm_max_num_timeout=params.pop("slurm_max_num_timeout"))
    params["slurm_setup"] = [pythonpath] + list(params.get("slurm_setup", []))
    executor.update_parameters(**params)
  elif cluster_name == "local":
    executor = submitit.AutoExecutor(folder=folder, cluster="local")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    executor.update_parameters(timeout_min=resources["timeout_min"],
                               local_setup=list(resources.get("slurm_setup", [])))
  elif cluster_name == "debug":
    executor = submitit.AutoExecutor(folder=folder, cluster="debug")
  else:
    raise UsageError(f"unknown cluster {cluster_name!r}")
  return executor


def job_record(run, job) -> dict:
  paths = job.paths
  return {"model": run.model, "algorithm": run.algorithm, "seed": run.seed,
          "run_dir": str(run.run_dir), "job_id": str(job.job_id),
          "stdout": str(paths.stdout), "stderr": str(paths.stderr),
          "result_pickle": str(paths.result_pickle)}


def calibration_record(calib, job) -> dict:
  paths = job.paths
  return {"algorithm": calib.algorithm, "reading": calib.reading,
          "record": str(calib.record_path), "job_id": str(job.job_id),
          "stdout": str(paths.stdout), "stderr": str(paths.stderr),
          "result_pickle": str(paths.result_pickle)}


class Manifest:
  """<results>/_sweeps/<timestamp>.json: what was submitted where (for --status)."""

  def __init__(self, results_dir, cluster_name, gin_files, gin_params, argv):
    from nar_markov import runs as runs_lib  # pylint: disable=g-import-not-at-top
    self._write_atomic = runs_lib.atomic_write_bytes
    now = datetime.datetime.now()
    d = status_lib.manifest_dir(results_dir)
    d.mkdir(parents=True, exist_ok=True)
    stem = now.strftime("%Y%m%d-%H%M%S-%f")
    self.path = d / f"{stem}.json"
    self.data = {"schema": status_lib.MANIFEST_SCHEMA,
                 "created": now.isoformat(timespec="seconds"),
                 "cluster": cluster_name, "argv": list(argv),
                 "gin_files": list(gin_files), "gin_params": list(gin_params),
                 "results_dir": str(results_dir),
                 "log_folder": str(_log_folder(results_dir)), "jobs": [],
                 "calibration_jobs": [],
                 # Planned entries (no job id yet) are in flight while this lives.
                 "sweep": status_lib.process_token()}

  def plan(self, runs, calibs=()) -> None:
    """The runs and calibrations this sweep is about to submit (before submitting:
    a second sweep on this folder sees them as queued)."""
    for c in calibs:
      self.data["calibration_jobs"].append(
          {"algorithm": c.algorithm, "reading": c.reading, "record": str(c.record_path),
           "job_id": None})
    for r in runs:
      self.data["jobs"].append({"model": r.model, "algorithm": r.algorithm,
                                "seed": r.seed, "run_dir": str(r.run_dir), "job_id": None})

  @staticmethod
  def _put(entries: list, record: dict, key) -> None:
    """Replace the planned entry of the same run (or calibration), else append."""
    for i, e in enumerate(entries):
      if not e.get("job_id") and key(e) == key(record):
        entries[i] = record
        return
    entries.append(record)

  def add(self, record: dict) -> None:
    self._put(self.data["jobs"], record,
              lambda e: (e["model"], e["algorithm"], int(e["seed"])))

  def add_calibration(self, record: dict) -> None:
    self._put(self.data["calibration_jobs"], record,
              lambda e: (e["reading"], e["algorithm"]))

  def save(self) -> None:
    self._write_atomic(self.path, json.dumps(self.data, indent=1).encode())


def group_name(group) -> str:
  """What one job trains, for progress lines."""
  run = group[0]
  if run.multitask:
    return f"{run.model}/seed{run.seed} ({len(run.job_algorithms)} algorithms)"
  if run.seeds_per_job > 1:
    return (f"{run.model}/{run.algorithm}/seeds "
            f"{','.join(str(r.seed) for r in group)} ({len(group)} seeds in one job)")
  return run.name


def submit_calibrations(executor, calibs, manifest) -> Dict[str, str]:
  """Stage 1 on Slurm: one array, a task per algorithm; algorithm -> task id."""
  from nar_markov import cluster  # pylint: disable=g-import-not-at-top
  if not calibs:
    return {}
  args = list(zip(*[c.job_args() for c in calibs]))
  jobs = executor.map_array(cluster.Job(), *args)
  for calib, job in zip(calibs, jobs):
    manifest.add_calibration(calibration_record(calib, job))
  manifest.save()
  return {c.algorithm: str(j.job_id) for c, j in zip(calibs, jobs)}


def submit_slurm(executor, runs, manifest, resources: dict,
                 after: Optional[Dict[str, str]] = None) -> List:
  """Stage 2 on Slurm.  `after`: algorithm -> the calibration task its runs
  wait for (`--dependency=afterok:<id>`): one array per such algorithm, one
  for all the others."""
  from nar_markov import cluster  # pylint: disable=g-import-not-at-top
  after = after or {}
  jobs = []
  # One job per run (multi-task: per seed; SEEDS_PER_JOB = K: up to K seeds).
  groups = cluster.job_groups(runs)
  by_dependency: Dict[Optional[str], list] = {}
  for group in groups:
    by_dependency.setdefault(after.get(group[0].algorithm), []).append(group)
  extra = dict(resources.get("slurm_additional_parameters", {}))
  for dependency, dep_groups in by_dependency.items():
    # A failed calibration cancels its algorithm's runs (Slurm would otherwise
    # keep them pending forever with DependencyNeverSatisfied).
    executor.update_parameters(slurm_additional_parameters=dict(
        extra, **({"dependency": f"afterok:{dependency}", "kill-on-invalid-dep": "yes"}
                  if dependency else {})))
    # One array per MAX_ARRAY_SIZE jobs (one array for any single-model sweep).
    for start in range(0, len(dep_groups), cluster.MAX_ARRAY_SIZE):
      chunk = dep_groups[start:start + cluster.MAX_ARRAY_SIZE]
      calls = [cluster.job_call(g) for g in chunk]
      args = list(zip(*[a for _, a in calls]))
      chunk_jobs = executor.map_array(calls[0][0], *args)
      for group, job in zip(chunk, chunk_jobs):
        for run in group:
          manifest.add(dict(job_record(run, job), after=dependency))
      jobs += list(zip(chunk, chunk_jobs))
  executor.update_parameters(slurm_additional_parameters=extra)
  manifest.save()
  return jobs


def run_calibrations(executor, calibs, manifest, cluster_name) -> Dict[str, str]:
  """Stage 1, local/debug: one calibration at a time; algorithm -> failure."""
  from nar_markov import cluster  # pylint: disable=g-import-not-at-top
  failed = {}
  for i, calib in enumerate(calibs, 1):
    t0 = time.time()
    job = executor.submit(cluster.Job(), *calib.job_args())
    record = calibration_record(calib, job)
    manifest.add_calibration(record)
    manifest.save()
    where = f" (pid {job.job_id}, log {record['stderr']})" if cluster_name == "local" else ""
    print(f"[calibration {i}/{len(calibs)}] {calib.name}: started{where}", flush=True)
    try:
      job.result()
      rec = json.loads(calib.record_path.read_text())
      outcome = (f"lambda = {rec['lambda']:.6g} (share {rec.get('share', 0):.3f}, "
                 f"status {rec.get('status')})")
    except KeyboardInterrupt:
      job.cancel()
      record["outcome"] = "interrupted by the user"
      manifest.save()
      raise
    except Exception as e:  # pylint: disable=broad-except
      lines = [l for l in str(e).strip().splitlines() if l.strip()]
      outcome = f"failed: {lines[-1] if lines else type(e).__name__}"
      failed[calib.algorithm] = outcome
      record["outcome"] = outcome
      manifest.save()
    print(f"[calibration {i}/{len(calibs)}] {calib.name}: {outcome} in "
          f"{time.time() - t0:.1f}s", flush=True)
  return failed


def run_sequentially(executor, runs, manifest, cluster_name) -> int:
  """local/debug: one job at a time, with progress; returns how many runs failed."""
  from nar_markov import cluster  # pylint: disable=g-import-not-at-top
  t_sweep = time.time()
  failures = 0
  # One job per run (multi-task: per seed; SEEDS_PER_JOB = K: up to K seeds).
  groups = cluster.job_groups(runs)
  n = len(groups)
  for i, group in enumerate(groups, 1):
    run = group[0]
    name = group_name(group)
    several = run.multitask or run.seeds_per_job > 1
    t0 = time.time()
    job_fn, job_args = cluster.job_call(group)
    job = executor.submit(job_fn, *job_args)
    records = [job_record(r, job) for r in group]
    for record in records:
      manifest.add(record)
    record = records[0]
    manifest.save()
    where = f" (pid {job.job_id}, log {record['stderr']})" if cluster_name == "local" else ""
    print(f"[{i}/{n}] {name}: started{where}", flush=True)
    try:
      paths = job.result()
      paths = [paths] if isinstance(paths, str) else list(paths)
      outcome = "done"
      missing = [p for p in paths if not pathlib.Path(p).exists()]
      if not paths or missing:
        outcome = "failed: no result.json written"
        failures += len(missing) if paths else len(group)
      else:
        outcomes = []
        for path in paths:
          res = json.loads(pathlib.Path(path).read_text())
          prefix = (f"{res.get('algorithm')}: " if run.multitask else
                    f"seed{res.get('seed')}: " if several else "")
          outcomes.append(
              prefix + f"{res.get('status')} (steps {res.get('steps')}, "
              f"test_score {res.get('test_score')})")
        outcome = "; ".join(outcomes)
    except KeyboardInterrupt:
      job.cancel()
      for r in records:
        r["outcome"] = "interrupted by the user"
      manifest.save()
      raise
    except Exception as e:  # pylint: disable=broad-except
      failures += len(group)
      lines = [l for l in str(e).strip().splitlines() if l.strip()]
      outcome = f"failed: {lines[-1] if lines else type(e).__name__}"
      for r in records:
        r["outcome"] = outcome
      manifest.save()
    print(f"[{i}/{n}] {name}: {outcome} in {time.time() - t0:.1f}s "
          f"(sweep elapsed {time.time() - t_sweep:.1f}s)", flush=True)
  return failures


def describe_resources(resources: dict) -> str:
  keys = [("slurm_partition", "partition"), ("cpus_per_task", "cpus_per_task"),
          ("mem_gb", "mem_gb"), ("slurm_gpus_per_task", "gpus_per_task"),
          ("timeout_min", "timeout_min"),
          ("slurm_array_parallelism", "array_parallelism")]
  parts = [f"{label}={resources.get(k, 'default' if k == 'slurm_partition' else 0)}"
           for k, label in keys]
  return " ".join(parts)


def cmd_status(args) -> int:
  results_dir = pathlib.Path(args.results).expanduser().resolve()
  expected = None
  if args.gin:
    from nar_markov import cluster  # pylint: disable=g-import-not-at-top
    runs = expand(args.gin, args.gin_param, results_dir)
    expected = cluster.expected_definitions(runs)  # what the sweep would ask for
  elif not results_dir.is_dir():
    raise UsageError(f"no results folder {results_dir}")
  statuses, warnings = status_lib.classify(results_dir, expected)
  print(status_lib.format_report(results_dir, statuses, warnings))
  return 0


def cmd_sweep(args, argv) -> int:
  results_dir = pathlib.Path(args.results).expanduser().resolve()
  cluster_name = pick_cluster(args.cluster)
  runs = expand(args.gin, args.gin_param, results_dir)
  from nar_markov import cluster  # pylint: disable=g-import-not-at-top
  resources = cluster.slurm_resources()  # bound by the gin just parsed

  if args.dry_run:
    return _sweep_plan(args, runs, results_dir, cluster_name, resources, argv,
                       release=lambda: None)
  # One sweep at a time plans and submits on a results folder (runs.sweep_lock);
  # local runs train after the lock is released (their manifest says queued).
  from nar_markov import runs as runs_lib  # pylint: disable=g-import-not-at-top
  with contextlib.ExitStack() as lock:
    lock.enter_context(runs_lib.sweep_lock(results_dir))
    return _sweep_plan(args, runs, results_dir, cluster_name, resources, argv,
                       release=lock.close)


def _sweep_plan(args, runs, results_dir, cluster_name, resources, argv, release) -> int:
  """Plan (done, in flight, to submit), then print it (--dry-run) or submit it.
  `release()` gives the sweep lock back (once the manifest is written)."""
  from nar_markov import cluster  # pylint: disable=g-import-not-at-top
  from nar_markov import runs as runs_lib  # pylint: disable=g-import-not-at-top
  expected = cluster.expected_definitions(runs)
  verdicts = {r.key: runs_lib.check_result(r.run_dir, expected[r.key]) for r in runs}
  done = [r for r in runs if verdicts[r.key].done]
  flying = in_flight(results_dir, [r for r in runs if r not in done])
  todo = [r for r in runs if r not in done and r.key not in flying]
  corrupt = [r for r in todo if verdicts[r.key].state == "corrupt"]
  other = [r for r in todo if verdicts[r.key].state == "other"]
  if other and not args.archive_mismatched:
    raise UsageError(
        f"{len(other)} runs have results made with other settings (nothing was "
        "submitted):\n  " + "\n  ".join(f"{r.name}: {verdicts[r.key].detail}"
                                        for r in other)
        + f"\nUse another --results folder, or --archive-mismatched to move them to "
        f"{pathlib.Path(results_dir) / runs_lib.ARCHIVE_DIR}/<timestamp>/ and train "
        "them again.")
  # Stage 1 (G-ForgetNet with lambda from calibration records).
  calibs, calibrated, problems = cluster.calibration_plan(runs)
  if problems:
    raise UsageError("lambda calibration records that cannot be used (nothing was "
                     "submitted):\n  " + "\n  ".join(problems))
  calib_flying = in_flight_calibrations(results_dir, calibs)
  calib_todo = [c for c in calibs if c.algorithm not in calib_flying]
  # Only the algorithms with runs left to train need their lambda now.
  needed = {r.algorithm for r in todo}
  calib_todo = [c for c in calib_todo if c.algorithm in needed]
  model = runs[0].model
  summary = f"{len(todo)} runs to submit, {len(done)} already done"
  if flying:
    summary += f", {len(flying)} already queued or running"
  if corrupt:
    summary += f", {len(corrupt)} with a corrupt result.json (moved aside, rerun)"
  if other:
    summary += f", {len(other)} made with other settings (archived, rerun)"
  print(f"sweep {model}: {len(runs)} runs ({len({r.algorithm for r in runs})} algorithms x "
        f"{len({r.seed for r in runs})} seeds) on {cluster_name}; {summary}")
  if calibs or calibrated:
    reading = (calibs or [None])[0].reading if calibs else next(iter(calibrated.values()))["reading"]
    print(f"stage 1, lambda calibration ({reading} reading): {len(calib_todo)} algorithms to "
          f"calibrate, {len(calibrated)} calibrated, {len(calib_flying)} calibrating")
  k = runs[0].seeds_per_job
  if args.dry_run:
    if calibs or calibrated:
      for alg in sorted({r.algorithm for r in runs}):
        if alg in calibrated:
          c = calibrated[alg]
          tag, what = "skip", f"record: lambda = {c['lambda']:.6g} ({c['record']})"
        elif alg in calib_flying:
          tag, what = "skip", calib_flying[alg][1]
        elif alg in needed:
          tag, what = "calibrate", str(next(c for c in calibs if c.algorithm == alg).record_path)
        else:
          tag, what = "skip", "no runs left to train"
        print(f"  {tag:<12} {'calibrate/' + alg:<40} {what}")
      print("stage 2, training:")
    waits = {c.algorithm for c in calibs}
    for r in runs:
      key = (r.model, r.algorithm, r.seed)
      tag = ("skip (done)" if r in done else
             f"skip ({flying[key]})" if key in flying else "submit")
      after = " (after its calibration)" if tag == "submit" and r.algorithm in waits else ""
      if tag == "submit" and verdicts[key].state in ("corrupt", "other"):
        after += (f" ({verdicts[key].state}: {verdicts[key].detail}; "
                  + ("moved aside)" if verdicts[key].state == "corrupt" else "archived)"))
      print(f"  {tag:<12} {r.name:<40} {r.run_dir}{after}")
    if k > 1 and todo:
      groups = cluster.job_groups(todo)
      print(f"{len(groups)} jobs of up to {k} seeds (SEEDS_PER_JOB={k}), "
            "each seed-group trained in one process:")
      for i, group in enumerate(groups, 1):
        print(f"  job {i:<4} {group[0].model}/{group[0].algorithm} seeds "
              + ",".join(str(r.seed) for r in group))
    if cluster_name == "slurm":
      per = f"job (up to {k} seeds)" if k > 1 else "run"
      print(f"slurm resources per {per}: {describe_resources(resources)}")
    print(f"gin: {' '.join(runs[0].gin_files)}"
          + "".join(f" --gin_param {shlex.quote(p)}" for p in runs[0].gin_params))
    from nar_markov import cost  # pylint: disable=g-import-not-at-top
    print(cost.format_estimate(cost.count_by_algorithm(r.algorithm for r in todo),
                               cost.settings_from_gin()))
    if calib_todo:
      from nar_markov import lambda_heuristic  # pylint: disable=g-import-not-at-top
      print(cost.format_calibration_estimate(
          [c.algorithm for c in calib_todo], cost.settings_from_gin(),
          lambda_heuristic.LambdaHeuristic()))
    print("dry run: nothing submitted")
    return 0
  if not todo:
    return 0

  for r in corrupt:
    print(f"{r.name}: corrupt result.json ({verdicts[r.key].detail}); moved aside to "
          f"{runs_lib.move_aside(verdicts[r.key].path)}")
  for r in other:
    print(f"{r.name}: {verdicts[r.key].detail}; archived to "
          f"{runs_lib.archive_run(results_dir, r.run_dir)}")
  executor = make_executor(cluster_name, results_dir, resources)
  manifest = Manifest(results_dir, cluster_name, runs[0].gin_files,
                      runs[0].gin_params, argv)
  # Written before anything is submitted: a sweep that waited for the lock
  # sees these runs as queued (status_lib.planned_state), not as to do.
  manifest.plan(todo, calib_todo)
  manifest.save()
  import submitit  # pylint: disable=g-import-not-at-top
  if cluster_name == "slurm":
    try:
      after = submit_calibrations(executor, calib_todo, manifest)
      if after:
        print(f"submitted {len(after)} lambda calibrations as job array "
              f"{sorted({j.split('_')[0] for j in after.values()})[0]}:")
        for alg, job_id in after.items():
          print(f"  {job_id:<12} calibrate/{alg}")
      after.update({alg: job_id for alg, (job_id, _) in calib_flying.items()
                    if alg in needed and job_id})
      submitted = submit_slurm(executor, todo, manifest, resources, after)
    except (subprocess.CalledProcessError, submitit.core.utils.FailedJobError) as e:
      # sbatch refused the script (unknown partition, account, limits...).
      raise UsageError(f"sbatch refused the job array: {e}") from e
    jobs = [j for _, j in submitted]
    arrays = sorted({str(j.job_id).split("_")[0] for j in jobs})
    what = (f"{len(todo)} runs in {len(jobs)} multi-task jobs (one per seed)"
            if todo[0].multitask else
            f"{len(todo)} runs in {len(jobs)} jobs of up to {k} seeds" if k > 1
            else f"{len(jobs)} runs")
    print(f"submitted {what} as job array {', '.join(arrays)} "
          f"({describe_resources(resources)})")
    for group, job in submitted:
      dep = after.get(group[0].algorithm)
      print(f"  {job.job_id:<12} {', '.join(r.name for r in group)}"
            + (f"  (after {dep})" if dep else ""))
    print(f"logs:     {_log_folder(results_dir)}  (%j = job id, e.g. "
          f"{jobs[0].paths.stderr})")
    print(f"results:  {results_dir}/<model>/<algorithm>/seed<k>/result.json")
    print(f"manifest: {manifest.path}")
    print(f"status:   python {pathlib.Path(__file__).relative_to(REPO_ROOT)} "
          f"--status --results {results_dir}")
    return 0
  release()
  print(f"logs: {_log_folder(results_dir)}; manifest: {manifest.path}")
  failed = run_calibrations(executor, calib_todo, manifest, cluster_name)
  if failed:
    skipped = [r for r in todo if r.algorithm in failed]
    for r in skipped:
      print(f"skip {r.name}: its lambda calibration {failed[r.algorithm]}")
    todo = [r for r in todo if r.algorithm not in failed]
  failures = run_sequentially(executor, todo, manifest, cluster_name)
  failures += sum(1 for r in runs if r.algorithm in failed and r not in done)
  print(f"{len(todo) - failures}/{len(todo)} runs finished, {failures} failed; "
        f"results in {results_dir}")
  return 1 if failures else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse_args(argv)
  try:
    return cmd_status(args) if args.status else cmd_sweep(args, argv)
  except UsageError as e:
    print(f"sweep.py: error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  quiet.setup()  # before anything imports clrs/tensorflow
  sys.exit(main())
