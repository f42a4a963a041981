"""launch/sweep.py without a real cluster: run expansion, bad input, dry runs,
the sbatch script it submits, and --status, against fake sbatch/squeue.

The real end-to-end sweeps (Slurm, local, requeue) are in tests/test_slurm.py.
"""

import json
import os
import pathlib
import pickle
import re
import signal
import stat
import subprocess
import sys
import time

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

from conftest import read_only  # pylint: disable=wrong-import-position  (tests/ is on sys.path)
from launch import cluster
from launch import job_logs
from launch import jobs as jobs_lib
from launch import status as status_lib
from launch import sweep
from launch import sweep_spec
from nar_markov.store import locks
from nar_markov.store import runs as runs_lib
from nar_markov.training import experiment

SMOKE = ["--gin", "gin/baseline.gin", "--gin", "gin/smoke.gin"]


def _scripts(fake):
  return sorted(fake["calls"].glob("script_*.sh"))


# -- run expansion -------------------------------------------------------------


def test_expand_runs_is_model_x_algorithms_x_seeds(tmp_path):
  runs = sweep_spec.expand_runs(
      ["gin/forget.gin", "gin/smoke.gin"],
      ["ALGORITHMS=['bfs','dfs']", "SEEDS=[0,1,2]"], str(tmp_path))
  assert [(r.model, r.algorithm, r.seed) for r in runs] == [
      ("forget", "bfs", 0), ("forget", "bfs", 1), ("forget", "bfs", 2),
      ("forget", "dfs", 0), ("forget", "dfs", 1), ("forget", "dfs", 2)]
  # Jobs start elsewhere: gin files and the results dir travel as absolute paths.
  assert runs[0].gin_files == (str(REPO_ROOT / "gin/forget.gin"),
                               str(REPO_ROOT / "gin/smoke.gin"))
  assert runs[0].results_dir == str(tmp_path.resolve())
  assert runs[4].run_dir == tmp_path.resolve() / "forget" / "dfs" / "seed1"
  job, kwargs = sweep_spec.job_call([runs[4]])
  assert job == sweep_spec.Job(experiment.run_from_gin)
  assert kwargs == dict(
      gin_files=list(runs[0].gin_files), gin_params=["ALGORITHMS=['bfs','dfs']", "SEEDS=[0,1,2]"],
      algorithms=["dfs"], seeds=[1], results_dir=str(tmp_path.resolve()), multitask=False)


def test_base_gin_sweeps_all_30_algorithms_and_10_seeds(tmp_path):
  runs = sweep_spec.expand_runs(["gin/baseline.gin"], [], str(tmp_path))
  assert len(runs) == 300
  assert len({r.algorithm for r in runs}) == 30 and {r.seed for r in runs} == set(range(10))


def test_slurm_resources_come_from_gin(tmp_path):
  sweep_spec.expand_runs(SMOKE[1::2], ["slurm_resources.cpus_per_task=1",
                                    "slurm_resources.mem_gb=2",
                                    "slurm_resources.partition='gpu'",
                                    "slurm_resources.gpus_per_task=1"], str(tmp_path))
  res = cluster.SlurmResources().executor_params()
  assert res["cpus_per_task"] == 1 and res["mem_gb"] == 2.0
  assert res["slurm_partition"] == "gpu" and res["slurm_gpus_per_task"] == 1
  assert res["timeout_min"] == 240 and res["slurm_array_parallelism"] == 64
  assert res["slurm_setup"] == ["export XLA_PYTHON_CLIENT_PREALLOCATE=false"]
  assert res["slurm_additional_parameters"] == {"requeue": True}


def test_the_job_pickles_by_name_and_checkpoint_resubmits_the_same_call(monkeypatch, tmp_path):
  from nar_markov.training import calibrate  # pylint: disable=g-import-not-at-top
  gin_file, results = str(REPO_ROOT / "gin/gforget.gin"), str(tmp_path / "results")
  calib = sweep_spec.Calibration("bfs", "schedule", (gin_file,), ("SEEDS=[0]",), results)
  job, kwargs = calib.job_call()
  pickled = pickle.dumps(job)
  # The function travels by its module and name: the job's process calls what that
  # name is there.
  monkeypatch.setattr(calibrate, "calibrate_from_gin", lambda **kw: ("called", kw))
  clone = pickle.loads(pickled)
  # The job reads its gin (GPU check, compilation cache) before it calls the function.
  assert clone(kwargs) == ("called", dict(gin_files=[gin_file], gin_params=["SEEDS=[0]"],
                                          algorithm="bfs", results_dir=results))
  delayed = clone.checkpoint(kwargs)
  assert delayed.function is clone
  assert delayed.args == (kwargs,) and delayed.kwargs == {}


# -- bad input: one error, exit code 2, nothing submitted ----------------------


@pytest.mark.parametrize("extra,message", [
    (["--gin", "gin/no_such_file.gin"], "gin file not found: 'gin/no_such_file.gin'"),
    (SMOKE + ["--gin_param", "ALGORITHMS=['bfs','bogo_sort']"],
     "unknown algorithm 'bogo_sort'"),
    (SMOKE + ["--gin_param", "Protocol.train_step=5"],
     "Configurable 'Protocol' doesn't have a parameter named 'train_step'"),
    (SMOKE + ["--gin_param", "slurm_resources.mem=2"],
     "Configurable 'slurm_resources' doesn't have a parameter named 'mem'"),
    (SMOKE + ["--gin_param", "no_such_configurable.x=1"], "no_such_configurable"),
    (SMOKE + ["--gin_param", "SEEDS=[0,"], "--gin_param 'SEEDS=[0,': does not parse"),
    (SMOKE + ["--gin_param", "SEEDS=3"], "SEEDS must be a list of ints, got 3"),
    (SMOKE + ["--gin_param", "SEEDS=[]"], "empty sweep"),
    (SMOKE + ["--gin_param", "SEEDS=[0,0]"], "SEEDS has duplicates"),
    (SMOKE + ["--gin_param", "slurm_resources.mem_gb=0"], "slurm_resources.mem_gb must be a number > 0, got 0"),
    (["--gin", "gin/base.gin"], "the model's label is not set in the gin files"),
    (["--gin", "gin/baseline.gin", "--gin_param", "run_experiment.model='forget'"],
     "label 'forget' is the paper's 'forget': NetConfig.history = 'none'"),
    (["--gin", "gin/baseline.gin", "--gin_param", "run_experiment.model='Base line'"],
     "must be a label"),
    (["--gin", "gin/gforget.gin", "--gin_param", "GatePenalty.lambda_gate={'bfs': 0.1}",
      "--gin_param", "ALGORITHMS=['bfs','dfs']"], "lambda_gate has no value for 'dfs'"),
    (SMOKE + ["--gin_param", "slurm_resources.cpus_per_task='x'"],
     "slurm_resources.cpus_per_task must be an int >= 1, got 'x'"),
    (["--gin", "gin/multitask.gin", "--gin_param", "ALGORITHMS=['bfs','bfs']"],
     "ALGORITHMS has duplicates: ['bfs', 'bfs']"),
    (SMOKE + ["--gin_param", "slurm_resources.timeout_min=2"],
     "slurm_resources.timeout_min must be an int >= 5, got 2"),
    ([], "no gin file given"),
    # Every job would die at start (ZeroDivisionError); a string was a traceback.
    (SMOKE + ["--gin_param", "Protocol.val_max_samples=0"], "val_max_samples must be > 0, got 0"),
    (SMOKE + ["--gin_param", "Protocol.test_max_samples=-8"],
     "test_max_samples must be > 0, got -8"),
    (SMOKE + ["--gin_param", "Protocol.val_max_samples='8'"],
     "val_max_samples must be an int, got '8'"),
    (SMOKE + ["--gin_param", "Protocol.test_batch_size=0"], "test_batch_size must be > 0, got 0"),
])
def test_bad_input_exits_2_before_submitting(extra, message, tmp_path, fake_slurm,
                                             capsys):
  results = tmp_path / "results"
  for dry_run in ([], ["--dry-run"]):
    rc = sweep.main(extra + ["--results", str(results), "--cluster", "slurm"] + dry_run)
    out, err = capsys.readouterr()
    assert rc == 2
    (line,) = err.splitlines()  # one line: not even gin's "In call to configurable ..."
    assert line.startswith("sweep.py: error: ") and message in line, err
    assert "Traceback" not in err + out
  assert _scripts(fake_slurm) == []          # sbatch never called
  assert not results.exists()                # no manifest, no log folder


