"""A sweep's job and its devices: a local job sees the GPUs slurm_resources.gpus_per_task
asks for (CUDA_VISIBLE_DEVICES, as submitit's LocalExecutor sets it), a job that asked
for a GPU and got the CPU stops at its start with one line, and the jobs of a sweep
share JAX's compilation cache (launch/cluster.py, launch/sweep_spec.py,
launch/executors.py)."""

import os
import pathlib
import stat
import subprocess
import sys

import gin
import pytest

from launch import cluster
from launch import executors
from launch import sweep_spec
from launch.plan import UsageError
from nar_markov.config import gin_files as config_lib
from nar_markov.training import devices

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOKE = ["--gin", "gin/forget.gin", "--gin", "gin/smoke.gin",
         "--gin_param", "ALGORITHMS=['bfs']", "--gin_param", "Protocol.train_lengths=[4]"]
@pytest.fixture(autouse=True)
def _no_gin_left():
  yield
  gin.clear_config()


TWO_GPUS = """GPU 0: NVIDIA H200 (UUID: GPU-aaaa)
GPU 1: NVIDIA H200 (UUID: GPU-bbbb)
"""


@pytest.fixture
def fake_gpus(tmp_path, monkeypatch):
  """An `nvidia-smi` on PATH that lists the GPUs written to the returned file (two);
  no CUDA_VISIBLE_DEVICES in this process."""
  bin_dir = tmp_path / "fake_nvidia"
  bin_dir.mkdir()
  listing = tmp_path / "nvidia-smi.out"
  listing.write_text(TWO_GPUS)
  exe = bin_dir / "nvidia-smi"
  exe.write_text(f'#!/bin/sh\n[ "$1" = "-L" ] && cat {listing}\n')
  exe.chmod(0o755)
  monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
  monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
  return listing


def _local_job_sees(results, gpus_per_task):
  """CUDA_VISIBLE_DEVICES in a job of a `--cluster local` executor (None: unset)."""
  executor = executors.make_executor("local", results,
                                  cluster.SlurmResources(gpus_per_task=gpus_per_task))
  return executor.submit(os.getenv, "CUDA_VISIBLE_DEVICES").result()


def test_a_local_job_sees_the_gpus_it_asks_for(tmp_path, fake_gpus, monkeypatch):
  seen = {n: _local_job_sees(tmp_path / "r", n) for n in (0, 1, 2, None)}
  # 0: none (CPU); None, the default: the first GPU there is.
  assert seen == {0: "", 1: "0", 2: "0,1", None: "0"}
  # The machine's GPUs as this process sees them: its own CUDA_VISIBLE_DEVICES.
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
  assert _local_job_sees(tmp_path / "r", 1) == "2"
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb")   # named by UUID
  assert _local_job_sees(tmp_path / "r", 1) == "GPU-aaaa"
  with pytest.raises(UsageError, match=r"gpus_per_task = 3 but this machine shows 2 GPU"):
    executors.make_executor("local", tmp_path / "r", cluster.SlurmResources(gpus_per_task=3))


def test_a_machine_without_gpus_gives_its_local_jobs_none(tmp_path, fake_gpus, monkeypatch):
  fake_gpus.write_text("")   # nvidia-smi lists nothing
  assert cluster.visible_gpus() == []
  assert _local_job_sees(tmp_path / "r", None) == ""
  monkeypatch.setenv("PATH", str(tmp_path))   # no nvidia-smi at all
  assert cluster.visible_gpus() == []
  assert cluster.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
  assert cluster.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
  assert cluster.visible_gpus({"CUDA_VISIBLE_DEVICES": "1,0"}) == ["1", "0"]


class _Device:
  def __init__(self, platform):
    self.platform = platform


CPU, GPU = _Device("cpu"), _Device("gpu")


@pytest.mark.parametrize("local_devices, environ, plugins, cause", [
    ([CPU], {"CUDA_VISIBLE_DEVICES": ""}, ["jax-cuda12-plugin 0.10.2"],
     "JAX runs on cpu: CUDA_VISIBLE_DEVICES='' leaves it fewer"),
    ([CPU], {}, [], "JAX runs on cpu: jaxlib has no CUDA plugin here"),
    ([CPU], {"CUDA_VISIBLE_DEVICES": "0"}, ["jax-cuda12-plugin 0.10.2"],
     "JAX runs on cpu: its CUDA plugin (jax-cuda12-plugin 0.10.2) found no more"),
])
def test_a_job_that_asked_for_a_gpu_and_got_the_cpu_says_why(local_devices, environ,
                                                                plugins, cause):
  with pytest.raises(devices.GpuError) as e:
    devices.check_gpus(1, local_devices, environ, plugins)
  message = str(e.value)
  assert message.startswith(f"slurm_resources.gpus_per_task = 1 but {cause}"), message
  assert "\n" not in message


def test_the_gpu_check_counts_gpus():
  devices.check_gpus(1, [GPU], {}, [])
  devices.check_gpus(2, [GPU, GPU], {"CUDA_VISIBLE_DEVICES": "0,1"}, [])
  with pytest.raises(devices.GpuError, match=r"= 2 but JAX sees 1 GPU\(s\): "
                     r"CUDA_VISIBLE_DEVICES='0' leaves it fewer"):
    devices.check_gpus(2, [GPU], {"CUDA_VISIBLE_DEVICES": "0"}, [])


def _kwargs(tmp_path, *params):
  return dict(gin_files=["gin/forget.gin", "gin/smoke.gin"],
              gin_params=["ALGORITHMS=['bfs']", *params], algorithms=["bfs"], seeds=[0],
              results_dir=str(tmp_path / "results"))


