"""End-to-end sweeps on a real Slurm (launch/local_slurm.sh gives a one-node one).

  * a 1 model x 2 algorithms x 2 seeds smoke sweep completes with 4 valid
    result files, and the same command then submits nothing;
  * `--cluster local` writes the same result files (same numbers: training on
    CPU is deterministic);
  * a job requeued mid-run (`scontrol requeue`) and a preempted one (submitit's
    USR2 -> Job.checkpoint() -> requeue) resume from their checkpoints
    and finish with the full step count;
  * two sweeps started at once on one results folder (Slurm and local) train
    each run once.

Without `sbatch` these tests skip, unless NAR_REQUIRE_SLURM=1 (CI), where
they fail.  If Slurm is installed but not answering and we are root, the
session starts it with `launch/local_slurm.sh start`.
Jobs ask for 1 CPU and 2 GB so two run at once on a 2-core machine.
"""

import getpass
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest
from nar_markov.store import locks
from nar_markov.store import runs as runs_lib
from nar_markov.store import state_files

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

from launch import jobs as jobs_lib
from launch import status as status_lib

REQUIRE_SLURM = os.environ.get("NAR_REQUIRE_SLURM") == "1"
LOCAL_SLURM = REPO_ROOT / "launch" / "local_slurm.sh"
SWEEP = REPO_ROOT / "launch" / "sweep.py"
# Every job these tests submit is named TEST_JOB_NAME: .ci/run cancels this user's jobs of
# that name left in the queue (by a run killed at its limit) before the tests.
TEST_JOB_NAME = "nar_markov_tests"
SMALL_JOBS = ["--gin_param", "slurm_resources.cpus_per_task=1",
              "--gin_param", "slurm_resources.mem_gb=2",
              "--gin_param", "slurm_resources.timeout_min=30",
              "--gin_param", f"slurm_resources.job_name='{TEST_JOB_NAME}'"]
SMOKE_SWEEP = ["--gin", "gin/baseline.gin", "--gin", "gin/smoke.gin",
               "--gin_param", "ALGORITHMS=['bfs','insertion_sort']",
               "--gin_param", "SEEDS=[0,1]"] + SMALL_JOBS
SWEEP_TIMEOUT_S = 900
# Real jobs: the second test stage (-m e2e), each test with its own limit above the
# suite's 300 s (the sweeps wait up to 1,200 s for sweep.py and 900 s for the jobs).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]


def _skip_or_fail(reason: str):
  if REQUIRE_SLURM:
    pytest.fail(f"NAR_REQUIRE_SLURM=1 but {reason}")
  pytest.skip(reason)


def _slurm_answers() -> bool:
  try:
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True,
                          text=True, timeout=30, check=False)
  except (OSError, subprocess.TimeoutExpired):
    return False
  states = proc.stdout.split()
  return proc.returncode == 0 and any(
      s.rstrip("*~#") in ("idle", "mixed", "allocated", "completing") for s in states)


@pytest.fixture(scope="session")
def slurm():
  if shutil.which("sbatch") is None:
    _skip_or_fail("Slurm is not installed (no sbatch on PATH; "
                  "`launch/local_slurm.sh install && launch/local_slurm.sh start`)")
  if not _slurm_answers():
    if os.geteuid() == 0:
      subprocess.run([str(LOCAL_SLURM), "start"], stdin=subprocess.DEVNULL,
                     timeout=300, check=False)
    if not _slurm_answers():
      _skip_or_fail("Slurm does not answer (sinfo shows no usable node; "
                    "`launch/local_slurm.sh start` as root)")


@pytest.fixture(scope="session")
def sweep_env(data_cache_dir):
  env = dict(os.environ)
  # sbatch exports this environment: jobs share the session's CLRS cache.
  env["NAR_MARKOV_CACHE"] = str(data_cache_dir)
  env.pop("SLURM_JOB_ID", None)
  return env


def _sweep(args, env, cwd):
  return subprocess.run([sys.executable, str(SWEEP)] + list(args),
                        capture_output=True, text=True, env=env, cwd=cwd,
                        timeout=1200, check=False)


