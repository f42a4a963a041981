"""Bad input to the sweep and to evaluate fails before anything runs, in one line naming the
flag or binding, exit 2; overlays give the same sweep in any order or are refused; a new
history policy without its branch is an error, never another policy's net."""

import pathlib

import pytest

from launch import cluster
from launch import sweep
from launch import sweep_spec
from nar_markov.config import components
from nar_markov.config import netconfig
from nar_markov.probes import evaluate

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
BFS = ["--gin_param", "ALGORITHMS=['bfs']", "--gin_param", "SEEDS=[0]"]


@pytest.mark.parametrize("args, says", [
    # Silent before: a model file's include of base.gin bound the overlay's settings again
    # (slurm_gpu.gin's GPU request, before base.gin bound no launcher setting).
    (["--gin", "gin/smoke.gin", "--gin", "gin/forget.gin"],
     "the model file --gin gin/forget.gin (its include of gin/base.gin) binds again what "
     "the overlay --gin gin/smoke.gin before it bound (ALGORITHMS, NetConfig.hidden_size, "
     "NetConfig.nb_triplet_fts and 9 more)"),
    # Silent before: the last model file won.
    (["--gin", "gin/baseline.gin", "--gin", "gin/forget.gin"],
     "--gin gin/baseline.gin and --gin gin/forget.gin are both model files"),
    # Two overlays that bind the same settings otherwise: their order decided.
    (["--gin", "gin/baseline.gin", "--gin", "gin/local.gin", "--gin", "gin/smoke.gin"],
     "--gin gin/smoke.gin binds otherwise what the overlay --gin gin/local.gin before it bound"),
    # Silent before: the baseline has no penalty and trained without it.
    (["--gin", "gin/baseline.gin", "--gin_param", "GatePenalty.lambda_gate=0.1"],
     "--gin_param 'GatePenalty.lambda_gate=0.1': this model (baseline) has no gate penalty"),
    (["--gin", "gin/baseline.gin", "--gin_param", "LambdaHeuristic.seeds=[0]"],
     "--gin_param 'LambdaHeuristic.seeds=[0]': this model (baseline) has no gate penalty"),
    (["--gin", "gin/forget.gin", "--gin_param", "NetConfig.gate_bias_init=1.0"],
     "--gin_param 'NetConfig.gate_bias_init=1.0': this model (forget) has NetConfig.history "
     "= 'none' (no gate)"),
    (["--gin", "gin/baseline.gin", "--gin_param", "NetConfig.history_scope='processor'"],
     "NetConfig.history_scope='processor'\": this model (baseline) has NetConfig.history = 'full'"),
    # Was a 43-line traceback.
    (["--gin", "gin/gforget.gin", "--gin_param", "LambdaHeuristic.reading='schedul'"],
     "LambdaHeuristic.reading must be one of ('schedule', 'constant'), got 'schedul'"),
    (["--gin", "gin/gforget.gin", "--gin_param", "LambdaHeuristic.band=(0.7,0.3)"],
     "LambdaHeuristic.band must be 0 < lo < hi < 1, got (0.7, 0.3)"),
    # Was "EOF in multi-line statement" (or "Expected ',' or ']'") without the binding.
    (["--gin", "gin/baseline.gin", "--gin_param", "SEEDS=[0,1"],
     "--gin_param 'SEEDS=[0,1': does not parse: a bracket or quote is not closed"),
    # Was "malformed node or string on line 1: <ast.Name object at 0x...>".
    (["--gin", "gin/baseline.gin", "--gin_param", "slurm_resources.partition=gpu"],
     "--gin_param 'slurm_resources.partition=gpu': gpu is not a value gin knows (a number, a "
     "list, None, True, @name(), %MACRO): to give the string, quote it: "
     "slurm_resources.partition='gpu'"),
    # Was "could not convert string to float: 'big'".
    (["--gin", "gin/gforget.gin", "--gin_param", "GatePenalty.lambda_gate='big'"],
     "GatePenalty.lambda_gate must be None (read from the calibration record), a number, or "
     "a dict algorithm -> number, got 'big'"),
    (["--gin", "gin/gforget.gin", "--gin_param", "GatePenalty.lambda_gate={'bfs': 'x'}"],
     "GatePenalty.lambda_gate must be None"),
])
def test_a_bad_sweep_input_is_one_line_before_anything_runs(args, says, tmp_path, capsys):
  results = tmp_path / "results"
  assert sweep.main(args + BFS + ["--dry-run", "--results", str(results)]) == 2
  out, err = capsys.readouterr()
  assert out == "" and err.count("\n") == 1, err
  assert err.startswith("sweep.py: error: ") and says in err, err
  assert not results.exists()


@pytest.mark.parametrize("flag", ["--dry-run", "--force", "--archive-mismatched", "--list",
                                  "--cluster=local"])
def test_status_refuses_the_flags_it_would_ignore(flag, tmp_path, capsys):
  assert sweep.main(["--status", flag, "--results", str(tmp_path)]) == 2
  err = capsys.readouterr().err
  assert err == (f"sweep.py: error: --status and {flag.split('=')[0]} do not go together: "
                 "--status reports what the results folder holds and plans nothing; give "
                 "one of them\n")


