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
  # A preset stands for its rows, beside others.
  assert gpu_check.parse_rows("levers") == gpu_check.parse_rows(gpu_check.LEVER_ROWS)
  assert gpu_check.parse_rows("default,init@cache0") == (
      gpu_check.parse_rows(gpu_check.DEFAULT_ROWS) + [("init", ["cache0"])])


def test_the_default_rows_are_what_the_docs_say():
  assert gpu_check.parse_rows(gpu_check.DEFAULT_ROWS)   # valid
  env = gpu_check.lever_env("nopin")
  assert env["PJRT_NPROC"] == str(os.cpu_count())
  assert "PJRT_NPROC" not in gpu_check.lever_env("pin")   # the package pins it
  assert gpu_check.lever_env("autotune0")["XLA_FLAGS"].endswith("--xla_gpu_autotune_level=0")


def test_the_new_levers_set_what_they_name():
  """Command buffers and the fusion autotuner are XLA flags of the rows' processes; the
  cache levers are jax options (by their names in this jax) that the worker sets after
  the project's cache set-up."""
  import jax  # pylint: disable=import-outside-toplevel
  assert gpu_check.lever_env("nocmdbuf")["XLA_FLAGS"].split()[-1] == (
      "--xla_gpu_enable_command_buffer=")
  assert gpu_check.lever_env("nofusionautotune")["XLA_FLAGS"].split()[-1] == (
      "--xla_gpu_experimental_enable_fusion_autotuner=false")
  assert gpu_check.jax_options("cache0") == {
      "jax_persistent_cache_min_compile_time_secs": 0.0}
  assert gpu_check.jax_options("xlacaches_all") == {
      "jax_persistent_cache_enable_xla_caches": "all"}
  assert gpu_check.jax_options("nocmdbuf") == {}
  for lever in ("cache0", "xlacaches_all", "xlacaches_none"):
    for name in gpu_check.jax_options(lever):
      assert name in jax.config.values, name
  assert {"nocmdbuf", "nofusionautotune", "xlacaches_all", "xlacaches_none"} <= (
      gpu_check.GPU_ONLY_LEVERS)
  assert "cache0" not in gpu_check.GPU_ONLY_LEVERS and "nopin" not in gpu_check.GPU_ONLY_LEVERS


def test_gpu_only_levers_are_skipped_with_the_reason_where_there_is_no_gpu(tmp_path,
                                                                            monkeypatch):
  out = tmp_path / "check.json"
  report = gpu_check.run_check("compile@nocmdbuf+nofusionautotune,autotune_cache@xlacaches_all",
                               budget_s=600, tiny=True, out=out)
  assert report["backend_probe"]["backend"] == "cpu"
  assert [(e["row"], e["lever"], e["status"]) for e in report["rows"]] == [
      ("compile", "nocmdbuf", "skipped"), ("compile", "nocmdbuf", "skipped"),
      ("compile", "nofusionautotune", "skipped"), ("compile", "nofusionautotune", "skipped"),
      ("autotune_cache", "xlacaches_all", "skipped"),
      ("autotune_cache", "xlacaches_all", "skipped")]
  assert all("GPU-only lever" in e["why"] and "backend cpu" in e["why"]
             for e in report["rows"])
  assert json.loads(out.read_text())["rows"] == report["rows"]
  assert not list((tmp_path / "check_logs").iterdir())     # no process was started
  # Where the processes get a GPU the same rows run.
  started = []
  monkeypatch.setattr(gpu_check, "probe_backend", lambda: {"backend": "gpu"})
  monkeypatch.setattr(gpu_check, "spawn", lambda row, lever, phase, *a, **k: started.append(
      (row, lever, phase)) or {"row": row, "lever": lever, "phase": phase, "status": "ok",
                               "seconds": 0.0})
  gpu_check.run_check("compile@nocmdbuf", budget_s=600, tiny=True, out=tmp_path / "g.json")
  assert started == [("compile", "nocmdbuf", "cold"), ("compile", "nocmdbuf", "warm")]


def test_a_row_past_the_budget_is_skipped_not_run(tmp_path):
  out = tmp_path / "check.json"
  report = gpu_check.run_check("backend,compile@pin,run@best", budget_s=5, tiny=True, out=out)
  assert [(e["row"], e["phase"], e["status"]) for e in report["rows"]] == [
      ("backend", "once", "skipped"), ("compile", "cold", "skipped"),
      ("compile", "warm", "skipped"), ("run", "cold", "skipped"), ("run", "warm", "skipped")]
  assert json.loads(out.read_text())["rows"] == report["rows"]