def _job_ids(results) -> list:
  return [j["job_id"] for m in jobs_lib.read_manifests(results) for j in m["jobs"]
          if j["job_id"]]


def _cancel_jobs(results):
  ids = sorted({j.split("_")[0] for j in _job_ids(results)})
  if ids and shutil.which("scancel"):
    subprocess.run(["scancel"] + ids, capture_output=True, check=False)


def _tail(path, n=40) -> str:
  try:
    return "\n".join(pathlib.Path(path).read_text(errors="replace").splitlines()[-n:])
  except OSError:
    return f"(no log {path})"


def _wait_for_sweep(results, expected_runs: int, timeout_s: float = SWEEP_TIMEOUT_S):
  """Poll --status's logic until every run is done; fail on the first failure."""
  t0 = time.time()
  while True:
    statuses, warnings = status_lib.classify(results)
    assert not warnings, warnings
    failed = [s for s in statuses if s.state == "failed"]
    if failed:
      pytest.fail("\n".join(f"{s.name} failed: {s.detail}\n{_tail(s.log)}" for s in failed))
    if (len(statuses) == expected_runs
        and all(s.state in ("done", "diverged") for s in statuses)):
      return statuses
    if time.time() - t0 > timeout_s:
      pytest.fail(f"sweep not done after {timeout_s}s: "
                  + ", ".join(f"{s.name}={s.state}({s.detail})" for s in statuses))
    time.sleep(2)


def _load(results, model, algorithm, seed):
  path = pathlib.Path(results) / model / algorithm / f"seed{seed}" / "result.json"
  return json.loads(path.read_text())


@pytest.fixture(scope="module")
def slurm_sweep(slurm, sweep_env, tmp_path_factory):
  """The smoke sweep, submitted once to Slurm and waited for."""
  results = tmp_path_factory.mktemp("slurm_results")
  proc = _sweep(SMOKE_SWEEP + ["--cluster", "slurm", "--results", str(results)],
                sweep_env, results.parent)
  try:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _wait_for_sweep(results, expected_runs=4)
  finally:
    _cancel_jobs(results)
  return results, proc.stdout


def test_slurm_sweep_completes_and_rerun_submits_nothing(slurm_sweep, sweep_env):
  results, first_out = slurm_sweep
  lines = first_out.splitlines()
  assert lines[0] == ("sweep baseline: 4 runs (2 algorithms x 2 seeds) on slurm; "
                      "4 runs to submit, 0 already done")
  m = re.match(r"submitted 4 runs as job array (\d+) \(", lines[1])
  assert m, first_out
  array_id = m.group(1)
  assert [l.split() for l in lines[2:6]] == [
      [f"{array_id}_0", "baseline/bfs/seed0"], [f"{array_id}_1", "baseline/bfs/seed1"],
      [f"{array_id}_2", "baseline/insertion_sort/seed0"],
      [f"{array_id}_3", "baseline/insertion_sort/seed1"]]

  for algorithm in ("bfs", "insertion_sort"):
    for seed in (0, 1):
      r = _load(results, "baseline", algorithm, seed)
      assert (r["schema"], r["model"], r["history"], r["algorithm"], r["seed"]) == (
          "nar_markov.result/1", "baseline", "full", algorithm, seed)
      assert (r["status"], r["steps"], r["train_steps"]) == ("done", 20, 20)
      assert 0.0 <= r["test_score"] <= 1.0
      assert r["curves"]["val"]["step"] == [0, 10, 20]
      assert r["hidden_size"] == 16  # gin/smoke.gin reached the job
      run_dir = results / "baseline" / algorithm / f"seed{seed}"
      assert not (run_dir / "checkpoint.npz").exists()
  # Different seeds are different runs.
  assert _load(results, "baseline", "bfs", 0)["curves"]["train"]["loss"] != \
      _load(results, "baseline", "bfs", 1)["curves"]["train"]["loss"]

  n_manifests = len(jobs_lib.read_manifests(results))
  again = _sweep(SMOKE_SWEEP + ["--cluster", "slurm", "--results", str(results)],
                 sweep_env, results.parent)
  assert again.returncode == 0, again.stderr
  assert again.stdout.splitlines() == [
      "sweep baseline: 4 runs (2 algorithms x 2 seeds) on slurm; "
      "0 runs to submit, 4 already done"]
  assert len(jobs_lib.read_manifests(results)) == n_manifests

  status = _sweep(["--status", "--results", str(results)], sweep_env, results.parent)
  rows = [l.split() for l in status.stdout.splitlines() if l.startswith("baseline ")]
  assert rows == [["baseline", "bfs", "2", "0", "0", "0", "0", "0", "0"],
                  ["baseline", "insertion_sort", "2", "0", "0", "0", "0", "0", "0"]], status.stdout


