"""The training loop: a list of algorithms x seeds, stepped, validated, tested, written.

What nar_markov.training.experiment.run_experiment resolved (runspec.Resolved) is trained here: one
processor on a list of algorithms (single-task is a list of one; several: dm-clrs
run.py's multi-task rule) for one or more seeds (K seeds of one algorithm: one
vmapped step).  The jitted net is nar_markov.nets.learner's; this module owns the loop's
cadence and each seed's bookkeeping (`_SeedRun`): its state and checkpoint are
nar_markov/state/checkpoint.py's, its selection nar_markov/state/selection.py's, its penalty weight
nar_markov/state/lambda_schedule.py's, and its result.json nar_markov.store.runs's (`RunRecord`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import pathlib
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np
import optax

from nar_markov.config import components
from nar_markov.config import lambda_heuristic
from nar_markov.config import provenance
from nar_markov.config import runspec
from nar_markov.data import batching
from nar_markov.data import preprocessing
from nar_markov.data import splits
from nar_markov.data import train_stream
from nar_markov.data import validation_pool
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib
from nar_markov.state import checkpoint
from nar_markov.store import locks as locks_lib
from nar_markov.store import params_io
from nar_markov.store import runs
from nar_markov.store import util
from nar_markov.training import devices


# Steps a loop started inside `stop_after` may train (None: to the end).
_STOP_AFTER: contextvars.ContextVar[Optional[int]] = contextvars.ContextVar(
    "stop_after", default=None)


@contextlib.contextmanager
def stop_after(steps: int):
  """Loops started inside stop after `steps` more steps (or at their end), leaving their
  checkpoint and no result, as a job killed there would: how resumption is checked."""
  token = _STOP_AFTER.set(int(steps))
  try:
    yield
  finally:
    _STOP_AFTER.reset(token)


def run(resolved: runspec.Resolved) -> Any:
  """Train what experiment.run_experiment checked and resolved (its docstring):
  its tasks (one per algorithm) for its seeds.  Returns the results, shaped as
  run_experiment says."""
  learner.setup_compilation_cache()
  tasks, seeds, model, results_dir = (resolved.tasks, resolved.seeds, resolved.model,
                                      resolved.results_dir)
  algorithms = [t.algorithm for t in tasks]

  def verdicts_of(s):
    return [runs.check_result(runs.run_dir(results_dir, model, t.algorithm, s),
                              dict(t.definition, seed=s)) for t in tasks]

  results: Dict[int, List[Dict[str, Any]]] = {}
  # Done means verified (nar_markov.store.runs.check_result): a result with other
  # settings is refused before anything is touched; a corrupt one is moved
  # aside and the seed trained again.
  verdicts = {s: verdicts_of(s) for s in seeds}
  runs.refuse_other_settings([v for vs in verdicts.values() for v in vs])
  with contextlib.ExitStack() as locks:
    todo = []
    for s in seeds:
      if not all(v.done for v in verdicts[s]):
        # One trainer per job: a second process is refused (locks_lib.run_lock);
        # then look again -- the other may have finished in between.
        locks.enter_context(
            locks_lib.run_lock(runs.job_folder(results_dir, model, algorithms, s)))
        verdicts[s] = verdicts_of(s)
      if all(v.done for v in verdicts[s]):
        for v in verdicts[s]:
          util.log(f"{v.path} exists ({v.state}, settings verified); nothing to do")
        results[s] = [v.result for v in verdicts[s]]
        continue
      for v in verdicts[s]:
        if v.state == "other":
          raise ValueError(f"{v.path}: {v.detail}; not retrained, not overwritten")
        if v.state == "corrupt":
          util.log(f"WARNING: {v.path} is corrupt ({v.detail}); moved aside to "
                   f"{runs.move_aside(v.path)}; training the run again")
      todo.append(s)
    if todo:
      job = _make_job(resolved)
      results.update(_train_seeds(job, todo, results_dir))

  def shaped(per_task):
    return per_task[0] if resolved.one_alg else dict(zip(algorithms, per_task))
  ordered = [shaped(results[s]) for s in seeds]
  return ordered[0] if resolved.one_seed else ordered


def _make_job(resolved: runspec.Resolved) -> "_Job":
  """What the seeds of one run_experiment call share: net, optimizer, test splits."""
  tasks, p, net_config = resolved.tasks, resolved.protocol, resolved.net
  specs = [preprocessing.get_spec(t.algorithm) for t in tasks]
  nb_dims = []
  for t, spec in zip(tasks, specs):
    t.test = splits.load_split(t.algorithm, "test")
    nb_dims.append(model_lib.nb_dims_of(t.test))
    t.test_batch_size = int(p.test_batch_size) if p.test_batch_size is not None else (
        learner.default_test_batch_size(spec, batching.nb_nodes_of(t.test),
                                        net_config.hidden_size, fast=net_config.fast))
  summed = p.multitask_update == "summed" and len(tasks) > 1
  updates_per_step = 1 if summed else len(tasks)
  optimizer = learner.make_optimizer(p.learning_rate, p.horizon * updates_per_step,
                                     p.grad_clip_max_norm)
  job = _Job(model=resolved.model, tasks=tasks, multitask=resolved.multitask,
             save_final_state=resolved.save_final_state, protocol=p, gin_str=resolved.gin_str,
             learner=learner.Learner(specs, nb_dims, net_config, optimizer,
                                     algorithms=[t.algorithm for t in tasks]))
  if summed:
    job.summed_step = learner.make_summed_train_step(job.learner, len(tasks))
  return job


def _train_seeds(job: "_Job", todo: Sequence[int], results_dir) -> Dict[int, List[Dict]]:
  """run_experiment's training of the seeds `todo` (their locks held): seed ->
  its results, one per algorithm."""
  algorithms = [t.algorithm for t in job.tasks]
  by_step: Dict[int, List[Tuple[_SeedRun, Any, Any]]] = {}
  for s in todo:
    out_dirs = [runs.run_dir(results_dir, job.model, a, s) for a in algorithms]
    for out_dir in out_dirs:
      out_dir.mkdir(parents=True, exist_ok=True)
      runs.atomic_write_bytes(out_dir / runs.CONFIG_NAME, job.gin_str.encode())
    # Data: one train stream and one validation pool per algorithm and seed,
    # as run.py; the test splits from the cache (the official draw).
    seeds_of = [train_stream.stream_seed(s, t.algorithm, algorithms) for t in job.tasks]
    streams = [train_stream.TrainStream(t.algorithm, seed=k, batch_size=job.protocol.batch_size,
                                        lengths=t.lengths)
               for t, k in zip(job.tasks, seeds_of)]
    vals = [validation_pool.ValidationPool(t.algorithm, seed=k, lengths=t.lengths,
                                           mode=job.protocol.validation_mode)
            for t, k in zip(job.tasks, seeds_of)]
    run = _SeedRun(job, s, runs.job_folder(results_dir, job.model, algorithms, s), out_dirs,
                   streams, vals, results_dir=results_dir)
    params, opt_state = run.start()
    by_step.setdefault(run.state.step, []).append((run, params, opt_state))
  if len(by_step) > 1 and len(job.tasks) == 1:
    # A K-seed step needs its seeds at the same step (one schedule value,
    # one graph size); this only happens when some seeds ran elsewhere.
    util.log("checkpoints at different steps (" + ", ".join(
             f"step {k}: seeds {[r.seed for r, _, _ in g]}" for k, g in sorted(by_step.items()))
             + "); training the groups one after the other")
  results = {}
  for group in by_step.values():
    # Several algorithms: the vmapped step is single-task; seeds one by one.
    for members in ([[m] for m in group] if len(job.tasks) > 1 else [group]):
      results.update(_train_group(job, members))
  return results


@dataclasses.dataclass
class _Job:
  """What the seeds of one run_experiment call share."""
  model: str
  tasks: List[runspec.Task]
  multitask: bool                     # a *_multitask label (result fields)
  save_final_state: bool
  learner: learner.Learner
  protocol: components.Protocol       # the run's protocol, as resolved (gin)
  gin_str: str
  summed_step: Any = None             # multitask_update='summed' with >1 algorithm

  def stop_at(self, step: int) -> int:
    """The step the loop started at `step` stops at: the end of training, or earlier
    inside `stop_after`."""
    extra = _STOP_AFTER.get()
    end = self.protocol.train_steps
    return end if extra is None else min(end, step + extra)

  # The loop's cadence, the same for every seed of the job.
  def flush_due(self, step: int, stop_at: int) -> bool:
    return (step % self.protocol.log_every_steps == 0 or step == stop_at
            or step % self.protocol.eval_every_steps == 0
            or step % self.protocol.checkpoint_every_steps == 0)

  def eval_due(self, step: int) -> bool:
    """run.py's cadence, and the last step of a run that ends its schedule.  A run cut
    short of its horizon -- a lambda calibration run, the first steps of a G-ForgetNet
    run that continues from its state -- validates only on the cadence, so that the
    continued run sees the validations a run from scratch sees."""
    return (step % self.protocol.eval_every_steps == 0
            or step == self.protocol.train_steps == self.protocol.horizon)

  def checkpoint_due(self, step: int) -> bool:
    return step % self.protocol.checkpoint_every_steps == 0 and step < self.protocol.train_steps

  def train_step(self, run: "_SeedRun", params, opt_state, feedbacks):
    """One training step of one seed: (params, opt_state, losses per algorithm)."""
    seed, step, lambdas = run.seed, run.state.step, run.state.lambdas
    if self.summed_step is not None:
      per_task = np.asarray([lambdas.at(t, step) for t in self.tasks], np.float32)
      return self.summed_step(params, opt_state, tuple(feedbacks), per_task,
                              self.learner.step_key(seed, step))
    losses = []
    n = len(self.tasks)
    for task, feedback in zip(self.tasks, feedbacks):
      # The update's rng depends on (seed, update index) only, so resuming needs
      # no rng state: fold_in(PRNGKey(seed + 1), step * n + k), one compiled function.
      rng_key = self.learner.step_key(seed, step * n + task.index)
      params, opt_state, l = self.learner.train_step(params, opt_state, feedback,
                                                     lambdas.at(task, step), task.index,
                                                     rng_key)
      losses.append(l)
    return params, opt_state, losses


class _SeedRun:
  """One seed's bookkeeping: its folders, data streams, state (checkpoint.SeedState),
  pending losses, evaluations, and its result.json files (one per algorithm).

  Everything of a seed except its parameters and optimizer state, which the
  training loop's stepper holds (`_OneSeed`: one seed's arrays; `_Stacked`: K
  seeds' on a leading axis) and hands this object when it evaluates or checkpoints.
  """

  def __init__(self, job: _Job, seed: int, job_dir: pathlib.Path,
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
    if len(self.job.tasks) == 1:
      return f"{self.job.model}/{self.job.tasks[0].algorithm}/seed{self.seed}"
    return f"{self.job.model}/seed{self.seed} ({len(self.job.tasks)} algorithms)"

  @property
  def definitions(self) -> List[Dict[str, Any]]:
    return [dict(t.definition, seed=self.seed) for t in self.job.tasks]

  def start(self):
    """Resume (checkpoint.resume), or initialise; returns (params, opt_state)."""
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
    """Validate on every algorithm's pool; returns the mean score (selection)."""
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
    # The optimizer state as its leaves (optax's named tuples are rebuilt on
    # load from the optimizer: Learner.restore_opt_state); no pickle.
    checkpoint.save(path or self.ckpt_path, self.state,
                    jax.tree_util.tree_map(np.asarray, params),
                    jax.tree_util.tree_leaves(jax.tree_util.tree_map(np.asarray, opt_state)),
                    [s.state_dict() for s in self.streams])

  def record(self, steps: Sequence[int], fetched: Sequence[Sequence[Any]]) -> Optional[int]:
    """Log one window of fetched losses (per step, one per algorithm); returns
    the first step with a non-finite loss of any algorithm."""
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
    """After the losses up to this step are recorded: GatePenalty's adaptive lambda."""
    self.state.lambdas.adapt(self.job.tasks, self.state.step, self.state.curves, self.name)

  def diverge(self, step: int) -> None:
    self.state.diverged_step = step
    util.log(f"{self.name}: non-finite loss at step {step}: run diverged")

  def end(self, params, opt_state) -> List[Dict[str, Any]]:
    """After the loop: the results, or (stopped early on purpose) the checkpoint."""
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
    """Score the best parameters on test; write one result.json per algorithm.

    A diverged run is tested too, on its best validation parameters (from
    before the divergence), and keeps its status: dm-clrs run.py never drops
    a seed, so neither does the analysis.  Algorithm by algorithm, with a
    checkpoint after each (given `params`): a kill keeps those tested.
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
    """`params` scored on `task`'s test split (`timed`: its time counted here)."""
    t0 = time.time()
    out = learner.evaluate_split(self.job.learner, params, task.test, task.index,
                                 task.test_batch_size, with_hints=False,
                                 max_samples=self.job.protocol.test_max_samples)
    if timed:
      self.state.eval_time_s += time.time() - t0
    return out


