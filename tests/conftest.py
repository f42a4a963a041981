"""Shared fixtures: one CLRS val/test cache for the whole session; fake Slurm
commands and result files for the sweep tests."""

import contextlib
import json
import os
import pathlib
import re
import subprocess
import textwrap
from typing import Any, Dict, Optional, Tuple

import pytest

from nar_markov.training import threads

# The suite trains: the committed runs' XLA:CPU pool, pinned before anything imports jax
# (its subprocesses inherit it).
threads.pin_xla_threads()
# Imported before any test captures output: submitit's logger keeps the sys.stderr
# it finds at import, which inside a capsys test is a stream closed after it (the
# session then dies with "lost sys.stderr").
import submitit  # noqa: F401  pylint: disable=unused-import

from nar_markov import quiet
from nar_markov.config import components

import flat

# TensorFlow's start-up banners stay out of the test log (NAR_MARKOV_VERBOSE=1 keeps
# them); pytest's own -v is not ours.
quiet.setup([])


@pytest.fixture
def same_gumbel_noise(monkeypatch):
  """Our nets and dm-clrs's add the same Gumbel noise to permutation-pointer logits.

  In training dm-clrs draws it inside its scan at every step and keeps the
  last step's outputs; the fast net decodes outputs once after the scan and
  draws it there, from another key (same distribution, another sample).  With
  every noisy `decoders.log_sinkhorn` on one fixed key, both add the same
  [B, N, N] noise to the same logits and the noisy path is still compared.
  The patch acts on dm-clrs's module function, which both nets call.
  """
  import jax  # pylint: disable=g-import-not-at-top
  from clrs._src import decoders  # pylint: disable=g-import-not-at-top
  log_sinkhorn = decoders.log_sinkhorn

  def log_sinkhorn_same_noise(x, steps, temperature, zero_diagonal,
                              noise_rng_key):
    if noise_rng_key is not None:
      noise_rng_key = jax.random.PRNGKey(1234)
    return log_sinkhorn(x, steps, temperature, zero_diagonal, noise_rng_key)

  monkeypatch.setattr(decoders, "log_sinkhorn", log_sinkhorn_same_noise)


@pytest.fixture
def quick_compile(monkeypatch, same_gumbel_noise):  # pylint: disable=unused-argument,redefined-outer-name
  """For tests that compare the fast net with the reference net within a tolerance:
  dm-clrs's Sinkhorn operator, which both nets call, runs its steps as one
  `lax.fori_loop` (the same operations in the same order), after its own start
  (`same_gumbel_noise`'s key, temperature, diagonal: the operator with 0 steps).
  Unrolled (50 steps for an output), XLA's fusion copies the chain into ~40,000 ops
  and one evaluation step of a sort compiles for 35-45 s.  Both sides of a comparison
  get the same; the numbers may differ from an unpatched run's in the last bits, so no
  golden or bit-exact test against production may use it."""
  import jax  # pylint: disable=g-import-not-at-top
  from clrs._src import decoders  # pylint: disable=g-import-not-at-top
  log_sinkhorn = decoders.log_sinkhorn   # same_gumbel_noise's

  def log_sinkhorn_rolled(x, steps, temperature, zero_diagonal, noise_rng_key):
    def step(_, x):
      x = jax.nn.log_softmax(x, axis=-1)
      return jax.nn.log_softmax(x, axis=-2)
    x = log_sinkhorn(x, 0, temperature, zero_diagonal, noise_rng_key)
    return jax.lax.fori_loop(0, steps, step, x)

  monkeypatch.setattr(decoders, "log_sinkhorn", log_sinkhorn_rolled)


@pytest.fixture(autouse=True)
def _gin_cleared_after_each_test():
  """NetConfig, Protocol and the other configurables read gin's bindings whenever
  they are built: one test's parsed gin files must not leak into the next."""
  yield
  import gin  # pylint: disable=g-import-not-at-top
  gin.clear_config()


def _memory_maps() -> Optional[Tuple[int, int]]:
  """(memory maps this process holds, the most the kernel allows), or None off Linux."""
  try:
    with open("/proc/self/maps", encoding="ascii") as f:
      held = sum(1 for _ in f)
    limit = int(pathlib.Path("/proc/sys/vm/max_map_count").read_text())
  except (OSError, ValueError):
    return None
  return held, limit


