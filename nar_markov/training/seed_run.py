"""One seed's bookkeeping in the training loop: state, validation, checkpoint, test, results.

`SeedRun` holds everything of a seed except its parameters and optimizer state (the
loop's stepper in nar_markov.training.train holds those): its folders and data streams,
its state (nar_markov/state/checkpoint.py's `SeedState`, with the selection of
nar_markov/state/selection.py and the penalty weight of nar_markov/state/lambda_schedule.py),
and at the end its result.json per algorithm (nar_markov.store.runs's `RunRecord`) and the
tested parameters (params.npz).
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Dict, List, Optional, Sequence

import jax
import numpy as np

from nar_markov.config import calibration_records
from nar_markov.config import provenance
from nar_markov.config import runspec
from nar_markov.data import batching
from nar_markov.data import train_stream
from nar_markov.data import validation_pool
from nar_markov.nets import learner
from nar_markov.state import checkpoint
from nar_markov.store import params_io
from nar_markov.store import runs
from nar_markov.store import util
from nar_markov.training import devices


class SeedRun:
  """One seed's bookkeeping: folders, data streams, state, evaluations and result files.

  Everything of a seed except its parameters and optimizer state, which the training
  loop's stepper holds and hands in where it evaluates or checkpoints.  `state` (a
  `checkpoint.SeedState`) is set by `start`.

  Args:
    job: the loop's job (tasks, protocol, learner, model name, gin text, ...), read here,
      never changed.
    seed: the seed.
    job_dir: the folder of the job's checkpoint (`runs.job_folder`).
    out_dirs: each algorithm's run folder, in task order.
    streams: each algorithm's train stream.
    vals: each algorithm's validation pool.
    results_dir: the folder the run trains into, which result.json names its files
      relative to; None: three folders above out_dirs[0].
  """

  def __init__(self, job, seed: int, job_dir: pathlib.Path,
               out_dirs: Sequence[pathlib.Path], streams: Sequence[train_stream.TrainStream],
               vals: Sequence[validation_pool.ValidationPool], results_dir=None):
    self.job = job
    self.seed = int(seed)
    # The folder the run trains into: result.json names its files relative to it.
    self.results_dir = (pathlib.Path(results_dir) if results_dir is not None
                        else pathlib.Path(out_dirs[0]).parents[2])
    self.out_dirs = list(out_dirs)
    self.streams = list(streams)
    self.vals = list(vals)
    self.ckpt_path = job_dir / runs.CHECKPOINT_NAME
    self.last_report = time.time()
    self.state: Optional[checkpoint.SeedState] = None  # set by `start`

  @property
  def name(self) -> str:
    """The seed's name in logs.

    `<model>/<algorithm>/seed<k>`; with several algorithms `<model>/seed<k> (<n> algorithms)`.
    """
    if len(self.job.tasks) == 1:
      return f"{self.job.model}/{self.job.tasks[0].algorithm}/seed{self.seed}"
    return f"{self.job.model}/seed{self.seed} ({len(self.job.tasks)} algorithms)"

  @property
  def definitions(self) -> List[Dict[str, Any]]:
    """Each task's run definition with this seed: what its checkpoint and results agree on."""
    return [dict(t.definition, seed=self.seed) for t in self.job.tasks]

  def start(self):
    """Resumes (`checkpoint.resume`) or initialises the seed; returns (params, opt_state).

    A fresh start initialises the parameters on each algorithm's first validation batch
    (`Learner.init_state`); a state at step 0 without a validation is validated there.

    Raises:
      ValueError: the checkpoint or calibration state is not this job's
        (`checkpoint.resume`).
    """
    job = self.job
    saved = checkpoint.resume(self.ckpt_path, job.tasks, self.seed, self.definitions,
                              self.results_dir, self.name)
    if saved is not None:
      for stream, stream_state in zip(self.streams, saved.streams):
        stream.load_state_dict(stream_state)
      params = saved.params
      opt_state = job.learner.restore_opt_state(params, saved.opt_leaves)
      self.state = saved.state
    else:
      init_features = [next(iter(batching.eval_batches(v.draw(0), job.protocol.val_batch_size)))[0]
                       .features for v in self.vals]
      # = net.init(PRNGKey(seed), ...) and optimizer.init, in one compilation.
      params, opt_state = job.learner.init_state(self.seed, init_features)
      self.state = checkpoint.SeedState.new([t.algorithm for t in job.tasks], self.definitions)
    if self.state.step == 0 and not self.state.curves[0]["val"]["step"]:
      self.evaluate(params, 0)
    return params, opt_state

  def evaluate(self, params, step_now: int) -> float:
    """Validates `params` at step `step_now` and records it; returns the mean score.

    Each algorithm's pool draw for the step (`ValidationPool.draw(step_now)`) is scored
    with hints: score, history norm and per-step hint loss go to its curves; the
    selection then observes the scores (and keeps the parameters it selects).  Where
    Protocol.test_every_steps divides `step_now`, the test split is scored too, into
    curves["test"], never selecting.  The time counts as evaluation time.
    """
    job, protocol = self.job, self.job.protocol
    t0 = time.time()
    scores = []
    for task, val, curves in zip(job.tasks, self.vals, self.state.curves):
      res = learner.evaluate_split(job.learner, params, val.draw(step_now), task.index,
                                   protocol.val_batch_size, with_hints=True,
                                   max_samples=protocol.val_max_samples)
      curves["val"]["step"].append(step_now)
      curves["val"]["score"].append(res["score"])
      curves["val"]["hidden_norm"].append(res["history_norm"])
      curves["hint_step_loss"]["step"].append(step_now)
      curves["hint_step_loss"]["loss"].append(res["hint_per_step"])
      scores.append(res["score"])
      if protocol.test_every_steps and step_now % protocol.test_every_steps == 0:
        # Diagnostic only (Protocol.test_every_steps): recorded, never selects.
        test_curve = curves.setdefault("test", {"step": [], "score": []})
        test_curve["step"].append(step_now)
        test_curve["score"].append(self.test(params, task, timed=False)["score"])
    self.state.eval_time_s += time.time() - t0
    return self.state.selection.observe(
        step_now, scores, lambda: jax.tree_util.tree_map(np.asarray, params))

  def report(self, score: float) -> None:
    """Logs step, train losses, validation `score`, best and speed (every 10 s at most).

    At the last training step it always logs.
    """
    job, state = self.job, self.state
    if time.time() - self.last_report > 10 or state.step == job.protocol.train_steps:
      self.last_report = time.time()
      losses = [c["train"]["loss"][-1] for c in state.curves]
      loss = (f"loss {losses[0]:.4f} val" if len(losses) == 1 else
              "loss [" + ", ".join(f"{t.algorithm} {l:.3f}" for t, l in
                                   zip(job.tasks, losses)) + "] mean val")
      util.log(f"{self.name} step {state.step}/{job.protocol.train_steps} {loss} {score:.4f} "
               f"(best {state.selection.best_val:.4f} @ {state.selection.best_step}) "
               f"{state.step / max(state.train_time_s, 1e-9):.2f} steps/s")

  def save_checkpoint(self, params, opt_state, path: Optional[pathlib.Path] = None) -> None:
    """Writes the seed's checkpoint (`checkpoint.save`) to `path`, else the job's.

    Its state, `params`, `opt_state` as its leaves, and the streams' states, as host
    arrays.
    """
    # The optimizer state as its leaves (optax's named tuples are rebuilt on
    # load from the optimizer: Learner.restore_opt_state); no pickle.
    checkpoint.save(path or self.ckpt_path, self.state,
                    jax.tree_util.tree_map(np.asarray, params),
                    jax.tree_util.tree_leaves(jax.tree_util.tree_map(np.asarray, opt_state)),
                    [s.state_dict() for s in self.streams])

  def record(self, steps: Sequence[int], fetched: Sequence[Sequence[Any]]) -> Optional[int]:
    """Logs one window of fetched losses into each algorithm's train curve.

    The curve gets one point, at the window's last step: each loss averaged over the
    window.

    Args:
      steps: the window's steps.
      fetched: per step, one `model.Losses` (host values) per algorithm.

    Returns:
      The window's first step with a non-finite total loss of any algorithm, else None.
    """
    bad = None
    for s, per_task in zip(steps, fetched):
      if bad is None and not all(np.isfinite(float(l.total)) for l in per_task):
        bad = s
    for k, curves in enumerate(self.state.curves):
      tr = curves["train"]
      tr["step"].append(steps[-1])
      for key, attr in [("loss", "total"), ("output_loss", "output"),
                        ("hint_loss", "hint"), ("gate_penalty", "gate_penalty"),
                        ("gate_term", "gate_term")]:
        tr[key].append(float(np.mean([float(getattr(l[k], attr)) for l in fetched])))
    return bad

  def adapt_lambda(self) -> None:
    """GatePenalty's adaptive λ, once the losses up to this step are recorded."""
    self.state.lambdas.adapt(self.job.tasks, self.state.step, self.state.curves, self.name)

  def diverge(self, step: int) -> None:
    """Marks the run diverged at `step`, its first non-finite loss, and logs it."""
    self.state.diverged_step = step
    util.log(f"{self.name}: non-finite loss at step {step}: run diverged")

  def end(self, params, opt_state) -> List[Dict[str, Any]]:
    """After the loop: the results, or where the loop stopped early the checkpoint.

    Returns:
      Where the run stopped before train_steps without diverging (`train.stop_after`):
      {"status": "interrupted", "steps": ...} per algorithm, its checkpoint written and no
      result.  Else `finish`'s results; an undiverged run is checkpointed first (a kill
      while testing loses no training), and with save_final_state its final state is
      written into the first algorithm's run folder.
    """
    if self.state.diverged_step is None and self.state.step < self.job.protocol.train_steps:
      # Stopped before the end (`stop_after`): leave the
      # checkpoint, write no result.
      self.save_checkpoint(params, opt_state)
      return [{"status": "interrupted", "steps": self.state.step} for _ in self.job.tasks]
    if self.state.diverged_step is None:
      # Checkpointed at the end too: a kill while testing loses no training.
      self.save_checkpoint(params, opt_state)
      if self.job.save_final_state:
        self.save_checkpoint(params, opt_state, self.out_dirs[0] / runs.FINAL_STATE_NAME)
    return self.finish(params, opt_state)

  def finish(self, params=None, opt_state=None) -> List[Dict[str, Any]]:
    """Scores the best-validation parameters on test; writes one result.json per algorithm.

    A diverged run is tested too, on its best validation parameters (from before the
    divergence), and keeps its status: dm-clrs run.py never drops a seed.  Algorithm by
    algorithm; given `params` and several algorithms, a checkpoint after each test, so a
    kill keeps those tested.  The other selection rules' parameters are tested where they
    differ (`selection.test_others`).  Each run folder also gets params.npz of the best
    parameters, where there are any; the checkpoint is deleted once every result is
    written.

    Args:
      params, opt_state: the last parameters and optimizer state; None for a diverged run.

    Returns:
      Each algorithm's result.json dict (`runs.RunRecord.as_json`), in task order.
    """
    job, selection = self.job, self.state.selection
    if selection.best_params is not None:
      for task in job.tasks:
        if task.algorithm in selection.test_results:
          continue
        selection.test_results[task.algorithm] = self.test(selection.best_params, task)
        if params is not None and len(job.tasks) > 1:
          self.save_checkpoint(params, opt_state)
    # The other selection rules' parameters, tested where they differ from run.py's.
    selection.test_others(self.state.step, params,
                          lambda p: {t.algorithm: self.test(p, t) for t in job.tasks})
    results = []
    for task, out_dir in zip(job.tasks, self.out_dirs):
      record = _record(self, task)
      if selection.best_params is not None:
        _save_params(self, task, out_dir, record)
      runs.write_result(out_dir, record)
      results.append(record.as_json())
    self.ckpt_path.unlink(missing_ok=True)  # only now: every result file is on disk
    for out_dir, result in zip(self.out_dirs, results):
      score = result["test_score"]
      util.log(f"wrote {out_dir / runs.RESULT_NAME}: status {result['status']}, test "
               f"{score if score is None else round(score, 4)}")
    return results

  def test(self, params, task: runspec.Task, timed: bool = True) -> Dict[str, Any]:
    """`params` scored on `task`'s test split (`learner.evaluate_split`, no hints).

    The split's first Protocol.test_max_samples samples, in the task's test batch size.
    `timed`: the time is added to the seed's evaluation time.
    """
    t0 = time.time()
    out = learner.evaluate_split(self.job.learner, params, task.test, task.index,
                                 task.test_batch_size, with_hints=False,
                                 max_samples=self.job.protocol.test_max_samples)
    if timed:
      self.state.eval_time_s += time.time() - t0
    return out


