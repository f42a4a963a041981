"""The dry run's planned cost (launch/cost.py): consistent with its inputs and
the measured figures it cites, and importable without jax."""

import json
import pathlib
import subprocess
import sys

import pytest

from launch import cost

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
PROTOCOL = {"train_steps": 10000, "hidden_size": 128, "batch_size": 32,
            "train_lengths": [4, 7, 11, 13, 16], "eval_every_steps": 50,
            "val_max_samples": None, "test_max_samples": None}


def test_cost_imports_neither_jax_nor_clrs():
  code = ("import sys; from launch import cost; "
          "print(cost.format_estimate({'bfs': 2}, {'train_steps': 100})); "
          "print(sorted(m for m in ('jax', 'clrs', 'tensorflow') if m in sys.modules))")
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                        text=True, timeout=120, check=True)
  assert proc.stdout.splitlines()[-1] == "[]"
  assert "bfs" in proc.stdout


def test_trajectory_lengths_are_the_measured_ones():
  table = json.loads(cost.TRAJECTORY_FILE.read_text())["algorithms"]
  assert cost.trajectory_length("bubble_sort", 64) == table["bubble_sort"]["test_T"] == 2017
  assert cost.trajectory_length("bfs", 16) == table["bfs"]["train_T"]["16"]
  assert cost.trajectory_length("insertion_sort", 40) == 40   # T = n at 16 and at 64


@pytest.mark.parametrize("algorithm", ["bfs", "insertion_sort", "dfs", "floyd_warshall"])
def test_training_model_reproduces_the_measured_speed(algorithm):
  m = cost.measured()["train_step"]["algorithms"][algorithm]
  e = cost.estimate_run(algorithm, dict(PROTOCOL, eval_every_steps=10**9))
  steps_per_s = 10000 / (e["train_s"] - cost.COMPILE_S_PER_RUN)
  # The bench drew the five sizes about equally often; its mean is over those steps.
  assert steps_per_s == pytest.approx(m["steps_per_s_mean"], rel=0.2)


def test_test_pass_model_reproduces_the_measured_test_pass():
  tp = cost.measured()["test_pass"]
  e = cost.estimate_run(tp["algorithm"], PROTOCOL)
  assert e["test_s"] == pytest.approx(tp["wall_s"], rel=1e-6)


def test_numbers_follow_the_inputs():
  base = cost.estimate_run("bubble_sort", PROTOCOL)
  given = cost.estimate_run("bubble_sort", dict(PROTOCOL, steps_per_s=2.5))
  assert given["train_s"] == pytest.approx(10000 / 2.5)
  assert given["val_s"] == base["val_s"] and given["test_s"] == base["test_s"]
  # 201 validations (steps 0, 50, ..., 10000) vs 101.
  half = cost.estimate_run("bubble_sort", dict(PROTOCOL, eval_every_steps=100))
  assert base["val_s"] / half["val_s"] == pytest.approx(201 / 101)
  fewer = cost.estimate_run("bubble_sort", dict(PROTOCOL, test_max_samples=8))
  assert fewer["test_s"] == pytest.approx(base["test_s"] / 4)   # 32 test graphs -> 8
  # The test-curve diagnostic: 1 final test + 11 (steps 0, 1000, ..., 10000).
  traced = cost.estimate_run("bubble_sort", dict(PROTOCOL, test_every_steps=1000))
  assert traced["test_s"] == pytest.approx(12 * base["test_s"])
  double = cost.estimate_run("bubble_sort", dict(PROTOCOL, batch_size=64))
  assert double["train_s"] - cost.COMPILE_S_PER_RUN == pytest.approx(
      2 * (base["train_s"] - cost.COMPILE_S_PER_RUN))
  # bubble_sort's test trajectories (T = 2,017 at 64 nodes) make its test pass
  # costlier than insertion_sort's (T = 64) by about that ratio x their k.
  ins = cost.estimate_run("insertion_sort", PROTOCOL)
  ratio = (2017 * cost.k_step("bubble_sort")) / (64 * cost.k_step("insertion_sort"))
  assert base["test_s"] / ins["test_s"] == pytest.approx(ratio)