def test_bad_input_from_the_command_line(tmp_path):
  proc = subprocess.run(
      [sys.executable, str(REPO_ROOT / "launch/sweep.py")] + SMOKE
      + ["--gin_param", "ALGORITHMS=['bfz']", "--results", str(tmp_path / "r"),
         "--cluster", "local"],
      capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
  assert proc.returncode == 2
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("sweep.py: error: unknown algorithm 'bfz'; valid CLRS-30")
  assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


def test_cluster_slurm_without_sbatch_is_an_error(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch anywhere
  rc = sweep.main(SMOKE + ["--cluster", "slurm", "--results", str(tmp_path / "r")])
  assert rc == 2
  assert "`sbatch` is not on PATH" in capsys.readouterr().err


def test_a_slurm_dry_run_plans_without_sbatch(tmp_path, monkeypatch, capsys):
  """The look before a 300-job submission, on a laptop: was refused ("sbatch is not on
  PATH")."""
  monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch anywhere
  rc = sweep.main(SMOKE + ["--cluster", "slurm", "--dry-run", "--results", str(tmp_path / "r")])
  out = capsys.readouterr().out
  assert rc == 0, out
  assert "slurm resources per run: partition=default cpus_per_task=2" in out
  assert out.splitlines()[-1] == "dry run: nothing submitted"


def test_cluster_auto_picks_slurm_only_with_sbatch(tmp_path, monkeypatch, fake_slurm):
  assert sweep.pick_cluster("auto") == "slurm"
  monkeypatch.setenv("PATH", str(tmp_path))
  assert sweep.pick_cluster("auto") == "local"
  assert sweep.pick_cluster("debug") == "debug"


# -- dry run -------------------------------------------------------------------


def test_dry_run_lists_runs_and_skips_done_ones(write_result, tmp_path, fake_slurm, capsys):
  """What the sweep will ask for comes first (the arrays, their resources, additional
  sbatch parameters and setup, the cost), then the runs: counts per model x algorithm,
  a line per run with --list."""
  results = tmp_path / "results"
  write_result(results, "baseline", "bfs", 1)
  args = SMOKE + ["--gin_param", "SEEDS=[0,1]", "--results", str(results),
                  "--gin_param", "slurm_resources.mem_gb=2", "--gin_param",
                  "slurm_resources.additional_parameters={'account': 'lab'}", "--dry-run"]
  outs = []
  for extra in ([], ["--list"]):
    assert sweep.main(args + extra) == 0
    outs.append(capsys.readouterr().out.splitlines())
  for lines in outs:
    assert lines[0] == ("sweep baseline: 4 runs (2 algorithms x 2 seeds) on slurm; "
                        "3 runs to submit, 1 already done")
    assert lines[1:5] == [
        "slurm job arrays: 1; training: 1 array, 3 tasks",
        "slurm resources per run: partition=default cpus_per_task=2 mem_gb=2.0 "
        "gpus_per_task=0 timeout_min=240 array_parallelism=64",
        "slurm additional parameters: requeue=True account=lab",
        "slurm setup: export XLA_PYTHON_CLIENT_PREALLOCATE=false"]
    assert lines[5].startswith("planned cost -- ESTIMATES")
    assert lines[-1] == "dry run: nothing submitted"
  folded, full = outs
  start = folded.index("runs per model/algorithm (2):")
  assert folded[start + 1:start + 4] == [
      "  baseline/bfs             2 runs: 1 submit, 1 skip (done)",
      "  baseline/insertion_sort  2 runs: 2 submit",
      "  (--list: a line per run)"]
  start = next(i for i, l in enumerate(full) if l.split()[:1] == ["submit"])
  assert [l.split() for l in full[start:start + 4]] == [
      ["submit", "baseline/bfs/seed0", f"{results}/baseline/bfs/seed0"],
      ["skip", "(done)", "baseline/bfs/seed1", f"{results}/baseline/bfs/seed1"],
      ["submit", "baseline/insertion_sort/seed0", f"{results}/baseline/insertion_sort/seed0"],
      ["submit", "baseline/insertion_sort/seed1", f"{results}/baseline/insertion_sort/seed1"],
  ]
  assert _scripts(fake_slurm) == [] and not (results / "_sweeps").exists()


# -- submission: one job array, its sbatch script, the manifest ----------------


def test_submits_one_array_with_gin_resources(write_result, tmp_path, fake_slurm, capsys):
  results = tmp_path / "results"
  write_result(results, "baseline", "bfs", 0)
  (results / "_logs").mkdir(mode=0o755)
  rc = sweep.main(SMOKE + ["--gin_param", "SEEDS=[0,1]", "--results", str(results),
                           "--gin_param", "slurm_resources.cpus_per_task=1",
                           "--gin_param", "slurm_resources.mem_gb=2",
                           "--gin_param", "slurm_resources.timeout_min=30",
                           "--gin_param", "slurm_resources.array_parallelism=2"])
  out = capsys.readouterr().out
  assert rc == 0, out
  scripts = _scripts(fake_slurm)
  assert len(scripts) == 1  # ONE array for the 3 runs left
  text = scripts[0].read_text()
  sbatch = sorted(l for l in text.splitlines() if l.startswith("#SBATCH"))
  # The array's tag (its manifest entries name it): how a rerun finds it in the queue
  # should the sweep die before recording it.
  (comment,) = [l for l in sbatch if l.startswith("#SBATCH --comment=")]
  sbatch.remove(comment)
  logs = results / "_logs"
  assert sbatch == sorted([
      "#SBATCH --array=0-2%2",
      "#SBATCH --cpus-per-task=1",
      f"#SBATCH --error={logs}/%A_%a/%A_%a_0_log.err",
      "#SBATCH --job-name=nar_markov",
      "#SBATCH --mem=2GB",
      "#SBATCH --nodes=1",
      "#SBATCH --ntasks-per-node=1",
      "#SBATCH --open-mode=append",   # a requeued job's log keeps the first attempt
      f"#SBATCH --output={logs}/%A_%a/%A_%a_0_log.out",
      "#SBATCH --requeue",
      "#SBATCH --signal=USR2@90",
      "#SBATCH --time=30",
      "#SBATCH --wckey=submitit",
  ])
  assert f"export PYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" in text
  assert "export XLA_PYTHON_CLIENT_PREALLOCATE=false" in text
  assert re.search(r"srun .* -u -m submitit.core._submit ", text)

  lines = out.splitlines()
  assert lines[0].endswith("3 runs to submit, 1 already done")
  assert lines[1].startswith("submitted 3 runs as job array 4242 ")
  assert [l.split() for l in lines[2:5]] == [
      ["4242_0", "baseline/bfs/seed1"], ["4242_1", "baseline/insertion_sort/seed0"],
      ["4242_2", "baseline/insertion_sort/seed1"]]
  assert f"logs:     {logs}/%j" in out

  manifests = jobs_lib.read_manifests(results)
  assert len(manifests) == 1
  m = manifests[0]
  assert m["cluster"] == "slurm" and m["gin_params"][0] == "SEEDS=[0,1]"
  assert [(j["algorithm"], j["seed"], j["job_id"]) for j in m["jobs"]] == [
      ("bfs", 1, "4242_0"), ("insertion_sort", 0, "4242_1"), ("insertion_sort", 1, "4242_2")]
  assert m["jobs"][0]["stderr"] == f"{logs}/4242_0/4242_0_0_log.err"
  assert [(f"#SBATCH --comment={j['submission']}", j["task"]) for j in m["jobs"]] == [
      (comment, 0), (comment, 1), (comment, 2)]
  # Jobs unpickle what is in _logs: private to the user who submits.
  assert stat.S_IMODE(logs.stat().st_mode) == 0o700

  # Relaunch while the array is queued: nothing is submitted twice.
  fake_slurm["squeue_out"].write_text("4242_0|RUNNING\n4242_1|PENDING\n4242_2|PENDING\n")
  rc = sweep.main(SMOKE + ["--gin_param", "SEEDS=[0,1]", "--results", str(results)])
  out = capsys.readouterr().out
  assert rc == 0
  assert out.splitlines()[0].endswith(
      "0 runs to submit, 1 already done, 3 already queued or running")
  assert len(_scripts(fake_slurm)) == 1


def test_debug_cluster_runs_in_process(write_result, tmp_path, monkeypatch, capsys):
  calls = []

  def fake_run_from_gin(gin_files, gin_params, *, algorithms, seeds, results_dir,
                        multitask):
    ((algorithm,), (seed,)) = algorithms, seeds
    assert not multitask
    calls.append((algorithm, seed))
    write_result(results_dir, "baseline", algorithm, seed, test_score=0.25 * seed)
    return [str(runs_lib.run_dir(results_dir, "baseline", algorithm, seed) / "result.json")]

  monkeypatch.setattr(experiment, "run_from_gin", fake_run_from_gin)
  results = tmp_path / "results"
  rc = sweep.main(SMOKE + ["--gin_param", "ALGORITHMS=['bfs']", "--gin_param", "SEEDS=[0,1]",
                           "--cluster", "debug", "--results", str(results)])
  out = capsys.readouterr().out
  assert rc == 0, out
  assert calls == [("bfs", 0), ("bfs", 1)]
  assert re.search(r"^\[1/2\] baseline/bfs/seed0: done \(steps 20, test_score 0.0\) in "
                   r"[\d.]+s \(sweep elapsed [\d.]+s\)$", out, re.M), out
  assert re.search(r"^\[2/2\] baseline/bfs/seed1: done \(steps 20, test_score 0.25\)", out, re.M)
  assert out.splitlines()[-1] == f"2/2 runs finished, 0 failed; results in {results}"


MULTITASK = ["--gin", "gin/multitask.gin", "--gin_param", "ALGORITHMS=['bfs','dfs']",
             "--gin_param", "SEEDS=[0,1]"]


def test_multitask_sweep_is_one_job_per_seed(tmp_path, fake_slurm, capsys):
  results = tmp_path / "results"
  rc = sweep.main(MULTITASK + ["--results", str(results), "--dry-run", "--list"])
  out = capsys.readouterr().out
  assert rc == 0
  assert out.splitlines()[0].endswith("4 runs to submit, 0 already done")
  assert "forget_multitask/dfs/seed1" in out
  rc = sweep.main(MULTITASK + ["--results", str(results)])
  out = capsys.readouterr().out
  assert rc == 0, out
  scripts = _scripts(fake_slurm)
  assert len(scripts) == 1 and "#SBATCH --array=0-1%2" in scripts[0].read_text()
  assert "submitted 4 runs in 2 multi-task jobs (one per seed)" in out
  assert [l.split(None, 1) for l in out.splitlines()[2:4]] == [
      ["4242_0", "forget_multitask/bfs/seed0, forget_multitask/dfs/seed0"],
      ["4242_1", "forget_multitask/bfs/seed1, forget_multitask/dfs/seed1"]]
  jobs = jobs_lib.read_manifests(results)[0]["jobs"]
  assert [(j["algorithm"], j["seed"], j["job_id"]) for j in jobs] == [
      ("bfs", 0, "4242_0"), ("dfs", 0, "4242_0"), ("bfs", 1, "4242_1"), ("dfs", 1, "4242_1")]


def test_multitask_job_trains_all_algorithms_of_its_seed(tmp_path):
  runs = sweep_spec.expand_runs(["gin/multitask.gin"], ["ALGORITHMS=['bfs','dfs']",
                                                     "SEEDS=[0,1]"], str(tmp_path))
  assert [(r.model, r.algorithm, r.seed) for r in runs] == [
      ("forget_multitask", "bfs", 0), ("forget_multitask", "dfs", 0),
      ("forget_multitask", "bfs", 1), ("forget_multitask", "dfs", 1)]
  groups = sweep_spec.job_groups(runs[1:])  # bfs/seed0 done: its job still trains both
  assert [[r.name for r in g] for g in groups] == [
      ["forget_multitask/dfs/seed0"], ["forget_multitask/bfs/seed1", "forget_multitask/dfs/seed1"]]
  job, kwargs = sweep_spec.job_call(groups[0])
  assert job == sweep_spec.Job(experiment.run_from_gin)
  assert (kwargs["algorithms"], kwargs["seeds"], kwargs["multitask"]) == (["bfs", "dfs"], [0], True)


@pytest.mark.parametrize("params, match", [
    (["run_experiment.model='forget'"], "MULTITASK = True but run_experiment.model = 'forget'"),
    (["SEEDS_PER_JOB=2"], "not supported for multi-task sweeps"),
    (["run_experiment.model='gforget_multitask'", "NetConfig.history='gated'",
      "run_experiment.penalty=@GatePenalty()"], "lambda_gate bound by hand"),
    (["run_experiment.model='gforget_multitask'"], "is the paper's 'gforget'"),
])
def test_bad_multitask_sweeps_are_refused(tmp_path, params, match):
  with pytest.raises(ValueError, match=match):
    sweep_spec.expand_runs(["gin/multitask.gin"], ["ALGORITHMS=['bfs','dfs']"] + params,
                        str(tmp_path))


def test_multitask_debug_sweep_skips_done_seeds(write_result, tmp_path, monkeypatch, capsys):
  calls = []

  def fake(gin_files, gin_params, *, algorithms, seeds, results_dir, multitask):
    assert multitask and algorithms == ["bfs", "dfs"]
    (seed,) = seeds
    calls.append(seed)
    paths = []
    for alg in ("bfs", "dfs"):
      write_result(results_dir, "forget_multitask", alg, seed, test_score=0.5)
      paths.append(str(runs_lib.run_dir(results_dir, "forget_multitask", alg, seed)
                       / "result.json"))
    return paths

  monkeypatch.setattr(experiment, "run_from_gin", fake)
  results = tmp_path / "results"
  write_result(results, "forget_multitask", "bfs", 0)
  write_result(results, "forget_multitask", "dfs", 0)
  rc = sweep.main(MULTITASK + ["--cluster", "debug", "--results", str(results)])
  out = capsys.readouterr().out
  assert rc == 0, out
  assert calls == [1]  # seed 0 is done; seed 1 is one job for both algorithms
  assert "[1/1] forget_multitask/seed1 (2 algorithms): bfs: done" in out
  assert out.splitlines()[-1] == f"2/2 runs finished, 0 failed; results in {results}"


# -- status ----------------------------------------------------------------------


def _fake_manifest(results, jobs, cluster_name="slurm"):
  d = results / "_sweeps"
  d.mkdir(parents=True, exist_ok=True)
  logs = results / "_logs"
  records = []
  for model, algorithm, seed, job_id in jobs:
    records.append({"model": model, "algorithm": algorithm, "seed": seed,
                    "job_id": job_id,
                    "stdout": f"{logs}/{job_id}/{job_id}_0_log.out",
                    "stderr": f"{logs}/{job_id}/{job_id}_0_log.err",
                    "result_pickle": f"{logs}/{job_id}/{job_id}_0_result.pkl"})
  (d / "20260101-000000-000000.json").write_text(json.dumps(
      {"schema": jobs_lib.MANIFEST_SCHEMA, "cluster": cluster_name, "jobs": records}))
  return records


def test_status_counts_each_state_and_names_failure_logs(write_result, tmp_path, fake_slurm, capsys):
  results = tmp_path / "results"
  write_result(results, "baseline", "bfs", 0, test_score=0.75)
  write_result(results, "baseline", "bfs", 1, status="diverged", diverged_step=7,
                test_score=None)
  records = _fake_manifest(results, [("baseline", "dfs", 0, "77_0"),
                                     ("baseline", "dfs", 1, "77_1"),
                                     ("baseline", "dfs", 2, "77_2"),
                                     ("baseline", "bfs", 0, "77_3")])
  fake_slurm["squeue_out"].write_text("77_0|RUNNING\n")
  # 77_1 raised (submitit logs it, then the traceback); 77_2 vanished without a word.
  log1 = pathlib.Path(records[1]["stderr"])
  log1.parent.mkdir(parents=True)
  log1.write_text("submitit ERROR (2026-01-01 00:00:00,000) - Submitted job triggered an "
                  "exception\nTraceback (most recent call last):\n  File x\n"
                  "ValueError: lambda_gate boom\n")
  log2 = pathlib.Path(records[2]["stderr"])
  log2.parent.mkdir(parents=True)
  log2.write_text("[nar_markov] baseline/dfs/seed2 step 10/20\n"
                  "slurmstepd-vm: error: *** JOB 80 ON vm CANCELLED AT 2026-01-01T00:00:00 "
                  "DUE TO TIME LIMIT ***\n")

  rc = sweep.main(["--status", "--results", str(results)] + SMOKE
                  + ["--gin_param", "ALGORITHMS=['bfs','dfs']", "--gin_param", "SEEDS=[0,1,2]"])
  out = capsys.readouterr().out
  assert rc == 0
  rows = {tuple(l.split()[:2]): [int(x) for x in l.split()[2:]]
          for l in out.splitlines() if l.startswith(("baseline ", "total "))}
  #                            done diverged running failed missing corrupt other
  assert rows[("baseline", "bfs")] == [1, 1, 0, 0, 1, 0, 0]
  assert rows[("baseline", "dfs")] == [0, 0, 1, 2, 0, 0, 0]
  assert out.splitlines()[1].split() == ["model", "algorithm", "done", "diverged",
                                         "running", "failed", "missing", "corrupt", "other"]
  assert f"baseline/dfs/seed1  job 77_1  log {records[1]['stderr']}" in out
  assert "ValueError: lambda_gate boom" in out
  assert f"baseline/dfs/seed2  job 77_2  log {records[2]['stderr']}" in out
  assert ("job ended without a result: *** JOB 80 ON vm CANCELLED AT "
          "2026-01-01T00:00:00 DUE TO TIME LIMIT ***") in out
  assert "baseline/dfs/seed0 (job 77_0 running)" in out

  # Without --gin the expected runs are what is on disk or in the manifests.
  rc = sweep.main(["--status", "--results", str(results)])
  out = capsys.readouterr().out
  rows = {tuple(l.split()[:2]): [int(x) for x in l.split()[2:]]
          for l in out.splitlines() if l.startswith("baseline ")}
  assert rows == {("baseline", "bfs"): [1, 1, 0, 0, 0, 0, 0],
                  ("baseline", "dfs"): [0, 0, 1, 2, 0, 0, 0]}


def test_status_when_slurm_cannot_be_asked(tmp_path, monkeypatch, capsys):
  results = tmp_path / "results"
  _fake_manifest(results, [("baseline", "bfs", 0, "9_0")])
  monkeypatch.setenv("PATH", str(tmp_path))  # no squeue
  statuses, warnings = status_lib.classify(results)
  assert [(s.name, s.state, s.detail) for s in statuses] == [
      ("baseline/bfs/seed0", "running", "unknown: squeue is not on PATH")]
  assert "squeue is not on PATH" in warnings[0]


def test_status_of_a_missing_results_dir_is_an_error(tmp_path, capsys):
  assert sweep.main(["--status", "--results", str(tmp_path / "nope")]) == 2
  assert "no results folder" in capsys.readouterr().err


# -- the launcher's planning imports no jax --------------------------------------------


HEAVY = ("jax", "jaxlib", "haiku", "clrs", "tensorflow", "optax", "nar_markov.training.train",
         "nar_markov.data.splits", "nar_markov.nets.model")


@pytest.mark.parametrize("args", [
    ["--gin", "gin/gforget.gin", "--gin_param", "ALGORITHMS=['bfs','insertion_sort']",
     "--dry-run"],
    ["--gin", "gin/multitask.gin", "--dry-run"],
    ["--gin", "gin/baseline.gin", "--gin", "gin/smoke.gin", "--status"],
    ["--status"],
])
def test_status_and_dry_run_import_no_jax(args, tmp_path):
  """A fresh interpreter: what --status / --dry-run import.

  No jax, haiku, clrs or tensorflow is what makes them answer in well under a
  second (0.3 s measured on the 2-core CPU box); the time itself is not asserted,
  since a shared machine makes wall time noise.
  """
  code = (
      "import sys, time\n"
      f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
      "t0 = time.time()\n"
      "from launch import sweep\n"
      f"rc = sweep.main({args + ['--results', str(tmp_path)]!r})\n"
      "elapsed = time.time() - t0\n"
      f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
      "print('RESULT', rc, heavy, elapsed)\n")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=120, check=False)
  line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")]
  assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
  _, rc, rest = line[0].split(" ", 2)
  heavy, elapsed = rest.rsplit(" ", 1)
  assert rc == "0" and heavy == "[]", (line, proc.stderr[-2000:])


# -- a typo in a sweep axis ----------------------------------------------------------


@pytest.mark.parametrize("params, first", [
    (["SEDS=[0]"], "unknown macro 'SEDS'"),
    (["ALGORITHM=['bfs']", "SEED=[0]"], "unknown macro 'ALGORITHM'"),
    (["sweep_axes.seed=[0]"], "unknown sweep axis 'sweep_axes.seed'"),
])
def test_an_unknown_macro_or_axis_is_refused_with_the_known_ones(params, first, tmp_path,
                                                                 fake_slurm, capsys):
  """gin accepts a macro that nothing reads: `SEDS=[0]` trained the default seeds."""
  results = tmp_path / "results"
  args = ["--gin", "gin/baseline.gin"] + [x for p in params for x in ("--gin_param", p)]
  for extra in ([], ["--dry-run"], ["--status"]):
    rc = sweep.main(args + ["--results", str(results)] + extra)
    out, err = capsys.readouterr()
    assert rc == 2, out + err
    (line,) = err.splitlines()
    assert line.startswith(f"sweep.py: error: {first}"), line
    assert ("ALGORITHMS (sweep_axes.algorithms), SEEDS (sweep_axes.seeds), SEEDS_PER_JOB "
            "(sweep_axes.seeds_per_job), MULTITASK (sweep_axes.multitask)") in line
  assert _scripts(fake_slurm) == [] and not results.exists()


def test_a_macro_the_command_line_defines_and_uses_is_known(tmp_path):
  runs = sweep_spec.expand_runs(SMOKE[1::2], ["N=[3]", "SEEDS=%N"], str(tmp_path))
  assert [r.seed for r in runs] == [3, 3]


# -- bad results paths: one line, exit 2, nothing written ------------------------------


def _tree(root: pathlib.Path):
  return sorted((str(p), p.is_dir() or p.read_bytes()) for p in root.rglob("*"))


@pytest.mark.parametrize("case", ["a file", "a missing parent", "a parent that is a file"])
def test_a_bad_results_path_is_one_line_and_writes_nothing(case, tmp_path, fake_slurm, capsys):
  (tmp_path / "notes.txt").write_text("not a results folder\n")
  results = {"a file": tmp_path / "notes.txt",
             "a missing parent": tmp_path / "no" / "such" / "results",
             "a parent that is a file": tmp_path / "notes.txt" / "results"}[case]
  before = _tree(tmp_path)
  for extra in ([], ["--dry-run"], ["--cluster", "local"]):
    rc = sweep.main(SMOKE + ["--results", str(results)] + extra)
    out, err = capsys.readouterr()
    assert rc == 2, out + err
    (line,) = err.splitlines()
    assert line.startswith(f"sweep.py: error: --results {results}"), line
    assert "Traceback" not in out + err
  if case == "a file":
    assert sweep.main(["--status", "--results", str(results)]) == 2
    assert capsys.readouterr().err.startswith(f"sweep.py: error: --results {results} ")
  assert _tree(tmp_path) == before and _scripts(fake_slurm) == []


def test_a_read_only_results_folder_is_one_line(write_result, tmp_path, fake_slurm, capsys):
  """Even with every run done, the sweep would take its lock in there."""
  results = tmp_path / "results"
  write_result(results, "baseline", "bfs", 0)
  write_result(results, "baseline", "insertion_sort", 0)
  before = _tree(results)
  with read_only(results):
    for extra in ([], ["--dry-run"]):
      rc = sweep.main(SMOKE + ["--results", str(results)] + extra)
      out, err = capsys.readouterr()
      assert rc == 2, out + err
      (line,) = err.splitlines()
      assert line.startswith(f"sweep.py: error: --results {results} is not writable"), line
    # --status only reads.
    assert sweep.main(["--status", "--results", str(results)] + SMOKE) == 0
    assert "baseline  bfs" in capsys.readouterr().out
  assert _tree(results) == before and _scripts(fake_slurm) == []


# -- the scheduler cannot be asked ---------------------------------------------------------


def test_when_squeue_fails_the_sweep_refuses_to_submit_again(tmp_path, fake_slurm, capsys):
  """A run whose last job Slurm cannot be asked about may still be queued: was a
  duplicate job, without a word."""
  results = tmp_path / "results"
  _fake_manifest(results, [("baseline", "bfs", 0, "77_0")])
  (fake_slurm["calls"].parent / "fake_bin" / "squeue").write_text(
      "#!/bin/sh\necho 'squeue: error: slurm_load_jobs error: Unable to contact slurm "
      "controller (connect failure)' >&2\nexit 1\n")
  args = SMOKE + ["--gin_param", "ALGORITHMS=['bfs']", "--results", str(results)]
  for extra in ([], ["--dry-run"]):
    rc = sweep.main(args + extra)
    out, err = capsys.readouterr()
    assert rc == 2, out + err
    (line,) = err.splitlines()
    assert line.startswith("sweep.py: error: cannot ask Slurm whether 1 run's job is still "
                           "queued or running"), line
    assert "Unable to contact slurm controller" in line and "--force" in line
  assert _scripts(fake_slurm) == [] and len(jobs_lib.read_manifests(results)) == 1
  rc = sweep.main(args + ["--force"])
  out, err = capsys.readouterr()
  assert rc == 0, out + err
  assert len(_scripts(fake_slurm)) == 1
  assert "warning: --force: submitting 1 run whose last job Slurm could not be asked about" in err


# -- why a job failed: its exception, from its own error log ------------------------------


def test_a_failed_jobs_reason_is_its_exception(tmp_path, data_cache_dir, capsys):
  """A local job that raises (here: its run is locked by this process).  The reason
  shown was the last line of submitit's text: `- .../<id>_0_log.out` in the sweep,
  gin's `In call to configurable 'run_experiment' (<function ... 0x...>)` in --status."""
  results = tmp_path / "results"
  run_folder = runs_lib.run_dir(results, "baseline", "bfs", 0)
  args = SMOKE + ["--gin_param", "ALGORITHMS=['bfs']", "--results", str(results)]
  env = dict(os.environ, NAR_MARKOV_CACHE=str(data_cache_dir), PYTHONPATH=str(REPO_ROOT))
  with locks.run_lock(run_folder):
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "launch/sweep.py")] + args
                          + ["--cluster", "local"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600, check=False)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  reason = (f"LockHeld: {run_folder} is being trained by another process (pid {os.getpid()} ")
  line = next(l for l in proc.stdout.splitlines() if l.startswith("[1/1] baseline/bfs/seed0: f"))
  assert line.startswith(f"[1/1] baseline/bfs/seed0: failed: {reason}"), proc.stdout
  assert "not starting a second training of the same run" in line
  # submitit's local controller makes its folder as named: no `%j` folder is left (beside
  # the controllers' own output).
  from launch import executors  # pylint: disable=g-import-not-at-top
  assert sorted(p.name for p in (results / "_logs").iterdir()
                if p.name != executors.CONTROLLER_LOG) == [
      line.split("(pid ")[1].split(",")[0]
      for line in proc.stdout.splitlines() if ": started (pid " in line]

  assert sweep.main(["--status", "--results", str(results)]) == 0
  out = capsys.readouterr().out
  lines = out.splitlines()
  i = next(i for i, l in enumerate(lines) if l.startswith("  baseline/bfs/seed0  job "))
  assert lines[i + 1].strip().startswith(reason), out
  assert "In call to configurable" not in out and " at 0x" not in out


