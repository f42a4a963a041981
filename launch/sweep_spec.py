"""A sweep's definition, from its gin files: its runs, its axes, its λ calibrations, and the
one job class that trains them.

`expand_runs` parses the gin files and lists the sweep's `Run`s, model x ALGORITHMS x SEEDS
(the sweep's axes, `AXES`: the macros gin/base.gin defines, or `sweep_axes.*`), checked
before anything runs.  The runs that are not done go out as `Job`s: a function
(`experiment.run_from_gin`, `calibrate.calibrate_from_gin`) called with strings and ints,
so that a job pickles, prints and re-creates anywhere; `job_groups` and `job_call` say
which job trains which runs.  `expected_definitions` is what each run's result must have
been made with; `calibration_plan` the `Calibration`s (stage 1 of a G-ForgetNet sweep)
still to make.  Where and with what a job runs: launch/cluster.py.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gin
import submitit

from launch import cluster
from nar_markov.config import clrs30
from nar_markov.config import components
from nar_markov.config import gin_files as config_lib
from nar_markov.config import calibration_records
from nar_markov.config import lambda_heuristic
from nar_markov.config import runspec
from nar_markov.store import runs as runs_lib
from nar_markov.training import calibrate
from nar_markov.training import experiment


@dataclasses.dataclass(frozen=True)
class Job(submitit.helpers.Checkpointable):
  """Every job of a sweep, on Slurm or here: `function(**kwargs)`.

  Stateless: the inherited `checkpoint()` resubmits this same call, which resumes
  from the checkpoints on disk.  `function` pickles by its module and name, so the
  job's process imports it there (experiment and calibrate import no jax at first).
  Before it, from the sweep's gin (`kwargs`' gin files and bindings,
  `cluster.job_environment`): a job that asked for GPUs
  (`slurm_resources.gpus_per_task` >= 1) and got fewer stops with one line naming why,
  and JAX's compilation cache is the sweep's (`cluster.compilation_cache_dir`).  It lives
  here, beside `sweep_axes`, so that the job's process, unpickling it, registers every
  configurable of the launcher that the sweep's gin may bind.
  """
  function: Callable[..., Any]

  def __call__(self, kwargs: Dict[str, Any]):
    with cluster.job_environment(kwargs):
      return self.function(**kwargs)


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run of a sweep: everything the job needs, as strings/ints.

  Attributes:
    model: the run's label (run_experiment.model).
    algorithm: its algorithm.
    seed: its seed.
    gin_files: the sweep's gin files, absolute paths.
    gin_params: the sweep's bindings.
    results_dir: the results folder, an absolute path.
    multitask: a multi-task sweep (gin macro MULTITASK): every algorithm of a seed is
      trained by one job, one processor on `job_algorithms`; the runs stay per algorithm
      for skipping and --status.
    job_algorithms: all of the sweep's ALGORITHMS, done or not (multi-task only).
    seeds_per_job: SEEDS_PER_JOB (gin macro): K > 1 trains up to K seeds of one (model,
      algorithm) in one job (run_experiment's K-seed mode); the runs stay per seed.
    resolved: the experiment `expand_runs` resolved (components.resolve), which the
      definitions and the calibration plan read instead of gin; not sent to jobs (they
      parse their gin files), not compared.
  """
  model: str
  algorithm: str
  seed: int
  gin_files: Tuple[str, ...]    # absolute paths
  gin_params: Tuple[str, ...]
  results_dir: str              # absolute path
  # Multi-task sweeps (gin macro MULTITASK): every algorithm of a seed is
  # trained by ONE job, one processor on `job_algorithms` (all of the sweep's
  # ALGORITHMS, done or not); the runs stay per algorithm for skipping and --status.
  multitask: bool = False
  job_algorithms: Tuple[str, ...] = ()
  # SEEDS_PER_JOB (gin macro): K > 1 trains up to K seeds of one (model,
  # algorithm) in one job (run_experiment's K-seed mode); the runs stay per seed.
  seeds_per_job: int = 1
  # What expand_runs resolved (components.resolve): the definitions and the calibration plan
  # read it, not gin again.  Not sent to jobs (they parse their gin files).
  resolved: Optional[components.Experiment] = dataclasses.field(default=None, compare=False,
                                                             repr=False)

  @property
  def name(self) -> str:
    """'<model>/<algorithm>/seed<k>'."""
    return f"{self.model}/{self.algorithm}/seed{self.seed}"

  @property
  def run_dir(self) -> pathlib.Path:
    """Its run folder (runs.run_dir)."""
    return runs_lib.run_dir(self.results_dir, self.model, self.algorithm, self.seed)

  @property
  def result_path(self) -> pathlib.Path:
    """Its result.json."""
    return self.run_dir / runs_lib.RESULT_NAME

  @property
  def key(self) -> Tuple[str, str, int]:
    """(model, algorithm, seed)."""
    return (self.model, self.algorithm, self.seed)

  @property
  def trained_with(self) -> Tuple[str, ...]:
    """The algorithms its job trains in one model (multi-task: all of the sweep's)."""
    return self.job_algorithms if self.multitask else (self.algorithm,)

  @property
  def checkpoint_folder(self) -> pathlib.Path:
    """Where its job keeps this seed's checkpoint (runs.job_folder)."""
    return runs_lib.job_folder(self.results_dir, self.model, self.trained_with, self.seed)

  @property
  def job_key(self):
    """Runs with the same key may be trained by the same job (`job_groups`)."""
    if self.multitask:
      return (self.model, "*", self.seed)
    if self.seeds_per_job > 1:
      return (self.model, self.algorithm)
    return (self.model, self.algorithm, self.seed)


