"""The gin-configurable entry point of every run (`run_experiment`) and a sweep job's (`run_from_gin`).

What a run is -- its components, label, settings, lambda and the task of each
algorithm -- is nar_markov/runspec.py's (no jax); `run_experiment` checks its input
there, resolves the job, and hands it to the training loop (nar_markov/train.py),
importing jax only then.  The config.gin written beside every result is this
module's (`run_gin`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence, Union

import gin

from nar_markov import config as config_lib
from nar_markov import runs
from nar_markov import runspec
from nar_markov.netconfig import NetConfig


@gin.configurable(denylist=["algorithm", "seed", "results_dir"])
def run_experiment(*,
                   algorithm: Union[str, Sequence[str]],
                   seed: Union[int, Sequence[int]],
                   model: str = gin.REQUIRED,
                   results_dir: str = "results",
                   net: Optional[NetConfig] = None,
                   protocol: Optional[runspec.Protocol] = None,
                   penalty: Optional[runspec.GatePenalty] = None,
                   save_final_state: bool = False) -> Any:
  """Train the net on `algorithm` with `seed`; write and return the result dict(s).

  The one training loop, as dm-clrs's run.py: a job trains a LIST of
  algorithms with one processor (single-task is a list of one) for one or
  more seeds.  What is trained is given by three components, each its own
  gin configurable (gin/base.gin and the model files bind them):

    net: NetConfig -- the history policy (baseline 'full', ForgetNet 'none',
      G-ForgetNet 'gated') and the architecture.  None: NetConfig() with its
      gin bindings.
    protocol: Protocol -- optimisation, data sizes, validation, evaluation
      and checkpoint cadence.  None: Protocol() with its gin bindings.
    penalty: GatePenalty or None -- G-ForgetNet's gate penalty and where its
      lambda comes from; None: no penalty.

  Args (gin-bindable except algorithm/seed/results_dir, which the sweep sets):
    algorithm: one CLRS-30 name -> a single-task run; a list -> one processor
      trained on all of them (per-algorithm encoders and decoders, paper App.
      "Multi-task experiments"), which needs a multi-task label
      (`<label>_multitask`, gin/multitask.gin).  One result.json per
      algorithm either way, under <results_dir>/<model>/<algorithm>/seed<k>/.
    seed: one seed -> returns one run's result (one algorithm) or a dict
      algorithm -> result (a list).  A sequence of K distinct seeds -> a list
      of those, in order.  One algorithm: the K seeds train together, one
      vmapped step (K-seed mode, below); several: one seed after the other.
    model: the run's label -- the name of its results folder and of its
      column in the tables (analysis/labels.py knows the paper's: baseline,
      forget, gforget, gforget_constant, gforget_nopenalty, and their
      *_multitask).  It selects nothing: the net and the penalty do.
    save_final_state: keep the state at the last step as FINAL_STATE_NAME
      beside result.json (the lambda calibration's lambda = 0 runs: G-ForgetNet
      under the schedule reading continues from it).

  Multi-task: the processor is validated on every algorithm's val split; the
  parameters with the best MEAN val score are tested (run.py keeps the best
  sum); Protocol.multitask_update says how a step updates it.

  K-seed mode (`seed=[s1, ..., sK]` with one algorithm, what the sweep runs
  with SEEDS_PER_JOB=K): one optimizer step of all K seeds is ONE XLA
  computation, `jax.vmap` of `Learner._train_step` over parameters, optimizer
  state, batch and step rng (`make_vmapped_train_step`).  Everything else
  stays per seed and is exactly what K separate runs do (`_SeedRun`): its own
  data stream, initial parameters, step rng, validation, best parameters,
  checkpoint (the same format: a run can be resumed either way), divergence
  and result.json.  So each seed's result equals its separate run's up to
  float reassociation in XLA's batched kernels (tests/test_multiseed.py).
  The K batches of a step have the same graph size (the streams cycle the
  train lengths in lockstep) and are zero-padded on the time axis to the
  longest of the K, which changes no number.  Seeds resumed from checkpoints
  at different steps are trained group by group.  `train_time_s` of a K-seed
  run is the job's training wall time, shared by its K seeds.

  Done-ness, for every seed: a seed whose results all read back with this
  call's definition (nar_markov.runs.check_result) is skipped; a result with
  other settings is an error (nothing trained); a corrupt one is moved aside
  and the seed trained again; a seed another process is training (its lock)
  is an error, runs.LockHeld.  A diverged seed gets its "diverged" results
  at once, tested on its best validation parameters, and the others go on.
  """
  for name, value, kind in (("net", net, NetConfig), ("protocol", protocol, runspec.Protocol),
                            ("penalty", penalty, runspec.GatePenalty)):
    if value is not None and not isinstance(value, kind):
      raise TypeError(f"run_experiment.{name} must be a {kind.__name__} or None, "
                      f"got {value!r}")
  net = net if net is not None else NetConfig()
  protocol = protocol if protocol is not None else runspec.Protocol()
  model = runspec.check_label(model, net, penalty)
  seeds, one_seed = runspec.check_seeds(seed)
  algorithms, one_alg = runspec.check_algorithms(algorithm)
  if len(algorithms) > 1 and not model.endswith(runspec.MULTITASK_SUFFIX):
    raise ValueError(
        f"{len(algorithms)} algorithms train one shared processor: use a multi-task "
        f"label ({model + runspec.MULTITASK_SUFFIX!r}, gin/multitask.gin), not {model!r}")
  if penalty is not None and net.history != "gated":
    raise ValueError(f"a gate penalty needs the gated history (NetConfig.history = "
                     f"'gated'), not {net.history!r}")
  tasks = runspec.make_tasks(model, algorithms, penalty, results_dir, protocol, net)
  from nar_markov import train  # pylint: disable=g-import-not-at-top  (jax: only to train)
  return train.run(runspec.Resolved(
      tasks=tasks, seeds=seeds, one_seed=one_seed, one_alg=one_alg, model=model,
      results_dir=results_dir, net=net, protocol=protocol,
      gin_str=run_gin(model, net, protocol, penalty),
      save_final_state=bool(save_final_state)))


def as_gin(model: str, net: NetConfig, protocol: runspec.Protocol,
           penalty: Optional[runspec.GatePenalty]) -> str:
  """The gin bindings of a run's label and components (config.gin of a run
  started from Python without gin)."""
  lines = [f"run_experiment.model = {model!r}"]
  for name, value in (("NetConfig", net), ("Protocol", protocol), ("GatePenalty", penalty)):
    if value is None:
      continue
    lines += [f"{name}.{f.name} = {getattr(value, f.name)!r}"
              for f in dataclasses.fields(value)]
  if penalty is not None:
    lines.append("run_experiment.penalty = @GatePenalty()")
  return "\n".join(lines) + "\n"


def run_gin(model: str, net: NetConfig, protocol: runspec.Protocol,
            penalty: Optional[runspec.GatePenalty]) -> str:
  """A run's config.gin: the parsed gin, and after it -- where the caller gave the run
  other components than that gin makes (nar_markov/calibrate.py's runs: their own
  label, length and lambda) -- the run's own, which gin reads over the ones above.
  Parsed alone, it gives the run that was trained (nar_markov/replay.py)."""
  parsed = gin.config_str()
  if not parsed:
    return as_gin(model, net, protocol, penalty)
  try:
    c = runspec.configured()
  except ValueError:  # gin that builds no components (a bad binding): write them all
    c = {}
  if (c.get("model"), c.get("net"), c.get("protocol"), c.get("penalty")) == (
      model, net, protocol, penalty):
    return parsed
  own = as_gin(model, net, protocol, penalty)
  if penalty is None:
    own += "run_experiment.penalty = None\n"
  return (parsed.rstrip("\n") + "\n\n# Given by the caller, not by the gin above "
          "(gin reads these over it):\n" + own)


def run_from_gin(gin_files: Sequence[str], gin_params: Sequence[str], *,
                 algorithms: Sequence[str], seeds: Sequence[int], results_dir: str,
                 multitask: bool = False) -> List[str]:
  """A sweep's job: parse gin afresh in this process, train, return the result paths.

  One job: `seeds` of one algorithm (K-seed mode when K > 1), or with
  `multitask` one processor on all `algorithms` for each seed.
  """
  config_lib.parse_gin(gin_files, gin_params)
  algorithms, seeds = list(algorithms), [int(s) for s in seeds]
  if not multitask and len(algorithms) != 1:
    raise ValueError(f"a single-task job trains one algorithm, got {algorithms}")
  run_experiment(algorithm=algorithms if multitask else algorithms[0], seed=seeds,
                 results_dir=results_dir)
  model = runspec.configured()["model"]
  return [str(runs.run_dir(results_dir, model, a, s) / runs.RESULT_NAME)
          for s in seeds for a in algorithms]
