"""A sweep's planned cost (runs x steps, hours, validation/test share, memory), without jax.

`launch/sweep.py --dry-run` prints `format_estimate(...)`: ESTIMATES from CPU step times
measured on this project's 2-core machine (`cost_cpu.json`), or, for a sweep that asks for
GPUs, from the GPU figures of `cost_gpu.json` (benchmarks/gpu_check.py --cost-figures)
where it exists, else with a word that there is no GPU measurement; the models behind
them are in docs/running.md ("What a sweep costs").
"""

from __future__ import annotations

import collections
import functools
import json
import pathlib
import statistics
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence

from nar_markov.config import clrs30

_HERE = pathlib.Path(__file__).resolve().parent
MEASURED_FILE = _HERE / "cost_cpu.json"
GPU_MEASURED_FILE = _HERE / "cost_gpu.json"   # absent until a GPU check is committed
TRAJECTORY_FILE = clrs30.TRAJECTORY_LENGTHS_FILE

TRAIN_LENGTHS = (4, 7, 11, 13, 16)
STRING_MATCHER_LENGTH = 20   # train and validation size of the string matchers
VAL_NODES = 16
TEST_NODES = 64
# Compilations per run: the bench's warm-up (5 train shapes, 27-58 s) plus the
# validation and test shapes.
COMPILE_S_PER_RUN = 60.0
# [B, N, N, H] float32 tensors a training step keeps per time step for the
# backward pass (an assumption for the memory class, not a measurement).
SAVED_TENSORS_PER_STEP = 4
MEMORY_CLASSES = ((4.0, "small (< 4 GB)"), (16.0, "medium (4-16 GB)"),
                  (float("inf"), "large (> 16 GB)"))


@functools.lru_cache(maxsize=None)
def measured() -> Dict[str, Any]:
  """The CPU figures of cost_cpu.json (train step times, a test pass, sweep speeds)."""
  return json.loads(MEASURED_FILE.read_text())


@functools.lru_cache(maxsize=None)
def measured_gpu() -> Optional[Dict[str, Any]]:
  """The GPU figures (benchmarks/gpu_check.py --cost-figures), None where none exist."""
  if not GPU_MEASURED_FILE.exists():
    return None
  return json.loads(GPU_MEASURED_FILE.read_text())


@functools.lru_cache(maxsize=None)
def _trajectories() -> Dict[str, Any]:
  return json.loads(TRAJECTORY_FILE.read_text())["algorithms"]


def is_string_matcher(algorithm: str) -> bool:
  """Whether `algorithm` is one of the string matchers (trained at STRING_MATCHER_LENGTH)."""
  return algorithm in ("naive_string_matcher", "kmp_matcher")


def trajectory_length(algorithm: str, nb_nodes: int) -> float:
  """The mean trajectory length T (hint steps) of `algorithm` at `nb_nodes` nodes.

  Measured at the train sizes and the test size (clrs30's trajectory lengths file),
  interpolated linearly between them, extrapolated linearly beyond the largest, and
  scaled in proportion to n below the smallest.

  Raises:
    KeyError: `algorithm` has no measured trajectory lengths.
  """
  t = _trajectories()[algorithm]
  points = sorted((int(n), float(v)) for n, v in t["train_T"].items())
  points.append((TEST_NODES, float(t["test_T"])))
  points = sorted(dict(points).items())
  if nb_nodes <= points[0][0]:
    return points[0][1] * nb_nodes / points[0][0]
  for (n0, t0), (n1, t1) in zip(points, points[1:]):
    if nb_nodes <= n1:
      return t0 + (t1 - t0) * (nb_nodes - n0) / (n1 - n0)
  (n0, t0), (n1, t1) = points[-2], points[-1]
  return t1 + (t1 - t0) * (nb_nodes - n1) / (n1 - n0)


@functools.lru_cache(maxsize=None)
def _fitted_k() -> Dict[str, float]:
  """k_alg (s per T * n^2 of one training step, batch 32, hidden 128)."""
  out = {}
  for alg, m in measured()["train_step"]["algorithms"].items():
    times = {int(n): s for n, s in m["step_s_median_by_nb_nodes"].items()}
    work = sum(trajectory_length(alg, n) * n**2 for n in times)
    out[alg] = sum(times.values()) / work
  return out