def test_where_the_cluster_keeps_accounting_submitit_answers(tmp_path, fake_slurm, capsys):
  """sacct (submitit's Job.state) knows jobs squeue has forgotten, and how they ended."""
  results = tmp_path / "results"
  _fake_manifest(results, [("baseline", "bfs", 0, "77_0"), ("baseline", "bfs", 1, "77_1")])
  fake_slurm["sacct_out"].write_text("JobID|State|NodeList\n77_0|RUNNING|vm\n"
                                     "77_1|TIMEOUT|vm\n")
  statuses, warnings = status_lib.classify(results)
  assert not warnings
  assert [(s.name, s.state, s.detail) for s in statuses] == [
      ("baseline/bfs/seed0", "running", "job 77_0 running"),
      ("baseline/bfs/seed1", "failed", "job ended without a result (Slurm: TIMEOUT)")]
  # The sweep does not submit the running one again.
  rc = sweep.main(SMOKE + ["--gin_param", "ALGORITHMS=['bfs']", "--gin_param", "SEEDS=[0,1]",
                           "--results", str(results), "--dry-run"])
  out = capsys.readouterr().out
  assert rc == 0 and "1 runs to submit, 0 already done, 1 already queued or running" in out


# -- a data cache the jobs cannot write ------------------------------------------------------