def test_local_cluster_writes_the_same_results(slurm_sweep, sweep_env, tmp_path):
  slurm_results, _ = slurm_sweep
  results = tmp_path / "local_results"
  args = [a if a != "SEEDS=[0,1]" else "SEEDS=[1]" for a in SMOKE_SWEEP]
  proc = _sweep(args + ["--cluster", "local", "--results", str(results)],
                sweep_env, tmp_path)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  out = proc.stdout
  assert out.splitlines()[0] == ("sweep baseline: 2 runs (2 algorithms x 1 seeds) on local; "
                                 "2 runs to submit, 0 already done")
  assert re.search(r"^\[1/2\] baseline/bfs/seed1: started \(pid \d+, log ", out, re.M), out
  assert re.search(r"^\[2/2\] baseline/insertion_sort/seed1: done \(steps 20, "
                   r"test_score [\d.]+\) in [\d.]+s \(sweep elapsed [\d.]+s\)$", out, re.M), out
  assert out.splitlines()[-1] == f"2/2 runs finished, 0 failed; results in {results}"
  # submitit's local controller makes its folder as named: no `%j` folder is left.
  assert not (results / "_logs" / "%j").exists()

  def comparable(r):
    r = dict(r)
    for volatile in ("wall_time_s", "train_time_s", "eval_time_s", "steps_per_s", "versions"):
      r.pop(volatile)
    # The one binding that differs: this sweep narrowed SEEDS.
    r["gin_config"] = re.sub(r"^SEEDS = .*$", "", r["gin_config"], flags=re.M)
    return r

  for algorithm in ("bfs", "insertion_sort"):
    on_slurm = _load(slurm_results, "baseline", algorithm, 1)
    local = _load(results, "baseline", algorithm, 1)
    assert sorted(local) == sorted(on_slurm)
    assert comparable(local) == comparable(on_slurm), algorithm


# A test hook, put on the jobs' PYTHONPATH (sbatch exports the sweep's environment): the
# first time a run writes its checkpoint (checkpoint.npz) it says so in $NAR_TEST_HOLD_DIR
# (<seed folder>.held, holding its pid) and then waits there for ever, so that what the
# test does to it next happens at that step, however fast the run is.  Its later
# attempts (the marker is there) run on.
_HOLD_HOOK = """\
import importlib.abc
import importlib.machinery
import os
import pathlib
import sys
import time

HOLD_DIR = pathlib.Path(os.environ["NAR_TEST_HOLD_DIR"])


def _hold_once(path):
  path = pathlib.Path(path)
  held = HOLD_DIR / (path.parent.name + ".held")
  if path.name != "checkpoint.npz" or held.exists():
    return
  tmp = held.with_suffix(".tmp")
  tmp.write_text(str(os.getpid()))
  tmp.rename(held)
  while True:  # until a signal's handler or a kill ends it
    time.sleep(0.05)


class _PatchCheckpoint(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name != "nar_markov.state.checkpoint":
      return None
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    exec_module = spec.loader.exec_module

    def exec_and_patch(module):
      exec_module(module)
      save = module.save

      def save_then_hold(path, *args, **kwargs):
        save(path, *args, **kwargs)
        _hold_once(path)

      module.save = save_then_hold

    spec.loader.exec_module = exec_and_patch
    return spec


sys.meta_path.insert(0, _PatchCheckpoint())
"""