def _record(run: SeedRun, task: runspec.Task) -> runs.RunRecord:
  """The result of `run` on one algorithm, typed (runs.RunRecord writes it)."""
  job, state = run.job, run.state
  selection, diverged = state.selection, state.diverged_step is not None
  updates = state.lambdas.updates
  return runs.RunRecord(
      model=job.model, history=job.learner.config.history, algorithm=task.algorithm,
      seed=run.seed, steps=state.diverged_step if diverged else state.step,
      train_steps=job.protocol.train_steps, diverged_step=state.diverged_step,
      test=selection.test_results.get(task.algorithm),
      val_best=(selection.best_scores[task.index] if selection.best_params is not None
                else None),
      val_best_step=selection.best_step, lambda_gate=task.lam,
      lambda_reading=(task.lambda_info or {}).get("reading"),
      penalty_start_step=task.penalty_start,
      lambda_calibration=_lambda_calibration(run, task), settings=task.settings,
      validation_mode=job.protocol.validation_mode, curves=state.curves[task.index],
      train_time_s=state.train_time_s, eval_time_s=state.eval_time_s,
      versions=util.package_versions(), code_version=provenance.code_version(),
      device=devices.describe_backend(), gin_config=job.gin_str,
      selection=selection.record(task.algorithm, None if diverged else state.step),
      lambda_updates=updates[task.index] if any(updates) else None,
      multitask=None if not job.multitask else {
          "multitask_algorithms": [t.algorithm for t in job.tasks],
          "multitask_update": job.protocol.multitask_update,
          "multitask_val_mean_best": (selection.best_val if selection.best_params is not None
                                      else None)})