@pytest.fixture(autouse=True)
def _jax_executables_freed_before_the_map_limit():
  """Every XLA executable this process compiles or loads from the persistent cache
  keeps its own memory maps until JAX's in-memory caches let it go, and tests that
  run a net op by op (test_fastnet: thousands of small executables per algorithm)
  add 2,000-4,000 maps each.  At vm.max_map_count (65,530 by default) XLA's next
  mmap fails and the process segfaults loading an executable; a CI worker did, in
  test_evaluate after test_fastnet's thirty algorithms.  Past half the limit the
  caches are cleared (back to about 1,500 maps); below it nothing is, since a
  clear costs recompilations (test_fastnet: +50 % if cleared after every test)."""
  yield
  maps = _memory_maps()
  if maps is not None and maps[0] > maps[1] // 2:
    import jax  # pylint: disable=g-import-not-at-top
    jax.clear_caches()


def default_test_cache() -> pathlib.Path:
  """The per-user folder where the tests keep their val/test splits and compiled steps
  between runs when $NAR_MARKOV_TEST_CACHE is not set: ~/.cache/nar_markov_test."""
  return pathlib.Path("~/.cache/nar_markov_test").expanduser()


def compile_cache_key() -> str:
  """The name of the XLA compilation cache's folder for this process: the jax version,
  the CPU kind (model name and the SIMD extensions XLA compiles for,
  `devices.describe_host_cpu`) and XLA:CPU's thread count.  JAX's own cache key names
  the backend only ("cpu"), and an executable compiled for another CPU kind or thread
  count rounds otherwise: the bit-exact golden runs (test_golden_runs) must never load
  one."""
  import jax  # pylint: disable=g-import-not-at-top
  from nar_markov.training import devices  # pylint: disable=g-import-not-at-top
  cpu = devices.describe_host_cpu()
  model = re.sub(r"[^A-Za-z0-9]+", "_", cpu["model"] or "unknown").strip("_")
  simd = ".".join(cpu["simd"]) if cpu["simd"] is not None else "simd_unknown"
  return f"jax-{jax.__version__}-{model}-{simd or 'no_simd'}-t{devices.xla_cpu_threads()}"


@pytest.fixture(scope="session")
def data_cache_dir(tmp_path_factory) -> pathlib.Path:
  """Val/test splits and compiled steps are kept in $NAR_MARKOV_TEST_CACHE, else in the
  per-user `default_test_cache()`, so that a second local run is warm (CI points the
  variable at its own persistent folder); "off" (or empty): a fresh temporary folder,
  every run cold."""
  path = os.environ.get("NAR_MARKOV_TEST_CACHE")
  if path in ("", "off"):
    return tmp_path_factory.mktemp("clrs_cache")
  p = pathlib.Path(path).expanduser() if path else default_test_cache()
  p.mkdir(parents=True, exist_ok=True)
  return p


@pytest.fixture(scope="session", autouse=True)
def _jax_compilation_cache(data_cache_dir):
  """Identical computations across tests compile once (persistent XLA cache, one
  folder per `compile_cache_key`), in this process and in the sweeps and jobs the
  tests start (they inherit the variable; $NAR_MARKOV_JAX_CACHE set beforehand wins)."""
  from nar_markov.nets import learner  # pylint: disable=g-import-not-at-top
  os.environ.setdefault("NAR_MARKOV_JAX_CACHE",
                        str(data_cache_dir / "jax" / compile_cache_key()))
  learner.setup_compilation_cache(os.environ["NAR_MARKOV_JAX_CACHE"])


# Learners (and the steps built on them) that `reused_learners` hands out, for the
# whole session of this process (one xdist worker): key -> (what the key's ids name,
# kept alive so that no id is reused, the object).
_REUSED: Dict[tuple, Tuple[tuple, Any]] = {}


def _traced_code() -> tuple:
  """The functions inside a learner's traced steps that tests replace (monkeypatch):
  part of the reuse key, so that a learner traced with one of them patched is never
  handed to a test without the patch, nor the other way round."""
  from clrs._src import decoders, encoders, nets  # pylint: disable=g-import-not-at-top
  from nar_markov.nets import model as model_lib  # pylint: disable=g-import-not-at-top
  return (model_lib.compute_losses, decoders.log_sinkhorn, encoders.preprocess,
          nets.Net._one_step_pred)  # pylint: disable=protected-access


