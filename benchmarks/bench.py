"""Our baseline model vs dm-clrs's own `BaselineModel`, at identical settings.

    python benchmarks/bench.py [--algorithms bfs,insertion_sort,dfs,floyd_warshall,naive_string_matcher | all]
        [--steps 30] [--hidden 128] [--batch 32] [--lengths 4,7,11,13,16]
        [--compile-steps 200] [--compile-hidden H] [--ood/--no-ood] [--ood-samples K]
        [--eval] [--eval-time-steps K] [--seed 0] [--out bench.json]
    python benchmarks/bench.py --table REPORT.json   # the table of a report, measured before

For each algorithm, three measurements of the paper's baseline (our
`learner.Learner` with `NetConfig(history='full')` -- the default impl, i.e. the
fast path of nar_markov.nets.fastnet -- and `learner.make_optimizer`) and of
`clrs.models.BaselineModel` built as `clrs/examples/run.py` builds it
(triplet_gmpnn -- or `--processor triplet_mpnn` on both sides -- with layer norm and
8 triplet features, hints encoded and
decoded, no teacher forcing, soft hint re-prediction, xavier_on_scalars, no
LSTM, no dropout, one message-passing step, lr 1.5e-3, clipping at 1.0):

1. Steady-state training steps/s, measured in this process, alternating.
   Both consume the *same* train batches: one `ClrsTrainStream` draw (the
   graphs of `train_stream.TrainStream` for the same seed, with hints padded as dm-clrs
   pads them: to the sampler's running max_steps), which our model receives
   time-bucketed by `ours_batch` (exactly what `train_stream.TrainStream` yields; the
   test checks it). After a warm-up block per model (one batch per train
   length), blocks of one batch per length go to ours then clrs (the order
   flips every block) until each has `--steps` timed steps. A step is timed to
   `jax.block_until_ready` of its outputs (ours) and `float(loss)` (clrs, as
   run.py logs it); a step during which XLA compiled (a time bucket or a clrs
   max_steps grew) is left out and counted. `steps_per_s` = 1 / median step
   time; `ratio` = ours / clrs steps_per_s (> 1: ours is faster);
   `ratio_mean` the same from mean step times (what a run over all sizes
   sees); per size: `step_s_median_by_nb_nodes`, `hint_time_by_nb_nodes`.
2. XLA compilations in a `--compile-steps` training run of each, in a fresh
   subprocess with JAX's persistent compilation cache off, counted with a
   `jax.monitoring` duration listener on '/jax/core/compile/backend_compile_duration'
   (one event per backend compilation in jax 0.10.2, `pxla._cached_compilation`;
   a persistent-cache hit would fire it too, hence the cache is off and its hit
   events are counted as a check). Eager ops (optimizer init, rng keys)
   compile too and are included; `by_function` splits the count, and
   `train_step_compilations` counts the jitted train step alone; `compile_cpu_s`
   is the CPU seconds of the compilations (common.CacheLog: on a loaded machine
   wall seconds stretch, CPU seconds much less).  The table's "first steps"
   column, ours / dm-clrs, is each one's warm-up in 1. (its first step at every
   train size: their compilations, the cache off, and the steps), which every
   report holds, also those measured with `--compile-steps 0`. At
   `--compile-hidden` (default `--hidden`): the number of compilations depends
   on shapes over time, not on the width; compile seconds do.
3. One OOD test pass (the whole official test split, 64 nodes, 32 x the
   algorithm's num_samples_multiplier samples; `--ood-samples K`: the first K) in a
   fresh subprocess each: wall time of the pass (its compilations included,
   also reported apart), peak resident memory (the worker's own VmHWM; its
   ru_maxrss is recorded too but includes the parent's RSS at spawn) and
   the score. Ours: `learner.evaluate_split` at `learner.default_test_batch_size`;
   clrs: run.py's `collect_and_eval` over batches of 32. Both untrained, with
   the same (dm-clrs's) initial parameters, so the scores must agree.

4. With `--eval`, validation and the final test pass of a 10,000-step run
   of each (run.py's cadence and batches against train.py's), from one timed
   batch of each kind (`measure_eval`), and their share of the run beside
   training at the steady state's mean step time (`run_shares`).

Ratios other than steps/s are ours / clrs of the quantity (< 1: ours uses
less). Writes JSON (schema `nar_markov.bench/1`) after every algorithm and
prints a markdown table to stdout; progress goes to stderr.  A report already
at `--out` with the same settings is resumed: its algorithms are skipped, so
`--algorithms all` can be stopped and started again.

Known differences kept on purpose: ours decays the learning rate (cosine over
the protocol's 10,000 steps) where run.py's is constant; the cost is the same.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import functools
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Optional, Sequence, Tuple

if __package__ in (None, ""):  # run by path: make `benchmarks` importable from the repo root
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

if __name__ == "__main__":  # before clrs imports tensorflow: no start-up banners
  from nar_markov import quiet  # pylint: disable=g-import-not-at-top
  quiet.setup()

import clrs
import jax
import numpy as np

from benchmarks import common
from nar_markov import quiet
from nar_markov.config import clrs30
from nar_markov.config import netconfig
from nar_markov.data import batching
from nar_markov.data import preprocessing
from nar_markov.data import splits
from nar_markov.data import train_stream
from nar_markov.data import validation_pool
from nar_markov.nets import learner
from nar_markov.nets import model as model_lib
from nar_markov.store import util
from nar_markov.training import devices

SCHEMA = "nar_markov.bench/1"
DEFAULT_ALGORITHMS = ("bfs", "insertion_sort", "dfs", "floyd_warshall",
                      "naive_string_matcher")

# run.py's settings (flags of clrs/examples/run.py, lr and clipping as ours).
LEARNING_RATE = 1.5e-3
GRAD_CLIP_MAX_NORM = 1.0
NB_TRIPLET_FTS = 8
# The processor of both sides (`--processor`): run.py's triplet_gmpnn, or the paper's Eq. 2
# net without the update gate, triplet_mpnn (both have our fast path).
PROCESSOR = "triplet_gmpnn"
PROTOCOL_TRAIN_STEPS = 10_000  # horizon of our cosine decay
PROTOCOL_EVAL_EVERY_STEPS = 50 # run.py's eval_every (ours: Protocol.eval_every_steps)
CLRS_TEST_BATCH_SIZE = 32      # run.py's test_batch_size
CLRS_VAL_BATCH_SIZE = 32       # run.py's val batch_size (ours: Protocol.val_batch_size)
# Settings that must match for a report on disk to be resumed.
_RESUME_KEYS = ("steps", "hidden", "batch", "lengths", "seed", "compile_steps",
                "compile_hidden", "ood", "ood_samples", "eval", "eval_reps",
                "eval_time_steps", "clrs_eval_max_gib", "ours_compiler_options")
# The jitted train step of each implementation, as the compile event names it.
TRAIN_STEP_FUNCTION = {"ours": "jit(_train_step)", "clrs": "jit(_feedback)"}


_log = functools.partial(common.log, "bench")


# -- compile accounting ----------------------------------------------------------


def disable_persistent_cache() -> Dict[str, Any]:
  """A cache hit would hide a compilation's cost; train.py turns the cache on."""
  jax.config.update("jax_enable_compilation_cache", False)
  return {"jax_enable_compilation_cache": bool(jax.config.jax_enable_compilation_cache),
          "jax_compilation_cache_dir": jax.config.jax_compilation_cache_dir}