def test_format_estimate_totals_are_the_sum_of_the_rows():
  runs = {"bfs": 10, "quickselect": 3}
  text = cost.format_estimate(runs, PROTOCOL)
  assert "ESTIMATES" in text and "cost_cpu.json" in text
  rows = {l.split()[0]: l.split() for l in text.splitlines()[2:5]}
  assert rows["bfs"][1:3] == ["10", "100,000"] and rows["quickselect"][1:3] == ["3", "30,000"]
  assert rows["total"][1:3] == ["13", "130,000"]
  per = {a: cost.estimate_run(a, PROTOCOL) for a in runs}
  total_h = sum(n * per[a]["total_s"] for a, n in runs.items()) / 3600
  assert float(rows["total"][6].replace(",", "")) == pytest.approx(total_h, abs=0.6)
  # quickselect: 2,048 val graphs at every validation dominate its time.
  assert int(rows["quickselect"][8].rstrip("%")) > 50
  assert cost.format_estimate({}, PROTOCOL) == "planned cost: nothing to run"


def test_dry_run_prints_the_estimate(tmp_path, capsys):
  from launch import sweep  # pylint: disable=g-import-not-at-top
  rc = sweep.main(["--gin", "gin/forget.gin", "--gin_param", "ALGORITHMS=['bfs','dfs']",
                   "--gin_param", "SEEDS=[0,1,2]", "--dry-run", "--cluster", "local",
                   "--results", str(tmp_path)])
  lines = capsys.readouterr().out.splitlines()
  assert rc == 0
  assert lines[-1] == "dry run: nothing submitted"
  assert any(l.startswith("planned cost -- ESTIMATES") for l in lines)
  assert [l.split()[:3] for l in lines if l.split()[:1] in (["bfs"], ["dfs"], ["total"])] == [
      ["bfs", "3", "30,000"], ["dfs", "3", "30,000"], ["total", "6", "60,000"]]


def test_calibration_stage_estimate():
  from nar_markov.config import lambda_heuristic  # pylint: disable=g-import-not-at-top
  settings = {"train_steps": 10_000, "schedule_steps": None, "hidden_size": 128,
              "batch_size": 32, "train_lengths": [4, 7, 11, 13, 16], "eval_every_steps": 50}
  one = cost.estimate_run("bfs", dict(settings, train_steps=6000))["total_s"] / 3600
  text = cost.format_calibration_estimate(["bfs"], settings, lambda_heuristic.LambdaHeuristic())
  assert "1 algorithms x 3 seed(s) x 6,000 steps" in text
  assert f"{3 * one:.2f} h" in text and "continue from their calibration" in text
  text = cost.format_calibration_estimate(
      ["bfs"], settings, lambda_heuristic.LambdaHeuristic(reading="constant", seeds=(0,), max_trials=4))
  assert "1 seed(s) x (1 + up to 4 search trials)" in text and f"{5 * one:.2f} h at most" in text
  assert "runs of the median calibration seed continue" in text


FIXTURE_GPU = REPO_ROOT / "tests" / "fixtures" / "cost_gpu.json"


@pytest.fixture
def gpu_figures(monkeypatch):
  """cost.py reading the fixture's GPU figures (which says it is no measurement)."""
  monkeypatch.setattr(cost, "GPU_MEASURED_FILE", FIXTURE_GPU)
  cost.measured_gpu.cache_clear()
  yield json.loads(FIXTURE_GPU.read_text())
  cost.measured_gpu.cache_clear()