def job_groups(runs: Sequence[Run]) -> List[List[Run]]:
  """Runs grouped by the job that trains them, in first-appearance order.

  Multi-task: one job per seed.  SEEDS_PER_JOB = K > 1: the given runs of
  one (model, algorithm) in chunks of up to K seeds -- the sweep passes only
  runs not done yet, so a relaunch packs the remaining seeds afresh.
  """
  groups: Dict[Any, List[Run]] = {}
  for r in runs:
    groups.setdefault(r.job_key, []).append(r)
  out = []
  for group in groups.values():
    k = 1 if group[0].multitask else group[0].seeds_per_job
    out += [group] if k == 1 else [group[i:i + k] for i in range(0, len(group), k)]
  return out


def job_call(group: Sequence[Run]) -> Tuple[Job, Dict[str, Any]]:
  """The job that trains one group of `job_groups`, and its keyword arguments.

  A group is one run, up to K seeds of one algorithm, or (multi-task) all algorithms of a
  seed; the job calls `experiment.run_from_gin`.

  Returns:
    (job, its keyword arguments).

  Raises:
    ValueError: several runs in a group where each job trains one run.
  """
  run = group[0]
  if not run.multitask and run.seeds_per_job == 1 and len(group) != 1:
    raise ValueError(f"one job per run, got {[r.name for r in group]}")
  return Job(experiment.run_from_gin), dict(
      gin_files=list(run.gin_files), gin_params=list(run.gin_params),
      algorithms=list(run.trained_with), seeds=list(dict.fromkeys(int(r.seed) for r in group)),
      results_dir=run.results_dir, multitask=run.multitask)


# The sweep's axes: sweep_axes' parameters, and the macros gin/base.gin binds them to
# (a command line overrides the macros: --gin_param "SEEDS=[0,1]").
AXES = {"algorithms": "ALGORITHMS", "seeds": "SEEDS", "seeds_per_job": "SEEDS_PER_JOB",
        "multitask": "MULTITASK"}