# -- data: one draw, two paddings -------------------------------------------------


class ClrsTrainStream(train_stream.TrainStream):
  """`train_stream.TrainStream`'s graphs with hints as dm-clrs pads them.

  run.py feeds `BaselineModel` `sampler.next(batch_size)`, whose hints clrs
  pads to the sampler's running max_steps (it only grows, so shapes change
  now and then); this is TrainStream.__next__ without our `pad_time`. Same
  seed, same samplers, same random `pos`.
  """

  def __next__(self) -> clrs.Feedback:
    # Mirrors train_stream.TrainStream.__next__; tests/test_bench.py checks that
    # `ours_batch` of this equals TrainStream's batch, so a drift fails there.
    feedback = self._samplers[self._next].next(self.batch_size)  # pylint: disable=protected-access
    feedback = preprocessing.preprocess_feedback(
        self.algorithm, feedback, self._rng)  # pylint: disable=protected-access
    self._next = (self._next + 1) % len(self.lengths)
    self.batches_drawn += 1
    return feedback


def hint_time(feedback: clrs.Feedback) -> int:
  return int(feedback.features.hints[0].data.shape[0])


def ours_batch(algorithm: str, feedback: clrs.Feedback) -> clrs.Feedback:
  """What `train_stream.TrainStream` yields for this clrs-padded batch."""
  return batching.pad_time(feedback, batching.time_bucket(
      algorithm, batching.nb_nodes_of(feedback), hint_time(feedback)))


# -- the two implementations --------------------------------------------------------


def ours_model(algorithm: str, nb_dims, hidden: int) -> learner.Learner:
  """Our baseline's model, as run_experiment builds it."""
  config = netconfig.NetConfig(hidden_size=int(hidden), history="full",
                               processor=PROCESSOR, use_ln=True,
                               nb_triplet_fts=NB_TRIPLET_FTS,
                               nb_msg_passing_steps=1,
                               encoder_init="xavier_on_scalars")
  optimizer = learner.make_optimizer(LEARNING_RATE, PROTOCOL_TRAIN_STEPS,
                                   GRAD_CLIP_MAX_NORM)
  return learner.Learner([preprocessing.get_spec(algorithm)], [nb_dims], config, optimizer,
                         algorithms=[algorithm])


def build_ours(algorithm: str, nb_dims, hidden: int, rng_seed: int, init_feedback):
  """(model, params, opt_state) of our baseline, as run_experiment builds it."""
  net = ours_model(algorithm, nb_dims, hidden)
  params, opt_state = net.init_state(rng_seed, [init_feedback.features])
  return net, params, opt_state


def build_clrs(spec, dummy_feedback, hidden: int, init_seed: int):
  """clrs.models.BaselineModel as clrs/examples/run.py main() builds it."""
  if jax.local_device_count() > 1:
    # BaselineModel pmaps over all local devices and then needs the batch
    # split across them; run.py's single-device path is the one compared.
    raise RuntimeError("dm-clrs BaselineModel needs exactly one local JAX "
                       f"device, found {jax.local_device_count()}")
  processor_factory = clrs.get_processor_factory(
      PROCESSOR, use_ln=True, nb_triplet_fts=NB_TRIPLET_FTS, nb_heads=1)
  model = clrs.models.BaselineModel(
      spec=[spec], dummy_trajectory=[dummy_feedback],
      processor_factory=processor_factory, hidden_dim=int(hidden),
      encode_hints=True, decode_hints=True, encoder_init="xavier_on_scalars",
      use_lstm=False, learning_rate=LEARNING_RATE,
      grad_clip_max_norm=GRAD_CLIP_MAX_NORM,
      checkpoint_path=tempfile.gettempdir(), freeze_processor=False,
      dropout_prob=0.0, hint_teacher_forcing=0.0, hint_repred_mode="soft",
      nb_msg_passing_steps=1)
  model.init([dummy_feedback.features], init_seed)
  return model


class OursTrainer:
  """One train step at a time, as run_experiment's loop runs it."""

  def __init__(self, algorithm, hidden, seed, first_feedback):
    self.algorithm = algorithm
    self.net, self.params, self.opt_state = build_ours(
        algorithm, model_lib.nb_dims_of(first_feedback), hidden, seed,
        ours_batch(algorithm, first_feedback))
    self._lambda = np.float32(0.0)
    self._seed = seed
    self.step = 0

  def prepare(self, clrs_feedback):
    """Everything before the step proper (not timed): padding, the rng key."""
    key = self.net.step_key(self._seed, self.step)
    return ours_batch(self.algorithm, clrs_feedback), key

  def run(self, prepared) -> float:
    feedback, key = prepared
    self.params, self.opt_state, losses = self.net.train_step(
        self.params, self.opt_state, feedback, self._lambda, 0, key)
    jax.block_until_ready((self.params, self.opt_state, losses))
    self.step += 1
    return losses.total


class ClrsTrainer:
  """One `BaselineModel.feedback` at a time, as run.py's loop runs it."""

  def __init__(self, spec, hidden, seed, first_feedback):
    # run.py: rng_key from its RandomState(seed); init with seed + 1.
    self.model = build_clrs(spec, first_feedback, hidden, seed + 1)
    self._rng_key = jax.random.PRNGKey(np.random.RandomState(seed).randint(2**32))
    self.step = 0

  def prepare(self, clrs_feedback):
    key, self._rng_key = jax.random.split(self._rng_key)
    return clrs_feedback, key

  def run(self, prepared) -> float:
    feedback, key = prepared
    loss = float(self.model.feedback(key, feedback, 0))
    self.step += 1
    return loss