def _record(run: _SeedRun, task: runspec.Task) -> runs.RunRecord:
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


def _lambda_calibration(run: _SeedRun, task: runspec.Task) -> Optional[Dict[str, Any]]:
  """result.json's lambda_calibration: where lambda came from, and the calibration
  state this run continued from, its paths relative to the results folder."""
  if task.lambda_info is None:
    return None
  info = dict(task.lambda_info)
  if info.get("record"):
    info["record"] = lambda_heuristic.record_relpath(info["record"], run.results_dir)
  if run.state.continued_from:
    info["continued_from"] = lambda_heuristic.record_relpath(
        run.state.continued_from, run.results_dir)
  return info


def _save_params(run: _SeedRun, task: runspec.Task, out_dir: pathlib.Path,
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


class _OneSeed:
  """One seed's arrays, `_Job.train_step` (jitted per shape) per algorithm."""

  def __init__(self, job: _Job, group):
    (self.run, self.params, self.opt_state), = group
    self.job = job

  def step(self, active: Sequence[_SeedRun], step: int):  # pylint: disable=unused-argument
    """One update; returns its losses, on the device (one per algorithm)."""
    feedbacks = [next(stream) for stream in self.run.streams]
    self.params, self.opt_state, losses = self.job.train_step(
        self.run, self.params, self.opt_state, feedbacks)
    return losses

  def losses_of(self, fetched, i: int):  # pylint: disable=unused-argument
    """Seed i's fetched losses: per step, one per algorithm."""
    return fetched

  def keep(self, idx: Sequence[int]) -> None:  # pylint: disable=unused-argument
    """Only one seed: a diverged one ends the loop (no seed is left)."""

  def slices(self, with_opt: bool):
    """Per seed: (its parameters, its optimizer state or None), as the loop holds them."""
    return [(self.params, self.opt_state if with_opt else None)]


class _Stacked:
  """K >= 2 seeds at the same step stacked on a leading axis, one vmapped step for all."""

  def __init__(self, job: _Job, group):
    self.job = job
    self.params = learner.stack_trees([p for _, p, _ in group])
    self.opt_state = learner.stack_trees([o for _, _, o in group])
    task = job.tasks[0]
    self.task = task
    self.per_seed_lambda = (task.penalty is not None
                            and task.penalty.adaptive_every_steps is not None)
    self.vstep = learner.make_vmapped_train_step(job.learner,
                                                 per_seed_lambda=self.per_seed_lambda)
    util.log(f"{job.model}/{task.algorithm}: training seeds {[r.seed for r, _, _ in group]} "
             f"together (one vmapped step) from step {group[0][0].state.step}")

  def step(self, active: Sequence[_SeedRun], step: int):
    feedbacks = [next(run.streams[0]) for run in active]
    batch, max_length = learner.stack_batches(feedbacks)
    lambdas = [run.state.lambdas.at(self.task, step) for run in active]
    self.params, self.opt_state, losses = self.vstep(
        self.params, self.opt_state, batch,
        np.asarray(lambdas) if self.per_seed_lambda else lambdas[0],
        self.job.learner.step_keys([r.seed for r in active], step), max_length)
    return losses

  def losses_of(self, fetched, i: int):
    return [[learner.tree_index(l, i)] for l in fetched]

  def keep(self, idx: Sequence[int]) -> None:
    """Drop the other seeds (diverged): one compilation for the smaller K."""
    idx = np.asarray(idx)
    self.params, self.opt_state = jax.tree_util.tree_map(
        lambda x: x[idx], (self.params, self.opt_state))

  def slices(self, with_opt: bool):
    """Each seed's slice, fetched once: (params, opt_state or None)."""
    host_params, host_opt = jax.device_get((self.params, self.opt_state if with_opt else None))
    k = jax.tree_util.tree_leaves(host_params)[0].shape[0]
    return [(learner.tree_index(host_params, i),
             learner.tree_index(host_opt, i) if with_opt else None) for i in range(k)]


def _train_group(job: _Job, group) -> Dict[int, List[Dict[str, Any]]]:
  """The training loop: seeds at the same step, each `group` member (run, params,
  opt_state); one seed (any number of algorithms) or K >= 2 seeds of one algorithm
  (one vmapped step).  Returns seed -> its results, one per algorithm.

  The cadence (log, eval, checkpoint) is the job's; each seed's losses are fetched,
  checked and logged by its own `_SeedRun`, which also evaluates and checkpoints its
  parameters.  A seed whose loss is not finite ends there, status "diverged"; the
  others go on without it.
  """
  active = [run for run, _, _ in group]
  stepper = _OneSeed(job, group) if len(group) == 1 else _Stacked(job, group)
  step = active[0].state.step
  stop_at = job.stop_at(step)
  pending = []  # (step, device-side losses) since the last flush
  results = {}
  while step < stop_at and active:
    t0 = time.time()
    losses = stepper.step(active, step)
    step += 1
    pending.append((step, losses))
    bad = [None] * len(active)
    if job.flush_due(step, stop_at):
      steps, stacked = zip(*pending)
      pending.clear()
      fetched = jax.device_get(list(stacked))
      bad = [run.record(steps, stepper.losses_of(fetched, i)) for i, run in enumerate(active)]
      for run, b in zip(active, bad):
        if b is None:
          run.state.step = step
          run.adapt_lambda()
    dt = time.time() - t0
    for run in active:
      run.state.step = step
      run.state.train_time_s += dt  # the job's wall time: shared by its seeds
    if any(b is not None for b in bad):
      keep = []
      for i, (run, b) in enumerate(zip(active, bad)):
        if b is None:
          keep.append(i)
        else:
          run.diverge(b)
          results[run.seed] = run.finish()
      active = [active[i] for i in keep]
      if not active:
        break
      stepper.keep(keep)
    eval_due, checkpoint_due = job.eval_due(step), job.checkpoint_due(step)
    if eval_due or checkpoint_due:
      for run, (params, opt_state) in zip(active, stepper.slices(with_opt=checkpoint_due)):
        if eval_due:
          run.report(run.evaluate(params, step))
        if checkpoint_due:
          run.save_checkpoint(params, opt_state)
  if active:
    for run, (params, opt_state) in zip(active, stepper.slices(with_opt=True)):
      results[run.seed] = run.end(params, opt_state)
  return results
