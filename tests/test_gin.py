"""Every shipped gin file parses, and runs two steps at smoke size."""

import pathlib
import re

import gin
import pytest

from nar_markov import config
from nar_markov import data
from nar_markov import train

GIN_DIR = config.GIN_DIR
SMOKE = ["run_experiment.train_steps = 2", "run_experiment.eval_every_steps = 2",
         "run_experiment.val_max_samples = 4", "run_experiment.test_max_samples = 4"]
# Overlays and data-only files are run on top of a model file.
OVERLAYS = {"smoke.gin", "local.gin", "slurm_gpu.gin", "reduced1500.gin"}


def _shipped():
  return sorted(p.name for p in GIN_DIR.glob("*.gin"))


def test_expected_files_are_shipped():
  names = set(_shipped())
  for required in ["base.gin", "baseline.gin", "forget.gin", "gforget.gin",
                   "gforget_constant.gin", "gforget_nopenalty.gin",
                   "smoke.gin", "local.gin"]:
    assert required in names


@pytest.mark.parametrize("name", _shipped())
def test_gin_file_parses_and_runs_two_steps(name, tmp_path, monkeypatch, data_cache_dir):
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))
  if name == "multitask.gin":  # the same run_experiment: the same smoke bindings
    paths = train.run_from_gin(
        [str(GIN_DIR / name), str(GIN_DIR / "smoke.gin")],
        SMOKE + ["ALGORITHMS = ['bfs', 'insertion_sort']"],
        algorithms=["bfs", "insertion_sort"], seeds=[0], results_dir=str(tmp_path),
        multitask=True)
    assert len(paths) == 2 and all(pathlib.Path(p).exists() for p in paths)
    return
  files = [str(GIN_DIR / name)]
  if name in OVERLAYS:
    files = [str(GIN_DIR / "baseline.gin")] + files
  files.append(str(GIN_DIR / "smoke.gin"))
  params = list(SMOKE)
  if name == "base.gin":  # the protocol without a model
    params.append("run_experiment.model = 'baseline'")
  config.parse_gin(files, params)
  algorithm = "bfs"
  if gin.query_parameter("run_experiment.model").startswith("gforget"):
    # lambda from a calibration record by default (tests/test_calibrate.py);
    # here bound by hand, which the sweep and run_experiment also accept.
    params.append("run_experiment.lambda_gate = 0.01")
  (path,) = train.run_from_gin(files, params, algorithms=[algorithm], seeds=[0],
                               results_dir=str(tmp_path))
  result = pathlib.Path(path)
  assert result.exists() and (result.parent / "config.gin").exists()
  import json  # pylint: disable=g-import-not-at-top
  r = json.loads(result.read_text())
  assert r["status"] == "done" and r["steps"] == 2
  assert data.check_algorithm(r["algorithm"]) == algorithm
  assert "run_experiment.model" in (result.parent / "config.gin").read_text()


EXPERIMENTS = sorted(set(_shipped()) - OVERLAYS - {"base.gin"})


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_overlay_applies_to_every_experiment_file(experiment, overlay):
  """An overlay's run_experiment bindings are what every experiment file, single-
  or multi-task, trains with (they are all one configurable, run_experiment)."""
  text = (GIN_DIR / overlay).read_text()
  bound = re.findall(r"^run_experiment\.(\w+)\s*=", text, flags=re.M)
  assert bound or overlay == "reduced1500.gin" or "slurm_resources" in text, overlay
  config.parse_gin([f"gin/{experiment}", f"gin/{overlay}"], [])
  with_overlay = {k: gin.query_parameter(f"run_experiment.{k}") for k in bound}
  config.parse_gin([f"gin/{overlay}"], [])  # the overlay's own values
  alone = {k: gin.query_parameter(f"run_experiment.{k}") for k in bound}
  assert with_overlay == alone, (experiment, overlay)


def test_includes_resolve_from_any_working_directory(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  config.parse_gin(["gin/gforget.gin"])
  assert gin.query_parameter("run_experiment.model") == "gforget"
  assert len(gin.query_parameter("%ALGORITHMS")) == 30


@pytest.mark.parametrize("files, params, match", [
    (["gin/nope.gin"], [], "gin file not found"),
    (["gin/baseline.gin"], ["run_experiment.hiden_size = 3"], "bad gin configuration"),
    (["gin/baseline.gin"], ["no_such_fn.x = 1"], "bad gin configuration"),
    (["gin/baseline.gin"], ["run_experiment.train_steps = ("], "bad gin configuration"),
])
def test_bad_gin_is_a_value_error(files, params, match):
  with pytest.raises(ValueError, match=match):
    config.parse_gin(files, params)
