"""The training loop: a list of algorithms x seeds, checkpoints, validation, selection, results.

What nar_markov.experiment.run_experiment resolved (runspec.Resolved) is trained here: one
processor on a list of algorithms (single-task is a list of one; several: dm-clrs
run.py's multi-task rule) for one or more seeds (K seeds of one algorithm: one
vmapped step).  The jitted net is nar_markov.learner's; this module owns the
loop's cadence, the checkpoint that makes a killed run resume exactly, the
best-validation selection, the OOD test and the result.json written per algorithm
(format and done-ness: nar_markov.runs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

import jax
import numpy as np
import optax

from nar_markov import data
from nar_markov import devices
from nar_markov import lambda_heuristic
from nar_markov import learner
from nar_markov import model as model_lib
from nar_markov import params_io
from nar_markov import provenance
from nar_markov import runs
from nar_markov import util

if TYPE_CHECKING:  # what a run is (jax-free) builds what this module trains; never imported here
  from nar_markov.runspec import Protocol, Resolved, Task

# The test score of each selection rule is in result.json's "selection"; test_score is
# the first's, dm-clrs run.py's: the first evaluation and every strict improvement.
SELECTION_RULES = ("first_best", "last_best", "final")
# Checkpoint format of the one loop (lists per algorithm); `upgrade_checkpoint`.
CHECKPOINT_FORMAT = 2
# The results format is nar_markov.runs's (no jax there); these names stay here too.
RESULT_SCHEMA = runs.RESULT_SCHEMA
CHECKPOINT_NAME = runs.CHECKPOINT_NAME
FINAL_STATE_NAME = runs.FINAL_STATE_NAME
RESULT_NAME = runs.RESULT_NAME
PARAMS_NAME = runs.PARAMS_NAME
run_dir = runs.run_dir
atomic_write_bytes = runs.atomic_write_bytes


def run(resolved: "Resolved") -> Any:
  """Train what experiment.run_experiment checked and resolved (its docstring):
  its tasks (one per algorithm) for its seeds.  Returns the results, shaped as
  run_experiment says."""
  learner.setup_compilation_cache()
  tasks, seeds, model, results_dir = (resolved.tasks, resolved.seeds, resolved.model,
                                      resolved.results_dir)
  algorithms = [t.algorithm for t in tasks]

  def verdicts_of(s):
    return [runs.check_result(run_dir(results_dir, model, t.algorithm, s),
                              dict(t.definition, seed=s)) for t in tasks]

  results: Dict[int, List[Dict[str, Any]]] = {}
  # Done means verified (nar_markov.runs.check_result): a result with other
  # settings is refused before anything is touched; a corrupt one is moved
  # aside and the seed trained again.
  verdicts = {s: verdicts_of(s) for s in seeds}
  runs.refuse_other_settings([v for vs in verdicts.values() for v in vs])
  with contextlib.ExitStack() as locks:
    todo = []
    for s in seeds:
      if not all(v.done for v in verdicts[s]):
        # One trainer per job: a second process is refused (runs.run_lock);
        # then look again -- the other may have finished in between.
        locks.enter_context(runs.run_lock(runs.job_folder(results_dir, model, algorithms, s)))
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


def _make_job(resolved: "Resolved") -> "_Job":
  """What the seeds of one run_experiment call share: net, optimizer, test splits."""
  tasks, p, net_config = resolved.tasks, resolved.protocol, resolved.net
  specs = [data.get_spec(t.algorithm) for t in tasks]
  nb_dims = []
  for t, spec in zip(tasks, specs):
    t.test = data.load_split(t.algorithm, "test")
    nb_dims.append(model_lib.nb_dims_of(t.test))
    t.test_batch_size = int(p.test_batch_size) if p.test_batch_size is not None else (
        learner.default_test_batch_size(spec, data.nb_nodes_of(t.test),
                                        net_config.hidden_size, fast=net_config.fast))
  summed = p.multitask_update == "summed" and len(tasks) > 1
  updates_per_step = 1 if summed else len(tasks)
  optimizer = learner.make_optimizer(p.learning_rate, p.horizon * updates_per_step,
                                     p.grad_clip_max_norm)
  net = learner.Learner(specs, nb_dims, net_config, optimizer,
                        algorithms=[t.algorithm for t in tasks])
  return _Job(
      model=resolved.model, tasks=tasks, multitask=resolved.multitask,
      summed_step=learner.make_summed_train_step(net, len(tasks)) if summed else None,
      save_final_state=resolved.save_final_state, net=net, optimizer=optimizer, protocol=p,
      gin_str=resolved.gin_str)


def _train_seeds(job: "_Job", todo: Sequence[int], results_dir) -> Dict[int, List[Dict]]:
  """run_experiment's training of the seeds `todo` (their locks held): seed ->
  its results, one per algorithm."""
  algorithms = [t.algorithm for t in job.tasks]
  by_step: Dict[int, List[Tuple[_SeedRun, Any, Any]]] = {}
  for s in todo:
    out_dirs = [run_dir(results_dir, job.model, a, s) for a in algorithms]
    for out_dir in out_dirs:
      out_dir.mkdir(parents=True, exist_ok=True)
      atomic_write_bytes(out_dir / "config.gin", job.gin_str.encode())
    # Data: one train stream and one validation pool per algorithm and seed,
    # as run.py; the test splits from the cache (the official draw).
    seeds_of = [data.stream_seed(s, t.algorithm, algorithms) for t in job.tasks]
    streams = [data.TrainStream(t.algorithm, seed=k, batch_size=job.protocol.batch_size,
                                lengths=t.lengths) for t, k in zip(job.tasks, seeds_of)]
    vals = [data.ValidationPool(t.algorithm, seed=k, lengths=t.lengths,
                                mode=job.protocol.validation_mode) for t, k in zip(job.tasks, seeds_of)]
    run = _SeedRun(job, s, runs.job_folder(results_dir, job.model, algorithms, s), out_dirs,
                   streams, vals, results_dir=results_dir)
    params, opt_state = run.start()
    by_step.setdefault(run.step, []).append((run, params, opt_state))
  if len(by_step) > 1 and len(job.tasks) == 1:
    # A K-seed step needs its seeds at the same step (one schedule value,
    # one graph size); this only happens when some seeds ran elsewhere.
    util.log("checkpoints at different steps (" + ", ".join(
             f"step {k}: seeds {[r.seed for r, _, _ in g]}" for k, g in sorted(by_step.items()))
             + "); training the groups one after the other")
  results = {}
  for group in by_step.values():
    if len(group) == 1 or len(job.tasks) > 1:
      # Several algorithms: the vmapped step is single-task; seeds one by one.
      for run, params, opt_state in group:
        results[run.seed] = _train_single(job, run, params, opt_state)
    else:
      results.update(_train_vmapped(job, group))
  return results


@dataclasses.dataclass
class _Job:
  """What the seeds of one run_experiment call share."""
  model: str
  tasks: List["Task"]
  multitask: bool                     # a *_multitask label (result fields)
  summed_step: Any                    # multitask_update='summed' with >1 algorithm
  save_final_state: bool
  net: learner.Learner
  optimizer: optax.GradientTransformation
  protocol: "Protocol"                # the run's protocol, as resolved (gin)
  gin_str: str

  def stop_at(self, step: int) -> int:  # pylint: disable=unused-argument
    """The step the loop started at `step` stops at: the end of training.  (A test
    stops it earlier, as if killed, by patching this: tests/flat.py.)"""
    return self.protocol.train_steps

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
    seed, step = run.seed, run.step
    if self.summed_step is not None:
      lambdas = np.asarray([run.lambda_at(t, step) for t in self.tasks], np.float32)
      return self.summed_step(params, opt_state, tuple(feedbacks), lambdas,
                              self.net.step_key(seed, step))
    losses = []
    n = len(self.tasks)
    for task, feedback in zip(self.tasks, feedbacks):
      # The update's rng depends on (seed, update index) only, so resuming needs
      # no rng state: fold_in(PRNGKey(seed + 1), step * n + k), one compiled function.
      rng_key = self.net.step_key(seed, step * n + task.index)
      params, opt_state, l = self.net.train_step(params, opt_state, feedback,
                                                 run.lambda_at(task, step), task.index,
                                                 rng_key)
      losses.append(l)
    return params, opt_state, losses


class _SeedRun:
  """One seed's bookkeeping: folders, data streams, checkpoint state, curves,
  pending losses, divergence and its result.json files (one per algorithm).

  Everything of a seed except its parameters and optimizer state, which the
  training loop holds: one seed's arrays (`_train_single`), or K seeds'
  stacked on a leading axis (`_train_vmapped`), which hands this object its
  seed's slice when it evaluates or checkpoints.
  """

  def __init__(self, job: _Job, seed: int, job_dir: pathlib.Path,
               out_dirs: Sequence[pathlib.Path], streams: Sequence[data.TrainStream],
               vals: Sequence[data.ValidationPool], results_dir=None):
    self.job = job
    self.seed = int(seed)
    # The folder the run trains into: result.json names its files relative to it.
    self.results_dir = (pathlib.Path(results_dir) if results_dir is not None
                        else pathlib.Path(out_dirs[0]).parents[2])
    self.out_dirs = list(out_dirs)
    self.streams = list(streams)
    self.vals = list(vals)
    self.ckpt_path = job_dir / CHECKPOINT_NAME
    self.pending = []  # (step, device-side losses per algorithm) since the last flush
    self.last_report = time.time()

  @property
  def name(self) -> str:
    if len(self.job.tasks) == 1:
      return f"{self.job.model}/{self.job.tasks[0].algorithm}/seed{self.seed}"
    return f"{self.job.model}/seed{self.seed} ({len(self.job.tasks)} algorithms)"

  @property
  def definitions(self) -> List[Dict[str, Any]]:
    return [dict(t.definition, seed=self.seed) for t in self.job.tasks]

  def start(self):
    """Resume from the checkpoint, or initialise; returns (params, opt_state)."""
    job = self.job
    state = load_checkpoint(self.ckpt_path)
    if state is not None:
      self.check_resume(state, self.ckpt_path, self.definitions)
    prefix = None if state is not None else self.calibration_prefix()
    if prefix is not None:
      state = load_checkpoint(prefix.state)
      if state is None or state["step"] != prefix.step:
        raise ValueError(f"{prefix.state} does not hold the state at step {prefix.step}")
      # A calibration run of this seed, model `calibrate` (nar_markov/calibrate.py):
      # this run's settings and data trained to the calibration step with prefix.lam.
      # At lambda = 0 (schedule reading) the calibration run's penalty settings did nothing.
      recorded = state.get("definitions")
      if recorded and prefix.lam == 0:
        state = dict(state, definitions=[job.tasks[0].as_calibrated(d) for d in recorded])
      self.check_resume(state, prefix.state, [dict(
          self.definitions[0], model="calibrate", lambda_gate=prefix.lam,
          lambda_reading=None, penalty_start_step=0,
          settings=dict(job.tasks[0].calibration_settings, train_steps=prefix.step))])
      util.log(f"{self.name}: continuing the calibration run's training (lambda = "
               f"{prefix.lam:.6g} from step 0) at step {prefix.step} ({prefix.state}): the "
               "same seed, data, schedule and penalty up to there, so the same training")
      state["continued_from"] = str(prefix.state)
    if state is not None:
      for stream, stream_state in zip(self.streams, state["streams"]):
        stream.load_state_dict(stream_state)
      params = state["params"]
      opt_state = job.net.restore_opt_state(params, state["opt_state"])
      if prefix is None:
        util.log(f"resuming {self.name} from step {state['step']}")
    else:
      init_features = [next(iter(data.eval_batches(v.draw(0), job.protocol.val_batch_size)))[0]
                       .features for v in self.vals]
      # = net.init(PRNGKey(seed), ...) and optimizer.init, in one compilation.
      params, opt_state = job.net.init_state(self.seed, init_features)
      state = {"format": CHECKPOINT_FORMAT, "algorithms": [t.algorithm for t in job.tasks],
               "step": 0, "best_val": -1.0, "best_step": None, "best_params": None,
               "best_scores": None, "curves": [empty_curves() for _ in job.tasks],
               "train_time_s": 0.0, "eval_time_s": 0.0, "diverged_step": None,
               "test_results": {}, "last_best_step": None, "last_best_params": None}
    state["definitions"] = self.definitions  # what this seed's checkpoints are of
    n = len(job.tasks)
    # Written since checkpoints keep them; an older one had neither (no adaptation).
    state.setdefault("lambda_now", [None] * n)
    state.setdefault("lambda_updates", [[] for _ in range(n)])
    if "last_best_step" not in state:
      state.update(_last_best_of_older_state(state))
    self.state = state
    self.curves = state["curves"]
    self.step = state["step"]
    self.t_train = state["train_time_s"]  # accumulated over resumes
    self.t_eval = state["eval_time_s"]
    self.diverged_step = state["diverged_step"]
    if self.step == 0 and not self.curves[0]["val"]["step"]:
      self.evaluate(params, 0)
    return params, opt_state

  def check_resume(self, state, path: pathlib.Path,
                   expected: Sequence[Mapping[str, Any]]) -> None:
    """A checkpoint continues only the job it was written for; a mismatch is
    an error that names the settings, and the checkpoint is kept."""
    recorded = state.get("definitions")
    if state.get("algorithms") != [d["algorithm"] for d in expected]:
      raise ValueError(
          f"checkpoint {path} is for algorithms {state.get('algorithms')}, this run is "
          f"on {[d['algorithm'] for d in expected]}; remove it or use another results_dir")
    if recorded is None:  # written before checkpoints recorded their settings
      util.log(f"WARNING: {path} records no settings (an older checkpoint); resuming "
               "without checking them")
      if state["step"] > expected[0]["settings"]["train_steps"]:
        raise ValueError(f"checkpoint {path} is at step {state['step']}, this run has "
                         f"train_steps={expected[0]['settings']['train_steps']}; the "
                         "checkpoint is kept: use another results_dir or move it aside")
      return
    # Checkpoints written before the history policy was part of the definition: their
    # label pinned it (runspec.check_label).
    recorded = [dict(r, history=r.get("history", e["history"])) for r, e in zip(recorded, expected)]
    diffs = [d for r, e in zip(recorded, expected) for d in runs.definition_mismatch(r, e)]
    if diffs:
      raise ValueError(
          f"checkpoint {path} was written with "
          + ", ".join(f"{k}={a!r}" for k, a, _ in diffs) + "; this run has "
          + ", ".join(f"{k}={b!r}" for k, _, b in diffs)
          + ". The checkpoint is kept (not resumed, not overwritten): use another "
          "results_dir, or move it aside to train this run from step 0")

  def calibration_prefix(self) -> Optional[lambda_heuristic.Continuation]:
    """The calibration run's saved state this seed's training continues from, if any
    (single-task G-ForgetNet with its λ from a calibration record; which state:
    lambda_heuristic.continuation)."""
    if len(self.job.tasks) != 1:
      return None
    task = self.job.tasks[0]
    info = task.lambda_info
    if (not info or info.get("source") != "calibration record"
        or not info.get("reuse_calibration_prefix")):
      return None
    return lambda_heuristic.continuation(
        info, self.seed, lam=task.lam, penalty_start=task.penalty_start,
        lambda_constant=task.penalty is None or task.penalty.acts_from_start_only,
        results_dir=self.results_dir)

  def lambda_at(self, task: "Task", step: int) -> np.float32:
    """The penalty weight of train step `step` (0-based): 0 before the task's penalty
    start, then its lambda (adapted: `adapt_lambda`), times the ramp's fraction."""
    if step < task.penalty_start:
      # A numpy scalar: no eager conversion to compile, one compiled step for both.
      return np.float32(0.0)
    lam = self.state["lambda_now"][task.index]
    lam = task.lam if lam is None else lam
    ramp = 0 if task.penalty is None else int(task.penalty.ramp_steps)
    if ramp:
      lam *= min(1.0, (step - task.penalty_start + 1) / ramp)
    return np.float32(lam)

  def adapt_lambda(self) -> None:
    """GatePenalty.adaptive_every_steps: every N steps after the penalty start,
    lambda = lambda_scale * L / G over those N steps' logged losses (at most
    adaptive_max_scale times the lambda it started from).  Called after the losses
    up to `self.step` are recorded."""
    for task in self.job.tasks:
      p = task.penalty
      if p is None or p.adaptive_every_steps is None or task.lam == 0:
        continue
      every, k = int(p.adaptive_every_steps), task.index
      updates = self.state["lambda_updates"][k]
      due = (updates[-1][0] if updates else task.penalty_start) + every
      if self.step < due:
        continue
      train = self.curves[k]["train"]
      idx = [i for i, st in enumerate(train["step"]) if due - every < st <= self.step]
      if not idx:
        continue
      task_loss = np.mean([train["output_loss"][i] + train["hint_loss"][i] for i in idx])
      gate = np.mean([train["gate_term"][i] for i in idx])
      cap = float(p.adaptive_max_scale) * task.lam
      lam = cap if not gate > 0 else min(cap, float(p.lambda_scale) * task_loss / gate)
      self.state["lambda_now"][k] = lam
      updates.append([self.step, lam, float(task_loss), float(gate)])
      util.log(f"{self.name}: step {self.step}: lambda = {lam:.6g} (L {task_loss:.4g}, "
               f"G {gate:.4g})")

  def evaluate(self, params, step_now: int) -> float:
    """Validate on every algorithm's pool; returns the mean score (selection)."""
    job, state = self.job, self.state
    t0 = time.time()
    scores = []
    for task, val, curves in zip(job.tasks, self.vals, self.curves):
      res = learner.evaluate_split(job.net, params, val.draw(step_now), task.index,
                                   job.protocol.val_batch_size, with_hints=True,
                                   max_samples=job.protocol.val_max_samples)
      curves["val"]["step"].append(step_now)
      curves["val"]["score"].append(res["score"])
      curves["val"]["hidden_norm"].append(res["history_norm"])
      curves["hint_step_loss"]["step"].append(step_now)
      curves["hint_step_loss"]["loss"].append(res["hint_per_step"])
      scores.append(res["score"])
      if job.protocol.test_every_steps and step_now % job.protocol.test_every_steps == 0:
        # Diagnostic only (Protocol.test_every_steps): recorded, never selects.
        res = learner.evaluate_split(job.net, params, task.test, task.index, task.test_batch_size,
                                     with_hints=False, max_samples=job.protocol.test_max_samples)
        test_curve = curves.setdefault("test", {"step": [], "score": []})
        test_curve["step"].append(step_now)
        test_curve["score"].append(res["score"])
    self.t_eval += time.time() - t0
    mean = float(np.mean(scores))
    # dm-clrs run.py keeps the first evaluation and any strict improvement
    # (of the sum of the algorithms' scores; the mean selects the same).
    if mean > state["best_val"] or state["best_params"] is None:
      state["best_val"] = mean
      state["best_scores"] = scores
      state["best_step"] = step_now
      state["best_params"] = jax.tree_util.tree_map(np.asarray, params)
    if mean >= state["best_val"]:
      # Another rule, reported beside run.py's: the last step that validates at the best.
      state["last_best_step"] = step_now
      state["last_best_params"] = (state["best_params"] if state["best_step"] == step_now
                                   else jax.tree_util.tree_map(np.asarray, params))
    return mean

  def report(self, score: float) -> None:
    job = self.job
    if time.time() - self.last_report > 10 or self.step == job.protocol.train_steps:
      self.last_report = time.time()
      losses = [c["train"]["loss"][-1] for c in self.curves]
      loss = (f"loss {losses[0]:.4f} val" if len(losses) == 1 else
              "loss [" + ", ".join(f"{t.algorithm} {l:.3f}" for t, l in
                                   zip(job.tasks, losses)) + "] mean val")
      util.log(f"{self.name} step {self.step}/{job.protocol.train_steps} {loss} {score:.4f} "
               f"(best {self.state['best_val']:.4f} @ {self.state['best_step']}) "
               f"{self.step / max(self.t_train, 1e-9):.2f} steps/s")

  def save_checkpoint(self, params, opt_state, path: Optional[pathlib.Path] = None) -> None:
    self.state.update(step=self.step, params=jax.tree_util.tree_map(np.asarray, params),
                      opt_state=jax.tree_util.tree_map(np.asarray, opt_state),
                      streams=[s.state_dict() for s in self.streams], curves=self.curves,
                      train_time_s=self.t_train, eval_time_s=self.t_eval,
                      diverged_step=self.diverged_step)
    # The optimizer state as its leaves (optax's named tuples are rebuilt on
    # load from the optimizer: Learner.restore_opt_state); no pickle.
    runs.write_state(path or self.ckpt_path, dict(
        self.state, opt_state=jax.tree_util.tree_leaves(self.state["opt_state"])))

  def flush(self) -> Optional[int]:
    """Fetch this seed's pending losses; see `record`."""
    if not self.pending:
      return None
    steps, losses = zip(*self.pending)
    self.pending.clear()
    return self.record(steps, jax.device_get(list(losses)))

  def record(self, steps: Sequence[int], fetched: Sequence[Sequence[Any]]) -> Optional[int]:
    """Log one window of fetched losses (per step, one per algorithm); returns
    the first step with a non-finite loss of any algorithm."""
    bad = None
    for s, per_task in zip(steps, fetched):
      if bad is None and not all(np.isfinite(float(l.total)) for l in per_task):
        bad = s
    for k, curves in enumerate(self.curves):
      tr = curves["train"]
      tr["step"].append(steps[-1])
      for key, attr in [("loss", "total"), ("output_loss", "output"),
                        ("hint_loss", "hint"), ("gate_penalty", "gate_penalty"),
                        ("gate_term", "gate_term")]:
        tr[key].append(float(np.mean([float(getattr(l[k], attr)) for l in fetched])))
    return bad

  def diverge(self, step: int) -> None:
    self.diverged_step = step
    util.log(f"{self.name}: non-finite loss at step {step}: run diverged")

  def end(self, params, opt_state) -> List[Dict[str, Any]]:
    """After the loop: the results, or (stopped early on purpose) the checkpoint."""
    if self.diverged_step is None and self.step < self.job.protocol.train_steps:
      # Stopped before the end (a test's early stop, `_Job.stop_at`): leave the
      # checkpoint, write no result.
      self.save_checkpoint(params, opt_state)
      return [{"status": "interrupted", "steps": self.step} for _ in self.job.tasks]
    if self.diverged_step is None:
      # Checkpointed at the end too: a kill while testing loses no training.
      self.save_checkpoint(params, opt_state)
      if self.job.save_final_state:
        self.save_checkpoint(params, opt_state, self.out_dirs[0] / FINAL_STATE_NAME)
    return self.finish(params, opt_state)

  def finish(self, params=None, opt_state=None) -> List[Dict[str, Any]]:
    """Score the best parameters on test; write one result.json per algorithm.

    A diverged run is tested too, on its best validation parameters (from
    before the divergence), and keeps its status: dm-clrs run.py never drops
    a seed, so neither does the analysis.  Algorithm by algorithm, with a
    checkpoint after each (given `params`): a kill keeps those tested.
    """
    job, state = self.job, self.state
    tested = state.setdefault("test_results", {})
    if state["best_params"] is not None:
      for task in job.tasks:
        if task.algorithm in tested:
          continue
        tested[task.algorithm] = self.test(state["best_params"], task)
        if params is not None and len(job.tasks) > 1:
          self.save_checkpoint(params, opt_state)
    self.test_other_selections(params)
    results = [self.result_of(task, tested.get(task.algorithm)) for task in job.tasks]
    for task, out_dir, result in zip(job.tasks, self.out_dirs, results):
      if state["best_params"] is not None:
        # The best-validation parameters, kept: python -m nar_markov.evaluate <run dir>.
        meta = {"algorithm": task.algorithm, "model": job.model, "seed": self.seed,
                "step": state["best_step"], "val_score": state["best_scores"][task.index],
                "test_score": result["test_score"], "lambda_gate": task.lam,
                "nb_dims": job.net.nb_dims[task.index]}
        if len(job.tasks) > 1:
          meta.update(algorithms=[t.algorithm for t in job.tasks], nb_dims=job.net.nb_dims)
        params_io.save_params(out_dir / PARAMS_NAME, state["best_params"],
                              dataclasses.asdict(job.net.config), meta)
      atomic_write_bytes(out_dir / RESULT_NAME,
                         json.dumps(util.jsonable(result), indent=1).encode())
    self.ckpt_path.unlink(missing_ok=True)  # only now: every result file is on disk
    for out_dir, result in zip(self.out_dirs, results):
      score = result["test_score"]
      util.log(f"wrote {out_dir / RESULT_NAME}: status {result['status']}, test "
               f"{score if score is None else round(score, 4)}")
    return results

  def test(self, params, task: "Task") -> Dict[str, Any]:
    """`params` scored on `task`'s test split (its evaluation time counted)."""
    t0 = time.time()
    out = learner.evaluate_split(self.job.net, params, task.test, task.index, task.test_batch_size,
                                 with_hints=False, max_samples=self.job.protocol.test_max_samples)
    self.t_eval += time.time() - t0
    return out

  def test_other_selections(self, final_params) -> None:
    """Test the parameters of the other selection rules (SELECTION_RULES), where they
    differ from run.py's: the last step that validates at the best, and the final step
    (`final_params`; None for a diverged run).  Reported, never used for test_score."""
    state = self.state
    tested = state.setdefault("selection_tests", {})
    candidates = {"last_best": (state.get("last_best_step"), state.get("last_best_params")),
                  "final": (self.step, final_params)}
    for rule, (step, params) in candidates.items():
      if rule in tested or step is None or step == state["best_step"] or params is None:
        continue
      same = [done for done in tested.values() if done["step"] == int(step)]
      tested[rule] = same[0] if same else {
          "step": int(step), "test": {t.algorithm: self.test(params, t) for t in self.job.tasks}}

  def selection_of(self, task: "Task", test_res) -> Dict[str, Any]:
    """result.json's "selection": the test score under each rule, run.py's first."""
    state = self.state
    out = {"rule": SELECTION_RULES[0], SELECTION_RULES[0]: {
        "step": state["best_step"], "test_score": None if test_res is None else test_res["score"]}}
    steps = {"last_best": state.get("last_best_step"),
             "final": None if self.diverged_step is not None else self.step}
    for rule, step in steps.items():
      done = state.get("selection_tests", {}).get(rule)
      if step is not None and step == state["best_step"]:
        out[rule] = dict(out[SELECTION_RULES[0]])
      elif done is not None:
        out[rule] = {"step": done["step"], "test_score": done["test"][task.algorithm]["score"]}
      else:
        out[rule] = {"step": step, "test_score": None}
    return out

  def lambda_calibration_of(self, task: "Task") -> Optional[Dict[str, Any]]:
    """result.json's lambda_calibration: where lambda came from, and the calibration
    state this run continued from, its paths relative to the results folder."""
    if task.lambda_info is None:
      return None
    info = dict(task.lambda_info)
    if info.get("record"):
      info["record"] = lambda_heuristic.record_relpath(info["record"], self.results_dir)
    if self.state.get("continued_from"):
      info["continued_from"] = lambda_heuristic.record_relpath(
          self.state["continued_from"], self.results_dir)
    return info

  def result_of(self, task: "Task", test_res: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The result record of one algorithm (schema: nar_markov.runs)."""
    job, state = self.job, self.state
    steps_done = self.step if self.diverged_step is None else self.diverged_step
    has_best = state["best_params"] is not None
    result = {
        "schema": RESULT_SCHEMA,
        "model": job.model,
        "history": job.net.config.history,
        "algorithm": task.algorithm,
        "seed": self.seed,
        "status": "done" if self.diverged_step is None else "diverged",
        "steps": int(steps_done),
        "train_steps": job.protocol.train_steps,
        "diverged_step": self.diverged_step,
        "test_score": None if test_res is None else test_res["score"],
        "test_scores": None if test_res is None else test_res["scores"],
        "val_best": state["best_scores"][task.index] if has_best else None,
        "val_best_step": state["best_step"],
        "lambda_gate": task.lam,
        "lambda_reading": (task.lambda_info or {}).get("reading"),
        "penalty_start_step": task.penalty_start,
        "lambda_calibration": self.lambda_calibration_of(task),
        "hidden_size": task.settings["hidden_size"],
        "batch_size": task.settings["batch_size"],
        "learning_rate": task.settings["learning_rate"],
        "schedule_steps": task.settings["schedule_steps"],
        "train_lengths": task.settings["train_lengths"],
        "validation_mode": job.protocol.validation_mode,
        "settings": task.settings,
        "curves": self.curves[task.index],
        "wall_time_s": self.t_train + self.t_eval,
        "train_time_s": self.t_train,
        "eval_time_s": self.t_eval,
        "steps_per_s": steps_done / max(self.t_train, 1e-9),
        "versions": util.package_versions(),
        **provenance.code_version(),
        "device": devices.describe_backend(),
        "gin_config": job.gin_str,
        "selection": self.selection_of(task, test_res),
    }
    if any(state["lambda_updates"]):
      result["lambda_updates"] = state["lambda_updates"][task.index]
    if job.multitask:
      result.update(multitask_algorithms=[t.algorithm for t in job.tasks],
                    multitask_update=job.protocol.multitask_update,
                    multitask_val_mean_best=state["best_val"] if has_best else None)
    return result


def _train_single(job: _Job, run: _SeedRun, params, opt_state) -> List[Dict[str, Any]]:
  """One seed, `Learner.train_step` (jitted per shape) per algorithm: the K = 1 path."""
  stop_at = job.stop_at(run.step)
  while run.step < stop_at and run.diverged_step is None:
    feedbacks = [next(stream) for stream in run.streams]
    t0 = time.time()
    params, opt_state, losses = job.train_step(run, params, opt_state, feedbacks)
    run.step += 1
    run.pending.append((run.step, losses))
    if job.flush_due(run.step, stop_at):
      bad = run.flush()
      run.t_train += time.time() - t0
      if bad is not None:
        run.diverge(bad)
        break
      run.adapt_lambda()
    else:
      run.t_train += time.time() - t0
    if job.eval_due(run.step):
      run.report(run.evaluate(params, run.step))
    if job.checkpoint_due(run.step):
      run.save_checkpoint(params, opt_state)
  return run.end(params, opt_state)


def _train_vmapped(job: _Job, group) -> Dict[int, List[Dict[str, Any]]]:
  """K >= 2 seeds at the same step, one vmapped step for all (K-seed mode).

  `group`: (run, params, opt_state) per seed.  The cadence (log, eval,
  checkpoint) is the single path's; each seed's losses are fetched, checked
  and logged by its own `_SeedRun`, which also evaluates and checkpoints its
  slice of the stacked parameters.
  """
  active = [run for run, _, _ in group]
  step = active[0].step
  stop_at = job.stop_at(step)
  params = learner.stack_trees([p for _, p, _ in group])
  opt_state = learner.stack_trees([o for _, _, o in group])
  task = job.tasks[0]
  per_seed_lambda = task.penalty is not None and task.penalty.adaptive_every_steps is not None
  vstep = learner.make_vmapped_train_step(job.net, per_seed_lambda=per_seed_lambda)
  pending = []  # (step, stacked device-side losses) since the last flush
  results = {}
  util.log(f"{job.model}/{job.tasks[0].algorithm}: training seeds {[r.seed for r in active]} "
           f"together (one vmapped step) from step {step}")
  while step < stop_at and active:
    feedbacks = [next(run.streams[0]) for run in active]
    t0 = time.time()
    batch, max_length = learner.stack_batches(feedbacks)
    lambdas = [run.lambda_at(task, step) for run in active]
    params, opt_state, losses = vstep(params, opt_state, batch,
                                      np.asarray(lambdas) if per_seed_lambda else lambdas[0],
                                      job.net.step_keys([r.seed for r in active], step),
                                      max_length)
    step += 1
    pending.append((step, losses))
    bad = [None] * len(active)
    if job.flush_due(step, stop_at):
      steps, stacked = zip(*pending)
      pending.clear()
      fetched = jax.device_get(list(stacked))
      bad = [run.record(steps, [[learner.tree_index(l, i)] for l in fetched])
             for i, run in enumerate(active)]
      for run, b in zip(active, bad):
        if b is None:
          run.step = step
          run.adapt_lambda()
    dt = time.time() - t0
    for run in active:
      run.step = step
      run.t_train += dt  # the job's wall time: shared by its seeds
    if any(b is not None for b in bad):
      # As a separate run: it ends here with status "diverged"; the other
      # seeds go on without it (one compilation for the smaller K).
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
      idx = np.asarray(keep)
      params, opt_state = jax.tree_util.tree_map(
          lambda x: x[idx], (params, opt_state))
    if job.eval_due(step) or job.checkpoint_due(step):
      host_params = jax.device_get(params)
      if job.eval_due(step):
        for i, run in enumerate(active):
          run.report(run.evaluate(learner.tree_index(host_params, i), step))
      if job.checkpoint_due(step):
        host_opt = jax.device_get(opt_state)
        for i, run in enumerate(active):
          run.save_checkpoint(learner.tree_index(host_params, i), learner.tree_index(host_opt, i))
  if active:
    host_params, host_opt = jax.device_get((params, opt_state))
    for i, run in enumerate(active):
      results[run.seed] = run.end(learner.tree_index(host_params, i), learner.tree_index(host_opt, i))
  return results


def _last_best_of_older_state(state) -> Dict[str, Any]:
  """The last-at-best selection of a state saved before it was kept: run.py's best
  where no later validation in the curves equals it, else unknown (None)."""
  scores = [c["val"]["score"] for c in state["curves"]]
  steps = state["curves"][0]["val"]["step"]
  at_best = [st for st, *per_task in zip(steps, *scores)
             if state["best_params"] is not None and float(np.mean(per_task)) >= state["best_val"]]
  if at_best and at_best[-1] == state["best_step"]:
    return {"last_best_step": state["best_step"], "last_best_params": state["best_params"]}
  return {"last_best_step": None, "last_best_params": None}


def empty_curves():
  return {
      "train": {"step": [], "loss": [], "output_loss": [], "hint_loss": [],
                "gate_penalty": [], "gate_term": []},
      "val": {"step": [], "score": [], "hidden_norm": []},
      "hint_step_loss": {"step": [], "loss": []},
  }


def load_checkpoint(path: pathlib.Path):
  """The training state saved at `path` (runs.read_state: no code is executed
  on load); None where there is none, or it was cut short by a kill (then it is
  moved aside, kept, and the run starts over)."""
  if not path.exists():
    return None
  try:
    return runs.read_state(path)
  except ValueError as e:  # a checkpoint cut short by a kill: start over, loudly
    util.log(f"WARNING: unreadable checkpoint {path} ({e}); moved aside to "
             f"{runs.move_aside(path)}; starting from step 0")
    return None