def test_a_row_stopped_by_the_budget_keeps_what_it_measured(tmp_path):
  """A process past its time is killed; its row says so, with its log's last lines.

  The worker's own log shows it: it started (its first line) and never finished (no
  result, no last line); the row's process was killed, not left to run out."""
  entry = gpu_check.spawn("compile", "pin", "cold", 5, tiny=True, cache=str(tmp_path / "c"),
                          work=str(tmp_path), logs=tmp_path)
  assert entry["status"] == "timeout" and entry["timeout_s"] == 5
  assert entry["killed_by_cap"] is True and "result" not in entry
  assert not (tmp_path / "compile-pin-cold.json").exists()
  log = pathlib.Path(entry["log"]).read_text()
  assert log.startswith(gpu_check.WORKER_STARTED + ": compile (pin)")
  assert gpu_check.WORKER_FINISHED not in log
  assert entry["log_tail"] == log.splitlines()[-25:]


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
  s = gpu_check.sizes(True)
  if row == "steady":
    bfs = result["bfs"]
    # Each impl's own figures: its ratio is ours' steps/s over dm-clrs's, i.e. clrs's
    # ms over ours'; each timed the steps asked for; a warm-up (its compilations, a
    # step each) takes longer than a compiled step.
    assert bfs["ratio"] == pytest.approx(bfs["clrs"]["ms_per_step"] / bfs["ours"]["ms_per_step"],
                                         rel=1e-9)
    for impl in ("ours", "clrs"):
      assert bfs[impl]["timed_steps"] >= s["steady_steps"]
      assert 1e3 * bfs[impl]["warmup_s"] > bfs[impl]["ms_per_step"]
  elif row == "seeds":
    assert result["settings"]["k"] == s["k"]
    assert result["timed_seed_steps"] == s["k"] * s["seeds_steps"] * s["rounds"]
    for side in ("vmapped", "sequential"):   # a total is the sum of its rounds
      assert result[side]["time_s"] == pytest.approx(
          sum(r[side]["time_s"] for r in result["rounds"]), rel=1e-9)
      assert result[side]["seed_steps_per_s"] == pytest.approx(
          result["timed_seed_steps"] / result[side]["time_s"], rel=1e-9)
    assert result["ratio"] == pytest.approx(
        result["vmapped"]["seed_steps_per_s"] / result["sequential"]["seed_steps_per_s"],
        rel=1e-9)
  else:
    assert set(result["variants"]) == {"ours", "clrs"}
    assert result["shapes_per_run"]["total"] == 7


@pytest.mark.e2e
@pytest.mark.timeout(1200)
def test_the_lever_rows_at_a_tiny_size(tmp_path, monkeypatch):
  """init (dm-clrs's op by op and jitted, ours) under the cache lever and dm-clrs's
  sampler's recompiles, in fresh processes as the GPU host runs them (caps raised: this
  CPU is slow and shared; the figures are checked, not the seconds)."""
  monkeypatch.setattr(gpu_check, "ROW_CAP_S", {k: 3000 for k in gpu_check.ROW_CAP_S})
  out = tmp_path / "levers.json"
  report = gpu_check.run_check("init@cache0,sampler", budget_s=6000,
                               tiny=True, out=out)
  rows = {(e["row"], e["lever"], e["phase"]): e for e in report["rows"]}
  assert all(e["status"] == "ok" for e in rows.values()), [
      (k, e.get("error"), e.get("log_tail")) for k, e in rows.items() if e["status"] != "ok"]
  assert "init" in gpu_check.summary(report) and "sampler" in gpu_check.summary(report)

  # init: dm-clrs's op by op compiles op after op, jitted it is one program with the
  # same parameters; under cache0 every compile is written (none skipped for being
  # short) and the warm process loads every one of them.
  cold = rows[("init", "cache0", "cold")]["result"]
  warm = rows[("init", "cache0", "warm")]["result"]
  assert set(cold) == {"clrs_op_by_op", "clrs_jitted", "ours_jitted"}
  assert cold["clrs_jitted"]["compilations"] == cold["ours_jitted"]["compilations"] == 1
  assert cold["clrs_op_by_op"]["compilations"] > 20 * cold["clrs_jitted"]["compilations"]
  assert cold["clrs_jitted"]["max_abs_diff_to_op_by_op"] == 0.0
  assert cold["clrs_jitted"]["parameters"] == cold["clrs_op_by_op"]["parameters"]
  for name, m in cold.items():
    assert m["compile_s"] <= m["first_s"], name
    assert m["not_written"] == {} and m["written"] == m["cache_misses"] > 0, name
    assert m["cache_hits"] + m["cache_misses"] == m["compilations"], name
    assert warm[name]["cache_hits"] == warm[name]["compilations"] == m["compilations"], name
  assert rows[("init", "cache0", "cold")]["process"]["jax_options"] == {
      "jax_persistent_cache_min_compile_time_secs": 0.0}

  # sampler: dm-clrs's step compiles exactly when its running max hint time grows.
  sampler = rows[("sampler", "pin", "once")]["result"]
  batches = sampler["batches"]
  assert len(batches) == gpu_check.sizes(True)["sampler_batches"]
  hints = [b["hint_time"] for b in batches]
  assert hints == sorted(hints)              # padded to the running max: it only grows
  assert len(set(hints)) >= 2                # it grew at least once in these batches
  assert [b["step_compilations"] for b in batches] == [
      int(i == 0 or hints[i] > hints[i - 1]) for i in range(len(hints))]
  assert sampler["step_compilations"] == sum(b["step_compilations"] for b in batches) == len(
      sampler["hint_times"])
  assert len(sampler["ours_hint_times"]) == 1   # ours: one time bucket per size