def _reused(key: tuple, alive: tuple, build):
  if key not in _REUSED:
    _REUSED[key] = (alive, build())
  return _REUSED[key][1]


@contextlib.contextmanager
def reused_learners():
  """Inside, every `learner.Learner` built for the same (specs, shapes, NetConfig,
  optimizer, algorithms) is one object for the whole session of this process, and so
  are the optimizers of `learner.make_optimizer` with the same arguments and the
  vmapped and summed steps of `learner.make_*_train_step` built on one learner:
  their jitted steps are traced and compiled once, not once per run.

  The numbers are the same: a learner holds no state of a run (parameters, optimizer
  state and batches are arguments of its pure steps), and the same traced program
  gives the same executable.  A test that patches code a learner traces must not run
  inside, unless what it patches is in `_traced_code` (then the patched and the real
  learners are different keys)."""
  from nar_markov.nets import learner  # pylint: disable=g-import-not-at-top
  real_learner, real_optimizer = learner.Learner, learner.make_optimizer
  real_vmapped, real_summed = learner.make_vmapped_train_step, learner.make_summed_train_step

  def make_optimizer(*args, **kwargs):
    key = ("optimizer", args, tuple(sorted(kwargs.items())))
    return _reused(key, (), lambda: real_optimizer(*args, **kwargs))

  def new_learner(specs_, nb_dims, config, optimizer, algorithms=None):
    specs_, nb_dims = list(specs_), [dict(d) for d in nb_dims]
    traced = _traced_code()
    key = ("learner", repr(specs_), repr([sorted(d.items()) for d in nb_dims]), config,
           id(optimizer), None if algorithms is None else tuple(algorithms),
           tuple(id(f) for f in traced))
    return _reused(key, (optimizer,) + traced,
                   lambda: real_learner(specs_, nb_dims, config, optimizer, algorithms))

  def make_vmapped_train_step(net, algorithm_index=0, per_seed_lambda=False):
    key = ("vmapped", id(net), algorithm_index, per_seed_lambda)
    return _reused(key, (net,), lambda: real_vmapped(net, algorithm_index, per_seed_lambda))

  def make_summed_train_step(net, nb_algorithms):
    key = ("summed", id(net), nb_algorithms)
    return _reused(key, (net,), lambda: real_summed(net, nb_algorithms))

  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(learner, "Learner", new_learner)
    mp.setattr(learner, "make_optimizer", make_optimizer)
    mp.setattr(learner, "make_vmapped_train_step", make_vmapped_train_step)
    mp.setattr(learner, "make_summed_train_step", make_summed_train_step)
    yield


@pytest.fixture
def reuse_learners():
  """The test runs inside `reused_learners` (read its contract first)."""
  with reused_learners():
    yield


@contextlib.contextmanager
def read_only(folder: pathlib.Path):
  """`folder` made read-only; as root (which writes through permissions) also immutable
  (chattr +i: a read-only file system's EROFS is EPERM here; launch/ and analysis/ treat
  both alike)."""
  folder.chmod(0o555)
  as_root = os.geteuid() == 0
  try:
    if as_root and subprocess.run(["chattr", "+i", str(folder)], capture_output=True,
                                  check=False).returncode != 0:
      pytest.skip("root cannot make a read-only folder here (chattr +i failed)")
    yield folder
  finally:
    if as_root:
      subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
    folder.chmod(0o755)


