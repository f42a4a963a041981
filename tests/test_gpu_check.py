"""benchmarks/gpu_check.py runs on this CPU at a tiny size: every row, its levers, the
budget, the JSON written as it goes, and the GPU figures launch/cost.py reads."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from benchmarks import gpu_check
from launch import cost

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_rows_and_levers_are_checked():
  assert gpu_check.parse_rows("backend,compile@pin+nopin,run@best,steady") == [
      ("backend", ["pin"]), ("compile", ["pin", "nopin"]), ("run", ["best"]),
      ("steady", ["pin"])]
  with pytest.raises(ValueError, match="unknown row 'compil'"):
    gpu_check.parse_rows("compil")
  with pytest.raises(ValueError, match=r"unknown lever\(s\) \['fast'\]"):
    gpu_check.parse_rows("compile@pin+fast")
  assert gpu_check.main(["--rows", "compile@fast"]) == 2


def test_the_default_rows_are_what_the_docs_say():
  assert gpu_check.parse_rows(gpu_check.DEFAULT_ROWS)   # valid
  env = gpu_check.lever_env("nopin")
  assert env["PJRT_NPROC"] == str(os.cpu_count())
  assert "PJRT_NPROC" not in gpu_check.lever_env("pin")   # the package pins it
  assert gpu_check.lever_env("autotune0")["XLA_FLAGS"].endswith("--xla_gpu_autotune_level=0")


def test_a_row_past_the_budget_is_skipped_not_run(tmp_path):
  out = tmp_path / "check.json"
  report = gpu_check.run_check("backend,compile@pin,run@best", budget_s=5, tiny=True, out=out)
  assert [(e["row"], e["phase"], e["status"]) for e in report["rows"]] == [
      ("backend", "once", "skipped"), ("compile", "cold", "skipped"),
      ("compile", "warm", "skipped"), ("run", "cold", "skipped"), ("run", "warm", "skipped")]
  assert json.loads(out.read_text())["rows"] == report["rows"]


def test_a_row_stopped_by_the_budget_keeps_what_it_measured(tmp_path, monkeypatch):
  """A process past its time is killed; its row says so, with its log's last lines."""
  monkeypatch.setattr(gpu_check, "ROW_CAP_S", dict(gpu_check.ROW_CAP_S, compile=3))
  entry = gpu_check.spawn("compile", "pin", "cold", 3, tiny=True, cache=str(tmp_path / "c"),
                          work=str(tmp_path), logs=tmp_path)
  assert entry["status"] == "timeout" and entry["timeout_s"] == 3
  assert entry["seconds"] < 60 and "log_tail" in entry


@pytest.mark.e2e
@pytest.mark.timeout(1200)
def test_the_tiny_check_on_this_cpu(tmp_path, monkeypatch):
  """The default rows and both levers, as the GPU host runs them, at a CPU's size."""
  out = tmp_path / "out" / "gpu_check.json"
  proc = subprocess.run(
      [sys.executable, "benchmarks/gpu_check.py", "--tiny", "--rows",
       "backend,compile@pin+nopin,run@best", "--budget-s", "3000", "--out", str(out)],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  report = json.loads(out.read_text())
  rows = {(e["row"], e["lever"], e["phase"]): e for e in report["rows"]}
  assert all(e["status"] == "ok" for e in rows.values()), [
      (k, e.get("error"), e.get("log_tail")) for k, e in rows.items() if e["status"] != "ok"]
  assert (out.parent / "gpu_check_logs").is_dir()

  backend = rows[("backend", "pin", "once")]["result"]
  assert backend["visible_gpus"] == []       # no GPU here: a local job gets none
  assert backend["gpus_per_task=None"]["CUDA_VISIBLE_DEVICES"] == ""
  assert backend["gpus_per_task=None"]["device"]["backend"] == "cpu"
  assert "shows 0 GPU(s)" in backend["gpus_per_task=1"]["refused_by_the_sweep"]

  for lever in ("pin", "nopin"):
    cold = rows[("compile", lever, "cold")]["result"]
    warm = rows[("compile", lever, "warm")]["result"]
    assert [r["cache"] for r in cold["cache"]] == ["miss"] and cold["cache"][0]["written"] is True
    assert [r["cache"] for r in warm["cache"]] == ["hit"]
    assert cold["hlo"]["fusions"] > 0 and cold["jaxpr"]["scan"] >= 1
  assert rows[("compile", "nopin", "cold")]["process"]["PJRT_NPROC"] == str(os.cpu_count())
  assert rows[("compile", "pin", "cold")]["process"]["PJRT_NPROC"] == "2"

  run_lever = gpu_check.best_lever(report)
  cold = rows[("run", run_lever, "cold")]["result"]
  warm = rows[("run", run_lever, "warm")]["result"]
  assert cold["steps"] == warm["steps"] == 4 and cold["device"]["backend"] == "cpu"
  assert cold["by_function"]["jit__train_step"]["misses"] == 1
  assert warm["by_function"]["jit__train_step"]["hits"] == 1
  assert "compile" in gpu_check.summary(report)

  # What launch/cost.py reads of it (a tiny CPU check stands in for a GPU's).
  figures_path = tmp_path / "cost_gpu.json"
  assert gpu_check.main(["--cost-figures", str(out), "--out", str(figures_path)]) == 0
  figures = json.loads(figures_path.read_text())
  assert figures["compile_s_per_shape"]["cold"] == rows[("compile", run_lever, "cold")][
      "result"]["compile_s"]
  assert figures["whole_run"]["eval_time_s"] == cold["eval_time_s"]
  monkeypatch.setattr(cost, "GPU_MEASURED_FILE", figures_path)
  cost.measured_gpu.cache_clear()
  try:
    text = cost.format_estimate({"bfs": 2}, {"train_steps": 100, "gpus_per_task": 1})
  finally:
    cost.measured_gpu.cache_clear()
  assert text.startswith("planned cost -- ESTIMATES for GPU jobs, from figures measured on one cpu")
  report["tiny"] = False   # a full-size check that ran on the CPU holds no GPU figures
  full = tmp_path / "full.json"
  full.write_text(json.dumps(report))
  assert gpu_check.main(["--cost-figures", str(full)]) == 2


@pytest.mark.e2e
@pytest.mark.timeout(900)
@pytest.mark.parametrize("row", ["steady", "seeds", "drivers"])
def test_the_other_rows_at_a_tiny_size(row, tmp_path):
  out = tmp_path / f"{row}.json"
  assert gpu_check.worker(row, str(out), tiny=True, cache=str(tmp_path / "cache"),
                          work=str(tmp_path)) == 0
  payload = json.loads(out.read_text())
  assert payload["status"] == "ok", payload.get("error")
  result = payload["result"]
  if row == "steady":
    assert result["bfs"]["ours"]["ms_per_step"] > 0 and result["bfs"]["clrs"]["ms_per_step"] > 0
  elif row == "seeds":
    assert result["settings"]["k"] == 2 and result["ratio"] > 0
  else:
    assert set(result["variants"]) == {"ours", "clrs"}
    assert result["shapes_per_run"]["total"] == 7