@gin.configurable
def sweep_axes(algorithms: Sequence[str] = gin.REQUIRED, seeds: Sequence[int] = gin.REQUIRED,
               seeds_per_job: int = 1, multitask: bool = False) -> Dict[str, Any]:
  """The sweep's axes as the gin files bind them (`AXES`); the launcher calls this.

  Args:
    algorithms: the sweep's algorithms (macro ALGORITHMS).
    seeds: its seeds (macro SEEDS).
    seeds_per_job: K > 1 trains up to K seeds of one algorithm in one job.
    multitask: one job per seed trains one processor on all `algorithms`.

  Returns:
    The four, by name, unchecked.
  """
  return dict(algorithms=algorithms, seeds=seeds, seeds_per_job=seeds_per_job,
              multitask=multitask)


def _check_names(gin_params: Sequence[str]) -> None:
  """gin takes a binding of a macro that nothing reads without a word (`SEDS=[0]`
  trained the default seeds): a binding must name a macro the gin files define (or
  one the bindings use), and sweep_axes.<name> one of its parameters.  Call with
  the gin files parsed alone."""
  known = ", ".join(f"{macro} (sweep_axes.{axis})" for axis, macro in AXES.items())
  used = set(re.findall(r"%(\w+)", " ".join(gin_params)))
  for param in gin_params:
    for name in re.findall(r"^\s*([A-Za-z_][\w./]*)\s*=", param, re.M):
      selector, _, arg = name.rpartition(".")
      if not selector and name not in used and not _defines_macro(name):
        raise ValueError(f"unknown macro {name!r} in --gin_param {param!r} (the gin files "
                         f"define no such macro); the sweep's axes: {known}")
      if selector.rpartition("/")[2] == "sweep_axes" and arg not in AXES:
        raise ValueError(f"unknown sweep axis {name!r} in --gin_param {param!r}; the "
                         f"sweep's axes: {known}")


def _defines_macro(name: str) -> bool:
  try:
    gin.query_parameter(f"{name}/macro.value")
  except ValueError:
    return False
  return True


def bound_axes() -> Dict[str, Any]:
  """`sweep_axes()` of the parsed gin files, unchecked.

  A `sweep_axes.<axis>` binding wins, else the macro gin/base.gin defines (AXES).

  Raises:
    gin's error (a RuntimeError or TypeError) where a required axis is missing.
  """
  macros = {}
  for axis, macro in AXES.items():
    try:
      gin.query_parameter(f"sweep_axes.{axis}")
    except ValueError:
      if _defines_macro(macro):
        macros[axis] = config_lib.bound_value(f"{macro}/macro.value")
  return sweep_axes(**macros)


def _axes() -> Dict[str, Any]:
  """`sweep_axes()` of the parsed gin files, checked: one ValueError per problem."""
  try:
    axes = bound_axes()
  except (RuntimeError, TypeError) as e:  # gin: a required binding is missing
    raise ValueError(f"the sweep's axes are not set in the gin files (the macros "
                     f"ALGORITHMS and SEEDS of gin/base.gin, or sweep_axes.*): {e}") from None
  k, multitask = axes["seeds_per_job"], axes["multitask"]
  algorithms, seeds = axes["algorithms"], axes["seeds"]
  if isinstance(k, bool) or not isinstance(k, int) or k < 1:
    raise ValueError(f"SEEDS_PER_JOB must be an int >= 1, got {k!r}")
  if not isinstance(multitask, bool):
    raise ValueError(f"MULTITASK must be True or False, got {multitask!r}")
  if multitask and k > 1:
    raise ValueError(f"SEEDS_PER_JOB = {k}: several seeds per job is not supported for "
                     "multi-task sweeps (one job per seed there); set SEEDS_PER_JOB = 1")
  if isinstance(algorithms, str) or not isinstance(algorithms, (list, tuple)):
    raise ValueError(f"ALGORITHMS must be a list of names, got {algorithms!r}")
  if isinstance(seeds, (str, bytes)) or not isinstance(seeds, (list, tuple)):
    raise ValueError(f"SEEDS must be a list of ints, got {seeds!r}")
  if not algorithms or not seeds:
    raise ValueError(f"empty sweep: ALGORITHMS={algorithms!r}, SEEDS={seeds!r}")
  bad_seeds = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
  if bad_seeds:
    raise ValueError(f"SEEDS must be ints >= 0, got {bad_seeds!r}")
  axes["algorithms"] = [clrs30.check_algorithm(a) for a in algorithms]
  for values, what in [(axes["algorithms"], "ALGORITHMS"), (seeds, "SEEDS")]:
    if len(set(values)) != len(values):
      raise ValueError(f"{what} has duplicates: {values!r}")
  return axes


