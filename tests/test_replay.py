"""Every committed result replays from its own folder: its config.gin parses with today's code
and gives its result's run, its result names no absolute path, and a replayed run scores
the same (nar_markov/tools/replay.py, scripts/migrate_results.py, nar_markov/config/provenance.py)."""

import dataclasses
import json
import pathlib
import subprocess
import sys

import gin
import pytest

from nar_markov.config import gin_files as config
from nar_markov.config import calibration_records
from nar_markov.training import calibrate
from nar_markov.training import experiment
from scripts import migrate_results
from nar_markov.config import components
from nar_markov.config import provenance
from nar_markov.store import definitions
from nar_markov.store import runs
from nar_markov.tools import replay

REPO = pathlib.Path(__file__).resolve().parents[1]
COMMITTED = [p.parent for p in runs.result_files(REPO / "results")]


def _name(folder: pathlib.Path) -> str:
  return folder.relative_to(REPO / "results").as_posix()


def test_there_are_committed_results():
  assert len(COMMITTED) > 10


@pytest.mark.parametrize("folder", COMMITTED, ids=_name)
def test_committed_run_replays_from_its_folder(folder):
  """config.gin parses alone and gives the result's run (check_result: the sweep's test),
  settings key by key too; lambda_calibration names its files relative to the results
  folder the run was trained into, and they are there."""
  plan = replay.check_folder(folder)
  result = json.loads((folder / runs.RESULT_NAME).read_text())
  assert plan.result == result
  assert definitions.definition_mismatch(result, {"settings": plan.definition["settings"]}) == []
  info = result.get("lambda_calibration") or {}
  assert migrate_results.absolute_paths(result) == {}
  if info.get("record"):
    assert (folder.parents[2] / info["record"]).is_file()


def test_every_committed_result_names_its_code_and_selection():
  """Each result says which code trained it -- its commit, or a provenance line naming the
  commit that added it and why the code cannot be named -- and its selection rules."""
  unnamed = []
  for folder in COMMITTED:
    result = json.loads((folder / runs.RESULT_NAME).read_text())
    provenance_ = result.get("provenance") or {}
    if "selection" not in result or "commit" not in result or not (
        result["commit"] or (provenance_.get("added_in") and provenance_.get("evidence"))):
      unnamed.append(_name(folder))
  assert unnamed == []


def _old_result(**changes):
  """A result as train.py wrote them before "selection" and "commit": validations at
  steps 0-150, the best (0.9) first at step 50 and again at 100."""
  result = {"schema": runs.RESULT_SCHEMA, "status": "done", "steps": 200, "test_score": 0.7,
            "val_best_step": 50,
            "curves": {"val": {"step": [0, 50, 100, 150], "score": [0.5, 0.9, 0.9, 0.8]}}}
  return dict(result, **changes)


def test_recovered_selection_is_each_rules_step_from_the_curves():
  sel = migrate_results.recovered_selection(_old_result())["selection"]
  assert sel["rule"] == "first_best" and sel["first_best"] == {"step": 50, "test_score": 0.7}
  assert sel["last_best"] == {"step": 100, "test_score": None}   # never tested
  assert sel["final"] == {"step": 200, "test_score": None}
  once = _old_result(curves={"val": {"step": [0, 50, 100], "score": [0.5, 0.9, 0.8]}},
                     steps=50, status="diverged")
  sel = migrate_results.recovered_selection(once)["selection"]
  assert sel["last_best"] == sel["first_best"] == {"step": 50, "test_score": 0.7}
  assert sel["final"] == {"step": None, "test_score": None}
  assert migrate_results.recovered_selection(dict(_old_result(), selection={})) == {}
  with pytest.raises(ValueError, match="val_best_step 100"):
    migrate_results.recovered_selection(_old_result(val_best_step=100))