def test_an_unwritable_data_cache_without_the_test_splits_is_refused(tmp_path, fake_slurm,
                                                                   monkeypatch, capsys):
  """Every job would fail at start making its test split there (OSError Errno 30 on a
  read-only $NAR_MARKOV_CACHE).  With the splits in it, a read-only cache is fine: the
  jobs only read it."""
  from launch import plan as plan_lib  # pylint: disable=g-import-not-at-top
  cache = tmp_path / "cache"
  cache.mkdir()
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(cache))
  results = tmp_path / "results"
  args = SMOKE + ["--gin_param", "ALGORITHMS=['bfs','dfs']", "--results", str(results)]
  splits = [plan_lib.cached_test_split(a) for a in ("bfs", "dfs")]
  with read_only(cache):
    for extra in ([], ["--dry-run"]):
      rc = sweep.main(args + extra)
      out, err = capsys.readouterr()
      assert rc == 2, out + err
      (line,) = err.splitlines()
      assert line.startswith(f"sweep.py: error: the data cache {splits[0].parent} cannot be "
                             "written ("), line
      assert "lacks the test split of bfs, dfs: every job would fail at start" in line
  assert _scripts(fake_slurm) == []
  splits[0].parent.mkdir()
  for split in splits:
    split.write_bytes(b"the split")
  with read_only(cache):
    assert sweep.main(args) == 0
  assert len(_scripts(fake_slurm)) == 1