def _held_runs(hold_dir: pathlib.Path, names, timeout_s: float = SWEEP_TIMEOUT_S) -> dict:
  """{seed folder name: pid} once each of `names` holds after its first checkpoint."""
  t0 = time.time()
  while True:
    pids = {n: int((hold_dir / f"{n}.held").read_text()) for n in names
            if (hold_dir / f"{n}.held").exists()}
    if len(pids) == len(names):
      return pids
    assert time.time() - t0 < timeout_s, f"no checkpoint written by {set(names) - set(pids)}"
    time.sleep(0.2)


def _wait_gone(pid: int, timeout_s: float = 120) -> None:
  t0 = time.time()
  while time.time() - t0 < timeout_s:
    try:
      os.kill(pid, 0)
    except ProcessLookupError:
      return
    time.sleep(0.1)
  raise AssertionError(f"process {pid} still alive {timeout_s}s after its requeue")


def _wait_requeued(job_id: str, timeout_s: float = 120) -> None:
  """Until Slurm shows the job back in its queue after a requeue (Restarts >= 1,
  pending or running again)."""
  t0 = time.time()
  out = ""
  while time.time() - t0 < timeout_s:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True,
                         text=True, check=False).stdout
    restarts = re.search(r"Restarts=(\d+)", out)
    state = re.search(r"JobState=(\w+)", out)
    if (restarts and int(restarts.group(1)) >= 1 and state
        and state.group(1) in ("PENDING", "RUNNING")):
      return
    time.sleep(0.2)
  raise AssertionError(f"job {job_id} not back in the queue {timeout_s}s after its requeue:\n{out}")


def test_requeued_and_preempted_jobs_resume_from_their_checkpoints(
    slurm, sweep_env, tmp_path):
  """Each run holds right after its first checkpoint (a test hook, _HOLD_HOOK); then
  seed 0 is requeued by Slurm and seed 1 preempted (submitit's USR2).  Both resume from
  that checkpoint, whatever the machine's speed.  Was: each run was stopped with SIGSTOP
  once its checkpoint appeared, and had to outlast squeue, scontrol and the signal."""
  results = tmp_path / "requeue_results"
  train_steps = 300
  args = ["--gin", "gin/baseline.gin", "--gin", "gin/smoke.gin",
          "--gin_param", "ALGORITHMS=['bfs']", "--gin_param", "SEEDS=[0,1]",
          "--gin_param", f"Protocol.train_steps={train_steps}",
          "--gin_param", "Protocol.checkpoint_every_steps=10",
          "--gin_param", "Protocol.log_every_steps=10",
          "--gin_param", "Protocol.eval_every_steps=150"] + SMALL_JOBS
  hook, hold_dir = tmp_path / "hold_hook", tmp_path / "held"
  hook.mkdir()
  hold_dir.mkdir()
  (hook / "sitecustomize.py").write_text(_HOLD_HOOK)
  env = dict(sweep_env, NAR_TEST_HOLD_DIR=str(hold_dir),
             PYTHONPATH=os.pathsep.join(filter(None, [str(hook),
                                                      sweep_env.get("PYTHONPATH")])))
  proc = _sweep(args + ["--cluster", "slurm", "--results", str(results)], env, tmp_path)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  try:
    (m,) = jobs_lib.read_manifests(results)
    jobs = {j["seed"]: j for j in m["jobs"]}
    ckpt = {s: pathlib.Path(jobs[s]["run_dir"]) / "checkpoint.npz" for s in (0, 1)}
    held = _held_runs(hold_dir, ["seed0", "seed1"])
    pids = {s: held[f"seed{s}"] for s in (0, 1)}
    first_step = {s: state_files.read_state(ckpt[s])["step"] for s in (0, 1)}
    assert first_step == {0: 10, 1: 10}  # checkpoint_every_steps

    # seed 0: requeued by the scheduler (an admin, a node drain) mid-run: SIGTERM, which
    # submitit ignores, then SIGKILL.
    subprocess.run(["scontrol", "requeue", jobs[0]["job_id"]], check=True)
    _wait_gone(pids[0])
    _wait_requeued(jobs[0]["job_id"])
    # seed 1: preempted -- submitit's own signal, as before a timeout: it calls
    # Job.checkpoint() and requeues itself.
    subprocess.run(["scancel", "--signal=USR2", jobs[1]["job_id"]], check=True)
    _wait_gone(pids[1])
    _wait_requeued(jobs[1]["job_id"])

    _wait_for_sweep(results, expected_runs=2)
  finally:
    _cancel_jobs(results)

  for seed in (0, 1):
    r = _load(results, "baseline", "bfs", seed)
    assert (r["status"], r["steps"], r["train_steps"]) == ("done", train_steps, train_steps)
    steps = r["curves"]["train"]["step"]
    # Resumed, not restarted: every logged step once, in order, up to the end.
    assert steps == list(range(10, train_steps + 1, 10)), steps
    assert r["curves"]["val"]["step"] == [0, 150, 300]
    assert not (pathlib.Path(jobs[seed]["run_dir"]) / "checkpoint.npz").exists()

  # --open-mode=append keeps both attempts in one log.
  log0 = pathlib.Path(jobs[0]["stderr"]).read_text()
  assert "DUE TO JOB REQUEUE" in log0
  resumed = re.findall(r"resuming baseline/bfs/seed0 from step (\d+)", log0)
  assert resumed == [str(first_step[0])], log0[-3000:]

  log1 = pathlib.Path(jobs[1]["stderr"]).read_text()
  assert "Caught signal SIGUSR2" in log1 and "Calling checkpoint method" in log1
  assert f"Requeued job {jobs[1]['job_id']}" in log1
  resumed = re.findall(r"resuming baseline/bfs/seed1 from step (\d+)", log1)
  assert resumed == [str(first_step[1])], log1[-3000:]