def k_step(algorithm: str) -> float:
  """Seconds per T * n^2 of one CPU training step (batch 32, hidden 128) of `algorithm`.

  Fitted to its measured step times; the median of the fitted ones for an algorithm
  without a measurement.
  """
  fitted = _fitted_k()
  return fitted.get(algorithm, statistics.median(fitted.values()))


def eval_fraction() -> float:
  """Cost of an evaluation sample / a training sample at the same n and T (the test pass)."""
  tp = measured()["test_pass"]
  alg, n = tp["algorithm"], tp["nb_nodes"]
  per_sample_train = k_step(alg) * trajectory_length(alg, n) * n**2 / 32
  return tp["wall_s"] / (tp["samples"] * per_sample_train)


def _clrs30_test_samples(algorithm: str) -> int:
  return int(_trajectories()[algorithm]["test_n"])


def estimate_run(algorithm: str, settings: Mapping[str, Any]) -> Dict[str, float]:
  """The CPU cost of one run of `algorithm`.

  Args:
    algorithm: a CLRS-30 algorithm.
    settings: as `settings_from_gin` gives them: train_steps (required), and optionally
      hidden_size, batch_size, train_lengths, eval_every_steps, val_max_samples,
      test_max_samples, test_every_steps, and steps_per_s (a given training speed, in
      place of the measured step times and the compilation).

  Returns:
    Seconds of training (compilation included), validation, test and in total
    (train_s, val_s, test_s, total_s), and peak_gb, the estimated peak memory in GB.
  """
  steps = int(settings["train_steps"])
  hidden = float(settings.get("hidden_size", 128))
  batch = float(settings.get("batch_size", 32))
  base = measured()["train_step"]
  scale = (hidden / base["hidden_size"]) * (batch / base["batch_size"])
  k = k_step(algorithm)
  lengths = ([STRING_MATCHER_LENGTH] if is_string_matcher(algorithm)
             else list(settings.get("train_lengths") or TRAIN_LENGTHS))
  step_s = scale * statistics.mean(
      k * trajectory_length(algorithm, n) * n**2 for n in lengths)
  if settings.get("steps_per_s"):
    train_s = steps / float(settings["steps_per_s"])
  else:
    train_s = steps * step_s + COMPILE_S_PER_RUN

  def eval_s(nb_nodes, samples):
    per_sample = (k * trajectory_length(algorithm, nb_nodes) * nb_nodes**2
                  / base["batch_size"] * hidden / base["hidden_size"])
    return samples * per_sample * eval_fraction()

  n_samples = _clrs30_test_samples(algorithm)   # test: 32 x multiplier
  # Validation as run.py: 2 x 32 x multiplier samples at the largest train size.
  val_samples = min(2 * n_samples, settings.get("val_max_samples") or 2 * n_samples)
  test_samples = min(n_samples, settings.get("test_max_samples") or n_samples)
  eval_every = int(settings.get("eval_every_steps") or steps)
  n_evals = steps // eval_every + 1 + (1 if steps % eval_every else 0)
  val_nodes = STRING_MATCHER_LENGTH if is_string_matcher(algorithm) else max(lengths)
  val_s = n_evals * eval_s(val_nodes, val_samples)
  # Once at the end, plus each Protocol.test_every_steps diagnostic evaluation.
  test_every = settings.get("test_every_steps")
  n_tests = 1 + (steps // int(test_every) + 1 if test_every else 0)
  test_s = n_tests * eval_s(TEST_NODES, test_samples)
  n_max = max(lengths)
  train_gb = (SAVED_TENSORS_PER_STEP * batch * trajectory_length(algorithm, n_max)
              * n_max**2 * hidden * 4 / 1e9)
  eval_gb = measured()["test_pass"]["peak_rss_mb"] / 1e3
  return {"train_s": train_s, "val_s": val_s, "test_s": test_s,
          "total_s": train_s + val_s + test_s, "peak_gb": max(train_gb + 1.0, eval_gb)}


def _gpu_k(algorithm: str, gpu: Mapping[str, Any]) -> float:
  """Seconds per hint step of ours' train step on the GPU: measured at 16 nodes for the
  algorithm, else the median of those measured."""
  per_step = {a: float(s) / trajectory_length(a, 16)
              for a, s in gpu["train_step_s_at_16_nodes"].items()}
  return per_step.get(algorithm, statistics.median(per_step.values()))


def _eval_hint_steps(algorithm: str, settings: Mapping[str, Any]) -> float:
  """Hint steps of the evaluation batches of one run (validation every eval_every_steps
  at the largest train size in batches of 32, one test pass at 64 nodes)."""
  steps = int(settings["train_steps"])
  lengths = ([STRING_MATCHER_LENGTH] if is_string_matcher(algorithm)
             else list(settings.get("train_lengths") or TRAIN_LENGTHS))
  n_samples = _clrs30_test_samples(algorithm)
  val = min(2 * n_samples, settings.get("val_max_samples") or 2 * n_samples)
  test = min(n_samples, settings.get("test_max_samples") or n_samples)
  eval_every = int(settings.get("eval_every_steps") or steps)
  n_evals = steps // eval_every + 1 + (1 if steps % eval_every else 0)
  val_nodes = STRING_MATCHER_LENGTH if is_string_matcher(algorithm) else max(lengths)
  return (n_evals * -(-val // 32) * trajectory_length(algorithm, val_nodes)
          + -(-test // 32) * trajectory_length(algorithm, TEST_NODES))


def estimate_runs_gpu(algorithm: str, runs: int, settings: Mapping[str, Any],
                      gpu: Mapping[str, Any]) -> Dict[str, float]:
  """Seconds of `runs` runs of one algorithm on the GPU of `gpu` (cost_gpu.json).

  On a GPU, a step's time follows its hint steps (the scan runs them one after
  another), not n^2: a train step at n nodes costs k * T(n), k measured at 16 nodes
  (`_gpu_k`), whatever the batch and hidden size (the measurement used the protocol's).
  Each of the run's shapes (a train step per train size, validation, test) compiles once
  per sweep: the first run cold, the others from the sweep's cache (warm).  Evaluation:
  the measured whole run's evaluation seconds per hint step of its evaluation batches,
  times this run's.

  Args:
    algorithm: a CLRS-30 algorithm.
    runs: how many runs of it.
    settings: as for `estimate_run`.
    gpu: the GPU figures (`measured_gpu`).

  Returns:
    Seconds of all `runs` together: train_s, val_s (validation and test together),
    test_s (0) and total_s.
  """
  steps = int(settings["train_steps"])
  lengths = ([STRING_MATCHER_LENGTH] if is_string_matcher(algorithm)
             else list(settings.get("train_lengths") or TRAIN_LENGTHS))
  k = _gpu_k(algorithm, gpu)
  step_s = statistics.mean(k * trajectory_length(algorithm, n) for n in lengths)
  compile_s = gpu["compile_s_per_shape"]
  shapes = len(lengths) + 2
  train_s = runs * (steps / float(settings["steps_per_s"]) if settings.get("steps_per_s")
                    else steps * step_s)
  train_s += shapes * (compile_s["cold"] + (runs - 1) * compile_s["warm"])
  whole = gpu["whole_run"]
  per_hint_step = whole["eval_time_s"] / _eval_hint_steps(whole["algorithm"],
                                                            whole["settings"])
  eval_s = runs * per_hint_step * _eval_hint_steps(algorithm, settings)
  return {"train_s": train_s, "val_s": eval_s, "test_s": 0.0, "total_s": train_s + eval_s}


def memory_class(gb: float) -> str:
  """The label of the MEMORY_CLASSES class a peak of `gb` GB falls into."""
  return next(label for limit, label in MEMORY_CLASSES if gb < limit)


def count_by_algorithm(algorithms: Iterable[str]) -> Dict[str, int]:
  """Runs to do per algorithm, in first-appearance order."""
  return dict(collections.Counter(algorithms))


def settings_from_gin() -> Dict[str, Any]:
  """The settings `estimate_run` and the calibration estimate read, from the gin parsed last.

  Read from the resolved components (nar_markov.config.components.resolve), the
  launcher's ``sweep_axes.seeds_per_job`` and ``slurm_resources.gpus_per_task``;
  train_lengths is None where it is given per algorithm (a mapping).

  Returns:
    The protocol's train_steps, batch_size, train_lengths, eval_every_steps,
    val_max_samples, test_max_samples, schedule_steps and test_every_steps, the net's
    hidden_size, seeds_per_job and gpus_per_task.
  """
  from launch import cluster  # pylint: disable=g-import-not-at-top  (no jax)
  from launch import sweep_spec  # pylint: disable=g-import-not-at-top  (no jax)
  from nar_markov.config import components  # pylint: disable=g-import-not-at-top  (no jax)
  exp = components.resolve()
  protocol, net = exp.protocol, exp.net
  out = {n: getattr(protocol, n) for n in (
      "train_steps", "batch_size", "train_lengths", "eval_every_steps",
      "val_max_samples", "test_max_samples", "schedule_steps", "test_every_steps")}
  out["hidden_size"] = net.hidden_size
  out["seeds_per_job"] = sweep_spec.bound_axes()["seeds_per_job"]
  out["gpus_per_task"] = cluster.SlurmResources().gpus_per_task
  if isinstance(out["train_lengths"], Mapping):   # per algorithm
    out["train_lengths"] = None
  return out


def _h(seconds: float) -> str:
  hours = seconds / 3600
  return f"{hours:.2f}" if hours < 10 else f"{hours:,.0f}"


def format_estimate(runs_by_algorithm: Mapping[str, int],
                    settings: Mapping[str, Any]) -> str:
  """The dry run's cost table: per algorithm and in total.

  A sweep that asks for GPUs (settings' gpus_per_task >= 1) is estimated from the GPU
  figures where they exist (`estimate_runs_gpu`), else from the CPU's, with a word that
  no GPU was measured.

  Args:
    runs_by_algorithm: runs to do per algorithm (`count_by_algorithm`); those with 0 are
      left out.
    settings: as for `estimate_run`, with gpus_per_task and seeds_per_job
      (`settings_from_gin`).

  Returns:
    The table's lines, joined; 'planned cost: nothing to run' where there is no run.
  """
  runs_by_algorithm = {a: n for a, n in runs_by_algorithm.items() if n}
  if not runs_by_algorithm:
    return "planned cost: nothing to run"
  gpus = int(settings.get("gpus_per_task") or 0)
  gpu = measured_gpu() if gpus > 0 else None
  if gpu is not None:
    return _format_table(runs_by_algorithm, settings, gpu, [
        f"planned cost -- ESTIMATES for GPU jobs, from figures measured on one "
        f"{gpu['device_kind']} ({gpu['source']}; launch/cost_gpu.json); a shape "
        "compiles once per sweep (the first run cold, the others from the sweep's cache):"])
  speed = (f"training at {float(settings['steps_per_s']):g} steps/s (given)"
           if settings.get("steps_per_s") else
           "training speed from CPU step times measured on this project's 2-core "
           "x86_64 machine (no GPU)")
  head = [f"planned cost -- ESTIMATES, {speed}; launch/cost_cpu.json says "
          "where each figure comes from:"]
  if gpus > 0:
    head.append(f"  (the sweep asks for {gpus} GPU(s) per job, and there is no GPU "
                "measurement yet (launch/cost_gpu.json, benchmarks/gpu_check.py): "
                "these are CPU hours, a GPU's are unknown)")
  lines = [_format_table(runs_by_algorithm, settings, None, head)]
  k = int(settings.get("seeds_per_job") or 1)
  if k > 1:
    lines.append(f"  SEEDS_PER_JOB={k}: a job of K seeds takes about K x h/run on a CPU.")
  observed = [v for by_model in measured()["sweep_runs"]["steps_per_s"].values()
              for v in by_model.values()]
  lines.append("  (hours of one process each; divide by the runs that run at once. "
               "Validation on 2 x 32 x multiplier samples (run.py) every eval_every_steps, test once "
               f"at 64 nodes. Real 500-step runs on the same machine, busy and with older "
               f"code, trained at {min(observed):g}-{max(observed):g} steps/s.)")
  return "\n".join(lines)


def _format_table(runs_by_algorithm: Mapping[str, int], settings: Mapping[str, Any],
                  gpu: Optional[Mapping[str, Any]], head: Sequence[str]) -> str:
  """`head`, then a row per algorithm and the total (CPU model, or GPU with `gpu`)."""
  steps = int(settings["train_steps"])
  lines = list(head) + [
      f"  {'algorithm':<30}{'runs':>6}{'steps':>12}{'h/run':>8}{'train h':>9}"
      f"{'val h':>8}{'test h':>8}{'total h':>9}{'val+test':>9}  memory"]
  total = collections.Counter()
  for alg, n in runs_by_algorithm.items():
    e = estimate_run(alg, settings)
    rows = ({key: n * e[key] for key in ("train_s", "val_s", "test_s", "total_s")}
            if gpu is None else estimate_runs_gpu(alg, n, settings, gpu))
    share = (rows["val_s"] + rows["test_s"]) / rows["total_s"]
    lines.append(
        f"  {alg:<30}{n:>6}{n * steps:>12,}{_h(rows['total_s'] / n):>8}{_h(rows['train_s']):>9}"
        f"{_h(rows['val_s']):>8}{_h(rows['test_s']):>8}{_h(rows['total_s']):>9}"
        f"{share:>9.0%}  {memory_class(e['peak_gb'])}")
    for key in ("train_s", "val_s", "test_s", "total_s"):
      total[key] += rows[key]
    total["runs"] += n
  share = (total["val_s"] + total["test_s"]) / total["total_s"]
  lines.append(
      f"  {'total':<30}{total['runs']:>6}{total['runs'] * steps:>12,}{'':>8}"
      f"{_h(total['train_s']):>9}{_h(total['val_s']):>8}{_h(total['test_s']):>8}"
      f"{_h(total['total_s']):>9}{share:>9.0%}")
  if gpu is not None:
    lines.append("  (validation and test together under 'val h'; a step's time from its "
                 "hint steps (measured at 16 nodes); docs/running.md has the model)")
  return "\n".join(lines)


def format_calibration_estimate(algorithms: Sequence[str], settings: Mapping[str, Any],
                                heuristic) -> str:
  """Stage 1 of a G-ForgetNet sweep: the lambda calibrations' cost (ESTIMATES).

  Each calibration seed trains to the heuristic's calibration step of the schedule
  (schedule_steps, else train_steps); under 'constant' each seed adds up to max_trials
  search runs of that length.  With reuse_calibration_prefix the G-ForgetNet run of a
  calibration seed continues from the calibration (schedule: the lambda = 0 run;
  constant: the chosen trial, for the median seed), so those steps are not trained twice.

  Args:
    algorithms: the algorithms to calibrate.
    settings: as for `estimate_run` (`settings_from_gin`).
    heuristic: a nar_markov.config.lambda_heuristic.LambdaHeuristic.

  Returns:
    A line of the total CPU hours (a line more on the reuse), or 'stage 1 cost: no
    calibration to run'.
  """
  algorithms = list(algorithms)
  if not algorithms:
    return "stage 1 cost: no calibration to run"
  schedule = int(settings.get("schedule_steps") or settings["train_steps"])
  step = heuristic.calibration_step(schedule)
  seeds = len(heuristic.seeds)
  runs_per_seed = 1 if heuristic.reading == "schedule" else 1 + heuristic.max_trials
  total = 0.0
  for alg in algorithms:
    e = estimate_run(alg, dict(settings, train_steps=step))
    total += seeds * runs_per_seed * e["total_s"]
  what = (f"{seeds} seed(s) x {step:,} steps" if runs_per_seed == 1 else
          f"{seeds} seed(s) x (1 + up to {heuristic.max_trials} search trials) x {step:,} steps")
  lines = [f"stage 1 cost, lambda calibration ({heuristic.reading}) -- ESTIMATES: "
           f"{len(algorithms)} algorithms x {what}: {_h(total)} h"
           + (" at most" if runs_per_seed > 1 else "")]
  if heuristic.reuse_calibration_prefix:
    which = (f"calibration seeds {list(heuristic.seeds)}" if heuristic.reading == "schedule"
             else "the median calibration seed")
    lines.append(f"  (the G-ForgetNet runs of {which} continue from their calibration at step "
                 f"{step:,}: stage 2 trains only the rest of them)")
  return "\n".join(lines)
