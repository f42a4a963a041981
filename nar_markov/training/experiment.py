"""The gin-configurable entry point of every run (`run_experiment`) and a sweep job's (`run_from_gin`).

What a run is -- its components, label, settings, lambda and the task of each
algorithm -- is nar_markov/config/runspec.py's (no jax); `run_experiment` checks its input
there, resolves the job, and hands it to the training loop (nar_markov/training/train.py),
importing jax only then.  The config.gin written beside every result is this
module's (`run_gin`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence, Union

import gin

from nar_markov.config import gin_files as config_lib
from nar_markov.config import runspec
from nar_markov.config.netconfig import NetConfig
from nar_markov.store import runs
from nar_markov.training import threads


@gin.configurable(denylist=["algorithm", "seed", "results_dir"])
def run_experiment(*,
                   algorithm: Union[str, Sequence[str]],
                   seed: Union[int, Sequence[int]],
                   model: str = gin.REQUIRED,
                   results_dir: str = runs.DEFAULT_RESULTS,
                   net: Optional[NetConfig] = None,
                   protocol: Optional[runspec.Protocol] = None,
                   penalty: Optional[runspec.GatePenalty] = None,
                   save_final_state: bool = False) -> Any:
  """Train the net on `algorithm` with `seed`; write and return the result dict(s).

  The one training loop, as dm-clrs's run.py: a job trains a list of algorithms
  with one processor (single-task is a list of one) for one or more seeds.

  Args (gin-bindable except algorithm/seed/results_dir, which the sweep sets):
    algorithm: one CLRS-30 name, or a list trained by one processor (a multi-task
      label, `<label>_multitask`: gin/multitask.gin).  One result.json per
      algorithm, under <results_dir>/<model>/<algorithm>/seed<k>/.
    seed: one seed -> one run's result (a dict algorithm -> result for a list of
      algorithms); K distinct seeds -> a list of those.  K seeds of one algorithm
      train together, one vmapped step, each as its separate run would
      (docs/running.md, "Several seeds per job").
    model: the run's label: its results folder and table column.  It selects
      nothing; the components do (runspec.check_label checks the paper's labels).
    net, protocol, penalty: the components (NetConfig, runspec.Protocol,
      runspec.GatePenalty); None: gin's (penalty None: no gate penalty).
    save_final_state: keep the state at the last step beside result.json (the
      lambda calibration's runs, which G-ForgetNet continues).

  A seed already done with this definition (runs.check_result) is skipped; a
  result with other settings is an error; a corrupt one is moved aside and
  trained again; a seed another process trains is nar_markov.store.locks.LockHeld.
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
  threads.pin_xla_threads()  # before train imports jax and JAX makes its CPU client
  from nar_markov.training import train  # pylint: disable=g-import-not-at-top  (jax: only to train)
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
  """A run's config.gin: the parsed gin less the launcher's settings, and after it -- where the caller gave the run
  other components than that gin makes (nar_markov/training/calibrate.py's runs: their own
  label, length and lambda) -- the run's own, which gin reads over the ones above.
  Parsed alone, it gives the run that was trained (nar_markov/tools/replay.py)."""
  # The launcher's settings (a Slurm overlay's resources) say how a sweep ran, not the run.
  parsed = config_lib.without_launcher(gin.config_str())
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
