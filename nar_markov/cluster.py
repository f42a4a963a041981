"""A sweep as a plain list of runs, its Slurm resources, and the one job class that trains them.

launch/sweep.py expands gin files into `Run`s (model x algorithm x seed), skips
those that are done (nar_markov.runs.check_result against `expected_definitions`:
a result that reads back with the settings this sweep asks for), and submits the
rest as one submitit job array of `Job`s.  A `Job` is `function(**kwargs)` with
`function` a "module:name" string -- `TRAIN` (one run; with the gin macro
SEEDS_PER_JOB = K > 1 up to K seeds of one algorithm in one process; with
MULTITASK = True one processor on all ALGORITHMS per seed) or `CALIBRATE` (the
lambda calibration of one algorithm) -- and kwargs of strings and ints only
(absolute gin files, gin bindings, algorithms, seeds, results dir), so it
pickles, prints and re-creates anywhere; it re-parses gin in the job's own
process.

Preemption and timeouts: submitit calls `Job.checkpoint()` on Slurm's signal,
which resubmits the same call; the job then resumes from its checkpoints
(nar_markov.experiment.run_experiment does that by itself: each run, or each
multi-task job, from its own checkpoint.pkl), so the job object needs no state
of its own.  A plain `scontrol requeue` (no signal to submitit) lands in the
same place.
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gin
import submitit

from nar_markov import clrs30
from nar_markov import config as config_lib
from nar_markov import experiment
from nar_markov import lambda_heuristic
from nar_markov import runs as runs_lib

# sbatch refuses arrays with more tasks than MaxArraySize (Slurm's default 1001).
MAX_ARRAY_SIZE = 1000
# submitit asks Slurm for USR2 90 s (its signal_delay_s) before the time limit, to
# checkpoint and requeue.  A shorter limit signals each attempt at once and the run
# never progresses (seen on the local cluster with timeout_min=2).
MIN_TIMEOUT_MIN = 5


@gin.configurable
def slurm_resources(partition: Optional[str] = None,
                    gpus_per_task: int = 0,
                    cpus_per_task: int = 2,
                    mem_gb: float = 16,
                    timeout_min: int = 240,
                    array_parallelism: int = 64,
                    max_num_timeout: int = 10,
                    job_name: str = "nar_markov",
                    setup: Sequence[str] = (
                        "export XLA_PYTHON_CLIENT_PREALLOCATE=false",),
                    additional_parameters: Optional[Dict[str, Any]] = None,
                    ) -> Dict[str, Any]:
  """Per-run Slurm resources as submitit executor parameters.

  Bound in the Slurm section of gin/base.gin; override per sweep, e.g.
  ``--gin_param "slurm_resources.partition='gpu'"``.

  Args:
    partition: Slurm partition; None = the cluster's default partition.
    gpus_per_task: GPUs per run (the paper's runs: 1; 0 trains on CPU).
    cpus_per_task, mem_gb: CPU cores and host memory per run.
    timeout_min: wall-clock limit of one attempt (>= MIN_TIMEOUT_MIN); a run
      that needs longer is checkpointed and requeued (at most `max_num_timeout`
      times).
    array_parallelism: most tasks of the array running at once.
    setup: shell lines run in the sbatch script before the job starts.
    additional_parameters: extra sbatch flags, e.g. {'account': 'x', 'qos': 'y'}.
  """
  def count(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
      raise ValueError(f"slurm_resources.{name} must be an int >= {minimum}, got {value!r}")
    return value

  for name, value, minimum in [("gpus_per_task", gpus_per_task, 0),
                               ("cpus_per_task", cpus_per_task, 1),
                               ("timeout_min", timeout_min, MIN_TIMEOUT_MIN),
                               ("array_parallelism", array_parallelism, 1),
                               ("max_num_timeout", max_num_timeout, 0)]:
    count(name, value, minimum)
  if isinstance(mem_gb, bool) or not isinstance(mem_gb, (int, float)) or not mem_gb > 0:
    raise ValueError(f"slurm_resources.mem_gb must be a number > 0, got {mem_gb!r}")
  if partition is not None and not isinstance(partition, str):
    raise ValueError(f"slurm_resources.partition must be a string or None, got {partition!r}")
  if isinstance(setup, str) or not all(isinstance(line, str) for line in setup):
    raise ValueError(f"slurm_resources.setup must be a list of shell lines, got {setup!r}")
  params = {
      "timeout_min": int(timeout_min),
      "cpus_per_task": int(cpus_per_task),
      "mem_gb": float(mem_gb),
      "tasks_per_node": 1,
      "nodes": 1,
      "name": job_name,
      "slurm_array_parallelism": int(array_parallelism),
      "slurm_max_num_timeout": int(max_num_timeout),
      "slurm_setup": list(setup),
      # A requeued run must be allowed back into the queue even where the
      # cluster's JobRequeue default is 0.
      "slurm_additional_parameters": {"requeue": True,
                                      **dict(additional_parameters or {})},
  }
  if partition:
    params["slurm_partition"] = partition
  if int(gpus_per_task) > 0:
    params["slurm_gpus_per_task"] = int(gpus_per_task)
  return params


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run of a sweep: everything the job needs, as strings/ints."""
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

  @property
  def name(self) -> str:
    return f"{self.model}/{self.algorithm}/seed{self.seed}"

  @property
  def run_dir(self) -> pathlib.Path:
    return runs_lib.run_dir(self.results_dir, self.model, self.algorithm, self.seed)

  @property
  def result_path(self) -> pathlib.Path:
    return self.run_dir / runs_lib.RESULT_NAME

  @property
  def key(self) -> Tuple[str, str, int]:
    return (self.model, self.algorithm, self.seed)

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


# The functions a `Job` calls ("module:name"; imported in the job's process).
TRAIN = "nar_markov.experiment:run_from_gin"
CALIBRATE = "nar_markov.calibrate:calibrate_from_gin"


class Job(submitit.helpers.Checkpointable):
  """Every job of a sweep, on Slurm or local: `function(**kwargs)`.

  `function` is a "module:name" string (`TRAIN`, `CALIBRATE`), imported when
  the job runs, so that the launcher's process needs no jax.  Stateless: the
  inherited `checkpoint()` resubmits this same call, which resumes from the
  checkpoints on disk.
  """

  def __call__(self, function: str, kwargs: Dict[str, Any]):
    module, name = function.split(":")
    return getattr(importlib.import_module(module), name)(**kwargs)


def job_call(group: Sequence[Run]) -> Tuple[Job, Tuple[str, Dict[str, Any]]]:
  """(job, its arguments) that trains one group of `job_groups`: one run,
  up to K seeds of one algorithm, or (multi-task) all algorithms of a seed."""
  run = group[0]
  if not run.multitask and run.seeds_per_job == 1 and len(group) != 1:
    raise ValueError(f"one job per run, got {[r.name for r in group]}")
  seeds = list(dict.fromkeys(int(r.seed) for r in group))
  algorithms = list(run.job_algorithms) if run.multitask else [run.algorithm]
  return Job(), (TRAIN, dict(gin_files=list(run.gin_files), gin_params=list(run.gin_params),
                             algorithms=algorithms, seeds=seeds,
                             results_dir=run.results_dir, multitask=run.multitask))


@gin.configurable
def sweep_axes(algorithms: Sequence[str] = gin.REQUIRED, seeds: Sequence[int] = gin.REQUIRED,
               seeds_per_job: int = 1, multitask: bool = False) -> Dict[str, Any]:
  """The sweep's axes as the gin files bind them; the launcher calls this.

  gin/base.gin binds them to the macros ALGORITHMS, SEEDS, SEEDS_PER_JOB and
  MULTITASK, which a command line overrides (--gin_param "SEEDS=[0,1]").
  seeds_per_job: K > 1 trains up to K seeds of one algorithm in one job.
  multitask: one job per seed trains one processor on all `algorithms`.
  """
  return dict(algorithms=algorithms, seeds=seeds, seeds_per_job=seeds_per_job,
              multitask=multitask)


def _axes() -> Dict[str, Any]:
  """`sweep_axes()` of the parsed gin files, checked: one ValueError per problem."""
  try:
    axes = sweep_axes()  # pylint: disable=no-value-for-parameter
  except (RuntimeError, TypeError) as e:  # gin: a required binding is missing
    raise ValueError(f"the sweep's axes are not set in the gin files (sweep_axes.*, "
                     f"gin/base.gin binds them to ALGORITHMS and SEEDS): {e}") from None
  k, multitask = axes["seeds_per_job"], axes["multitask"]
  if isinstance(k, bool) or not isinstance(k, int) or k < 1:
    raise ValueError(f"SEEDS_PER_JOB must be an int >= 1, got {k!r}")
  if not isinstance(multitask, bool):
    raise ValueError(f"MULTITASK must be True or False, got {multitask!r}")
  return axes


def expand_runs(gin_files: Sequence[str], gin_params: Sequence[str],
                results_dir: str) -> List[Run]:
  """Parse gin and list the sweep's runs: model x ALGORITHMS x SEEDS.

  Each run carries the macro SEEDS_PER_JOB (how `job_groups` packs them).
  Raises ValueError (with the reason) for a missing gin file, an unknown or
  malformed binding, a missing/unknown model, an unknown algorithm, bad seeds,
  a bad SEEDS_PER_JOB (or one > 1 in a multi-task sweep), or an algorithm
  G-ForgetNet has no lambda for -- before anything runs.
  Leaves gin parsed, so `slurm_resources()` returns this sweep's resources.
  """

  config_lib.parse_gin(list(gin_files), list(gin_params))
  files = tuple(config_lib.resolve_gin_file(f) for f in gin_files)

  def query(key, what):
    try:
      return config_lib.bound_value(key)
    except ValueError as e:
      raise ValueError(f"{what} is not set in the gin files ({key}): {e}") from e

  axes = _axes()
  seeds_per_job, multitask = axes["seeds_per_job"], axes["multitask"]
  query("run_experiment.model", "the model's label")
  components = experiment.configured()
  model = experiment.check_label(components["model"], components["net"],
                                 components["penalty"])
  if multitask != model.endswith(experiment.MULTITASK_SUFFIX):
    raise ValueError(
        f"MULTITASK = {multitask} but run_experiment.model = {model!r}: a multi-task "
        f"sweep (gin/multitask.gin) trains a '*{experiment.MULTITASK_SUFFIX}' label, a "
        "single-task sweep any other")
  if multitask and seeds_per_job > 1:
    raise ValueError(
        f"SEEDS_PER_JOB = {seeds_per_job}: several seeds per job is not "
        "supported for multi-task sweeps (one job per seed there); "
        "set SEEDS_PER_JOB = 1")
  algorithms, seeds = axes["algorithms"], axes["seeds"]
  if isinstance(algorithms, str) or not isinstance(algorithms, (list, tuple)):
    raise ValueError(f"ALGORITHMS must be a list of names, got {algorithms!r}")
  if isinstance(seeds, (str, bytes)) or not isinstance(seeds, (list, tuple)):
    raise ValueError(f"SEEDS must be a list of ints, got {seeds!r}")
  if not algorithms or not seeds:
    raise ValueError(f"empty sweep: ALGORITHMS={algorithms!r}, SEEDS={seeds!r}")
  bad_seeds = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
  if bad_seeds:
    raise ValueError(f"SEEDS must be ints >= 0, got {bad_seeds!r}")
  algorithms = [clrs30.check_algorithm(a) for a in algorithms]
  for dupes, what in [(algorithms, "ALGORITHMS"), (seeds, "SEEDS")]:
    if len(set(dupes)) != len(dupes):
      raise ValueError(f"{what} has duplicates: {dupes!r}")

  # The components (net, protocol, penalty) and G-ForgetNet's per-algorithm
  # lambda: refuse a bad one here rather than in N jobs.  A lambda from
  # calibration records (gin/gforget.gin) is checked by `calibration_plan`, which
  # the sweep makes first where missing.
  penalty = components["penalty"]
  if multitask or not experiment.needs_calibration(penalty):
    for a in algorithms:  # lambda bound by hand: check it all
      experiment.run_definition_from_gin(a, results_dir,
                                         algorithms=algorithms if multitask else None)
  slurm_resources()  # validates the Slurm section's values

  results_dir = str(pathlib.Path(results_dir).expanduser().resolve())
  if multitask:  # one job per seed: runs seed by seed
    return [Run(model=model, algorithm=a, seed=int(s), gin_files=files,
                gin_params=tuple(gin_params), results_dir=results_dir, multitask=True,
                job_algorithms=tuple(algorithms))
            for s in seeds for a in algorithms]
  return [Run(model=model, algorithm=a, seed=int(s), gin_files=files,
              gin_params=tuple(gin_params), results_dir=results_dir,
              seeds_per_job=seeds_per_job)
          for a in algorithms for s in seeds]


def expected_definitions(runs: Sequence[Run]) -> Dict[Tuple[str, str, int], Optional[dict]]:
  """Run key -> what its result must have been made with (nar_markov.runs.check_result).

  Single-task runs: `experiment.run_definition_from_gin` (settings, model, lambda;
  lambda left out where its calibration record does not exist yet) plus the
  seed; multi-task runs name the algorithms trained together.  Call
  after `expand_runs` (gin parsed).
  """
  if not runs:
    return {}
  per_alg = {a: experiment.run_definition_from_gin(a, runs[0].results_dir,
                                              algorithms=runs[0].job_algorithms or None)
             for a in {r.algorithm for r in runs}}
  return {r.key: dict(per_alg[r.algorithm], seed=r.seed) for r in runs}


@dataclasses.dataclass(frozen=True)
class Calibration:
  """Stage 1 of a G-ForgetNet sweep: the lambda calibration of one algorithm."""
  algorithm: str
  reading: str
  gin_files: Tuple[str, ...]
  gin_params: Tuple[str, ...]
  results_dir: str
  scope: Optional[str] = None   # NetConfig.history_scope (None: the default)

  @property
  def name(self) -> str:
    return f"lambda calibration ({self.reading})/{self.algorithm}"

  @property
  def record_path(self) -> pathlib.Path:
    return lambda_heuristic.record_path(self.results_dir, self.reading, self.algorithm,
                                        self.scope)

  def job_args(self) -> Tuple[str, Dict[str, Any]]:
    """The arguments of `Job.__call__`."""
    return (CALIBRATE, dict(gin_files=list(self.gin_files), gin_params=list(self.gin_params),
                            algorithm=self.algorithm, results_dir=self.results_dir))


def calibration_plan(runs: Sequence[Run]) -> Tuple[List[Calibration], Dict[str, dict], List[str]]:
  """(calibrations to make, algorithm -> usable record, problems) of a sweep.

  Empty unless the sweep is G-ForgetNet with lambda read from calibration
  records (lambda_gate None).  A problem is a record that is unreadable or was
  made with other settings: the sweep refuses to go on (nothing is
  overwritten).  Call after `expand_runs` (gin parsed).
  """
  if not runs or runs[0].multitask:
    return [], {}, []
  if not experiment.needs_calibration(experiment.configured()["penalty"]):
    return [], {}, []
  heuristic = lambda_heuristic.LambdaHeuristic()
  todo, have, problems = [], {}, []
  seen = set()
  for run in runs:
    if run.algorithm in seen:
      continue
    seen.add(run.algorithm)
    settings = experiment.record_settings(experiment.run_settings_from_gin(run.algorithm))
    scope = settings.get("history_scope")
    path = lambda_heuristic.record_path(run.results_dir, heuristic.reading, run.algorithm,
                                        scope)
    try:
      if lambda_heuristic.read_record(path) is None:
        todo.append(Calibration(run.algorithm, heuristic.reading, run.gin_files,
                                run.gin_params, run.results_dir, scope))
        continue
      lam, info = lambda_heuristic.load_lambda(run.results_dir, run.algorithm, heuristic, settings)
      have[run.algorithm] = dict(info, **{"lambda": lam})
    except lambda_heuristic.CalibrationError as e:
      problems.append(str(e))
  return todo, have, problems