def test_the_sweep_looks_for_the_test_splits_where_the_jobs_make_them(tmp_path, monkeypatch):
  from launch import plan as plan_lib  # pylint: disable=g-import-not-at-top
  from nar_markov.config import gin_files as config_lib  # pylint: disable=g-import-not-at-top
  from nar_markov.data import splits  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv("NAR_MARKOV_CACHE", raising=False)
  assert plan_lib.cached_test_split("dfs") == splits.cache_path("dfs", "test")
  config_lib.parse_gin(["gin/baseline.gin"], [f"cache_dir.path = '{tmp_path / 'gin'}'"])
  assert plan_lib.cached_test_split("dfs") == splits.cache_path("dfs", "test")
  assert str(tmp_path / "gin") in str(splits.cache_path("dfs", "test"))
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(tmp_path / "env"))
  assert plan_lib.cached_test_split("dfs") == splits.cache_path("dfs", "test")
  assert str(tmp_path / "env") in str(splits.cache_path("dfs", "test"))


# -- interrupted, killed or out of disk while submitting --------------------------------------

# G-ForgetNet on two algorithms: three arrays (the calibrations, then each algorithm's runs
# after its calibration task), i.e. three sbatch calls.
GFORGET = ["--gin", "gin/gforget.gin", "--gin", "gin/smoke.gin",
           "--gin_param", "ALGORITHMS=['bfs','dfs']", "--gin_param", "SEEDS=[0,1]",
           "--cluster", "slurm"]


