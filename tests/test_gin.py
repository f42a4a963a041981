"""Every shipped gin file parses, and runs two steps at smoke size."""

import pathlib
import re

import gin
import pytest

from nar_markov.config import clrs30
from nar_markov.config import components
from nar_markov.config import gin_files as config
from nar_markov.config import runspec
from nar_markov.training import experiment

GIN_DIR = config.GIN_DIR
SMOKE = ["Protocol.train_steps = 2", "Protocol.eval_every_steps = 2",
         "Protocol.val_max_samples = 4", "Protocol.test_max_samples = 4"]
# Overlays and data-only files are run on top of a model file.
OVERLAYS = {"smoke.gin", "local.gin", "slurm_gpu.gin", "reduced1500.gin", "pilot.gin",
            "triplet_mpnn.gin", "triplet_gmpnn.gin", "decoder_processed.gin"}


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
    paths = experiment.run_from_gin(
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
    params.append("GatePenalty.lambda_gate = 0.01")
  resolved = []  # a job resolves its gin once (issue 74: config flows one way)
  real_resolve = components.resolve
  monkeypatch.setattr(components, "resolve",
                      lambda **kw: resolved.append(kw) or real_resolve(**kw))
  (path,) = experiment.run_from_gin(files, params, algorithms=[algorithm], seeds=[0],
                               results_dir=str(tmp_path))
  assert resolved == [{}]
  result = pathlib.Path(path)
  assert result.exists() and (result.parent / "config.gin").exists()
  import json  # pylint: disable=g-import-not-at-top
  r = json.loads(result.read_text())
  assert r["status"] == "done" and r["steps"] == 2
  assert clrs30.check_algorithm(r["algorithm"]) == algorithm
  assert "run_experiment.model" in (result.parent / "config.gin").read_text()


EXPERIMENTS = sorted(set(_shipped()) - OVERLAYS - {"base.gin"})


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
@pytest.mark.parametrize("experiment_file", EXPERIMENTS)
def test_every_overlay_applies_to_every_experiment_file(experiment_file, overlay):
  """An overlay's bindings are what every experiment file, single- or multi-task,
  trains with: the protocol and net that run_experiment receives carry them."""
  text = (GIN_DIR / overlay).read_text()
  bound = re.findall(r"^(\w+)\.(\w+)\s*=", text, flags=re.M)
  assert bound, overlay
  config.parse_gin([f"gin/{experiment_file}", f"gin/{overlay}"], [])
  with_overlay = {(c, k): gin.query_parameter(f"{c}.{k}") for c, k in bound}
  exp = components.resolve()
  for (c, k), value in with_overlay.items():
    if c == "Protocol":
      assert getattr(exp.protocol, k) == value, (experiment_file, overlay, k)
    if c == "NetConfig":
      assert getattr(exp.net, k) == value, (experiment_file, overlay, k)
  config.parse_gin(["gin/base.gin", f"gin/{overlay}"], [])  # the overlay's own values
  alone = {(c, k): gin.query_parameter(f"{c}.{k}") for c, k in bound}
  assert with_overlay == alone, (experiment_file, overlay)


def test_each_model_file_binds_its_history_and_penalty():
  """The history policy is on the net's config, the penalty only where G-ForgetNet
  needs it; the label only names the folder (and is checked against them)."""
  expected = {"baseline.gin": ("baseline", "full", None),
              "forget.gin": ("forget", "none", None),
              "gforget.gin": ("gforget", "gated", "record"),
              "gforget_constant.gin": ("gforget_constant", "gated", "record"),
              "gforget_nopenalty.gin": ("gforget_nopenalty", "gated", None),
              "gforget_input.gin": ("gforget_input", "gated", "record"),
              "gforget_processor.gin": ("gforget_processor", "gated", "record"),
              "multitask.gin": ("forget_multitask", "none", None)}
  assert set(expected) == set(EXPERIMENTS)
  for name, (label, history, penalty) in expected.items():
    config.parse_gin([f"gin/{name}"], [])
    c = components.resolve()  # checks the label against the history and penalty
    assert (c.model, c.net.history) == (label, history), name
    if penalty is None:
      assert c.penalty is None, name
    else:
      assert c.penalty == components.GatePenalty(None) and runspec.needs_calibration(
          c.penalty), name


def test_includes_resolve_from_any_working_directory(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  config.parse_gin(["gin/gforget.gin"])
  assert gin.query_parameter("run_experiment.model") == "gforget"
  assert len(gin.query_parameter("%ALGORITHMS")) == 30


@pytest.mark.parametrize("files, params, match", [
    (["gin/nope.gin"], [], "gin file not found"),
    (["gin/baseline.gin"], ["NetConfig.hiden_size = 3"], "bad gin configuration"),
    (["gin/baseline.gin"], ["no_such_fn.x = 1"], "bad gin configuration"),
    (["gin/baseline.gin"], ["Protocol.train_steps = ("], "bad gin configuration"),
])
def test_bad_gin_is_a_value_error(files, params, match):
  with pytest.raises(ValueError, match=match):
    config.parse_gin(files, params)
