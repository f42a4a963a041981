"""Results that cannot be wrong, lost or trained twice (nar_markov.store.runs).

  * done means verified: a result.json counts only when it reads back with the
    schema, a final status and the sweep's settings; --status, --dry-run, the
    sweep and run_experiment give the same verdict (one function);
  * corrupt results are moved aside and rerun; results made with other
    settings are refused, or archived with --archive-mismatched;
  * locks: one trainer per run, one sweep at a time per results folder;
  * a checkpoint resumes only the run it was written for.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import gin
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

from conftest import SMOKE_SETTINGS  # pylint: disable=wrong-import-position  (tests/ is on sys.path)
from launch import jobs as jobs_lib
from launch import status as status_lib
from launch import submit
from launch import sweep
from nar_markov.config import gin_files as config
from nar_markov.config import runspec
from nar_markov.state import checkpoint
from nar_markov.store import definitions
from nar_markov.store import locks
from nar_markov.store import runs
from nar_markov.store import state_files

import flat

# gin logs through absl on its first parse, and absl keeps the stream it first
# wrote to: parse once here, not under `capsys` (whose stream is closed after
# the test, which then breaks pytest's own capture).  Cleared at once: a binding left
# from here (base.gin's NetConfig.processor) would reach the first test run in this
# process, whichever file it is in (a module fixture's tiny runs of test_multitask).
config.parse_gin(["gin/baseline.gin"])
gin.clear_config()

SMOKE = ["--gin", "gin/baseline.gin", "--gin", "gin/smoke.gin",
         "--gin_param", "ALGORITHMS=['bfs']", "--gin_param", "SEEDS=[0]"]
TINY = dict(hidden_size=16, nb_triplet_fts=4, batch_size=8, train_lengths=(4, 7),
            eval_every_steps=5, log_every_steps=5, checkpoint_every_steps=5,
            val_max_samples=8, test_max_samples=8)


@pytest.fixture
def cache(monkeypatch, data_cache_dir):
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))


def _result_path(results, model="baseline", algorithm="bfs", seed=0):
  return pathlib.Path(results) / model / algorithm / f"seed{seed}" / "result.json"


# -- done means verified: one verdict, everywhere ---------------------------------------

def _cut_params(folder):
  data = (folder / runs.PARAMS_NAME).read_bytes()
  (folder / runs.PARAMS_NAME).write_bytes(data[:len(data) * 2 // 3])  # a full disk, a kill


def _diverged_untested(folder):
  """Diverged before anything was tested: no parameters were kept, none are needed."""
  result = json.loads((folder / runs.RESULT_NAME).read_text())
  result.update(status="diverged", diverged_step=3, test_score=None)
  (folder / runs.RESULT_NAME).write_text(json.dumps(result))
  (folder / runs.PARAMS_NAME).unlink()


# (what is in result.json, or what is done to the run folder, the verdict)
CASES = {
    "valid": (None, "done"),
    "truncated": ('{"schema": "nar_markov.result/1", "model": "base', "corrupt"),
    "list": ("[]", "corrupt"),
    "not final": ({"status": "running"}, "corrupt"),
    "no settings (older version)": ({"settings": None}, "other"),
    "demo budget": ({"settings": {"train_steps": 200}}, "other"),
    "hidden 64": ({"settings": {"hidden_size": 64}}, "other"),
    "other lambda": ({"lambda_gate": 0.5}, "other"),
    # Done means the run can be replayed (config.gin) and re-scored (params.npz where
    # there is one; git keeps none, and replay makes it again).
    "params.npz cut short": (_cut_params, "corrupt"),
    "no params.npz": (lambda d: (d / runs.PARAMS_NAME).unlink(), "done"),
    # A run folder deleted mid-run: the job writes params.npz and result.json at the end.
    "no config.gin": (lambda d: (d / runs.CONFIG_NAME).unlink(), "corrupt"),
    "empty config.gin": (lambda d: (d / runs.CONFIG_NAME).write_text(""), "corrupt"),
    "diverged untested, no params.npz": (_diverged_untested, "diverged"),
}


def _write_case(write_result, results, content):
  if isinstance(content, str):
    path = _result_path(results)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    return
  write_result(results, "baseline", "bfs", 0)
  if callable(content):
    content(_result_path(results).parent)
    return
  if content:
    path = _result_path(results)
    result = json.loads(path.read_text())
    for key, value in content.items():
      if isinstance(value, dict):
        result[key].update(value)
      elif value is None:
        del result[key]
      else:
        result[key] = value
    path.write_text(json.dumps(result))


@pytest.mark.parametrize("case", sorted(CASES))
def test_status_dry_run_and_sweep_agree_on_what_is_done(case, write_result, tmp_path,
                                                        fake_slurm, capsys):
  content, verdict = CASES[case]
  results = tmp_path / "results"
  _write_case(write_result, results, content)
  before = _result_path(results).read_bytes()

  # The sweep's definition of baseline/bfs/seed0 under gin/smoke.gin.
  expected = dict(runspec.run_definition("baseline", "bfs", flat.settings(
      "bfs", **SMOKE_SETTINGS), 0.0, 0, None, "full"), seed=0)
  assert runs.check_result(_result_path(results).parent, expected).state == verdict

  # --status (with the sweep's gin files: it knows the settings).
  assert sweep.main(["--status", "--results", str(results)] + SMOKE) == 0
  out = capsys.readouterr().out
  row = next(l.split() for l in out.splitlines() if l.startswith("baseline "))
  counts = dict(zip(status_lib.STATES, map(int, row[2:])))
  assert counts == {s: int(s == verdict) for s in status_lib.STATES}, out

  # --dry-run
  rc = sweep.main(SMOKE + ["--results", str(results), "--dry-run"])
  out, err = capsys.readouterr()
  if verdict in ("done", "diverged"):
    assert rc == 0 and "skip (done)" in out and "0 runs to submit, 1 already done" in out
  elif verdict == "corrupt":
    assert rc == 0 and "1 runs to submit, 0 already done" in out
    assert "(corrupt: " in out and "moved aside)" in out
  else:
    assert rc == 2 and "1 runs have results made with other settings" in err, err
    assert "baseline/bfs/seed0: " in err and "--archive-mismatched" in err
  assert _scripts(fake_slurm) == [] and _result_path(results).read_bytes() == before

  # The sweep.
  rc = sweep.main(SMOKE + ["--results", str(results)])
  out, err = capsys.readouterr()
  if verdict in ("done", "diverged"):
    assert rc == 0 and len(_scripts(fake_slurm)) == 0
    assert _result_path(results).read_bytes() == before
  elif verdict == "corrupt":
    assert rc == 0 and len(_scripts(fake_slurm)) == 1
    (aside,) = _result_path(results).parent.glob("result.json.corrupt-*")
    assert aside.read_bytes() == before and not _result_path(results).exists()
    assert f"moved aside to {aside}" in out
  else:
    assert rc == 2 and len(_scripts(fake_slurm)) == 0  # refused: nothing submitted
    assert _result_path(results).read_bytes() == before
    rc = sweep.main(SMOKE + ["--results", str(results), "--archive-mismatched"])
    out, err = capsys.readouterr()
    assert rc == 0 and len(_scripts(fake_slurm)) == 1, out + err
    (archived,) = (results / runs.ARCHIVE_DIR).glob("*/baseline/bfs/seed0/result.json")
    assert archived.read_bytes() == before and not _result_path(results).exists()
    assert f"archived to {archived.parent}" in out
    # The analysis does not read archived results.
    assert runs.result_files(results) == []


def _scripts(fake):
  return sorted(fake["calls"].glob("script_*.sh"))


def test_status_without_gin_checks_the_result_only(write_result, tmp_path):
  results = tmp_path / "results"
  write_result(results, "baseline", "bfs", 0, settings={"hidden_size": 64})
  write_result(results, "baseline", "bfs", 1, status="running")
  statuses, _ = status_lib.classify(results)
  assert [(s.seed, s.state) for s in statuses] == [(0, "done"), (1, "corrupt")]


@pytest.mark.parametrize("name", sorted({p.parts[-5] for p in (REPO_ROOT / "results").glob(
    f"*/*/*/seed*/{runs.RESULT_NAME}")}))
def test_the_committed_runs_are_done(name):
  """git keeps no params.npz: the committed runs count as done without one, so a sweep
  on their folder does not move their result.json aside and train them again."""
  statuses, _ = status_lib.classify(REPO_ROOT / "results" / name)
  assert statuses and {s.state for s in statuses} <= {"done", "diverged"}, [
      (s.name, s.state, s.detail) for s in statuses if s.state not in ("done", "diverged")]


def test_a_result_from_before_decoder_input_is_a_dmclrs_run():
  """NetConfig.decoder_input is recorded only where it is not its default (as every field
  added after the first results): a result without the key, as every committed one, is
  the same run as a 'dmclrs' one and another run than a 'processed' one."""
  old = {"settings": flat.settings("bfs", model="baseline")}
  assert "decoder_input" not in old["settings"]
  for value, diffs in (("dmclrs", []), ("processed", [("decoder_input", None, "processed")])):
    expected = {"settings": flat.settings("bfs", model="baseline", decoder_input=value)}
    assert definitions.definition_mismatch(old, expected) == diffs, value


def test_status_without_gin_counts_a_result_only_in_its_own_folder(write_result, tmp_path,
                                                                    capsys):
  """A seed-0 result copied into seed1/ and into another model's folder: one run done,
  as the tables count it (they warn about the duplicates).  Was: 3 done."""
  results = tmp_path / "results"
  write_result(results, "gforget", "bfs", 0)
  source = _result_path(results, "gforget").parent
  for copy in (_result_path(results, "gforget", seed=1).parent,
               _result_path(results, "forget").parent):
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, copy)
  statuses, _ = status_lib.classify(results)
  assert [(s.name, s.state) for s in statuses] == [
      ("forget/bfs/seed0", "other"), ("gforget/bfs/seed0", "done"),
      ("gforget/bfs/seed1", "other")]
  details = {s.name: s.detail for s in statuses}
  assert details["gforget/bfs/seed1"] == ("the result of another run: seed: result 0, "
                                          "its folder 1")
  assert details["forget/bfs/seed0"] == ("the result of another run: model: result "
                                         "'gforget', its folder 'forget'")
  assert sweep.main(["--status", "--results", str(results)]) == 0
  total = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("total"))
  assert dict(zip(status_lib.STATES, map(int, total.split()[1:]))) == dict(
      dict.fromkeys(status_lib.STATES, 0), done=1, other=2)


def test_replaying_an_empty_config_gin_says_so_in_one_line(write_result, tmp_path):
  """Was: `run_experiment.model must be a label ..., got <object object at 0x...>`."""
  results = tmp_path / "results"
  write_result(results, "baseline", "bfs", 0)
  folder = _result_path(results).parent
  (folder / runs.CONFIG_NAME).write_text("\n")
  proc = subprocess.run([sys.executable, "-m", "nar_markov.tools.replay", str(folder), "--results",
                         str(tmp_path / "again"), "--dry-run"], capture_output=True, text=True,
                        cwd=REPO_ROOT, timeout=300, check=False)
  assert proc.returncode == 2, proc.stdout + proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
      f"replay: error: {folder / runs.CONFIG_NAME} is empty: it does not say how the run "
      "was trained")


def test_run_experiment_reruns_a_corrupt_result_and_refuses_other_settings(
    tmp_path, cache):
  common = dict(algorithm="bfs", seed=0, model="baseline", results_dir=str(tmp_path),
                train_steps=5, **TINY)
  path = _result_path(tmp_path)
  path.parent.mkdir(parents=True)
  path.write_text('{"schema": "nar_markov.res')
  result = flat.run_one(**common)  # was: "exists; nothing to do", JSONDecodeError
  assert result["status"] == "done" and result["steps"] == 5
  (aside,) = path.parent.glob("result.json.corrupt-*")
  assert aside.read_text() == '{"schema": "nar_markov.res'
  assert runs.check_result(path.parent, dict(
      runspec.run_definition("baseline", "bfs", result["settings"], 0.0, 0, None, "full"),
      seed=0)).state == "done"
  written = path.read_bytes()
  # Verified done: read back, not retrained.
  assert flat.run_one(**common) == json.loads(written)
  # Other settings: refused, nothing touched.
  with pytest.raises(ValueError, match=r"other settings.*train_steps: result 5, this run 3"):
    flat.run_one(**dict(common, train_steps=3))
  with pytest.raises(ValueError, match=r"hidden_size: result 16, this run 32"):
    flat.run_one(**dict(common, hidden_size=32))
  assert path.read_bytes() == written


# -- locks --------------------------------------------------------------------------------


def test_a_run_being_trained_is_not_trained_again(tmp_path, cache):
  run_folder = _result_path(tmp_path).parent
  with locks.run_lock(run_folder):
    with pytest.raises(locks.LockHeld, match="being trained by another process"):
      flat.run_one(algorithm="bfs", seed=0, model="baseline",
                   results_dir=str(tmp_path), train_steps=5, **TINY)
    # Another process, too (flock is per open file, not per process).
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(f"""\
            from nar_markov.store import locks
            try:
              with locks.run_lock({str(run_folder)!r}):
                print("acquired")
            except locks.LockHeld as e:
              print("held:", e)
            """)], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert proc.stdout.startswith("held: ") and f"pid {os.getpid()}" in proc.stdout
  assert not _result_path(tmp_path).exists()
  with locks.run_lock(run_folder):  # released
    pass


_SLOW_SBATCH = """\
    sleep 3
    n=$(ls {calls} | wc -l)
    cp "$1" {calls}/script_$n.sh
    echo "Submitted batch job $((4242 + n))"
    """


def test_two_sweeps_at_once_submit_each_run_once(tmp_path, fake_slurm, data_cache_dir):
  """Both sweeps start together; sbatch takes 3 s.  Without the lock both plan
  before either has written its manifest, and submit two arrays."""
  bin_dir = pathlib.Path(fake_slurm["calls"]).parent / "fake_bin"
  (bin_dir / "sbatch").write_text("#!/bin/sh\n" + textwrap.dedent(
      _SLOW_SBATCH.format(calls=fake_slurm["calls"])))
  # squeue: every task of every array submitted so far is pending.
  (bin_dir / "squeue").write_text(textwrap.dedent(f"""\
      #!/bin/sh
      for f in {fake_slurm['calls']}/script_*.sh; do
        [ -e "$f" ] || continue
        n=$(basename "$f" .sh | sed 's/script_//')
        for t in 0 1 2 3; do echo "$((4242 + n))_$t|PENDING"; done
      done
      """))
  results = tmp_path / "results"
  args = [sys.executable, str(REPO_ROOT / "launch" / "sweep.py"), "--gin", "gin/baseline.gin",
          "--gin", "gin/smoke.gin", "--gin_param", "ALGORITHMS=['bfs','insertion_sort']",
          "--gin_param", "SEEDS=[0,1]", "--cluster", "slurm", "--results", str(results)]
  env = dict(os.environ, NAR_MARKOV_CACHE=str(data_cache_dir))
  procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO_ROOT, env=env) for _ in range(2)]
  outs = [p.communicate(timeout=600) for p in procs]
  assert [p.returncode for p in procs] == [0, 0], outs
  firsts = sorted(o.splitlines()[0] for o, _ in outs)
  assert firsts == [
      "sweep baseline: 4 runs (2 algorithms x 2 seeds) on slurm; 0 runs to submit, "
      "0 already done, 4 already queued or running",
      "sweep baseline: 4 runs (2 algorithms x 2 seeds) on slurm; 4 runs to submit, "
      "0 already done"], outs
  assert len(_scripts(fake_slurm)) == 1
  jobs = [j for m in jobs_lib.read_manifests(results) for j in m["jobs"]]
  assert sorted((j["algorithm"], j["seed"], j["job_id"]) for j in jobs) == [
      ("bfs", 0, "4242_0"), ("bfs", 1, "4242_1"), ("insertion_sort", 0, "4242_2"),
      ("insertion_sort", 1, "4242_3")]


def test_the_manifest_is_written_before_submission(tmp_path, fake_slurm, monkeypatch, capsys):
  """While sbatch runs, the runs are in the manifest, planned, and count as
  queued for anyone who looks (another sweep, --status)."""
  seen = []
  real = submit.submit_runs

  def spy(submission, todo, resources, after):
    results = pathlib.Path(todo[0].results_dir)
    (m,) = jobs_lib.read_manifests(results)
    seen.append([(j["algorithm"], j["seed"], j["job_id"]) for j in m["jobs"]])
    statuses, _ = status_lib.classify(results)
    seen.append({(s.algorithm, s.seed): (s.state, s.detail) for s in statuses})
    return real(submission, todo, resources, after)

  monkeypatch.setattr(submit, "submit_runs", spy)
  results = tmp_path / "results"
  assert sweep.main(SMOKE + ["--results", str(results)]) == 0
  capsys.readouterr()
  planned, states = seen
  assert planned == [("bfs", 0, None)]
  assert states == {("bfs", 0): ("running", f"queued by sweep pid {os.getpid()} "
                                            "(not submitted yet)")}
  (m,) = jobs_lib.read_manifests(results)
  assert [(j["algorithm"], j["seed"], j["job_id"]) for j in m["jobs"]] == [("bfs", 0, "4242")]


# -- resume checks the settings -----------------------------------------------------------


def test_a_checkpoint_resumes_only_its_own_run(tmp_path, cache):
  common = dict(algorithm="bfs", seed=0, model="baseline", results_dir=str(tmp_path),
                **TINY)
  assert flat.run_one(train_steps=20, stop_after_steps=5,
                      **common)["status"] == "interrupted"
  ckpt = _result_path(tmp_path).parent / "checkpoint.npz"
  saved = ckpt.read_bytes()
  assert state_files.read_state(ckpt)["definitions"][0]["settings"]["train_steps"] == 20
  # Was: finished "done" with steps 5 > train_steps 3.
  with pytest.raises(ValueError, match=r"checkpoint .*checkpoint.npz was written with "
                     r"train_steps=20, schedule_steps=20; this run has train_steps=3, "
                     r"schedule_steps=3\. The checkpoint is kept"):
    flat.run_one(train_steps=3, **common)
  # Was: a bare haiku shape error.
  with pytest.raises(ValueError, match=r"hidden_size=16.*this run has.*hidden_size=32"):
    flat.run_one(train_steps=20, **dict(common, hidden_size=32))
  with pytest.raises(ValueError, match=r"model='baseline'.*this run has model='forget'"):
    # Another model label in the same folder cannot happen through run_dir;
    # a checkpoint copied by hand is refused all the same.
    other = tmp_path / "forget" / "bfs" / "seed0"
    other.mkdir(parents=True)
    (other / "checkpoint.npz").write_bytes(saved)
    flat.run_one(train_steps=20, **dict(common, model="forget"))
  assert ckpt.read_bytes() == saved and not _result_path(tmp_path).exists()
  result = flat.run_one(train_steps=20, **common)
  assert result["status"] == "done" and result["steps"] == 20
  assert result["curves"]["train"]["step"] == [5, 10, 15, 20]  # resumed, not restarted


# -- nothing loaded from a results folder executes code ------------------------------


class _Evil:
  """Unpickling this would create `marker`: proof that a load executed code."""

  def __init__(self, marker):
    self.marker = str(marker)

  def __reduce__(self):
    return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_state_files_round_trip_and_never_unpickle(tmp_path):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import pickle  # pylint: disable=g-import-not-at-top
  state = {"step": 7, "rng": ("MT19937", np.arange(4, dtype=np.uint32), 2, 0, 0.0),
           "params": {"net/linear": {"w": np.ones((2, 3), np.float32)}},
           "opt_state": [np.int32(5), np.zeros(3)], "best_params": None,
           "curves": [{"train": {"loss": [1.5, float("nan")]}}]}
  path = tmp_path / runs.CHECKPOINT_NAME
  state_files.write_state(path, state)
  back = state_files.read_state(path)
  assert back["step"] == 7 and back["best_params"] is None
  assert back["rng"][0] == "MT19937" and isinstance(back["rng"], tuple)
  np.testing.assert_array_equal(back["rng"][1], state["rng"][1])
  assert back["params"]["net/linear"]["w"].dtype == np.float32
  assert int(back["opt_state"][0]) == 5
  with pytest.raises(TypeError, match="cannot store a _Evil"):
    state_files.write_state(path, {"x": _Evil(tmp_path / "never")})
  # A pickle planted under the checkpoint's name is refused, not executed.
  marker = tmp_path / "executed"
  path.write_bytes(pickle.dumps({"step": 1, "x": _Evil(marker)}))
  with pytest.raises(ValueError, match="not a readable state file"):
    state_files.read_state(path)
  assert not marker.exists()
  assert checkpoint.load(path) is None and not marker.exists()


def test_status_never_loads_submitits_result_pickle(write_result, tmp_path, capsys):
  import pickle  # pylint: disable=g-import-not-at-top
  results = tmp_path / "results"
  logs = results / "_logs" / "9_0"
  logs.mkdir(parents=True)
  marker = tmp_path / "executed"
  (logs / "9_0_0_result.pkl").write_bytes(pickle.dumps(("error", _Evil(marker))))
  (logs / "9_0_0_log.err").write_text(
      "submitit ERROR (x) - Submitted job triggered an exception\nTraceback (most recent "
      "call last):\nValueError: boom\n")
  (results / "_sweeps").mkdir()
  (results / "_sweeps" / "20260101-000000-000000.json").write_text(json.dumps(
      {"schema": jobs_lib.MANIFEST_SCHEMA, "cluster": "local", "jobs": [
          {"model": "baseline", "algorithm": "bfs", "seed": 0, "job_id": "9_0",
           "stderr": str(logs / "9_0_0_log.err"),
           "result_pickle": str(logs / "9_0_0_result.pkl")}]}))
  assert sweep.main(["--status", "--results", str(results)]) == 0
  out = capsys.readouterr().out
  assert "ValueError: boom" in out and not marker.exists()


# -- a checkpoint cut short -------------------------------------------------------------


def test_a_truncated_checkpoint_is_moved_aside_and_the_run_starts_over(tmp_path, cache, capfd):
  """Was: zipfile.BadZipFile out of state_files.read_state, on every retry, until someone
  deleted the file by hand."""
  common = dict(algorithm="bfs", seed=0, model="baseline", results_dir=str(tmp_path),
                **TINY)
  assert flat.run_one(train_steps=10, stop_after_steps=5, **common)["status"] == "interrupted"
  ckpt = _result_path(tmp_path).parent / runs.CHECKPOINT_NAME
  cut = ckpt.read_bytes()[:ckpt.stat().st_size // 2]
  ckpt.write_bytes(cut)
  with pytest.raises(ValueError, match="is not a readable state file"):
    state_files.read_state(ckpt)
  capfd.readouterr()
  result = flat.run_one(train_steps=10, **common)
  assert result["status"] == "done" and result["curves"]["train"]["step"] == [5, 10]
  (aside,) = ckpt.parent.glob(f"{runs.CHECKPOINT_NAME}.corrupt-*")
  assert aside.read_bytes() == cut
  err = capfd.readouterr().err
  assert f"WARNING: unreadable checkpoint {ckpt}" in err and f"moved aside to {aside}" in err


# -- a checkpoint written with other settings, seen before a job is submitted ------------------


def test_dry_run_and_status_see_a_checkpoint_with_other_settings(tmp_path, cache, fake_slurm,
                                                                 capsys):
  """The job refuses such a checkpoint (and keeps it): --dry-run said `submit` and
  --status `missing`, and the sweep submitted a job bound to fail."""
  results = tmp_path / "results"
  smoke = dict(SMOKE_SETTINGS, checkpoint_every_steps=5)
  smoke.pop("schedule_steps")
  assert flat.run_one(algorithm="bfs", seed=0, model="baseline", results_dir=str(results),
                      stop_after_steps=5, **dict(smoke, train_steps=30))["status"] == "interrupted"
  ckpt = _result_path(results).parent / runs.CHECKPOINT_NAME
  saved = ckpt.read_bytes()
  why = (f"checkpoint {ckpt} was written with train_steps=30, schedule_steps=30; this run "
         "has train_steps=20, schedule_steps=20")

  assert sweep.main(["--status", "--results", str(results)] + SMOKE) == 0
  out = capsys.readouterr().out
  row = next(l.split() for l in out.splitlines() if l.startswith("baseline "))
  assert dict(zip(status_lib.STATES, map(int, row[2:])))["other"] == 1, out
  assert f"baseline/bfs/seed0  other: {why}" in out

  for extra in (["--dry-run"], []):
    rc = sweep.main(SMOKE + ["--results", str(results)] + extra)
    out, err = capsys.readouterr()
    assert rc == 2, out + err
    assert "1 runs have checkpoints made with other settings" in err
    assert f"baseline/bfs/seed0: {why}" in err
  assert _scripts(fake_slurm) == [] and ckpt.read_bytes() == saved

  rc = sweep.main(SMOKE + ["--results", str(results), "--archive-mismatched"])
  out, err = capsys.readouterr()
  assert rc == 0 and len(_scripts(fake_slurm)) == 1, out + err
  (archived,) = (results / runs.ARCHIVE_DIR).glob(f"*/baseline/bfs/seed0/{runs.CHECKPOINT_NAME}")
  assert archived.read_bytes() == saved and not ckpt.exists()
