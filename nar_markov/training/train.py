"""The training loop: a list of algorithms x seeds, stepped, validated, tested, written.

What nar_markov.training.experiment.run_experiment resolved (runspec.Resolved) is trained
here: one processor on a list of algorithms (single-task is a list of one; several: dm-clrs
run.py's multi-task rule) for one or more seeds (K seeds of one algorithm: one vmapped
step).  The jitted net is nar_markov.nets.learner's; this module owns the loop's cadence
(flush, validate, checkpoint) and the steppers that hold the parameters; each seed's
bookkeeping is nar_markov.training.seed_run's (`SeedRun`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np

from nar_markov.config import components
from nar_markov.config import runspec
from nar_markov.data import batching
from nar_markov.data import preprocessing
from nar_markov.data import splits
from nar_markov.data import train_stream
from nar_markov.data import validation_pool
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib
from nar_markov.store import archive
from nar_markov.store import locks as locks_lib
from nar_markov.store import runs
from nar_markov.store import util
from nar_markov.training import seed_run


# Steps a loop started inside `stop_after` may train (None: to the end).
_STOP_AFTER: contextvars.ContextVar[Optional[int]] = contextvars.ContextVar(
    "stop_after", default=None)


@contextlib.contextmanager
def stop_after(steps: int):
  """Training loops started inside stop after `steps` more steps (or at their end).

  Such a loop leaves its checkpoint and no result, as a job killed there would: how
  resumption is tested.  Context-local (a contextvars.ContextVar).
  """
  token = _STOP_AFTER.set(int(steps))
  try:
    yield
  finally:
    _STOP_AFTER.reset(token)


def run(resolved: runspec.Resolved) -> Any:
  """Trains what `experiment.run_experiment` checked and resolved: its tasks for its seeds.

  Turns on the compilation cache.  A seed whose results are all done with this definition
  (`runs.check_result`) is not trained: its results are read back.  The others are
  trained under their job's lock (`locks.run_lock`), checked again once it is held; a
  corrupt result is moved aside and its seed trained again.

  Returns:
    {algorithm: {seed: result}} (`run_experiment`).

  Raises:
    ValueError: a result there made with other settings (before anything is touched).
    nar_markov.store.locks.LockHeld: another process trains one of the seeds.
  """
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
                   f"{archive.move_aside(v.path)}; training the run again")
      todo.append(s)
    if todo:
      job = _make_job(resolved)
      results.update(_train_seeds(job, todo, results_dir))

  return {a: {s: results[s][i] for s in seeds} for i, a in enumerate(algorithms)}


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
  by_step: Dict[int, List[Tuple[seed_run.SeedRun, Any, Any]]] = {}
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
    run = seed_run.SeedRun(job, s, runs.job_folder(results_dir, job.model, algorithms, s), out_dirs,
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
    """Whether the losses since the last flush are read back at `step`: a log, validation or
    checkpoint step, or the step the loop stops at."""
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
    """Whether the training state is saved at `step`: on the checkpoint cadence, except at the
    run's last step."""
    return step % self.protocol.checkpoint_every_steps == 0 and step < self.protocol.train_steps

  def train_step(self, run: "seed_run.SeedRun", params, opt_state, feedbacks):
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


class _OneSeed:
  """One seed's arrays, `_Job.train_step` (jitted per shape) per algorithm."""

  def __init__(self, job: _Job, group):
    (self.run, self.params, self.opt_state), = group
    self.job = job

  def step(self, active: Sequence[seed_run.SeedRun], step: int):  # pylint: disable=unused-argument
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

  def step(self, active: Sequence[seed_run.SeedRun], step: int):
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
  checked and logged by its own `seed_run.SeedRun`, which also evaluates and checkpoints its
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