def test_the_sub_cache_phase_keeps_only_xlas_caches(tmp_path):
  """Before `autotune_cache`'s second process the executables go, XLA's caches stay.
  (The row itself at the tiny size: docs/running.md; each of its processes compiles
  the compile row's step, minutes on a shared CPU.)"""
  cache = tmp_path / "cache"
  (cache / "xla_gpu_per_fusion_autotune_cache_dir" / "ab").mkdir(parents=True)
  (cache / "xla_gpu_per_fusion_autotune_cache_dir" / "ab" / "fusion.textproto").write_text("x" * 7)
  (cache / "xla_gpu_kernel_cache_file").write_bytes(b"k" * 3)
  (cache / "jit__train_step-0123abcd-cache").write_bytes(b"e" * 11)
  (cache / "jit__train_step-0123abcd-atime").write_bytes(b"t")
  kept = {"xla_gpu_kernel_cache_file": 3,
          "xla_gpu_per_fusion_autotune_cache_dir/ab/fusion.textproto": 7}
  assert gpu_check.sub_cache_files(str(cache)) == kept
  assert gpu_check.keep_only_sub_caches(str(cache)) == {"removed_entries": 2, "kept": kept}
  assert sorted(f.name for f in cache.iterdir()) == [
      "xla_gpu_kernel_cache_file", "xla_gpu_per_fusion_autotune_cache_dir"]
  assert gpu_check.keep_only_sub_caches(str(tmp_path / "none")) == {
      "removed_entries": 0, "kept": {}}


def test_a_levers_jax_options_outlast_the_projects_cache_set_up(tmp_path):
  """The project's cache set-up sets a 0.5 s minimum; under `cache0` the row sees 0 (and
  the default lever the project's 0.5), after the row's own set-up call too."""
  code = (
      "import json, sys\n"
      "from benchmarks import gpu_check\n"
      "def row(cache, **_):\n"
      "  import jax\n"
      "  from nar_markov.nets import learner\n"
      "  learner.setup_compilation_cache(cache)\n"
      "  return jax.config.jax_persistent_cache_min_compile_time_secs\n"
      "gpu_check.ROW_FUNCTIONS['init'] = row\n"
      "gpu_check.worker('init', sys.argv[1], lever=sys.argv[2], tiny=True,\n"
      "                 cache=sys.argv[3], work=sys.argv[3])\n")
  seen = {}
  for lever in ("cache0", "pin"):
    out = tmp_path / f"{lever}.json"
    proc = subprocess.run([sys.executable, "-c", code, str(out), lever, str(tmp_path / lever)],
                          cwd=REPO_ROOT, env=gpu_check.lever_env(lever), capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    payload = json.loads(out.read_text())
    assert payload["status"] == "ok", payload
    seen[lever] = payload["result"]
  assert seen == {"cache0": 0.0, "pin": 0.5}
