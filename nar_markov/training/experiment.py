"""The entry point of every run (`run_experiment`) and a sweep job's (`run_from_gin`).

What a run is -- its components, label, settings, lambda and the task of each
algorithm -- is nar_markov/config/runspec.py's (no jax); `run_experiment` checks its input
there (`components.resolve`: gin's ``run_experiment.*`` and the caller's keywords), makes
the job's tasks, and hands them to the training loop (nar_markov/training/train.py),
importing jax only then.  The config.gin written beside every result is this
module's (`run_gin`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence, Union

import gin

from nar_markov.config import components
from nar_markov.config import gin_files as config_lib
from nar_markov.config.netconfig import NetConfig
from nar_markov.config import runspec
from nar_markov.store import runs
from nar_markov.training import threads


_GIN = object()  # a component not given: gin's (components.resolve)


def run_experiment(*,
                   algorithm: Union[str, Sequence[str]],
                   seed: Union[int, Sequence[int]],
                   results_dir: str = runs.DEFAULT_RESULTS,
                   model: Any = _GIN,
                   net: Any = _GIN,
                   protocol: Any = _GIN,
                   penalty: Any = _GIN,
                   save_final_state: Any = _GIN) -> Any:
  """Trains the net on `algorithm` for `seed`; writes and returns the result(s).

  The one training loop, as dm-clrs's run.py: a job trains a list of algorithms with one
  processor (single-task: a list of one) for one or more seeds.  The input is checked
  before jax is imported; then the XLA:CPU thread pool is pinned
  (`threads.pin_xla_threads`) and the training loop runs (`train.run`).  A seed already
  done with this definition (`runs.check_result`) is not trained again; a corrupt result
  is moved aside and its seed trained again.

  Args:
    algorithm: one CLRS-30 name, or a list trained by one processor (needs a multi-task
      label, `<label>_multitask`: gin/multitask.gin).  One result.json per algorithm,
      under <results_dir>/<model>/<algorithm>/seed<k>/.
    seed: one seed, or a sequence of K distinct seeds.  K seeds of one algorithm train
      together, one vmapped step, each as its separate run would (docs/running.md,
      "Several seeds per job").
    results_dir: the results root.
    model, net, protocol, penalty, save_final_state: the run's label and components
      (`components.Experiment`); those not given are gin's (`components.resolve`: gin's
      ``run_experiment.*``); penalty=None given: no gate penalty.

  Returns:
    {algorithm: {seed: result}}, whatever the call's shape (as the results folder:
    <model>/<algorithm>/seed<k>): each run's result.json dict, algorithms in the order
    given, seeds in the order given.  A seed found done gives its recorded result; one
    stopped early (`train.stop_after`) gives {"status": "interrupted", "steps": ...}.

  Raises:
    ValueError: a label, components, algorithms or seeds that cannot make a run, or a
      result there made with other settings (never overwritten).
    TypeError: a component of the wrong type.
    nar_markov.store.locks.LockHeld: another process trains one of the seeds.
  """
  given = {k: v for k, v in (("model", model), ("net", net), ("protocol", protocol),
                             ("penalty", penalty), ("save_final_state", save_final_state))
           if v is not _GIN}
  return _train(components.resolve(**given), algorithm, seed, results_dir,
                gin_made_it=not given)


def _train(exp: components.Experiment, algorithm, seed, results_dir: str,
           gin_made_it: bool) -> Any:
  """`run_experiment` on the resolved `exp` (its arguments, its return)."""
  seeds = runspec.check_seeds(seed)
  algorithms = runspec.check_algorithms(algorithm)
  if len(algorithms) > 1 and not exp.multitask:
    raise ValueError(
        f"{len(algorithms)} algorithms train one shared processor: use a multi-task "
        f"label ({exp.model + components.MULTITASK_SUFFIX!r}, gin/multitask.gin), not "
        f"{exp.model!r}")
  tasks = runspec.make_tasks(exp.model, algorithms, exp.penalty, results_dir, exp.protocol,
                             exp.net)
  threads.pin_xla_threads()  # before train imports jax and JAX makes its CPU client
  from nar_markov.training import train  # pylint: disable=g-import-not-at-top  (jax: only to train)
  return train.run(runspec.Resolved(
      tasks=tasks, seeds=seeds, model=exp.model,
      results_dir=results_dir, net=exp.net, protocol=exp.protocol,
      gin_str=run_gin(exp, gin_made_it=gin_made_it), save_final_state=exp.save_final_state))


def as_gin(model: str, net: NetConfig, protocol: components.Protocol,
           penalty: Optional[components.GatePenalty]) -> str:
  """The gin bindings of a run's label and components, every field bound.

  The config.gin of a run started from Python without gin.  `penalty` None: no
  GatePenalty bindings and no ``run_experiment.penalty``.
  """
  lines = [f"run_experiment.model = {model!r}"]
  for name, value in (("NetConfig", net), ("Protocol", protocol), ("GatePenalty", penalty)):
    if value is None:
      continue
    lines += [f"{name}.{f.name} = {getattr(value, f.name)!r}"
              for f in dataclasses.fields(value)]
  if penalty is not None:
    lines.append("run_experiment.penalty = @GatePenalty()")
  return "\n".join(lines) + "\n"


def run_gin(exp: components.Experiment, gin_made_it: bool = False) -> str:
  """A run's config.gin: parsed alone, it gives the run that was trained (tools/replay.py).

  The parsed gin less the launcher's settings (`gin_files.without_launcher`).  Where the
  caller gave the run other components than that gin resolves to (calibrate.py's runs:
  their own label, length and λ), or the gin resolves to no run, the run's own bindings
  (`as_gin`) follow it, which gin reads over the ones above.  With no gin parsed:
  `as_gin` alone.

  Args:
    exp: the run's label and components.
    gin_made_it: `exp` is what the parsed gin resolves to (no component given): the
      parsed gin alone is the run's.
  """
  # The launcher's settings (a Slurm overlay's resources) say how a sweep ran, not the run.
  model, net, protocol, penalty = exp.model, exp.net, exp.protocol, exp.penalty
  parsed = config_lib.without_launcher(gin.config_str())
  if not parsed:
    return as_gin(model, net, protocol, penalty)
  if gin_made_it:
    return parsed
  try:
    gins = components.resolve()
  except (ValueError, TypeError):  # gin that builds no run (a bad binding): write them all
    gins = None
  if gins is not None and (gins.model, gins.net, gins.protocol, gins.penalty) == (
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
  """A sweep's job: parses gin afresh in this process, trains, returns the result paths.

  Args:
    gin_files, gin_params: the gin to parse (`gin_files.parse_gin`).
    algorithms: the job's algorithm (one), or with `multitask` all that one processor
      trains.
    seeds: the job's seeds (K > 1 of one algorithm: one vmapped step).
    results_dir: the results root.
    multitask: one processor on all `algorithms` for each seed.

  Returns:
    The result.json path of each (seed, algorithm), seed by seed.

  Raises:
    ValueError: a single-task job of not exactly one algorithm; and what
      `run_experiment` raises.
  """
  config_lib.parse_gin(gin_files, gin_params)
  algorithms, seeds = list(algorithms), [int(s) for s in seeds]
  if not multitask and len(algorithms) != 1:
    raise ValueError(f"a single-task job trains one algorithm, got {algorithms}")
  exp = components.resolve()  # once: what trains is what the paths name
  _train(exp, algorithms if multitask else algorithms[0], seeds, results_dir,
         gin_made_it=True)
  return [str(runs.run_dir(results_dir, exp.model, a, s) / runs.RESULT_NAME)
          for s in seeds for a in algorithms]