def test_list_without_dry_run_is_refused(tmp_path, capsys):
  assert sweep.main(["--gin", "gin/baseline.gin", "--list", "--results", str(tmp_path)]) == 2
  assert "--list lists the runs of a --dry-run" in capsys.readouterr().err


def test_an_overlay_before_the_model_file_keeps_its_gpu_request(tmp_path):
  """Was refused (before that, silent): forget.gin's include of base.gin bound the Slurm
  resources again and reset the overlay's GPU request.  base.gin binds none of the
  launcher's settings now, so the order of the Slurm overlay and the model file is free."""
  params = ["ALGORITHMS=['bfs']", "SEEDS=[0]"]
  swept = []
  for files in (["gin/slurm_gpu.gin", "gin/forget.gin"], ["gin/forget.gin", "gin/slurm_gpu.gin"]):
    runs = sweep_spec.expand_runs(files, params, str(tmp_path))
    swept.append(([r.key for r in runs], cluster.SlurmResources()))
  assert swept[0] == swept[1]
  assert swept[0][1].gpus_per_task == 1


def test_overlays_give_the_same_sweep_in_any_order(tmp_path):
  """Overlays that bind different settings compose to the same runs and resources."""
  params = ["ALGORITHMS=['bfs','dfs']", "SEEDS=[0,1]"]
  swept = []
  for overlays in (["gin/slurm_gpu.gin", "gin/smoke.gin", "gin/triplet_gmpnn.gin"],
                   ["gin/triplet_gmpnn.gin", "gin/smoke.gin", "gin/slurm_gpu.gin"]):
    runs = sweep_spec.expand_runs(["gin/forget.gin"] + overlays, params, str(tmp_path))
    resources = cluster.SlurmResources()
    definitions = sweep_spec.expected_definitions(runs)
    swept.append(([(r.key, r.seeds_per_job) for r in runs], resources, definitions))
  assert swept[0] == swept[1]
  assert swept[0][1].gpus_per_task == 1  # the GPU request is kept
  assert next(iter(swept[0][2].values()))["settings"]["processor"] == "triplet_gmpnn"


# -- evaluate -------------------------------------------------------------------------------


def test_evaluate_on_a_folder_that_does_not_exist_is_one_line(tmp_path, capsys):
  """Was: seven lines of usage, then "has no params.npz"."""
  with pytest.raises(SystemExit) as e:
    evaluate.main([str(tmp_path / "nope")])
  assert e.value.code == 2
  out, err = capsys.readouterr()
  assert out == "" and err == f"evaluate: error: no run folder {tmp_path / 'nope'}\n"


def test_evaluate_on_a_committed_run_says_to_replay_it_on_its_cpu_kind(capsys):
  run = REPO_ROOT / "results/full_activity_selector/baseline/activity_selector/seed0"
  assert (run / "result.json").exists() and not (run / "params.npz").exists()
  with pytest.raises(SystemExit) as e:
    evaluate.main([str(run)])
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1, err
  assert f"python -m nar_markov.tools.replay {run} --results <folder>" in err
  assert ("a bit-exact replay needs the CPU kind that trained it (result.json "
          "device.host_cpu: AMD EPYC, SIMD sse4_2/avx/avx2/fma/avx512f/avx512_bf16)") in err


# -- history policies ---------------------------------------------------------------------


def _history_of(cfg):
  import haiku as hk  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from nar_markov.nets import model  # pylint: disable=g-import-not-at-top

  class Probe(hk.Module):
    """Net's own `_history` on a module holding only the config."""
    _history = model.Net._history  # pylint: disable=protected-access

    def __init__(self):
      super().__init__(name="net")
      self._config = cfg

  x = jnp.ones((1, 3, cfg.hidden_size))
  fn = hk.transform(lambda: Probe()._history(x, 2 * x))  # pylint: disable=protected-access
  params = fn.init(jax.random.PRNGKey(0))
  return params, fn.apply(params, None)


@pytest.mark.parametrize("policy", netconfig.HISTORY_POLICIES)
def test_every_registered_history_policy_has_its_branch(policy):
  _, seen = _history_of(netconfig.NetConfig(hidden_size=4, history=policy))
  assert seen.processor.shape == (1, 3, 4)


def test_a_registered_policy_without_its_branch_is_an_error_not_the_gated_net(monkeypatch):
  """Was: `_history`'s `else:` built the gate, so a new name in HISTORY_POLICIES without
  its branch trained a G-ForgetNet (without a penalty) under another name."""
  monkeypatch.setattr(netconfig, "HISTORY_POLICIES", netconfig.HISTORY_POLICIES + ("noisy",))
  cfg = netconfig.NetConfig(hidden_size=4, history="noisy")
  with pytest.raises(ValueError, match="NetConfig.history 'noisy' has no branch in "
                     r"nar_markov/nets/model.py Net._history"):
    _history_of(cfg)


def test_a_name_outside_the_registry_is_refused_by_the_config():
  with pytest.raises(ValueError, match="history must be one of"):
    netconfig.NetConfig(history="gate")
  assert components.PAPER_LABELS["gforget"][0] in netconfig.HISTORY_POLICIES