def expand_runs(gin_files: Sequence[str], gin_params: Sequence[str],
                results_dir: str) -> List[Run]:
  """Parses gin and lists the sweep's runs: model x ALGORITHMS x SEEDS.

  Leaves gin parsed, so `cluster.SlurmResources()` is this sweep's.

  Args:
    gin_files: the gin files (relative to the cwd or the repo root).
    gin_params: the bindings, after the files.
    results_dir: the results folder.

  Returns:
    The runs: per algorithm, then seed; multi-task, per seed, then algorithm.

  Raises:
    ValueError: with the reason in one line, before anything runs: a missing gin file,
      files whose order would decide the sweep (two model files, a model file after an
      overlay: launch/inputs.py), an unknown or malformed binding, macro or axis, a
      binding on a component the model does not use, a missing or unknown model, a
      MULTITASK that does not match the label, an unknown algorithm, bad seeds or
      SEEDS_PER_JOB, bad slurm_resources, or an algorithm G-ForgetNet has no lambda for.
  """
  from launch import inputs  # pylint: disable=g-import-not-at-top
  try:
    inputs.check_files(list(gin_files))
    inputs.check_binding_syntax(list(gin_params))
    config_lib.parse_gin(list(gin_files))
    _check_names(gin_params)
    config_lib.parse_gin(list(gin_files), list(gin_params))
  except ValueError as e:
    raise ValueError(" ".join(str(e).split())) from None  # gin's messages span lines
  files = tuple(config_lib.resolve_gin_file(f) for f in gin_files)
  axes = _axes()
  try:
    exp = components.resolve()
  except TypeError as e:  # a component bound to something else than its configurable
    raise ValueError(str(e)) from None
  model = exp.model
  inputs.check_used(gin_params, components.unused_components(model, exp.net, exp.penalty))
  if exp.penalty is not None and not exp.multitask:
    lambda_heuristic.LambdaHeuristic()  # its bindings checked here, not in N jobs
  multitask = axes["multitask"]
  if multitask != model.endswith(components.MULTITASK_SUFFIX):
    raise ValueError(
        f"MULTITASK = {multitask} but run_experiment.model = {model!r}: a multi-task "
        f"sweep (gin/multitask.gin) trains a '*{components.MULTITASK_SUFFIX}' label, a "
        "single-task sweep any other")
  algorithms = axes["algorithms"]
  # The components and a lambda bound by hand: refused here rather than in N jobs.  A
  # lambda from calibration records is `calibration_plan`'s.
  if multitask or not runspec.needs_calibration(exp.penalty):
    for a in algorithms:
      runspec.definition_of(a, exp, results_dir,
                            algorithms=algorithms if multitask else None)
  cluster.SlurmResources()  # validates the Slurm section's values
  common = dict(model=model, resolved=exp, gin_files=files, gin_params=tuple(gin_params),
                results_dir=str(pathlib.Path(results_dir).expanduser().resolve()))
  if multitask:  # one job per seed: runs seed by seed
    return [Run(algorithm=a, seed=int(s), multitask=True, job_algorithms=tuple(algorithms),
                **common) for s in axes["seeds"] for a in algorithms]
  return [Run(algorithm=a, seed=int(s), seeds_per_job=axes["seeds_per_job"], **common)
          for a in algorithms for s in axes["seeds"]]