def test_old_results_gain_fields_and_keep_every_number(tmp_path):
  """Appended after every byte the result had; named code only with its evidence; run
  twice, nothing more changes."""
  text = json.dumps(_old_result(), indent=1)
  added = {**migrate_results.recovered_selection(_old_result()),
           **migrate_results.recovered_provenance(_old_result(), "abc")}
  new = migrate_results.append_fields(text, added)
  assert new.startswith(text[:-2]) and json.loads(new) == dict(_old_result(), **added)
  assert added["commit"] is None and added["provenance"]["added_in"] == "abc"
  assert "cannot be recovered" in added["provenance"]["evidence"]
  named = migrate_results.recovered_provenance(_old_result(), "abc", "def", "a log says so")
  assert named["commit"] == "def" and named["provenance"]["evidence"] == "a log says so"
  with pytest.raises(ValueError, match="evidence"):
    migrate_results.recovered_provenance(_old_result(), "abc", "def")
  assert migrate_results.recovered_provenance(dict(_old_result(), commit=None), "abc") == {}
  with pytest.raises(ValueError, match="already has"):
    migrate_results.append_fields(new, {"selection": {}})

  folder = tmp_path / "r" / "forget" / "bfs" / "seed0"   # outside git: added_in unknown
  folder.mkdir(parents=True)
  (folder / runs.RESULT_NAME).write_text(text)
  (folder / runs.CONFIG_NAME).write_text(migrate_results.migrate_config(
      OLD_GIN.replace("'gforget'", "'forget'"), None))
  assert migrate_results.migrate_folder(folder) == [str(folder / runs.RESULT_NAME)]
  result = json.loads((folder / runs.RESULT_NAME).read_text())
  assert result["provenance"]["added_in"] is None and result["selection"]["final"]["step"] == 200
  assert migrate_results.migrate_folder(folder) == []


def test_committed_config_gin_are_migrated():
  """No config.gin under results/ (finished or not) still has the old flat bindings."""
  flat = [p for p in migrate_results.run_folders(REPO / "results")
          if migrate_results.is_flat((p / runs.CONFIG_NAME).read_text())]
  assert flat == []


def test_committed_config_gin_import_todays_modules():
  """No config.gin under results/ imports a module that has moved since it was written
  (migrate_results.MOVED_MODULES: the launcher's, out of the library)."""
  old = [p for p in migrate_results.run_folders(REPO / "results")
         if migrate_results.migrate_imports((p / runs.CONFIG_NAME).read_text())
         != (p / runs.CONFIG_NAME).read_text()]
  assert old == []


def test_a_moved_module_is_imported_from_its_new_home():
  """A config.gin of the flat layout imports the subpackages' modules, and nothing of the
  launcher (its import and bindings dropped), so it parses without launch/ or submitit."""
  text = ("import nar_markov.cluster\nimport nar_markov.experiment as nar_markov2\n"
          "import nar_markov.netconfig as nar_markov3\n\n"
          "# Parameters for slurm_resources:\n# ====\nslurm_resources.cpus_per_task = 2\n\n"
          "sweep_axes.seeds = %SEEDS\nrun_experiment.model = 'forget'\n")
  out = migrate_results.migrate_config(text, None)
  assert out == ("import nar_markov.training.experiment as nar_markov2\n"
                 "import nar_markov.config.netconfig as nar_markov3\n\n"
                 "run_experiment.model = 'forget'\n")
  assert migrate_results.migrate_config(out, None) == out  # idempotent
  config.parse_gin([], [])
  gin.parse_config(out)
  assert config.bound_value("run_experiment.model") == "forget"


def test_committed_config_gin_parse_without_the_launcher():
  """Every committed config.gin parses in a process where submitit cannot be imported and
  launch/ is never imported."""
  code = ("import importlib.abc, pathlib, sys\n"
          "class Block(importlib.abc.MetaPathFinder):\n"
          "  def find_spec(self, name, path=None, target=None):\n"
          "    if name.split('.')[0] in ('submitit', 'launch'):\n"
          "      raise ImportError(name + ' blocked')\n"
          "sys.meta_path.insert(0, Block())\n"
          "from nar_markov.config import gin_files\n"
          "paths = sorted(pathlib.Path('results').glob('**/config.gin'))\n"
          "for p in paths:\n"
          "  gin_files.parse_gin([str(p)])\n"
          "print(len(paths), sorted(m for m in sys.modules if m.split('.')[0] in "
          "('submitit', 'launch', 'jax')))\n")
  out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       timeout=600, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  count, modules = out.stdout.split(maxsplit=1)
  assert int(count) > 100 and modules.strip() == "[]", out.stdout


def test_a_run_under_the_slurm_overlay_writes_a_config_gin_without_the_launcher():
  """gin/slurm_gpu.gin imports launch.cluster and binds slurm_resources.*: the run's
  config.gin (experiment.run_gin) keeps neither, and gives the same run parsed alone."""
  config.parse_gin(["gin/forget.gin", "gin/slurm_gpu.gin"])
  try:
    assert "import launch.cluster" in gin.config_str()
    c = components.resolve()
    text = experiment.run_gin(c)
  finally:
    gin.clear_config()
  assert "launch" not in text and "slurm_resources" not in text, text
  gin.parse_config(text)
  try:
    assert components.resolve() == c
  finally:
    gin.clear_config()