GFORGET_SWEEP = ["--gin", "gin/gforget.gin", "--gin", "gin/smoke.gin",
                 "--gin_param", "ALGORITHMS=['bfs','insertion_sort']",
                 "--gin_param", "SEEDS=[0,1]"] + SMALL_JOBS
# Every job of the sweep held back an hour (sbatch --begin): it stays queued.
HELD_BACK = ["--gin_param", "slurm_resources.additional_parameters={'begin': 'now+1hour'}"]


def _scontrol_dependency(job_id: str) -> str:
  out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True,
                       text=True, check=False).stdout
  m = re.search(r"Dependency=(\S+)", out)
  return m.group(1) if m else ""


def _release(array_ids) -> None:
  """Jobs held back by --begin start now (each array's tasks alike)."""
  for array_id in sorted(array_ids):
    subprocess.run(["scontrol", "update", f"JobId={array_id}", "StartTime=now"], check=True)


def test_gforget_sweep_calibrates_first_and_each_task_waits_for_its_algorithm(
    slurm, sweep_env, tmp_path):
  """One command: a calibration array, then per algorithm an array whose tasks
  depend (afterok) on that algorithm's calibration task; the runs read lambda
  from the records; a rerun submits nothing.  The jobs are held back an hour until
  Slurm has shown each run's dependency, then released.  Was: the dependency was read
  whenever the test got to it, and "(null)" (what Slurm shows with none, or once it is
  met) passed."""
  results = tmp_path / "results"
  args = GFORGET_SWEEP + HELD_BACK + ["--cluster", "slurm", "--results", str(results)]
  proc = _sweep(args, sweep_env, tmp_path)
  calib = {}
  try:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert ("stage 1, lambda calibration (schedule reading): 2 algorithms to calibrate, "
            "0 calibrated, 0 calibrating") in out
    calib = dict(re.findall(r"^  (\d+_\d+)\s+calibrate/(\w+)$", out, re.M))
    assert sorted(calib.values()) == ["bfs", "insertion_sort"], out
    task_of = {alg: task for task, alg in calib.items()}
    runs = re.findall(r"^  (\d+_\d+)\s+gforget/(\w+)/seed(\d)  \(after (\d+_\d+)\)$", out, re.M)
    assert len(runs) == 4, out
    for job_id, alg, _, after in runs:
      assert after == task_of[alg]
      # Slurm's own record: afterok on its own algorithm's calibration task, which
      # (held back) has not run.
      assert _scontrol_dependency(job_id) == f"afterok:{after}(unfulfilled)", job_id
    for task in calib:
      assert _scontrol_dependency(task) == "(null)", task
    _release({j.split("_")[0] for j in list(calib) + [r[0] for r in runs]})
    _wait_for_sweep(results, expected_runs=4)
  finally:
    _cancel_jobs(results)
    ids = sorted({t.split("_")[0] for t in calib})
    if ids:
      subprocess.run(["scancel"] + ids, capture_output=True, check=False)
  for alg in ("bfs", "insertion_sort"):
    record = json.loads((results / "_calibration" / "schedule" / f"{alg}.json").read_text())
    for seed in (0, 1):
      r = _load(results, "gforget", alg, seed)
      info = r["lambda_calibration"]
      assert info["source"] == "calibration record" and r["lambda_gate"] == record["lambda"]
      assert r["penalty_start_step"] == record["calibration_step"] == 12
      # Seed 0 was a calibration seed (gin/smoke.gin): its run continued from there.
      assert ("continued_from" in info) == (seed == 0)
  again = _sweep(args, sweep_env, tmp_path)
  assert again.returncode == 0, again.stderr
  assert again.stdout.splitlines()[:2] == [
      "sweep gforget: 4 runs (2 algorithms x 2 seeds) on slurm; 0 runs to submit, 4 already done",
      "stage 1, lambda calibration (schedule reading): 0 algorithms to calibrate, "
      "2 calibrated, 0 calibrating"]
  status = _sweep(["--status", "--results", str(results)], sweep_env, tmp_path)
  assert "lambda calibrations" in status.stdout
  assert re.search(r"schedule\s+insertion_sort\s+done: lambda = ", status.stdout), status.stdout