def test_a_gpu_sweep_without_gpu_figures_says_so(monkeypatch, tmp_path):
  monkeypatch.setattr(cost, "GPU_MEASURED_FILE", tmp_path / "none.json")
  cost.measured_gpu.cache_clear()
  cpu = cost.format_estimate({"bfs": 2}, PROTOCOL)
  gpu = cost.format_estimate({"bfs": 2}, dict(PROTOCOL, gpus_per_task=1))
  assert "no GPU measurement" not in cpu
  lines = gpu.splitlines()
  assert lines[0] == cpu.splitlines()[0]
  assert lines[1].startswith("  (the sweep asks for 1 GPU(s) per job, and there is no GPU "
                             "measurement yet")
  assert lines[2:] == cpu.splitlines()[1:]       # the CPU hours, as they were
  cost.measured_gpu.cache_clear()


def test_the_gpu_estimate_follows_the_measured_figures(gpu_figures):
  settings = dict(PROTOCOL, gpus_per_task=1)
  one = cost.estimate_runs_gpu("bfs", 1, settings, gpu_figures)
  three = cost.estimate_runs_gpu("bfs", 3, settings, gpu_figures)
  # A step follows its hint steps: k = 0.008 s / T(bfs, 16), times T at each size.
  k = 0.008 / cost.trajectory_length("bfs", 16)
  step_s = sum(k * cost.trajectory_length("bfs", n) for n in PROTOCOL["train_lengths"]) / 5
  assert one["train_s"] == pytest.approx(10000 * step_s + 7 * 20.0)     # 7 shapes, cold
  # Two more runs: their steps, and their shapes from the sweep's cache (warm).
  assert three["train_s"] - one["train_s"] == pytest.approx(2 * (10000 * step_s + 7 * 2.0))
  # The measured run's own evaluation comes back as measured.
  whole = cost.estimate_runs_gpu("binary_search", 1, settings, gpu_figures)
  assert whole["val_s"] == pytest.approx(100.0)
  # An algorithm not measured: the median seconds per hint step of those measured.
  kadane = cost.estimate_runs_gpu("find_maximum_subarray_kadane", 1,
                                  dict(settings, train_lengths=[16]), gpu_figures)
  ks = sorted([0.008 / cost.trajectory_length("bfs", 16),
               0.005 / cost.trajectory_length("binary_search", 16)])
  t16 = cost.trajectory_length("find_maximum_subarray_kadane", 16)
  assert kadane["train_s"] == pytest.approx(10000 * sum(ks) / 2 * t16 + 3 * 20.0)


def test_a_gpu_sweep_is_estimated_from_the_gpu_figures(gpu_figures):
  text = cost.format_estimate({"bfs": 3, "dfs": 1}, dict(PROTOCOL, gpus_per_task=1))
  assert text.startswith("planned cost -- ESTIMATES for GPU jobs, from figures measured on "
                         "one Fixture GPU (tests/fixtures/cost_gpu.json;")
  rows = {l.split()[0]: l.split() for l in text.splitlines()[2:5]}
  bfs = cost.estimate_runs_gpu("bfs", 3, dict(PROTOCOL, gpus_per_task=1), gpu_figures)
  assert rows["bfs"][1:3] == ["3", "30,000"]
  assert float(rows["bfs"][7]) == pytest.approx(bfs["total_s"] / 3600, abs=0.006)
  assert rows["total"][1] == "4"
  # Without a GPU asked, the same figures are not used.
  cpu = cost.format_estimate({"bfs": 3}, PROTOCOL)
  assert cpu.startswith("planned cost -- ESTIMATES, training speed from CPU step times")


def test_dry_run_of_the_gpu_overlay_says_there_is_no_gpu_measurement(tmp_path, capsys,
                                                                       monkeypatch):
  from launch import sweep  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(cost, "GPU_MEASURED_FILE", tmp_path / "none.json")
  cost.measured_gpu.cache_clear()
  rc = sweep.main(["--gin", "gin/forget.gin", "--gin", "gin/slurm_gpu.gin",
                   "--gin_param", "ALGORITHMS=['bfs']", "--gin_param", "SEEDS=[0]",
                   "--dry-run", "--cluster", "local", "--results", str(tmp_path / "r")])
  out = capsys.readouterr().out
  assert rc == 0
  assert "(the sweep asks for 1 GPU(s) per job, and there is no GPU measurement yet" in out
  cost.measured_gpu.cache_clear()