def expected_definitions(runs: Sequence[Run]) -> Dict[Tuple[str, str, int], Optional[dict]]:
  """Run key -> what its result must have been made with (nar_markov.store.runs.check_result).

  Single-task runs: `runspec.definition_of` (settings, model, lambda;
  lambda left out where its calibration record does not exist yet) plus the
  seed; multi-task runs name the algorithms trained together.  Call
  with `runs` from `expand_runs` (their `resolved` experiment).
  """
  if not runs:
    return {}
  exp = runs[0].resolved
  per_alg = {a: runspec.definition_of(a, exp, runs[0].results_dir,
                                      algorithms=runs[0].job_algorithms or None)
             for a in {r.algorithm for r in runs}}
  return {r.key: dict(per_alg[r.algorithm], seed=r.seed) for r in runs}


@dataclasses.dataclass(frozen=True)
class Calibration:
  """Stage 1 of a G-ForgetNet sweep: the lambda calibration of one algorithm.

  Attributes:
    algorithm: the algorithm.
    reading: LambdaHeuristic.reading ('schedule' or 'constant').
    gin_files, gin_params, results_dir: the sweep's, as in `Run`.
    scope: NetConfig.history_scope (None: the default).
  """
  algorithm: str
  reading: str
  gin_files: Tuple[str, ...]
  gin_params: Tuple[str, ...]
  results_dir: str
  scope: Optional[str] = None   # NetConfig.history_scope (None: the default)

  @property
  def name(self) -> str:
    """'lambda calibration (<reading>)/<algorithm>', for progress lines."""
    return f"lambda calibration ({self.reading})/{self.algorithm}"

  @property
  def record_path(self) -> pathlib.Path:
    """The calibration record it writes (calibration_records.record_path)."""
    return calibration_records.record_path(self.results_dir, self.reading, self.algorithm,
                                        self.scope)

  def job_call(self) -> Tuple[Job, Dict[str, Any]]:
    """(job, its keyword arguments) that makes this calibration's record."""
    return Job(calibrate.calibrate_from_gin), dict(
        gin_files=list(self.gin_files), gin_params=list(self.gin_params),
        algorithm=self.algorithm, results_dir=self.results_dir)


def calibration_plan(runs: Sequence[Run]) -> Tuple[List[Calibration], Dict[str, dict], List[str]]:
  """The λ calibrations of a sweep: those to make, the usable records, the problems.

  Empty unless the sweep is a single-task G-ForgetNet one with lambda read from
  calibration records (lambda_gate None).

  Args:
    runs: the sweep's runs, from `expand_runs` (their `resolved` experiment).

  Returns:
    (calibrations to make: one per algorithm without a record, algorithm -> its usable
    record with its 'lambda', problems: records that are unreadable or were made with
    other settings; the sweep refuses to go on, nothing is overwritten).
  """
  if not runs or runs[0].multitask:
    return [], {}, []
  exp = runs[0].resolved
  if not runspec.needs_calibration(exp.penalty):
    return [], {}, []
  heuristic = lambda_heuristic.LambdaHeuristic()
  todo, have, problems = [], {}, []
  seen = set()
  for run in runs:
    if run.algorithm in seen:
      continue
    seen.add(run.algorithm)
    settings = runspec.record_settings(runspec.settings_of(run.algorithm, exp))
    scope = settings.get("history_scope")
    path = calibration_records.record_path(run.results_dir, heuristic.reading, run.algorithm,
                                        scope)
    try:
      if calibration_records.read_record(path) is None:
        todo.append(Calibration(run.algorithm, heuristic.reading, run.gin_files,
                                run.gin_params, run.results_dir, scope))
        continue
      lam, info = calibration_records.load_lambda(run.results_dir, run.algorithm, heuristic, settings)
      have[run.algorithm] = dict(info, **{"lambda": lam})
    except lambda_heuristic.CalibrationError as e:
      problems.append(str(e))
  return todo, have, problems