def test_a_job_asked_for_a_gpu_stops_before_it_trains_on_the_cpu(tmp_path):
  calls = []
  job = sweep_spec.Job(lambda **kw: calls.append(kw))
  with pytest.raises(devices.GpuError, match="gpus_per_task = 1 but JAX runs on cpu"):
    job(_kwargs(tmp_path, "slurm_resources.gpus_per_task = 1"))
  assert not calls
  job(_kwargs(tmp_path, "slurm_resources.gpus_per_task = 0"))   # CPU, as asked
  job(_kwargs(tmp_path))                                         # the default: anything
  assert len(calls) == 2


def test_a_local_sweep_job_without_its_gpu_fails_in_one_line(tmp_path, fake_gpus):
  """The machine shows a GPU (nvidia-smi), the job gets CUDA_VISIBLE_DEVICES=0, and
  jaxlib here has no CUDA backend: the job fails at its start, and says why."""
  results = tmp_path / "results"
  proc = subprocess.run(
      [sys.executable, str(REPO_ROOT / "launch/sweep.py")] + SMOKE
      + ["--gin_param", "slurm_resources.gpus_per_task=1", "--cluster", "local",
         "--results", str(results)],
      capture_output=True, text=True, cwd=tmp_path, timeout=900, check=False,
      env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
  assert proc.returncode == 1, proc.stdout + proc.stderr
  line = next(l for l in proc.stdout.splitlines() if l.startswith("[1/1] forget/bfs/seed0: f"))
  assert line.startswith("[1/1] forget/bfs/seed0: failed: GpuError: slurm_resources."
                         "gpus_per_task = 1 but JAX runs on cpu: "), line
  assert not (results / "forget" / "bfs" / "seed0" / "result.json").exists()


def test_the_compilation_cache_of_a_sweep(tmp_path, monkeypatch):
  results = tmp_path / "results"
  monkeypatch.delenv("NAR_MARKOV_JAX_CACHE", raising=False)
  config_lib.parse_gin(["gin/forget.gin"])
  assert cluster.compilation_cache_dir(results) == str(results / "_jax_cache")
  monkeypatch.setenv("NAR_MARKOV_JAX_CACHE", str(tmp_path / "mine"))
  assert cluster.compilation_cache_dir(results) == str(tmp_path / "mine")
  config_lib.parse_gin(["gin/forget.gin"], [f"compilation_cache.path = '{tmp_path}/there'"])
  assert cluster.compilation_cache_dir(results) == str(tmp_path / "there")
  config_lib.parse_gin(["gin/forget.gin"], ["compilation_cache.path = 'off'"])
  assert cluster.compilation_cache_dir(results) == "off"
  config_lib.parse_gin(["gin/forget.gin"], ["compilation_cache.path = 3"])
  with pytest.raises(ValueError, match="compilation_cache.path must be"):
    cluster.compilation_cache_dir(results)


def test_a_job_compiles_into_the_sweeps_cache(tmp_path, monkeypatch):
  """The job's NAR_MARKOV_JAX_CACHE (what train.py's learner.setup_compilation_cache
  reads) is the sweep's, and is given back after the call (a debug sweep's jobs run in
  its own process)."""
  monkeypatch.delenv("NAR_MARKOV_JAX_CACHE", raising=False)
  job = sweep_spec.Job(lambda **kw: os.environ["NAR_MARKOV_JAX_CACHE"])
  results = tmp_path / "results"
  assert job(_kwargs(tmp_path)) == str(results / "_jax_cache")
  assert stat.S_IMODE((results / "_jax_cache").stat().st_mode) == 0o700
  assert "NAR_MARKOV_JAX_CACHE" not in os.environ
  assert job(_kwargs(tmp_path, "compilation_cache.path = 'off'")) == "off"
  monkeypatch.setenv("NAR_MARKOV_JAX_CACHE", "/elsewhere")
  assert job(_kwargs(tmp_path, f"compilation_cache.path = '{tmp_path}/c'")) == f"{tmp_path}/c"
  assert os.environ["NAR_MARKOV_JAX_CACHE"] == "/elsewhere"


def test_the_sweep_makes_its_cache_private(tmp_path, monkeypatch):
  monkeypatch.delenv("NAR_MARKOV_JAX_CACHE", raising=False)
  config_lib.parse_gin(["gin/forget.gin"])
  results = tmp_path / "results"
  (results / "_jax_cache").mkdir(parents=True, mode=0o777)
  os.chmod(results / "_jax_cache", 0o777)
  executors.make_executor("debug", results, cluster.SlurmResources())
  assert stat.S_IMODE((results / "_jax_cache").stat().st_mode) == 0o700


def test_a_local_sweeps_jobs_share_its_compilation_cache(tmp_path, monkeypatch, data_cache_dir):
  """With no $NAR_MARKOV_JAX_CACHE, a local sweep's jobs keep their compiled steps in
  <results>/_jax_cache (benchmarks/compile_cache.py measures what a second run saves)."""
  env = {k: v for k, v in os.environ.items() if k != "NAR_MARKOV_JAX_CACHE"}
  env.update(PYTHONPATH=str(REPO_ROOT), NAR_MARKOV_CACHE=str(data_cache_dir))
  results = tmp_path / "results"
  proc = subprocess.run(
      [sys.executable, str(REPO_ROOT / "launch/sweep.py")] + SMOKE
      + ["--gin_param", "SEEDS=[0,1]", "--gin_param", "NetConfig.hidden_size=8",
         "--cluster", "local", "--results", str(results)],
      capture_output=True, text=True, cwd=tmp_path, timeout=900, check=False, env=env)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  entries = sorted(p.name for p in (results / "_jax_cache").iterdir())
  assert any(e.startswith("jit__train_step-") for e in entries), entries
  assert "2/2 runs finished" in proc.stdout