def _queue() -> list:
  """(job id, comment) of this user's jobs in Slurm's queue (-r: one per array task)."""
  out = subprocess.run(["squeue", "-h", "-r", "-u", getpass.getuser(), "-o", "%i|%k"],
                       capture_output=True, text=True, check=True).stdout
  return [tuple(line.split("|", 1)) for line in out.splitlines() if "|" in line]


def _sweep_tags(results) -> set:
  return {j["submission"] for m in jobs_lib.read_manifests(results)
          for j in m["jobs"] + m["calibration_jobs"] if j.get("submission")}


@pytest.mark.parametrize("sig, code", [("INT", 130), ("TERM", 143), ("HUP", 129),
                                       ("KILL", -9)])
def test_a_sweep_interrupted_while_submitting_never_submits_a_run_twice(
    sig, code, slurm, sweep_env, tmp_path):
  """The real sbatch behind a wrapper that signals the sweep as it makes its second of
  three sbatch calls (G-ForgetNet on two algorithms: the calibrations, then each
  algorithm's runs): Ctrl-C, kill, a closed SSH session, and SIGKILL, which no sweep
  can answer.  Jobs are held back an hour, so all stay queued.  The rerun submits only
  what is not queued: Slurm then holds one job per run and per calibration.  Was: the
  manifest was written after the last array, and the rerun submitted queued runs again."""
  results = tmp_path / "results"
  calls = tmp_path / "sbatch_calls"
  calls.mkdir()
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  # The signal comes once Slurm has taken the array, before the sweep reads the answer.
  (bin_dir / "sbatch").write_text(f"""#!/bin/sh
n=$(ls {calls} | wc -l)
touch {calls}/call_$n
out=$({shutil.which("sbatch")} "$@")
rc=$?
[ "$n" -eq 1 ] && kill -{sig} $PPID
echo "$out"
exit $rc
""")
  (bin_dir / "sbatch").chmod(0o755)
  args = GFORGET_SWEEP + HELD_BACK + ["--cluster", "slurm", "--results", str(results)]
  try:
    first = _sweep(args, dict(sweep_env, PATH=f"{bin_dir}:{sweep_env['PATH']}"), tmp_path)
    assert first.returncode == code, first.stdout + first.stderr
    assert "Traceback" not in first.stderr
    if sig != "KILL":
      (line,) = first.stderr.splitlines()
      assert line.startswith(f"sweep.py: interrupted by SIG{sig}: job array(s) "), line
      assert line.endswith("2 of 4 runs not submitted: run the same command again to submit "
                           "them (it skips what is queued or running)"), line
    again = _sweep(args, sweep_env, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[0] == (
        "sweep gforget: 4 runs (2 algorithms x 2 seeds) on slurm; 2 runs to submit, "
        "0 already done, 2 already queued or running")
    tags = _sweep_tags(results)
    queued = [job for job, comment in _queue() if comment in tags]
    assert len(queued) == 6 and len(tags) == 3, (queued, tags)  # 2 calibrations, 4 runs
    statuses, warnings = status_lib.classify(results)
    assert not warnings
    assert sorted((s.name, s.state) for s in statuses) == [
        (f"gforget/{a}/seed{k}", "running") for a in ("bfs", "insertion_sort") for k in (0, 1)]
    assert len({s.job_id for s in statuses}) == 4 and {s.job_id for s in statuses} < set(queued)
    assert not [p for p in (results / "_logs").iterdir()
                if p.name.endswith(".pkl") and sig != "KILL"]
  finally:
    _cancel_jobs(results)
    ids = [job for job, comment in _queue() if comment in _sweep_tags(results)]
    if ids:
      subprocess.run(["scancel"] + sorted({j.split("_")[0] for j in ids}),
                     capture_output=True, check=False)


def _two_sweeps_at_once(args, env, cwd):
  procs = [subprocess.Popen([sys.executable, str(SWEEP)] + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
           for _ in range(2)]
  outs = [p.communicate(timeout=1200) for p in procs]
  return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


@pytest.mark.parametrize("cluster", ["slurm", "local"])
def test_two_sweeps_at_once_train_each_run_once(cluster, slurm, sweep_env, tmp_path):
  """Two identical sweeps started together on one results folder: one plans and
  submits under the sweep lock, the other waits and then finds every run queued
  or running; each run is trained exactly once."""
  results = tmp_path / "results"
  seeds = "SEEDS=[0,1]" if cluster == "slurm" else "SEEDS=[0]"
  args = ["--gin", "gin/baseline.gin", "--gin", "gin/smoke.gin",
          "--gin_param", "ALGORITHMS=['bfs']", "--gin_param", seeds,
          "--gin_param", "Protocol.train_steps=10", "--cluster", cluster,
          "--results", str(results)] + SMALL_JOBS
  n = 2 if cluster == "slurm" else 1
  try:
    outs = _two_sweeps_at_once(args, sweep_env, tmp_path)
    assert [rc for rc, _, _ in outs] == [0, 0], outs
    firsts = sorted(out.splitlines()[0] for _, out, _ in outs)
    head = f"sweep baseline: {n} runs (1 algorithms x {n} seeds) on {cluster}; "
    assert firsts == [head + f"0 runs to submit, 0 already done, {n} already queued or running",
                      head + f"{n} runs to submit, 0 already done"], outs
    _wait_for_sweep(results, expected_runs=n)
  finally:
    _cancel_jobs(results)
  jobs = [j for m in jobs_lib.read_manifests(results) for j in m["jobs"]]
  assert sorted((j["seed"], bool(j["job_id"])) for j in jobs) == [(s, True) for s in range(n)]
  for j in jobs:
    log = pathlib.Path(j["stderr"]).read_text()
    # One training: the run's initial validation and its result, once each.
    assert log.count(f"wrote {j['run_dir']}/result.json") == 1, log[-3000:]
    r = _load(results, "baseline", "bfs", j["seed"])
    assert (r["status"], r["steps"]) == ("done", 10)
    assert r["curves"]["train"]["step"] == [5, 10]


# -- when something goes wrong -----------------------------------------------------------------


def test_when_slurm_cannot_be_asked_nothing_is_submitted_twice(slurm, sweep_env, tmp_path):
  """A queued job (held back an hour by --begin), then squeue fails (the controller
  cannot be reached): the sweep refuses to submit the run again, in one line.  Was:
  the run counted as to do, and a second job was submitted without a word."""
  results = tmp_path / "results"
  args = ["--gin", "gin/baseline.gin", "--gin", "gin/smoke.gin",
          "--gin_param", "ALGORITHMS=['bfs']", "--gin_param", "SEEDS=[0]",
          "--gin_param", "slurm_resources.additional_parameters={'begin': 'now+1hour'}",
          "--cluster", "slurm", "--results", str(results)] + SMALL_JOBS
  try:
    first = _sweep(args, sweep_env, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    (job_id,) = _job_ids(results)
    # The name .ci/run cancels leftover jobs by.
    name = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%j"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert name == TEST_JOB_NAME
    again = _sweep(args, sweep_env, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[0].endswith("0 runs to submit, 0 already done, "
                                                 "1 already queued or running")
    # The cluster's configuration with a port no controller listens on.
    conf = pathlib.Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    if not conf.is_file():
      _skip_or_fail(f"no Slurm configuration at {conf} to make an unreachable copy of")
    lines = [l for l in conf.read_text().splitlines() if not l.startswith("SlurmctldPort=")]
    (tmp_path / "slurm.conf").write_text("\n".join(lines + ["SlurmctldPort=6899", ""]))
    unreachable = dict(sweep_env, SLURM_CONF=str(tmp_path / "slurm.conf"))
    for extra in ([], ["--dry-run"]):
      proc = _sweep(args + extra, unreachable, tmp_path)
      assert proc.returncode == 2, proc.stdout + proc.stderr
      (line,) = proc.stderr.splitlines()
      assert line.startswith("sweep.py: error: cannot ask Slurm whether 1 run's job is "
                             "still queued or running"), line
      assert "--force" in line
    assert _job_ids(results) == [job_id]
    status = _sweep(["--status", "--results", str(results)], unreachable, tmp_path)
    assert status.returncode == 0 and "warning: cannot ask Slurm" in status.stdout
  finally:
    _cancel_jobs(results)


def test_status_names_the_exception_of_a_failed_slurm_job(slurm, sweep_env, tmp_path):
  """The job raises (its run is locked by this process); --status shows the
  exception, not the last line of the log."""
  results = tmp_path / "results"
  run_folder = runs_lib.run_dir(results, "baseline", "bfs", 0)
  args = ["--gin", "gin/baseline.gin", "--gin", "gin/smoke.gin",
          "--gin_param", "ALGORITHMS=['bfs']", "--gin_param", "SEEDS=[0]",
          "--cluster", "slurm", "--results", str(results)] + SMALL_JOBS
  try:
    with locks.run_lock(run_folder):
      proc = _sweep(args, sweep_env, tmp_path)
      assert proc.returncode == 0, proc.stdout + proc.stderr
      t0 = time.time()
      while True:
        (s,) = status_lib.classify(results)[0]
        if s.state == "failed":
          break
        assert s.state == "running" and time.time() - t0 < SWEEP_TIMEOUT_S, s
        time.sleep(2)
  finally:
    _cancel_jobs(results)
  assert s.detail.startswith(f"LockHeld: {run_folder} is being trained by another process "
                             f"(pid {os.getpid()} "), (s.detail, _tail(s.log))
  status = _sweep(["--status", "--results", str(results)], sweep_env, tmp_path)
  assert f"      LockHeld: {run_folder} is being trained" in status.stdout, status.stdout
  assert "In call to configurable" not in status.stdout