def _signalling_sbatch(fake_slurm, call: int, sig: str):
  """The fake sbatch, which on its `call`-th call (0: the first) sends `sig` to the sweep
  once it has taken the array, before it answers (as when a terminal's Ctrl-C reaches the
  sweep while sbatch is answering)."""
  calls = fake_slurm["calls"]
  (calls.parent / "fake_bin" / "sbatch").write_text(f"""#!/bin/sh
n=$(ls {calls} | wc -l)
cp "$1" {calls}/script_$n.sh
[ "$n" -eq {call} ] && kill -{sig} $PPID
echo "Submitted batch job $((4242 + n))"
""")


def _sweep_process(args, cwd):
  return subprocess.run([sys.executable, str(REPO_ROOT / "launch" / "sweep.py")] + args,
                        capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


def _comments(fake_slurm) -> list:
  return [re.search(r"^#SBATCH --comment=(\S+)$", p.read_text(), re.M).group(1)
          for p in _scripts(fake_slurm)]


def _queue_all_pending(fake_slurm):
  """squeue lists every task of every array sbatch took, pending, with its comment."""
  lines = []
  for n, (script, comment) in enumerate(zip(_scripts(fake_slurm), _comments(fake_slurm))):
    array = re.search(r"^#SBATCH --array=0-(\d+)", script.read_text(), re.M)
    # One job goes out alone (submitit), not as an array of one.
    tasks = [f"_{t}" for t in range(int(array.group(1)) + 1)] if array else [""]
    lines += [f"{4242 + n}{task}|PENDING|{comment}" for task in tasks]
  fake_slurm["squeue_out"].write_text("\n".join(lines) + "\n")


def _loose_logs(results) -> list:
  return sorted(p.name for p in (results / "_logs").iterdir()
                if p.is_file() and not p.is_symlink())


@pytest.mark.parametrize("sig, code", [("INT", 130), ("TERM", 143), ("HUP", 129)])
def test_a_signal_while_submitting_stops_after_recording_the_array_it_reached(
    sig, code, tmp_path, fake_slurm):
  """Ctrl-C, kill, a dropped SSH session during the second of three sbatch calls.  Was:
  the manifest was saved once after every array, the signal killed the sweep, and the
  rerun submitted the queued runs again."""
  results = tmp_path / "results"
  _signalling_sbatch(fake_slurm, call=1, sig=sig)
  proc = _sweep_process(GFORGET + ["--results", str(results)], tmp_path)
  assert proc.returncode == code, proc.stdout + proc.stderr
  (line,) = proc.stderr.splitlines()
  (m,) = jobs_lib.read_manifests(results)
  assert line == (f"sweep.py: interrupted by SIG{sig}: job array(s) 4242, 4243 recorded in "
                  f"{m['_path']}; 2 of 4 runs not submitted: run the same command again to "
                  "submit them (it skips what is queued or running)")
  assert "Traceback" not in proc.stdout + proc.stderr
  assert len(_scripts(fake_slurm)) == 2
  assert sorted((c["algorithm"], c["job_id"]) for c in m["calibration_jobs"]) == [
      ("bfs", "4242_0"), ("dfs", "4242_1")]
  assert sorted((j["algorithm"], j["seed"], j["job_id"]) for j in m["jobs"]) == [
      ("bfs", 0, "4243_0"), ("bfs", 1, "4243_1"), ("dfs", 0, None), ("dfs", 1, None)]
  assert _loose_logs(results) == []  # submitit's pickles went into their jobs' folders

  # The rerun, with the four jobs queued: only dfs's runs, after dfs's calibration.
  _signalling_sbatch(fake_slurm, call=-1, sig=sig)
  _queue_all_pending(fake_slurm)
  again = _sweep_process(GFORGET + ["--results", str(results)], tmp_path)
  assert again.returncode == 0, again.stdout + again.stderr
  assert again.stdout.splitlines()[:2] == [
      "sweep gforget: 4 runs (2 algorithms x 2 seeds) on slurm; 2 runs to submit, 0 already "
      "done, 2 already queued or running",
      "stage 1, lambda calibration (schedule reading): 0 algorithms to calibrate, "
      "0 calibrated, 2 calibrating"]
  scripts = _scripts(fake_slurm)
  assert len(scripts) == 3 and "#SBATCH --dependency=afterok:4242_1" in scripts[2].read_text()
  assert "  4244_0       gforget/dfs/seed0  (after 4242_1)" in again.stdout


def test_an_array_sbatch_refuses_leaves_no_files_in_the_logs(tmp_path, fake_slurm, capsys):
  """submitit writes an array's pickled calls and its script into `_logs` before sbatch
  and moves them into the job's folder after it; a refused array left them there."""
  (fake_slurm["calls"].parent / "fake_bin" / "sbatch").write_text(
      "#!/bin/sh\necho 'sbatch: error: invalid partition specified: gpu' >&2\nexit 1\n")
  results = tmp_path / "results"
  rc = sweep.main(SMOKE + ["--gin_param", "SEEDS=[0,1]", "--results", str(results)])
  out, err = capsys.readouterr()
  assert rc == 2, out + err
  line = err.splitlines()[-1]  # after sbatch's own words, which pass through
  assert line.startswith("sweep.py: error: sbatch refused the job array: "), line
  assert "Traceback" not in err
  assert "invalid partition specified: gpu" in line
  assert _loose_logs(results) == []


def test_a_sweep_killed_between_sbatch_and_its_record_is_found_in_the_queue(
    tmp_path, fake_slurm):
  """SIGKILL (or a power cut) right after sbatch took the second array: the manifest
  names the array's tag, Slurm lists its jobs with it as their comment, and the rerun
  submits only what is in neither."""
  results = tmp_path / "results"
  _signalling_sbatch(fake_slurm, call=1, sig="KILL")
  proc = _sweep_process(GFORGET + ["--results", str(results)], tmp_path)
  assert proc.returncode == -9, proc.stdout + proc.stderr
  assert len(_scripts(fake_slurm)) == 2
  (m,) = jobs_lib.read_manifests(results)
  assert sorted((j["algorithm"], j["seed"], j["job_id"], j.get("task")) for j in m["jobs"]) == [
      ("bfs", 0, None, 0), ("bfs", 1, None, 1), ("dfs", 0, None, None), ("dfs", 1, None, None)]
  assert {j["submission"] for j in m["jobs"] if "task" in j} == {_comments(fake_slurm)[1]}

  _signalling_sbatch(fake_slurm, call=-1, sig="KILL")
  _queue_all_pending(fake_slurm)
  statuses, _ = status_lib.classify(results)
  assert [(s.name, s.state, s.job_id) for s in statuses] == [
      ("gforget/bfs/seed0", "running", "4243_0"), ("gforget/bfs/seed1", "running", "4243_1"),
      ("gforget/dfs/seed0", "missing", None), ("gforget/dfs/seed1", "missing", None)]
  assert statuses[0].detail == ("job 4243_0 pending (found in the queue by its comment: its "
                                "sweep ended before recording it)")
  again = _sweep_process(GFORGET + ["--results", str(results)], tmp_path)
  assert again.returncode == 0, again.stdout + again.stderr
  assert again.stdout.splitlines()[0].endswith(
      "2 runs to submit, 0 already done, 2 already queued or running")
  assert len(_scripts(fake_slurm)) == 3

  # Slurm cannot be asked: those runs may be queued, so nothing is submitted.
  (fake_slurm["calls"].parent / "fake_bin" / "squeue").write_text(
      "#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller' >&2\nexit 1\n")
  third = _sweep_process(GFORGET + ["--results", str(results), "--dry-run"], tmp_path)
  assert third.returncode == 2 and "cannot ask Slurm whether" in third.stderr, third.stderr


def test_a_full_disk_while_submitting_is_one_line(tmp_path, fake_slurm, monkeypatch, capsys):
  """The manifest cannot be written (ENOSPC), before the first array and after it.
  Was: chained tracebacks, and the rerun did not know the array was queued."""
  import errno  # pylint: disable=g-import-not-at-top
  results = tmp_path / "results"
  args = SMOKE + ["--gin_param", "ALGORITHMS=['bfs']", "--results", str(results)]
  real = runs_lib.atomic_write_bytes

  def full_when(test):
    def write(path, payload):
      if test(pathlib.Path(path), payload):
        raise OSError(errno.ENOSPC, "No space left on device")
      real(path, payload)
    monkeypatch.setattr(runs_lib, "atomic_write_bytes", write)

  full_when(lambda path, _: path.parent.name == "_sweeps")  # the manifest, before anything
  rc = sweep.main(args)
  out, err = capsys.readouterr()
  assert rc == 1, out + err
  (line,) = err.splitlines()
  assert line == "sweep.py: error: No space left on device"
  assert _scripts(fake_slurm) == [] and jobs_lib.read_manifests(results) == []

  full_when(lambda path, payload: b'"job_id": "4242' in payload)  # once the array is out
  rc = sweep.main(args)
  out, err = capsys.readouterr()
  assert rc == 1, out + err
  (line,) = err.splitlines()
  (tag,) = _comments(fake_slurm)
  assert line.startswith("sweep.py: error: cannot write the sweep manifest ")
  assert line.endswith(f" to record job array 4242 (submitted: a rerun finds it in Slurm's "
                       f"queue by its comment {tag}): No space left on device; no job array "
                       "recorded; every run was submitted")
  monkeypatch.setattr(runs_lib, "atomic_write_bytes", real)
  _queue_all_pending(fake_slurm)
  assert sweep.main(args) == 0
  assert capsys.readouterr().out.splitlines()[0].endswith(
      "0 runs to submit, 0 already done, 1 already queued or running")
  assert len(_scripts(fake_slurm)) == 1


def test_a_full_disk_at_the_sweep_lock_is_one_line(tmp_path, fake_slurm, monkeypatch, capsys):
  """A sweep started with 0 bytes free: writing its lock fails without a file name."""
  import errno  # pylint: disable=g-import-not-at-top

  def full(*_, **__):
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(locks, "_acquire", full)
  results = tmp_path / "results"
  rc = sweep.main(SMOKE + ["--results", str(results)])
  out, err = capsys.readouterr()
  assert rc == 2, out + err
  assert err.splitlines() == [
      f"sweep.py: error: --results {results}: cannot take the sweep lock "
      f"{results / runs_lib.SWEEP_LOCK} (No space left on device)"]


def test_a_job_log_cut_short_by_a_full_disk_says_so(tmp_path, monkeypatch):
  """The job's exception could not be written to its log: --status said only 'the job
  raised an exception'."""
  import collections  # pylint: disable=g-import-not-at-top
  results = tmp_path / "results"
  (record,) = _fake_manifest(results, [("baseline", "bfs", 0, "77_0")], cluster_name="local")
  log = pathlib.Path(record["stderr"])
  log.parent.mkdir(parents=True)
  log.write_text("submitit ERROR (2026-01-01 00:00:00,000) - Submitted job triggered an "
                 "exception\nTraceback (most recent call last):\n  File \"x.py\", line 1\n")
  usage = collections.namedtuple("usage", "total used free")
  monkeypatch.setattr(job_logs.shutil, "disk_usage", lambda _: usage(100, 100, 0))
  (s,) = status_lib.classify(results)[0]
  assert (s.state, s.detail) == ("failed", (
      "the job raised an exception; its log ends before naming it (the disk of "
      f"{log} is full: 0 bytes free; No space left on device?)"))


# -- Ctrl-C, kill, a closed terminal: one line ------------------------------------------------


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                       (signal.SIGHUP, 129)])
def test_a_signal_is_one_line_and_its_exit_code(sig, code, tmp_path):
  """Here while the sweep waits for another sweep's lock.  Was: a KeyboardInterrupt
  traceback (SIGINT); SIGTERM and SIGHUP killed it without a word."""
  results = tmp_path / "results"
  with locks.sweep_lock(results):
    proc = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "launch" / "sweep.py")] + SMOKE
        + ["--results", str(results), "--cluster", "local"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    waiting = proc.stderr.readline()
    assert waiting.startswith(f"waiting for {results / runs_lib.SWEEP_LOCK}"), waiting
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
  assert proc.returncode == code, out + err
  assert err.splitlines() == [f"sweep.py: interrupted by {sig.name}"], err


def test_an_interrupted_local_job_is_cancelled_and_recorded(tmp_path, monkeypatch):
  """SIGTERM while a local sweep waits for its job: the job is cancelled, the manifest
  says why it ended, and the sweep says so in one line."""
  from launch import submit  # pylint: disable=g-import-not-at-top
  results = tmp_path / "results"
  (results / "_logs" / "%j").mkdir(parents=True)  # what submitit's local controller makes
  runs = sweep_spec.expand_runs(SMOKE[1::2], ["ALGORITHMS=['bfs']", "SEEDS=[0]"], str(results))

  class Job:
    job_id = "4321"
    paths = type("Paths", (), dict(stdout="out", stderr="err", result_pickle="pkl"))
    cancelled = False

    def result(self):
      raise submit.Interrupted(signal.SIGTERM)

    def cancel(self):
      Job.cancelled = True

  executor = type("Executor", (), dict(submit=lambda self, fn, kwargs: Job()))()
  manifest = jobs_lib.Manifest(results, "local", SMOKE[1::2], [], [])
  plan = type("Plan", (), dict(calib_todo=[], todo=runs, runs=runs))
  with pytest.raises(submit.Interrupted) as e:
    submit.run_here(executor, plan, manifest, "local")
  assert str(e.value) == ("interrupted by SIGTERM: [1/1] baseline/bfs/seed0: job 4321 "
                          "cancelled (a checkpoint resumes it); run the same command again "
                          "to go on")
  assert Job.cancelled and e.value.exit_code == 143
  (m,) = jobs_lib.read_manifests(results)
  assert m["jobs"][0]["outcome"] == "interrupted by the user"
  assert not (results / "_logs" / "%j").exists()


# -- small things a 900-job sweep prints ------------------------------------------------------


def test_the_status_command_printed_is_quoted(tmp_path, fake_slurm, capsys):
  results = tmp_path / "my results"
  assert sweep.main(SMOKE + ["--gin_param", "ALGORITHMS=['bfs']", "--results",
                             str(results)]) == 0
  out = capsys.readouterr().out
  assert f"status:   python launch/sweep.py --status --results '{results}'" in out


def test_an_unreadable_manifest_is_one_warning(write_result, tmp_path, fake_slurm):
  """Was: the same warning three times (every look at the manifests printed it)."""
  results = tmp_path / "results"
  write_result(results, "baseline", "bfs", 0)
  (results / "_sweeps").mkdir()
  (results / "_sweeps" / "20260101-000000-000000.json").write_text('{"schema": "nar_mar')
  for args in (["--status", "--results", str(results)] + SMOKE,
               SMOKE + ["--results", str(results), "--dry-run"]):
    proc = _sweep_process(args, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.count("warning: unreadable sweep manifest") == 1, proc.stderr


# A job function and a controller hook the local job's processes import (tests/ is not on
# their path): the job writes its pid to a marker file, then sleeps; with
# NAR_MARKOV_TEST_SLOW_FORK set, submitit's controller sleeps right after forking the
# process that runs the job, before it records it -- the window in which a SIGINT to the
# controller alone leaves that process running, widened to minutes.
_PROBE = """
import os, pathlib, time

def mark_and_sleep(marker):
  pathlib.Path(marker).write_text(str(os.getpid()))
  time.sleep(600)
"""
_SLOW_FORK = """
import os
if (os.environ.get("NAR_MARKOV_TEST_SLOW_FORK") and "SUBMITIT_LOCAL_NTASKS" in os.environ
    and "SUBMITIT_LOCAL_JOB_ID" not in os.environ):  # submitit's controller, not its task
  import pathlib, subprocess, time

  class _SlowPopen(subprocess.Popen):
    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      pathlib.Path(os.environ["NAR_MARKOV_TEST_SLOW_FORK"]).write_text(str(self.pid))
      time.sleep(600)  # forked, not recorded in the controller's tasks yet

  subprocess.Popen = _SlowPopen
"""


def _alive(pid):
  fields = jobs_lib.stat_fields(pid)
  return fields is not None and fields[0] != "Z"  # a zombie has ended


def _wait_for(path: pathlib.Path, timeout_s: float = 120) -> int:
  deadline = time.time() + timeout_s
  while not (path.exists() and path.read_text()) and time.time() < deadline:
    time.sleep(0.05)
  assert path.exists() and path.read_text(), f"{path} not written in {timeout_s} s"
  return int(path.read_text())


def _local_job(tmp_path, monkeypatch, slow_fork: bool):
  """A real local job, started as the sweep starts one (through a shell, for the setup
  lines), running `mark_and_sleep`; (job, the marker its call writes, the fork marker)."""
  from launch import executors  # pylint: disable=g-import-not-at-top
  hooks = tmp_path / "hooks"
  hooks.mkdir()
  (hooks / "cancel_probe.py").write_text(_PROBE)
  (hooks / "sitecustomize.py").write_text(_SLOW_FORK)
  monkeypatch.syspath_prepend(str(hooks))
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
      [str(hooks)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
  forked = tmp_path / "forked"
  if slow_fork:
    monkeypatch.setenv("NAR_MARKOV_TEST_SLOW_FORK", str(forked))
  import cancel_probe  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  results = tmp_path / "results"
  results.mkdir()
  resources = cluster.SlurmResources()
  assert resources.setup, "the default has setup lines: the job starts through a shell"
  executor = executors.make_executor("local", results, resources)
  marker = tmp_path / "running"
  return executor.submit(cancel_probe.mark_and_sleep, str(marker)), marker, forked


def _cancel_and_check(job, call_pid):
  from launch import executors  # pylint: disable=g-import-not-at-top
  group = job._process.pid  # pylint: disable=protected-access
  try:
    executors.cancel(job)
    assert not _alive(call_pid), "the process running the call is still running"
    assert not executors._group_alive(group)  # pylint: disable=protected-access
  finally:  # nothing left running when it fails
    for kill in (lambda: os.killpg(group, signal.SIGKILL), lambda: os.kill(call_pid, 9)):
      try:
        kill()
      except (ProcessLookupError, PermissionError):
        pass


@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="Linux /proc")
def test_cancelling_a_local_job_ends_the_process_that_runs_it(tmp_path, monkeypatch):
  """Cancelled once its call is running (the marker it writes), every process of the job
  ends, the one running the call included; with submitit's cancel alone (SIGINT to the
  shell) the controller and the call ran on."""
  job, marker, _ = _local_job(tmp_path, monkeypatch, slow_fork=False)
  _cancel_and_check(job, _wait_for(marker))


@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="Linux /proc")
def test_a_job_cancelled_while_its_controller_forks_it_ends(tmp_path, monkeypatch):
  """Cancelled while submitit's controller is inside Popen (the call forked and running,
  not yet in the controller's tasks, so its kill_tasks does not know it): the call ends
  too.  Signalling the controller (and the children it knew) left it running."""
  job, marker, forked = _local_job(tmp_path, monkeypatch, slow_fork=True)
  call_pid = _wait_for(marker)
  assert _wait_for(forked) == call_pid  # the controller is in the window now
  _cancel_and_check(job, call_pid)


@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="Linux /proc")
def test_ctrl_c_of_a_local_sweep_is_one_line_and_leaves_no_job(tmp_path, data_cache_dir):
  """A terminal's Ctrl-C (SIGINT to the sweep's whole process group) while a local job
  runs: the sweep says so in one line (exit 130) and the job's processes end.  Was: the
  job's submitit controller, in the sweep's group, got the SIGINT too and printed its
  KeyboardInterrupt traceback on the sweep's terminal."""
  results = tmp_path / "results"
  env = dict(os.environ, NAR_MARKOV_CACHE=str(data_cache_dir))
  proc = subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, str(REPO_ROOT / "launch" / "sweep.py")] + SMOKE
      + ["--gin_param", "ALGORITHMS=['bfs']", "--cluster", "local", "--results", str(results)],
      cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
      start_new_session=True)
  job = None
  try:
    for line in proc.stdout:
      found = re.search(r": started \(pid (\d+)", line)
      if found:
        job = int(found.group(1))
        break
    assert job is not None, proc.stderr.read()
    marker = results / "_logs" / str(job) / f"{job}_0_log.err"
    _wait_for_file(marker)  # the job's call runs (its log is open)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err, err
    (said,) = [l for l in err.splitlines() if l.strip()]
    assert said.startswith("sweep.py: interrupted by SIGINT: [1/1] baseline/bfs/seed0: job "), said
    from launch import executors  # pylint: disable=g-import-not-at-top
    assert not executors._group_alive(job)  # pylint: disable=protected-access
  finally:
    for group in (proc.pid, job):
      try:
        if group is not None:
          os.killpg(group, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=30)


def _wait_for_file(path: pathlib.Path, timeout_s: float = 120) -> None:
  deadline = time.time() + timeout_s
  while not path.exists() and time.time() < deadline:
    time.sleep(0.05)
  assert path.exists(), f"{path} not written in {timeout_s} s"
