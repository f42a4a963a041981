"""gin/slurm_gpu.gin: the sbatch script submitit writes from it asks for one GPU
per task (fake sbatch: tests/conftest.py's fake_slurm; no GPU or Slurm needed)."""

from launch import sweep

GPU_SWEEP = ["--gin", "gin/baseline.gin", "--gin", "gin/slurm_gpu.gin",
             "--gin", "gin/smoke.gin", "--gin_param", "ALGORITHMS=['bfs']",
             "--gin_param", "SEEDS=[0,1]", "--cluster", "slurm"]


def test_gpu_overlay_sbatch_script(tmp_path, fake_slurm, capsys):
  results = tmp_path / "results"
  rc = sweep.main(GPU_SWEEP + ["--results", str(results),
                               "--gin_param", "slurm_resources.partition='gpu'"])
  out = capsys.readouterr().out
  assert rc == 0, out
  scripts = sorted(fake_slurm["calls"].glob("script_*.sh"))
  assert len(scripts) == 1
  text = scripts[0].read_text()
  logs = results / "_logs"
  # The array's tag (the sweep finds its arrays in the queue by it: launch/submit.py).
  lines = [l for l in text.splitlines() if l.startswith("#SBATCH")]
  (comment,) = [l for l in lines if l.startswith("#SBATCH --comment=nar_markov-")]
  assert sorted(l for l in lines if l != comment) == sorted([
      "#SBATCH --array=0-1%2",   # array_parallelism 64, capped at the 2 tasks
      "#SBATCH --cpus-per-task=8",
      f"#SBATCH --error={logs}/%A_%a/%A_%a_0_log.err",
      "#SBATCH --gpus-per-task=1",
      "#SBATCH --job-name=nar_markov",
      "#SBATCH --mem=32GB",
      "#SBATCH --nodes=1",
      "#SBATCH --ntasks-per-node=1",
      "#SBATCH --open-mode=append",
      f"#SBATCH --output={logs}/%A_%a/%A_%a_0_log.out",
      "#SBATCH --partition=gpu",
      "#SBATCH --requeue",
      "#SBATCH --signal=USR2@90",
      "#SBATCH --time=240",
      "#SBATCH --wckey=submitit",
  ])
  assert "export XLA_PYTHON_CLIENT_PREALLOCATE=false" in text
  assert 'nvidia-smi -L || echo "nvidia-smi: no GPU visible to this job"' in text
  assert "partition=gpu cpus_per_task=8 mem_gb=32.0 gpus_per_task=1 timeout_min=240" in out


def test_gpu_overlay_dry_run_shows_the_gpu_request(tmp_path, fake_slurm, capsys):
  rc = sweep.main(GPU_SWEEP + ["--results", str(tmp_path / "results"), "--dry-run"])
  out = capsys.readouterr().out
  assert rc == 0, out
  assert ("slurm resources per run: partition=default cpus_per_task=8 mem_gb=32.0 "
          "gpus_per_task=1 timeout_min=240 array_parallelism=64") in out.splitlines()
  assert list(fake_slurm["calls"].glob("*")) == []