# -- 1. steady-state steps/s -------------------------------------------------------


def _summary(times: Sequence[float], nb_nodes: Sequence[int],
             hint_times: Sequence[int], excluded: int, warmup_s: float,
             losses: Sequence[float]) -> Dict[str, Any]:
  median = statistics.median(times)
  per_size = collections.defaultdict(list)
  hint_time_per_size = collections.defaultdict(set)
  for t, n, T in zip(times, nb_nodes, hint_times):
    per_size[n].append(t)
    hint_time_per_size[n].add(T)
  return {
      "timed_steps": len(times),
      "step_s_median": median,
      "step_s_mean": statistics.fmean(times),
      "steps_per_s": 1.0 / median,
      "steps_per_s_mean": len(times) / sum(times),
      "step_s_median_by_nb_nodes": {str(n): statistics.median(v)
                                    for n, v in sorted(per_size.items())},
      # The time axis each size was run at: ours is bucketed, clrs's grows.
      "hint_time_by_nb_nodes": {str(n): sorted(v)
                                for n, v in sorted(hint_time_per_size.items())},
      "excluded_compiling_steps": int(excluded),
      "warmup_s": warmup_s,
      "last_loss": float(losses[-1]) if losses else None,
  }


def measure_steady_state(algorithm: str, *, steps: int = 30, hidden: int = 128,
                         batch: int = 32,
                         lengths: Sequence[int] = clrs30.TRAIN_LENGTHS,
                         seed: int = 0, counter: Optional[common.CompileCounter] = None
                         ) -> Dict[str, Any]:
  """Median train step time of ours and clrs's, alternating blocks."""
  own_counter = counter is None
  counter = counter or common.CompileCounter()
  try:
    stream = ClrsTrainStream(algorithm, seed=seed, batch_size=batch,
                             lengths=tuple(lengths))
    first = next(stream)
    trainers = {"ours": OursTrainer(algorithm, hidden, seed, first),
                "clrs": ClrsTrainer(stream.spec, hidden, seed, first)}
    times = {k: [] for k in trainers}
    sizes = {k: [] for k in trainers}
    hint_times = {k: [] for k in trainers}
    losses = {k: [] for k in trainers}
    excluded = {k: 0 for k in trainers}
    warmup_s = {}

    def run_block(name, block, record):
      trainer = trainers[name]
      for feedback in block:
        prepared = trainer.prepare(feedback)
        compiles_before = counter.count
        t0 = time.perf_counter()
        loss = trainer.run(prepared)
        dt = time.perf_counter() - t0
        if not record:
          continue
        if counter.count != compiles_before:
          excluded[name] += 1
          continue
        times[name].append(dt)
        sizes[name].append(batching.nb_nodes_of(feedback))
        hint_times[name].append(hint_time(prepared[0]))
        losses[name].append(float(loss))

    # Warm-up: every train length once per model (the first draw included).
    block = [first] + [next(stream) for _ in range(len(stream.lengths) - 1)]
    warmup_compiles = {}
    for name in trainers:
      before = {k: v[0] for k, v in counter.by_function.items()}
      t0 = time.perf_counter()
      run_block(name, block, record=False)
      warmup_s[name] = time.perf_counter() - t0
      warmup_compiles[name] = (
          counter.by_function[TRAIN_STEP_FUNCTION[name]][0]
          - before.get(TRAIN_STEP_FUNCTION[name], 0))
      _log(f"{algorithm}: {name} warm-up {warmup_s[name]:.1f}s ({len(block)} "
           f"steps, {warmup_compiles[name]} train-step compilations)")

    # Shapes only grow, so compiling steps stop; the cap guards a stream
    # whose max_steps keeps growing.
    max_blocks = 10 * (-(-steps // len(stream.lengths))) + 10
    order = ["ours", "clrs"]
    for b in range(max_blocks):
      if min(len(t) for t in times.values()) >= steps:
        break
      block = [next(stream) for _ in stream.lengths]
      for name in (order if b % 2 == 0 else order[::-1]):
        run_block(name, block, record=True)
    result = {name: _summary(times[name], sizes[name], hint_times[name],
                             excluded[name], warmup_s[name], losses[name])
              for name in trainers}
    for name in trainers:
      result[name]["warmup_train_step_compilations"] = int(warmup_compiles[name])
    result["ratio"] = result["ours"]["steps_per_s"] / result["clrs"]["steps_per_s"]
    # The mean over whole blocks is what a run over all train sizes sees;
    # the median (the headline) is robust to a preempted step.
    result["ratio_mean"] = (result["ours"]["steps_per_s_mean"]
                            / result["clrs"]["steps_per_s_mean"])
    _log(f"{algorithm}: steady state ours {result['ours']['steps_per_s']:.2f} "
         f"steps/s, clrs {result['clrs']['steps_per_s']:.2f} steps/s, "
         f"ratio {result['ratio']:.3f}")
    return result
  finally:
    if own_counter:
      counter.close()


# -- 2. compilations in a training run (worker) --------------------------------------


def compile_run(impl: str, algorithm: str, *, steps: int, hidden: int,
                batch: int, lengths: Sequence[int], seed: int) -> Dict[str, Any]:
  """A `steps`-step training run of `impl` in this (fresh) process."""
  cache = disable_persistent_cache()
  counter = common.CompileCounter()
  cache_log = common.CacheLog()   # with the cache off: each compilation's CPU seconds
  t0 = time.perf_counter()
  # Each gets what its own training loop is fed (train.py / run.py).
  stream_cls = train_stream.TrainStream if impl == "ours" else ClrsTrainStream
  stream = stream_cls(algorithm, seed=seed, batch_size=batch,
                      lengths=tuple(lengths))
  first = next(stream)
  if impl == "ours":
    # OursTrainer pads again; padding a padded batch to its bucket is a no-op.
    trainer = OursTrainer(algorithm, hidden, seed, first)
  else:
    trainer = ClrsTrainer(stream.spec, hidden, seed, first)
  shapes = set()
  feedback = first
  for step in range(steps):
    if step:
      feedback = next(stream)
    prepared = trainer.prepare(feedback)
    shapes.add((batching.nb_nodes_of(prepared[0]), hint_time(prepared[0])))
    trainer.run(prepared)
  wall_s = time.perf_counter() - t0
  cache_log.close()
  counter.close()
  step_fn = counter.by_function.get(TRAIN_STEP_FUNCTION[impl], [0, 0.0])
  return {
      "compilations": counter.count,
      "compile_s": counter.seconds,
      "compile_cpu_s": sum(r.get("cpu_s") or 0.0 for r in cache_log.records),
      "train_step_compilations": int(step_fn[0]),
      "train_step_compile_s": float(step_fn[1]),
      "trace_s": counter.trace_s,
      "lower_s": counter.lower_s,
      "train_shapes": len(shapes),
      "by_function": {k: {"count": int(v[0]), "seconds": float(v[1])}
                      for k, v in sorted(counter.by_function.items())},
      "persistent_cache": cache,
      "persistent_cache_hits": counter.cache_hits,
      "steps": int(steps),
      "wall_s": wall_s,
  }


# -- 3. one OOD test pass (worker) ---------------------------------------------------


def _ru_maxrss_mb() -> float:
  # Linux reports ru_maxrss in KiB.
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _peak_rss_mb() -> float:
  """This process's peak resident memory (MiB): VmHWM where Linux has it.

  ru_maxrss survives execve and a spawned child starts from the spawning
  process's RSS (the bench parent holds GBs of compiled models), so it
  over-reports a worker; VmHWM belongs to the worker's own address space.
  """
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) / 1024.0  # kB
  except OSError:
    pass
  return _ru_maxrss_mb()


def ood_pass(impl: str, algorithm: str, *, hidden: int,
             samples: Optional[int], seed: int) -> Dict[str, Any]:
  """One untrained pass over the test split (first `samples`), in this process."""
  cache = disable_persistent_cache()
  counter = common.CompileCounter()
  cache_log = common.CacheLog()   # with the cache off: each compilation's CPU seconds
  t0 = time.perf_counter()
  test = splits.load_split(algorithm, "test")
  if samples:
    test = batching.take_samples(test, samples)
  samples = batching.nb_samples_of(test)
  spec = preprocessing.get_spec(algorithm)
  load_s = time.perf_counter() - t0
  # Parameters do not depend on nb_nodes or the batch: initialise on one
  # sample, so init's memory does not count as the pass's.
  init_feedback = batching.take_samples(test, 1)
  nb_nodes = batching.nb_nodes_of(test)
  if impl == "ours":
    batch_size = learner.default_test_batch_size(spec, nb_nodes, hidden)
    net = ours_model(algorithm, model_lib.nb_dims_of(test), hidden)
    # dm-clrs's own initial parameters (the clrs worker's, same seed): the
    # two passes compute the same function, so the scores must agree.
    params = build_clrs(spec, init_feedback, hidden, seed + 1).params
    run = lambda: learner.evaluate_split(net, params, test, 0, batch_size,
                                       with_hints=False)
  else:
    from clrs.examples import run as clrs_run  # pylint: disable=g-import-not-at-top
    batch_size = CLRS_TEST_BATCH_SIZE
    if samples % batch_size:
      raise ValueError(f"{samples} test samples: run.py scores whole batches "
                       f"of {batch_size}; --ood-samples must be a multiple")
    model = build_clrs(spec, init_feedback, hidden, seed + 1)
    def run():
      batches = (b for b, _ in batching.eval_batches(test, batch_size))
      return clrs_run.collect_and_eval(
          batches, model.predict, samples, jax.random.PRNGKey(seed), extras=None)
  rss_before_mb = _peak_rss_mb()
  compiles_before, compile_s_before = counter.count, counter.seconds
  t0 = time.perf_counter()
  res = run()
  wall_s = time.perf_counter() - t0
  counter.close()
  return {
      "wall_s": wall_s,
      "compilations": counter.count - compiles_before,
      "compile_s": counter.seconds - compile_s_before,
      "peak_rss_mb": _peak_rss_mb(),
      "peak_rss_before_pass_mb": rss_before_mb,
      "ru_maxrss_mb": _ru_maxrss_mb(),
      "score": float(res["score"]),
      "samples": int(samples),
      "nb_nodes": int(nb_nodes),
      "batch_size": int(batch_size),
      "load_s": load_s,
      "persistent_cache": cache,
  }


# -- 4. validation and test: their share of a run --------------------------------------


def _truncate_time(feedback: clrs.Feedback, steps: Optional[int]) -> clrs.Feedback:
  """The first `steps` hint steps of a batch, trajectories cut there (None: all)."""
  if steps is None or steps >= hint_time(feedback):
    return feedback
  hints = tuple(clrs.DataPoint(h.name, h.location, h.type_, h.data[:steps])
                for h in feedback.features.hints)
  lengths = np.minimum(feedback.features.lengths, steps)
  return feedback._replace(features=feedback.features._replace(
      hints=hints, lengths=lengths))


def _time_alternating(fns: Dict[Any, Any], reps: int) -> Dict[Any, Dict[str, float]]:
  """Each call's first run (it compiles), then `reps` rounds timing every call
  once, the order reversed each round; the median of each call's rounds.

  Not one call's reps back to back: glibc's malloc adapts its mmap and trim
  thresholds to the sizes a process frees, so the first call timed after
  start-up paid page faults on every run (kadane's validation batch: 150 ms
  for the first call timed, 78 ms once the other had run, either way round).
  Alternating gives both the same allocator state, as the train loop does.
  """
  first = {}
  for name, fn in fns.items():
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    first[name] = time.perf_counter() - t0
  times = {name: [] for name in fns}
  order = list(fns)
  for r in range(reps):
    for name in (order if r % 2 == 0 else order[::-1]):
      t0 = time.perf_counter()
      jax.block_until_ready(fns[name]())
      times[name].append(time.perf_counter() - t0)
  return {name: {"first_s": first[name], "s": statistics.median(times[name])}
          for name in fns}


def _steps_run(feedback: clrs.Feedback, impl: str) -> int:
  """Processor steps one batch costs: ours stops at its longest trajectory
  (steps after it are skipped), dm-clrs runs the whole padded time axis."""
  if impl == "ours":
    return max(1, int(np.max(feedback.features.lengths)) - 1)
  return max(1, hint_time(feedback) - 1)


def _ours_batches(n_total: int, batch_size: int) -> Tuple[int, int]:
  """(number, size) of the sub-batches `learner.evaluate_split` runs."""
  nb_batches = -(-n_total // max(1, min(batch_size, n_total)))
  return nb_batches, -(-n_total // nb_batches)


def _edge_pointer_bytes(spec, nb_nodes: int, hidden: int) -> int:
  """Per sample, dm-clrs's edge-pointer decoders' [n, n, n, H] float32 maximum."""
  if any(loc == clrs.Location.EDGE and t == clrs.Type.POINTER
         for _, loc, t in spec.values()):
    return nb_nodes**3 * hidden * 4
  return 0


def measure_eval(algorithm: str, *, hidden: int, seed: int, reps: int = 2,
                 time_steps: Optional[int] = None,
                 clrs_max_gib: float = 1.0) -> Dict[str, Any]:
  """One validation batch and one test batch of each, scaled to a run.

  Validation (both): every PROTOCOL_EVAL_EVERY_STEPS steps, run.py's pool at
  the largest train size (2 x 32 x num_samples_multiplier samples) in batches
  of 32; ours with hint losses (`Learner.eval_batch(with_hints=True)`, what
  train.py runs), dm-clrs with `BaselineModel.predict` (what run.py runs).
  Ours also pays for drawing the samples of each evaluation (`draw_s`).
  Test (both, once): the official test split, ours in
  `learner.default_test_batch_size` sub-batches, dm-clrs in batches of 32.
  The four calls (ours and dm-clrs, validation and test) are timed in
  alternating rounds after each has run once (`_time_alternating`).
  A batch is timed on the split's first samples and its time is multiplied by
  the number of batches: an estimate, since batches differ in their longest
  trajectory, which is all that ours' cost depends on.  `time_steps` cuts
  every batch to its first steps and scales the time by the processor steps
  of the whole batch (`_steps_run`): a step costs the same all along, so this
  bounds the time of long test trajectories at little loss.  A dm-clrs test batch
  whose edge-pointer decoders would build more than `clrs_max_gib` GiB is
  timed with fewer samples and scaled to 32 (`scaled_from_batch`).
  """
  spec = preprocessing.get_spec(algorithm)
  t0 = time.perf_counter()
  pool = validation_pool.ValidationPool(algorithm, seed=seed)
  pool_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  val = pool.draw(PROTOCOL_EVAL_EVERY_STEPS)
  draw_s = time.perf_counter() - t0
  test = splits.load_split(algorithm, "test")
  n_val, n_test = batching.nb_samples_of(val), batching.nb_samples_of(test)
  test_nodes = batching.nb_nodes_of(test)
  evals_per_run = PROTOCOL_TRAIN_STEPS // PROTOCOL_EVAL_EVERY_STEPS

  net = ours_model(algorithm, model_lib.nb_dims_of(test), hidden)
  params = net.init(jax.random.PRNGKey(seed), [batching.take_samples(val, 1).features])
  clrs_model = build_clrs(spec, batching.take_samples(val, 1), hidden, seed + 1)
  key = jax.random.PRNGKey(seed)

  ours_test_batches, ours_test_size = _ours_batches(
      n_test, learner.default_test_batch_size(spec, test_nodes, hidden))
  clrs_test_size = CLRS_TEST_BATCH_SIZE
  per_sample = _edge_pointer_bytes(spec, test_nodes, hidden)
  if per_sample and per_sample * clrs_test_size > clrs_max_gib * 2**30:
    clrs_test_size = max(1, int(clrs_max_gib * 2**30 // per_sample))
  plan = {
      "ours": {"val": (CLRS_VAL_BATCH_SIZE, -(-n_val // CLRS_VAL_BATCH_SIZE)),
               "test": (ours_test_size, ours_test_batches)},
      "clrs": {"val": (CLRS_VAL_BATCH_SIZE, -(-n_val // CLRS_VAL_BATCH_SIZE)),
               "test": (clrs_test_size, -(-n_test // CLRS_TEST_BATCH_SIZE))},
  }
  res = {"evals_per_run": evals_per_run, "val_samples": n_val,
         "test_samples": n_test, "test_nb_nodes": test_nodes,
         "val_nb_nodes": batching.nb_nodes_of(val), "pool_build_s": pool_s,
         "time_steps": time_steps}
  fns, batches = {}, {}   # ours val, clrs val, ours test, clrs test: each pair side by side
  for split, feedback in (("val", val), ("test", test)):
    for impl in ("ours", "clrs"):
      size, _ = plan[impl][split]
      full, _ = next(batching.eval_batches(feedback, size))
      batch = _truncate_time(full, time_steps)
      batches[impl, split] = (full, batch)
      if impl == "ours":
        with_hints = split == "val"
        fns[impl, split] = lambda b=batch, h=with_hints: net.eval_batch(params, b, 0, h)
      else:
        fns[impl, split] = lambda b=batch: clrs_model.predict(key, b.features)
  timings = _time_alternating(fns, reps)
  for impl in ("ours", "clrs"):
    out = {}
    for split in ("val", "test"):
      size, nb_batches = plan[impl][split]
      full, batch = batches[impl, split]
      timing = timings[impl, split]
      batch_s = timing["s"] * _steps_run(full, impl) / _steps_run(batch, impl)
      scale = 1.0
      if impl == "clrs" and split == "test" and size != CLRS_TEST_BATCH_SIZE:
        scale = CLRS_TEST_BATCH_SIZE / size
        out["test_scaled_from_batch"] = size
      out[f"{split}_batch_s"] = batch_s * scale
      out[f"{split}_batch_size"] = CLRS_TEST_BATCH_SIZE if scale != 1.0 else size
      out[f"{split}_batches"] = nb_batches
      out[f"{split}_first_call_s"] = timing["first_s"]
      out[f"{split}_steps_run"] = _steps_run(full, impl)
    out["val_draw_s"] = draw_s if impl == "ours" else None
    per_eval = out["val_batch_s"] * out["val_batches"] + (out["val_draw_s"] or 0.0)
    out["val_s_per_run"] = per_eval * evals_per_run
    out["test_s_per_run"] = out["test_batch_s"] * out["test_batches"]
    res[impl] = out
    _log(f"{algorithm}: {impl} validation {out['val_s_per_run']:.0f} s and test "
         f"{out['test_s_per_run']:.0f} s per run")
  return res


def run_shares(steady: Dict[str, Any], evaluation: Dict[str, Any]
               ) -> Dict[str, Any]:
  """Training, validation and test seconds of a PROTOCOL_TRAIN_STEPS run of each
  (training at the steady state's mean step time), and their shares."""
  out = {}
  for impl in ("ours", "clrs"):
    train_s = PROTOCOL_TRAIN_STEPS / steady[impl]["steps_per_s_mean"]
    val_s = evaluation[impl]["val_s_per_run"]
    test_s = evaluation[impl]["test_s_per_run"]
    total = train_s + val_s + test_s
    out[impl] = {"train_s": train_s, "val_s": val_s, "test_s": test_s,
                 "run_s": total, "val_share": val_s / total,
                 "test_share": test_s / total}
  out["ratio_run"] = out["clrs"]["run_s"] / out["ours"]["run_s"]
  return out


# -- subprocess plumbing -------------------------------------------------------------


def _worker_env() -> Dict[str, str]:
  env = dict(os.environ)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  env["NAR_MARKOV_JAX_CACHE"] = "off"
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # clrs imports TensorFlow
  return env


class _Worker:
  """`compile_run` / `ood_pass` in a fresh interpreter (clean counts, own RSS)."""

  def __init__(self, kind: str, impl: str, algorithm: str, **kwargs):
    self.name = f"{kind}/{impl}/{algorithm}"
    self._tmp = tempfile.TemporaryDirectory(prefix="nar_markov_bench_")
    self._out = pathlib.Path(self._tmp.name) / "result.json"
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", kind,
           "--impl", impl, "--algorithms", algorithm, "--processor", PROCESSOR,
           "--worker-out", str(self._out)]
    for key, value in kwargs.items():
      if value is None:  # the worker's default
        continue
      if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
      cmd += [f"--{key.replace('_', '-')}", str(value)]
    _log(f"{algorithm}: {impl} {kind} worker (fresh process)")
    self._t0 = time.perf_counter()
    # Its stderr is ours: a failure's traceback shows above our error.
    self._proc = subprocess.Popen(cmd, env=_worker_env(),
                                  stdout=subprocess.DEVNULL)

  def result(self) -> Dict[str, Any]:
    try:
      returncode = self._proc.wait()
      if returncode != 0 or not self._out.exists():
        raise RuntimeError(f"bench worker {self.name} failed (exit "
                           f"{returncode}); see its stderr above")
      result = json.loads(self._out.read_text())
      result["process_s"] = time.perf_counter() - self._t0
      return result
    finally:
      self._tmp.cleanup()

  def kill(self) -> None:
    if self._proc.poll() is None:
      self._proc.kill()
      self._proc.wait()
    self._tmp.cleanup()


def run_worker(kind: str, impl: str, algorithm: str, **kwargs) -> Dict[str, Any]:
  return _Worker(kind, impl, algorithm, **kwargs).result()


def measure_compiles(algorithm: str, *, steps: int, hidden: int, batch: int,
                     lengths: Sequence[int], seed: int,
                     parallel: bool = False) -> Dict[str, Any]:
  """Both compile-counting runs; `parallel` runs them at once (counts are
  unaffected, compile seconds are inflated by the shared CPU)."""
  kwargs = dict(compile_steps=steps, hidden=hidden, batch=batch,
                lengths=list(lengths), seed=seed)
  res = {}
  if parallel:
    workers = {impl: _Worker("compile", impl, algorithm, **kwargs)
               for impl in ("ours", "clrs")}
    try:
      res = {impl: w.result() for impl, w in workers.items()}
    finally:
      for w in workers.values():
        w.kill()  # only the other one, if one of them failed
  for impl in ("ours", "clrs"):
    if impl not in res:
      res[impl] = run_worker("compile", impl, algorithm, **kwargs)
    _log(f"{algorithm}: {impl} {steps}-step run: {res[impl]['compilations']} "
         f"compilations, {res[impl]['compile_s']:.1f}s compiling "
         f"({res[impl]['train_step_compilations']} of the train step)")
  res["hidden"] = int(hidden)
  res["steps"] = int(steps)
  res["parallel"] = bool(parallel)
  res["ratio_compilations"] = _ratio(res["ours"]["compilations"],
                                     res["clrs"]["compilations"])
  res["ratio_compile_s"] = _ratio(res["ours"]["compile_s"], res["clrs"]["compile_s"])
  return res


def measure_ood(algorithm: str, *, hidden: int, samples: Optional[int], seed: int
                ) -> Dict[str, Any]:
  res = {}
  for impl in ("ours", "clrs"):
    res[impl] = run_worker("ood", impl, algorithm, hidden=hidden,
                           ood_samples=samples, seed=seed)
    _log(f"{algorithm}: {impl} OOD pass {res[impl]['wall_s']:.1f}s, peak "
         f"{res[impl]['peak_rss_mb'] / 1024:.2f} GiB, score {res[impl]['score']:.4f}")
  res["ratio_wall_s"] = _ratio(res["ours"]["wall_s"], res["clrs"]["wall_s"])
  res["ratio_peak_rss"] = _ratio(res["ours"]["peak_rss_mb"], res["clrs"]["peak_rss_mb"])
  return res


def _ratio(a, b) -> Optional[float]:
  return float(a) / float(b) if b else None


# -- report --------------------------------------------------------------------------


def _fmt(x, spec=".2f"):
  return "n/a" if x is None else format(x, spec)


def cpu_label(host_cpu: Optional[Dict[str, Any]]) -> str:
  """'AMD EPYC (avx512f)': the model and its widest SIMD extension; 'unrecorded' for
  rows measured before reports named the CPU per algorithm."""
  if not host_cpu:
    return "unrecorded"
  simd = host_cpu.get("simd") or []
  return f"{host_cpu.get('model')} ({simd[-1]})" if simd else str(host_cpu.get("model"))


def markdown_table(report: Dict[str, Any]) -> str:
  rows = ["| algorithm | ours steps/s | clrs steps/s | ratio | ratio (mean) "
          "| first steps s, ours / clrs "
          "| ours compiles (s) | clrs compiles (s) | ours OOD s / GiB / score "
          "| clrs OOD s / GiB / score | CPU |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
  for algorithm, res in report["algorithms"].items():
    ss, cc, ood = res["steady_state"], res.get("compile"), res.get("ood")
    cells = [algorithm, _fmt(ss["ours"]["steps_per_s"]),
             _fmt(ss["clrs"]["steps_per_s"]), _fmt(ss["ratio"], ".3f"),
             _fmt(ss["ratio_mean"], ".3f"),
             # Rows measured before the first steps were timed say n/a.
             f"{_fmt(ss['ours'].get('warmup_s'), '.1f')} / "
             f"{_fmt(ss['clrs'].get('warmup_s'), '.1f')}"]
    for impl in ("ours", "clrs"):
      cpu = cc and cc[impl].get("compile_cpu_s")
      cells.append("skipped" if cc is None else
                   f"{cc[impl]['compilations']} ({cc[impl]['compile_s']:.1f}"
                   + (f"; {cpu:.1f} CPU s)" if cpu else ")"))
    for impl in ("ours", "clrs"):
      cells.append("skipped" if ood is None else
                   f"{ood[impl]['wall_s']:.1f} / {ood[impl]['peak_rss_mb'] / 1024:.2f}"
                   f" / {ood[impl]['score']:.3f}")
    cells.append(cpu_label(res.get("host_cpu")))
    rows.append("| " + " | ".join(cells) + " |")
  s = report["settings"]
  ratios = [r["steady_state"]["ratio"] for r in report["algorithms"].values()]
  rows.append("")
  if ratios:
    rows.append(f"Median ratio over {len(ratios)} algorithms: "
                f"{statistics.median(ratios):.2f}; lowest {min(ratios):.2f}.")
  rows.append(f"hidden {s['hidden']}, batch {s['batch']}, >= {s['steps']} timed "
              f"steps each; first steps: each impl's first step at every train size "
              f"(its compilations, cache off, and the step); compiles: "
              f"{s['compile_steps']}-step runs at hidden "
              f"{s['compile_hidden']}; ratio = ours/clrs steps/s; "
              f"{report['machine']['cpu_count']} CPUs, jax {report['versions']['jax']}, "
              f"{report['date']}")
  runs = {a: r["run"] for a, r in report["algorithms"].items() if r.get("run")}
  if runs:
    rows += ["", f"A {s['protocol_train_steps']:,}-step run (validation every "
             f"{s['protocol_eval_every_steps']} steps, one test pass), hours and shares:",
             "",
             "| algorithm | ours h | ours val | ours test | clrs h | clrs val "
             "| clrs test | run ratio |", "|---|---|---|---|---|---|---|---|"]
    for algorithm, r in runs.items():
      cells = [algorithm]
      for impl in ("ours", "clrs"):
        cells += [f"{r[impl]['run_s'] / 3600:.2f}", f"{r[impl]['val_share']:.1%}",
                  f"{r[impl]['test_share']:.1%}"]
      cells.append(f"{r['ratio_run']:.2f}")
      rows.append("| " + " | ".join(cells) + " |")
  return "\n".join(rows)


def run_bench(algorithms: Sequence[str], *, steps: int = 30, hidden: int = 128,
              batch: int = 32, lengths: Sequence[int] = clrs30.TRAIN_LENGTHS,
              compile_steps: int = 200, compile_hidden: Optional[int] = None,
              parallel_compile_workers: bool = False,
              ood: bool = True, ood_samples: Optional[int] = None, seed: int = 0,
              ood_algorithms: Optional[Sequence[str]] = None,
              evaluation: bool = False, eval_reps: int = 2,
              eval_time_steps: Optional[int] = None, clrs_eval_max_gib: float = 1.0,
              out: Optional[str] = None,
              argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
  """The measurements for each algorithm; the report dict (also `out`).

  An `out` that already holds a report of the same settings is resumed: its
  algorithms are kept and not measured again.
  """
  compile_hidden = int(compile_hidden or hidden)
  report = {
      "schema": SCHEMA,
      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
          timespec="seconds"),
      "machine": common.machine_info(),
      "versions": util.package_versions(),
      "settings": {
          "algorithms": list(algorithms), "steps": int(steps),
          "hidden": int(hidden), "batch": int(batch),
          "lengths": [int(n) for n in lengths], "seed": int(seed),
          "compile_steps": int(compile_steps), "compile_hidden": compile_hidden,
          "parallel_compile_workers": bool(parallel_compile_workers),
          "ood": bool(ood), "ood_samples": None if ood_samples is None else int(ood_samples),
          "ood_algorithms": None if ood_algorithms is None else list(ood_algorithms),
          "eval": bool(evaluation), "eval_reps": int(eval_reps),
          "eval_time_steps": None if eval_time_steps is None else int(eval_time_steps),
          "clrs_eval_max_gib": float(clrs_eval_max_gib),
          "protocol_train_steps": PROTOCOL_TRAIN_STEPS,
          "protocol_eval_every_steps": PROTOCOL_EVAL_EVERY_STEPS,
          "clrs_test_batch_size": CLRS_TEST_BATCH_SIZE,
          "learning_rate": LEARNING_RATE,
          "grad_clip_max_norm": GRAD_CLIP_MAX_NORM,
          "ours_lr_schedule": f"cosine over {PROTOCOL_TRAIN_STEPS} steps",
          "clrs_lr_schedule": "constant",
          "processor": PROCESSOR, "use_ln": True,
          "nb_triplet_fts": NB_TRIPLET_FTS, "nb_msg_passing_steps": 1,
          "hint_mode": "encoded_decoded", "hint_teacher_forcing": 0.0,
          "hint_repred_mode": "soft", "encoder_init": "xavier_on_scalars",
          "use_lstm": False, "dropout_prob": 0.0,
          "persistent_compilation_cache": False,
          # Ours' compiled steps keep their scratch in heaps (NetConfig.xla_heap_mib);
          # dm-clrs's are compiled as run.py compiles them.
          "ours_compiler_options": learner.compiler_options(netconfig.NetConfig()),
          "command": list(argv) if argv is not None else None,
      },
      "algorithms": {},
  }
  if out and pathlib.Path(out).exists():
    previous = json.loads(pathlib.Path(out).read_text())
    report["algorithms"] = resumable(previous, report["settings"], out)
    # The report stays dated and placed where it began; each algorithm names the
    # CPU it was measured on (`host_cpu`), since a resumed report may span machines.
    report["date"], report["machine"] = previous["date"], previous["machine"]
  counter = common.CompileCounter()
  try:
    for algorithm in algorithms:
      clrs30.check_algorithm(algorithm)
      if algorithm in report["algorithms"]:
        _log(f"{algorithm}: in {out} already, skipped")
        continue
      _log(f"{algorithm}: steady state (hidden {hidden}, batch {batch})")
      res = {"train_lengths": list(clrs30.train_lengths(algorithm, lengths)),
             "host_cpu": devices.describe_host_cpu(),
             "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                 timespec="seconds"),
             "loadavg": list(os.getloadavg())}
      res["steady_state"] = measure_steady_state(
          algorithm, steps=steps, hidden=hidden, batch=batch, lengths=lengths,
          seed=seed, counter=counter)
      res["compile"] = None
      if compile_steps > 0:
        res["compile"] = measure_compiles(
            algorithm, steps=compile_steps, hidden=compile_hidden, batch=batch,
            lengths=lengths, seed=seed, parallel=parallel_compile_workers)
      res["ood"] = None
      if ood and (ood_algorithms is None or algorithm in ood_algorithms):
        res["ood"] = measure_ood(algorithm, hidden=hidden, samples=ood_samples,
                                 seed=seed)
      res["eval"] = res["run"] = None
      if evaluation:
        res["eval"] = measure_eval(algorithm, hidden=hidden, seed=seed,
                                   reps=eval_reps, time_steps=eval_time_steps,
                                   clrs_max_gib=clrs_eval_max_gib)
        res["run"] = run_shares(res["steady_state"], res["eval"])
      res["loadavg_end"] = list(os.getloadavg())
      report["algorithms"][algorithm] = res
      if out:  # after every algorithm: a long run keeps what it measured
        common.write_json(out, report)
  finally:
    counter.close()
  return report


def resumable(previous: Dict[str, Any], settings: Dict[str, Any], out: str
              ) -> Dict[str, Any]:
  """The algorithms of a report on disk, if it was measured with `settings`."""
  if previous.get("schema") != SCHEMA:
    raise ValueError(f"{out} is not a {SCHEMA} report; choose another --out")
  differ = [k for k in _RESUME_KEYS
            if previous["settings"].get(k) != settings.get(k)]
  if differ:
    raise ValueError(f"{out} was measured with other settings ({', '.join(differ)}); "
                     "choose another --out to start afresh")
  return dict(previous["algorithms"])


# -- CLI -----------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="python benchmarks/bench.py",
      description="Our baseline vs dm-clrs's BaselineModel: steps/s, XLA "
                  "compilations, OOD test pass time and memory.")
  p.add_argument("--algorithms", default=",".join(DEFAULT_ALGORITHMS),
                 help="comma-separated CLRS-30 names, or 'all'")
  p.add_argument("--steps", type=int, default=30,
                 help="timed steady-state steps per implementation (minimum)")
  p.add_argument("--hidden", type=int, default=128)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--lengths", type=common.int_list, default=list(clrs30.TRAIN_LENGTHS),
                 help="train sizes (string matchers: max * 5 // 4)")
  p.add_argument("--compile-steps", type=int, default=200,
                 help="length of the compile-counting runs; 0 skips them")
  p.add_argument("--compile-hidden", type=int, default=None,
                 help="hidden size of the compile-counting runs (default --hidden)")
  p.add_argument("--parallel-compile-workers", action="store_true",
                 help="run the two compile-counting runs at once: same counts, "
                      "compile seconds inflated by the shared CPU")
  p.add_argument("--ood", action=argparse.BooleanOptionalAction, default=True,
                 help="time one OOD test pass of each (dm-clrs floyd_warshall: "
                      "~650 s, ~19.5 GB)")
  p.add_argument("--ood-algorithms", default=None,
                 help="comma-separated: the OOD pass for these only (default: all)")
  p.add_argument("--ood-samples", type=int, default=None,
                 help="first K test samples (default: the whole split)")
  p.add_argument("--eval", action=argparse.BooleanOptionalAction, default=False,
                 help="time a validation and a test batch of each and report "
                      "their share of a 10,000-step run")
  p.add_argument("--eval-reps", type=int, default=2,
                 help="timed calls per evaluation batch (after one that compiles)")
  p.add_argument("--eval-time-steps", type=int, default=None,
                 help="time evaluation batches cut to their first K steps and "
                      "scale by the steps each implementation runs (default: "
                      "whole batches; bubble_sort's dm-clrs test batch is 2,016 "
                      "steps)")
  p.add_argument("--clrs-eval-max-gib", type=float, default=1.0,
                 help="largest dm-clrs edge-pointer decoder tensor in a test "
                      "batch; above it the batch is timed smaller and scaled")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--processor", choices=netconfig.FAST_PROCESSORS, default=PROCESSOR,
                 help="the processor of both sides (default: run.py's %(default)s)")
  p.add_argument("--table", metavar="REPORT_JSON", default=None,
                 help="print the markdown table of a report already measured; "
                      "measure nothing")
  p.add_argument("--out", default="bench.json",
                 help="JSON report path; a report there with the same settings "
                      "is resumed (its algorithms are skipped)")
  # Internal: one measurement in a fresh process.
  p.add_argument("--worker", choices=("compile", "ood"), help=argparse.SUPPRESS)
  p.add_argument("--impl", choices=("ours", "clrs"), help=argparse.SUPPRESS)
  p.add_argument("--worker-out", help=argparse.SUPPRESS)
  quiet.add_flag(p)
  return p


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  args = _parser().parse_args(argv)
  global PROCESSOR  # pylint: disable=global-statement
  PROCESSOR = args.processor
  if args.table:
    print(markdown_table(json.loads(pathlib.Path(args.table).read_text())))
    return 0
  algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
  if algorithms == ["all"]:
    algorithms = list(clrs30.ALGORITHMS)
  try:
    for a in algorithms:
      clrs30.check_algorithm(a)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2

  if args.worker:
    if args.worker == "compile":
      result = compile_run(args.impl, algorithms[0], steps=args.compile_steps,
                           hidden=args.hidden, batch=args.batch,
                           lengths=args.lengths, seed=args.seed)
    else:
      result = ood_pass(args.impl, algorithms[0], hidden=args.hidden,
                        samples=args.ood_samples, seed=args.seed)
    common.write_json(args.worker_out, result, indent=None)
    return 0

  disable_persistent_cache()
  report = run_bench(algorithms, steps=args.steps, hidden=args.hidden,
                     batch=args.batch, lengths=args.lengths,
                     compile_steps=args.compile_steps,
                     compile_hidden=args.compile_hidden,
                     parallel_compile_workers=args.parallel_compile_workers,
                     ood=args.ood,
                     ood_samples=args.ood_samples, seed=args.seed, out=args.out,
                     evaluation=args.eval, eval_reps=args.eval_reps,
                     eval_time_steps=args.eval_time_steps,
                     clrs_eval_max_gib=args.clrs_eval_max_gib,
                     ood_algorithms=None if args.ood_algorithms is None else [
                         a.strip() for a in args.ood_algorithms.split(",") if a.strip()],
                     argv=["python", "benchmarks/bench.py"] + argv)
  print(markdown_table(report))
  if args.out:
    _log(f"wrote {args.out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