def _lambda_calibration(run: SeedRun, task: runspec.Task) -> Optional[Dict[str, Any]]:
  """result.json's lambda_calibration: where lambda came from, and the calibration
  state this run continued from, its paths relative to the results folder."""
  if task.lambda_info is None:
    return None
  info = dict(task.lambda_info)
  if info.get("record"):
    info["record"] = calibration_records.record_relpath(info["record"], run.results_dir)
  if run.state.continued_from:
    info["continued_from"] = calibration_records.record_relpath(
        run.state.continued_from, run.results_dir)
  return info


def _save_params(run: SeedRun, task: runspec.Task, out_dir: pathlib.Path,
                 record: runs.RunRecord) -> None:
  """The best-validation parameters, kept: python -m nar_markov.probes.evaluate <run dir>."""
  job, selection = run.job, run.state.selection
  meta = {"algorithm": task.algorithm, "model": job.model, "seed": run.seed,
          "step": selection.best_step, "val_score": selection.best_scores[task.index],
          "test_score": None if record.test is None else record.test["score"],
          "lambda_gate": task.lam,
          "nb_dims": job.learner.nb_dims[task.index]}
  if len(job.tasks) > 1:
    meta.update(algorithms=[t.algorithm for t in job.tasks], nb_dims=job.learner.nb_dims)
  params_io.save_params(out_dir / runs.PARAMS_NAME, selection.best_params,
                        dataclasses.asdict(job.learner.config), meta)