def _write_exe(path: pathlib.Path, text: str) -> None:
  path.write_text("#!/bin/sh\n" + textwrap.dedent(text))
  path.chmod(0o755)


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
  """sbatch/squeue/sacct/srun stand-ins on PATH: sbatch keeps each script it is given
  and answers job 4242, 4243, ...; squeue prints the file `squeue.out`; sacct fails
  (no accounting) unless `sacct.out` holds its answer."""
  bin_dir = tmp_path / "fake_bin"
  bin_dir.mkdir()
  calls = tmp_path / "sbatch_calls"
  calls.mkdir()
  _write_exe(bin_dir / "sbatch", f"""\
      n=$(ls {calls} | wc -l)
      cp "$1" {calls}/script_$n.sh
      echo "Submitted batch job $((4242 + n))"
      """)
  # submitit's SlurmExecutor refuses to start without `srun` on PATH; the fake
  # sbatch only keeps the script, so nothing ever calls it.
  _write_exe(bin_dir / "srun", 'echo "fake srun: never called" >&2; exit 1\n')
  squeue_out = tmp_path / "squeue.out"
  squeue_out.write_text("")
  _write_exe(bin_dir / "squeue", f"cat {squeue_out}\n")
  # A cluster without accounting (as launch/local_slurm.sh's), unless a test writes
  # sacct's answer to `sacct.out`.
  sacct_out = tmp_path / "sacct.out"
  _write_exe(bin_dir / "sacct", f"""\
      [ -s {sacct_out} ] && exec cat {sacct_out}
      echo "Slurm accounting storage is disabled" >&2; exit 1
      """)
  monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
  return {"calls": calls, "squeue_out": squeue_out, "sacct_out": sacct_out}


# The settings of gin/smoke.gin runs and of gin/multitask.gin runs on
# ALGORITHMS=['bfs','dfs'] (what the sweep tests ask for), for `write_result`.
SMOKE_SETTINGS = dict(train_steps=20, batch_size=8, hidden_size=16, learning_rate=0.0015,
                      grad_clip_max_norm=1.0, schedule_steps=None, train_lengths=[4, 7],
                      processor="triplet_mpnn", nb_triplet_fts=4, gate_mlp_layers=2,
                      gate_bias_init=0.0, eval_every_steps=10, log_every_steps=5,
                      val_max_samples=8, test_max_samples=8)
MULTITASK_SETTINGS = dict(SMOKE_SETTINGS, train_steps=10000, batch_size=32, hidden_size=128,
                          nb_triplet_fts=8, train_lengths=[4, 7, 11, 13, 16],
                          eval_every_steps=50, log_every_steps=10, val_max_samples=None,
                          test_max_samples=None)


def write_run_files(folder) -> None:
  """What a finished run keeps beside its result.json, so that it counts as done
  (nar_markov.store.runs.run_file_problems): a config.gin and a (tiny) params.npz."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from nar_markov.store import params_io  # pylint: disable=g-import-not-at-top
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "config.gin").write_text("# the run's gin (a test stand-in)\n")
  params_io.save_params(folder / "params.npz", {"net/linear": {"w": np.zeros(2, np.float32)}},
                        {}, {"written_by": "tests"})


@pytest.fixture
def write_result():
  """Writes a minimal result.json (status done unless `fields` say otherwise),
  with the definition of a gin/smoke.gin run (multi-task models: gin/multitask.gin
  on bfs and dfs), and the run's other files (`write_run_files`), so that the sweep
  counts it as done."""

  def write(results, model, algorithm, seed, **fields):
    d = pathlib.Path(results) / model / algorithm / f"seed{seed}"
    d.mkdir(parents=True, exist_ok=True)
    base = model[:-len("_multitask")] if model.endswith("_multitask") else model
    result = {"schema": "nar_markov.result/1", "model": model, "algorithm": algorithm,
              "history": components.PAPER_LABELS.get(base, ("full",))[0],
              "seed": seed, "status": "done", "steps": 20, "train_steps": 20,
              "diverged_step": None, "test_score": 0.5, "lambda_gate": 0.0,
              "lambda_reading": None, "penalty_start_step": 0}
    if model.endswith("_multitask"):
      result["settings"] = dict(flat.settings(algorithm, **MULTITASK_SETTINGS),
                                multitask_algorithms=["bfs", "dfs"],
                                multitask_update="per_algorithm")
    else:
      result["settings"] = flat.settings(algorithm, **SMOKE_SETTINGS)
    result.update(fields)
    (d / "result.json").write_text(json.dumps(result))
    write_run_files(d)

  return write


# Under CI (CI=true, or NAR_FAIL_ON_SKIPS=1 from .ci/run) a skip not listed in
# tests/skips_allowed.txt fails the run (tests/skip_allowlist.py); the test files run longest
# first (tests/file_order.py).
pytest_plugins = ["skip_allowlist", "file_order"]