OLD_GIN = """\
ALGORITHMS = ['bfs']
run_experiment.batch_size = 8
run_experiment.hidden_size = 16
run_experiment.lambda_gate = None
run_experiment.model = 'gforget'
run_experiment.train_lengths = [4, 7]
run_experiment.train_steps = 20
"""


def test_flat_bindings_become_todays():
  text = migrate_results.migrate_config(OLD_GIN, None)
  assert migrate_results.migrate_config(text, None) == text  # idempotent
  config.parse_gin([], [])
  gin.parse_config(text)
  c = components.resolve()
  assert c.model == "gforget" and c.net.history == "gated"
  assert (c.net.hidden_size, c.protocol.batch_size, c.protocol.train_steps) == (16, 8, 20)
  assert c.penalty == components.GatePenalty(None)
  forget = migrate_results.migrate_config(OLD_GIN.replace("'gforget'", "'forget'"), None)
  assert "lambda_gate" not in forget and "@GatePenalty" not in forget


def test_only_the_paths_of_a_result_change():
  result = {"test_score": 0.375, "lambda_calibration": {
      "record": "/elsewhere/r/_calibration/schedule/bfs.json", "lambda": 0.1,
      "continued_from": "/elsewhere/r/_calibration/runs/lambda0/calibrate/bfs/seed0/final_state.npz"}}
  text = json.dumps(result, indent=1)
  new = migrate_results.migrate_result_paths(text)
  info = json.loads(new)["lambda_calibration"]
  assert info["record"] == "_calibration/schedule/bfs.json"
  assert info["continued_from"] == "_calibration/runs/lambda0/calibrate/bfs/seed0/final_state.npz"
  assert migrate_results.migrate_result_paths(new) == new
  assert new.replace(info["record"], "").replace(info["continued_from"], "") == text.replace(
      result["lambda_calibration"]["record"], "").replace(
          result["lambda_calibration"]["continued_from"], "")


def test_recorded_paths_read_both_ways(tmp_path):
  path = tmp_path / "_calibration" / "schedule" / "bfs.json"
  rel = calibration_records.record_relpath(path, tmp_path)
  assert rel == "_calibration/schedule/bfs.json"
  assert calibration_records.resolve_recorded(rel, tmp_path) == path
  assert calibration_records.resolve_recorded(str(path), tmp_path / "other") == path
  assert calibration_records.record_relpath("/else/x.npz", tmp_path) == "/else/x.npz"


def test_config_gin_keeps_components_the_caller_gave():
  """A calibration run's components are not its gin's: its config.gin says them too."""
  config.parse_gin(["gin/gforget.gin", "gin/smoke.gin"])
  c = components.resolve()
  assert experiment.run_gin(c) == gin.config_str()
  protocol = dataclasses.replace(c.protocol, train_steps=12, schedule_steps=20)
  penalty = components.GatePenalty(0.0, start_step=0)
  own = components.Experiment(model="calibrate", net=c.net, protocol=protocol, penalty=penalty)
  text = experiment.run_gin(own)
  gin.clear_config()
  gin.parse_config(text)
  assert components.resolve() == own


def test_provenance_outside_git_is_none(tmp_path, monkeypatch):
  monkeypatch.setattr(provenance, "PACKAGE_DIR", tmp_path)
  provenance.code_version.cache_clear()
  try:
    assert provenance.code_version() == {"commit": None, "dirty": None}
  finally:
    provenance.code_version.cache_clear()


@pytest.mark.parametrize("missing", [runs.CONFIG_NAME, runs.RESULT_NAME])
def test_a_folder_that_is_not_a_finished_run_is_one_line_exit_2(tmp_path, capsys, missing):
  folder = tmp_path / "r" / "forget" / "bfs" / "seed0"
  folder.mkdir(parents=True)
  for name in {runs.CONFIG_NAME, runs.RESULT_NAME} - {missing}:
    (folder / name).write_text("{}")
  assert replay.main([str(folder), "--results", str(tmp_path / "out")]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("replay: error:") and missing in err and "\n" not in err


def test_dry_run_checks_and_trains_nothing(tmp_path, capsys):
  folder = REPO / "results" / "pilot" / "forget" / "insertion_sort" / "seed0"
  assert replay.main([str(folder), "--results", str(tmp_path / "out"), "--dry-run"]) == 0
  assert "forget/insertion_sort/seed0" in capsys.readouterr().out
  assert not (tmp_path / "out").exists()


TINY = ["NetConfig.hidden_size = 8", "Protocol.train_steps = 4", "Protocol.eval_every_steps = 2",
        "Protocol.log_every_steps = 2", "Protocol.checkpoint_every_steps = 2"]


def test_a_replayed_run_scores_the_same(tmp_path, monkeypatch, data_cache_dir, capsys):
  """A tiny run, trained, then replayed from its folder into another: the same test score
  (deterministic on CPU); both results say which code trained them."""
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))
  (path,) = experiment.run_from_gin(["gin/forget.gin", "gin/smoke.gin"], TINY,
                                    algorithms=["bfs"], seeds=[0],
                                    results_dir=str(tmp_path / "a"))
  first = json.loads(pathlib.Path(path).read_text())
  gin.clear_config()
  assert replay.main([str(pathlib.Path(path).parent), "--results", str(tmp_path / "b")]) == 0
  second = json.loads((tmp_path / "b" / "forget" / "bfs" / "seed0" / runs.RESULT_NAME).read_text())
  assert second["test_score"] == first["test_score"] and second["steps"] == 4
  assert "(recorded" in capsys.readouterr().out
  for r in (first, second):
    assert "commit" in r and "dirty" in r
    assert r["commit"] == provenance.code_version()["commit"]


# G-ForgetNet as gin/gforget.gin trains it, tiny: λ from the record of a 6-step λ = 0 run
# (schedule reading: the penalty from step 6 of 10, the run continuing from that state).
TINY_GATED = ["NetConfig.hidden_size = 8", "Protocol.train_steps = 10",
              "Protocol.eval_every_steps = 2", "Protocol.log_every_steps = 2",
              "Protocol.checkpoint_every_steps = 2"]
GFORGET = ["gin/gforget.gin", "gin/smoke.gin"]


def test_a_gforget_run_that_reads_a_calibration_record_replays(tmp_path, monkeypatch,
                                                                data_cache_dir, capsys):
  """The replay copies the λ calibration record the run read to the same place under the
  new results folder, trains with that record's λ (read here from the record file itself)
  and scores the same; another record already at that place is refused, nothing trained."""
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))
  config.parse_gin(GFORGET, TINY_GATED)
  c = components.resolve()
  calibrate.calibrate_algorithm("bfs", tmp_path / "a", net=c.net, protocol=c.protocol)
  gin.clear_config()
  (path,) = experiment.run_from_gin(GFORGET, TINY_GATED, algorithms=["bfs"], seeds=[0],
                                    results_dir=str(tmp_path / "a"))
  first = json.loads(pathlib.Path(path).read_text())
  info = first["lambda_calibration"]
  record_file = tmp_path / "a" / info["record"]
  record = json.loads(record_file.read_text())
  assert info["source"] == "calibration record" and info["reading"] == "schedule"
  assert first["lambda_gate"] == record["lambda"] > 0.0
  assert first["penalty_start_step"] == record["calibration_step"] == 6
  gin.clear_config()

  folder = pathlib.Path(path).parent
  assert replay.main([str(folder), "--results", str(tmp_path / "b")]) == 0
  assert f"lambda    {record['lambda']} from {record_file}" in capsys.readouterr().out
  assert (tmp_path / "b" / info["record"]).read_bytes() == record_file.read_bytes()
  second = json.loads((tmp_path / "b" / "gforget" / "bfs" / "seed0" / runs.RESULT_NAME)
                      .read_text())
  assert second["lambda_gate"] == record["lambda"]
  assert second["lambda_calibration"]["record"] == info["record"]
  assert second["test_score"] == first["test_score"] and second["steps"] == 10

  other = tmp_path / "c" / info["record"]
  other.parent.mkdir(parents=True)
  other.write_text(json.dumps(dict(record, **{"lambda": 2.0 * record["lambda"]})))
  assert replay.main([str(folder), "--results", str(tmp_path / "c")]) == 2
  assert "is another calibration record" in capsys.readouterr().err
  assert not (tmp_path / "c" / "gforget").exists()
