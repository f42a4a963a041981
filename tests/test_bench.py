"""The benchmarks (benchmarks/): ours vs dm-clrs gets the same graphs for both and a
well-formed report; K seeds per job reports both sides."""

import json
import types

import numpy as np
import pytest

from benchmarks import ab_heaps
from benchmarks import ab_variants
from benchmarks import bench
from benchmarks import bench_seeds
from benchmarks import common
from nar_markov.data import batching
from nar_markov.data import train_stream
from nar_markov.training import devices


def _arrays(feedback):
  features = feedback.features
  points = list(features.inputs) + list(features.hints) + list(feedback.outputs)
  return [(dp.name, dp.data) for dp in points] + [("lengths", features.lengths)]


def test_both_models_get_the_same_graphs_as_train_stream():
  """clrs's batch is TrainStream's before our time bucketing, bit for bit."""
  ours = train_stream.TrainStream("bfs", seed=3, batch_size=4, lengths=(4, 7))
  theirs = bench.ClrsTrainStream("bfs", seed=3, batch_size=4, lengths=(4, 7))
  for _ in range(4):
    clrs_batch = next(theirs)
    expected = next(ours)
    got = bench.ours_batch("bfs", clrs_batch)
    assert bench.hint_time(clrs_batch) <= bench.hint_time(got)
    assert [n for n, _ in _arrays(got)] == [n for n, _ in _arrays(expected)]
    for (name, a), (_, b) in zip(_arrays(got), _arrays(expected)):
      np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.e2e
@pytest.mark.timeout(900)  # fresh compile-worker processes, 70-204 s on 2 cores
def test_tiny_bench_report(tmp_path):
  out = tmp_path / "bench.json"
  # One train length keeps it to one train-step compilation per model and
  # process; the compile counts still come from fresh worker processes (run
  # side by side here: the counts do not depend on it).
  report = bench.run_bench(["bfs"], steps=2, hidden=8, batch=4, lengths=(4,),
                           compile_steps=2, parallel_compile_workers=True,
                           ood=False, out=str(out))
  on_disk = json.loads(out.read_text())
  assert on_disk["schema"] == bench.SCHEMA
  assert on_disk["settings"]["hidden"] == 8
  assert on_disk["settings"]["compile_hidden"] == 8
  assert on_disk["machine"]["cpu_count"] >= 1
  res = on_disk["algorithms"]["bfs"]
  assert res["train_lengths"] == [4]
  assert res["host_cpu"] == devices.describe_host_cpu()  # each row names its CPU
  assert bench.cpu_label(res["host_cpu"]) in bench.markdown_table(on_disk)
  steady = res["steady_state"]
  for impl in ("ours", "clrs"):
    s = steady[impl]
    assert s["timed_steps"] >= 2
    assert s["step_s_median"] > 0
    assert s["steps_per_s"] == 1.0 / s["step_s_median"]
    assert list(s["step_s_median_by_nb_nodes"]) == ["4"]
    assert list(s["hint_time_by_nb_nodes"]) == ["4"]
    assert np.isfinite(s["last_loss"])
    # The warm-up compiled each model's train step once (the one shape),
    # which also checks the compile events' function names.
    assert s["warmup_train_step_compilations"] == 1
  assert steady["ratio"] == (steady["ours"]["steps_per_s"]
                             / steady["clrs"]["steps_per_s"])
  assert steady["ratio_mean"] == (steady["ours"]["steps_per_s_mean"]
                                  / steady["clrs"]["steps_per_s_mean"])
  # Ours runs the same batch padded to its time bucket, never shorter.
  assert (steady["ours"]["hint_time_by_nb_nodes"]["4"][0]
          >= steady["clrs"]["hint_time_by_nb_nodes"]["4"][0])
  compiles = res["compile"]
  assert compiles["steps"] == 2 and compiles["hidden"] == 8
  assert compiles["parallel"] is True
  for impl in ("ours", "clrs"):
    c = compiles[impl]
    assert isinstance(c["compilations"], int) and c["compilations"] > 0
    # One train length, one hint-time bucket: the train step compiles once.
    assert c["train_step_compilations"] == 1
    assert c["train_shapes"] == 1
    assert c["compile_s"] > 0
    assert 0 < c["compile_cpu_s"]
    assert c["persistent_cache_hits"] == 0
    assert c["persistent_cache"]["jax_enable_compilation_cache"] is False
    assert sum(f["count"] for f in c["by_function"].values()) == c["compilations"]
  assert compiles["ratio_compilations"] == (compiles["ours"]["compilations"]
                                            / compiles["clrs"]["compilations"])
  assert res["ood"] is None
  table = bench.markdown_table(report)
  assert table.splitlines()[2].startswith("| bfs | ")
  assert "skipped" in table


def test_the_30_algorithm_table_has_the_first_steps_of_each(capsys):
  """Each impl's warm-up (its first step at every train size, compilations included),
  ours / dm-clrs, as a column of the committed 30-algorithm table."""
  path = "benchmarks/results/cpu_clrs30_intel.json"
  assert bench.main(["--table", path]) == 0
  # The first table (the run-hours table follows it, after a blank line).
  first = capsys.readouterr().out.split("\n\n")[0]
  rows = [l for l in first.splitlines() if l.startswith("| ")][1:]   # after the header
  report = json.loads(open(path).read())
  assert len(rows) == len(report["algorithms"]) == 30
  for row, (algorithm, res) in zip(rows, report["algorithms"].items()):
    cells = [c.strip() for c in row.strip("|").split("|")]
    ss = res["steady_state"]
    assert cells[0] == algorithm
    assert cells[5] == f"{ss['ours']['warmup_s']:.1f} / {ss['clrs']['warmup_s']:.1f}"


def test_cache_log_says_what_the_persistent_cache_did():
  """A miss too quick to write, a miss whose write failed, a hit: jax's own words, per
  function, in the order jax says them for each compilation; then a real one."""
  import logging
  import warnings
  import jax
  import jax.numpy as jnp
  x = jnp.ones(3).block_until_ready()   # its own compilation, before the log listens
  log = common.CacheLog()
  say = lambda message: log.emit(logging.makeLogRecord({"msg": message}))
  compiled = lambda seconds: log._on_duration(common.BACKEND_COMPILE_EVENT, seconds)  # pylint: disable=protected-access
  try:
    say("PERSISTENT COMPILATION CACHE MISS for 'jit_f' with key 'k1'")
    say("Not writing persistent cache entry for 'jit_f' because it took < 0.50 seconds "
        "to compile (0.10s)")
    compiled(0.1)
    say("PERSISTENT COMPILATION CACHE MISS for 'jit_g' with key 'k2'")
    warnings.warn("Error writing persistent compilation cache entry for 'jit_g': "
                  "XlaRuntimeError: UNKNOWN: Multiple temp buffer allocations found")
    compiled(2.0)
    say("Persistent compilation cache hit for 'jit_h' with key 'k3'")
    compiled(0.05)
    jax.jit(lambda x: x * 7 + 1)(x).block_until_ready()   # a real compilation
  finally:
    log.close()
  by = log.by_function()
  assert by["jit_f"]["misses"] == 1 and by["jit_f"]["not_written"] == {
      "it took < 0.50 seconds to compile (0.10s)": 1}
  assert by["jit_g"]["not_written"] == {
      "XlaRuntimeError: UNKNOWN: Multiple temp buffer allocations found": 1}
  assert by["jit_g"]["seconds"] == 2.0
  assert by["jit_h"]["hits"] == 1 and by["jit_h"]["misses"] == 0
  last = log.records[-1]
  assert last["function"].startswith("jit_") and last["cache"] == "miss"
  assert last["seconds"] > 0 and last["cpu_s"] >= 0 and len(log.records) == 4


def test_compile_counter_counts_one_compilation_per_shape():
  import jax
  import jax.numpy as jnp
  counter = common.CompileCounter()
  try:
    f = jax.jit(lambda x: x * 3.0 + 1.0)
    x4, x5 = jnp.ones(4), jnp.ones(5)
    before = {k: v[0] for k, v in counter.by_function.items()}
    f(x4).block_until_ready()
    f(x4).block_until_ready()
    f(x5).block_until_ready()
    counts = {k: v[0] - before.get(k, 0)
              for k, v in counter.by_function.items()}
    assert counts["jit(<lambda>)"] == 2
  finally:
    counter.close()


def test_bench_seeds_reports_both_sides(tmp_path, capsys):
  out = tmp_path / "bench.json"
  assert bench_seeds.main(["--k", "2", "--steps", "2", "--rounds", "2", "--hidden", "8",
                           "--batch", "4", "--lengths", "4", "--out", str(out)]) == 0
  report = json.loads(out.read_text())
  assert report["schema"] == bench_seeds.SCHEMA and report["timed_seed_steps"] == 8
  assert report["compilations_in_timed"] == 0  # warm-up saw every shape
  for side in ("vmapped", "sequential"):
    assert report[side]["seed_steps_per_s"] > 0
  assert report["ratio"] == pytest.approx(
      report["vmapped"]["seed_steps_per_s"] / report["sequential"]["seed_steps_per_s"])
  table = capsys.readouterr().out.strip().splitlines()
  assert table[0].startswith("| algorithm | history | K |") and table[2].startswith(
      "| bfs | full | 2 | 8 | 4 | 4 |")
  assert bench_seeds.main(["--k", "0"]) == 2


def test_report_on_disk_is_resumed(tmp_path, monkeypatch):
  """An algorithm already in --out (same settings) is not measured again;
  a report of other settings is refused, not mixed in."""
  out = tmp_path / "bench.json"
  kwargs = dict(steps=2, hidden=8, batch=4, lengths=(4,), compile_steps=0,
                ood=False)
  first = bench.run_bench([], out=str(out), **kwargs)
  first["algorithms"]["bfs"] = {"steady_state": {"ratio": 2.5}, "done": True}
  common.write_json(out, first)

  def measured(algorithm, **_):
    raise AssertionError(f"{algorithm} was measured again")
  monkeypatch.setattr(bench, "measure_steady_state", measured)
  report = bench.run_bench(["bfs"], out=str(out), **kwargs)
  assert report["algorithms"]["bfs"]["done"] is True
  # It stays dated and placed where it began, and its old rows say their CPU is unknown.
  assert (report["date"], report["machine"]) == (first["date"], first["machine"])
  assert "| unrecorded |" in bench.markdown_table(
      dict(report, algorithms={"bfs": {"steady_state": {
          "ours": {"steps_per_s": 1.0}, "clrs": {"steps_per_s": 0.5}, "ratio": 2.0,
          "ratio_mean": 2.0}}}))
  with pytest.raises(ValueError, match="other settings.*hidden"):
    bench.run_bench(["bfs"], out=str(out), **dict(kwargs, hidden=16))


def test_eval_batches_are_counted_as_the_loops_run_them():
  """The batch counts that scale one timed batch to a run: ours as
  learner.evaluate_split splits a split, dm-clrs in run.py's batches of 32."""
  from nar_markov.nets import learner
  calls = []

  class Recorder:
    def eval_batch(self, params, batch, index, with_hints):
      calls.append(batching.nb_samples_of(batch))
      out = batch.outputs[0]
      return {out.name: out}, None

  for n_total, batch_size in [(32, 7), (2048, 7), (64, 32), (5, 32)]:
    calls.clear()
    split = batching.take_samples(next(train_stream.TrainStream(
        "bfs", seed=0, batch_size=n_total, lengths=(4,))), n_total)
    learner.evaluate_split(Recorder(), None, split, 0, batch_size, False)
    assert (len(calls), calls[0]) == bench._ours_batches(n_total, batch_size)  # pylint: disable=protected-access


def test_eval_costs_scale_to_a_run():
  res = bench.measure_eval("bfs", hidden=8, seed=0, reps=1, time_steps=3)
  assert res["evals_per_run"] == bench.PROTOCOL_TRAIN_STEPS // 50
  assert res["val_samples"] == 64 and res["val_nb_nodes"] == 16
  assert res["test_samples"] == 32 and res["test_nb_nodes"] == 64
  for impl in ("ours", "clrs"):
    r = res[impl]
    assert r["val_batches"] == 2 and r["val_batch_size"] == 32
    assert r["test_s_per_run"] == pytest.approx(r["test_batch_s"] * r["test_batches"])
  assert res["ours"]["val_draw_s"] > 0 and res["clrs"]["val_draw_s"] is None
  assert res["ours"]["val_s_per_run"] == pytest.approx(
      (res["ours"]["val_batch_s"] * 2 + res["ours"]["val_draw_s"]) * res["evals_per_run"])
  assert res["clrs"]["test_batches"] == 1
  # dm-clrs runs the whole padded time axis; ours stops at the longest trajectory.
  assert res["clrs"]["test_steps_run"] >= res["ours"]["test_steps_run"]
  steady = {impl: {"steps_per_s_mean": 10.0} for impl in ("ours", "clrs")}
  shares = bench.run_shares(steady, res)
  for impl in ("ours", "clrs"):
    s = shares[impl]
    assert s["train_s"] == pytest.approx(bench.PROTOCOL_TRAIN_STEPS / 10.0)
    assert s["run_s"] == pytest.approx(s["train_s"] + s["val_s"] + s["test_s"])
    assert s["val_share"] == pytest.approx(s["val_s"] / s["run_s"])


def test_eval_calls_are_timed_alternating_after_a_first_run():
  calls = []
  fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
  timings = bench._time_alternating(fns, reps=3)  # pylint: disable=protected-access
  # One untimed first run each, then rounds in order, reversed, in order.
  assert calls == ["a", "b", "c"] + ["a", "b", "c"] + ["c", "b", "a"] + ["a", "b", "c"]
  assert set(timings) == {"a", "b", "c"}
  assert all(t["s"] >= 0 and t["first_s"] >= 0 for t in timings.values())


def test_truncated_eval_batch_cuts_time_and_lengths():
  feedback = next(train_stream.TrainStream("dfs", seed=0, batch_size=4, lengths=(7,)))
  cut = bench._truncate_time(feedback, 5)  # pylint: disable=protected-access
  assert bench.hint_time(cut) == 5
  assert int(np.max(cut.features.lengths)) <= 5
  assert bench._truncate_time(feedback, None) is feedback  # pylint: disable=protected-access


class _Clock:
  """A stand-in for a benchmark module's `time`: perf_counter moves only when a
  timed call (`advance`) says so, by the seconds the test gives it."""

  def __init__(self):
    self.now = 0.0

  def perf_counter(self) -> float:
    return self.now

  def advance(self, seconds: float) -> None:
    self.now += seconds


@pytest.mark.timeout(900)  # three trainers' train steps compiled
def test_ab_variants_reports_the_median_of_each_variants_timed_steps(monkeypatch):
  """The real steps run; the clock moves only inside each train step, by 50 s in the
  compiling round and then by a variant's own durations: each figure must be that
  variant's median of its timed rounds, in ms, the compiling round left out.  Was:
  only "> 0" was asserted."""
  clock = _Clock()
  monkeypatch.setattr(ab_variants, "time", clock)
  seconds = {"default": [50, 0.003, 0.001, 0.002], "noremat": [50, 0.007, 0.009, 0.004],
             "exactT": [50, 0.020, 0.010, 0.030]}   # per round: medians 2, 7 and 20 ms
  make_learner = ab_variants._learner  # pylint: disable=protected-access

  def timed_learner(name, *args, **kwargs):
    net = make_learner(name, *args, **kwargs)
    step, rounds = net.train_step, iter(seconds[name])

    def train_step(*a, **k):
      out = step(*a, **k)
      clock.advance(next(rounds))
      return out

    net.train_step = train_step
    return net

  monkeypatch.setattr(ab_variants, "_learner", timed_learner)
  ms = ab_variants.ab("bfs", reps=3, hidden=8, batch=2, lengths=(4,))
  assert ms == {
      "default": [pytest.approx(2.0)], "noremat": [pytest.approx(7.0)],
      "exactT": [pytest.approx(20.0)]}


@pytest.mark.timeout(900)  # three trainers' train steps compiled
def test_ab_heaps_reports_medians_means_and_ratios_of_the_timed_steps(monkeypatch):
  """The real trainers run; the clock (and the page-fault count) move only inside each
  trainer's step, by its own figures: per size and over all steps the medians and means
  of the timed blocks (the warm-up left out), and dm-clrs / ours as their quotients.
  Was: only "> 0" was asserted."""
  clock = _Clock()
  monkeypatch.setattr(ab_heaps, "time", clock)
  faults = [0]
  monkeypatch.setattr(ab_heaps, "resource", types.SimpleNamespace(
      RUSAGE_SELF=0, getrusage=lambda _: types.SimpleNamespace(ru_minflt=faults[0])))
  # Per trainer, made in this order: the warm-up step, then one step per timed block.
  seconds = iter([[9.0, 0.003, 0.001, 0.002],    # heaps: median 2 ms, mean 2 ms
                  [9.0, 0.004, 0.004, 0.007],    # one: median 4, mean 5
                  [9.0, 0.006, 0.009, 0.006]])   # clrs: median 6, mean 7
  page_faults = iter([[99, 1, 3, 2], [99, 5, 5, 5], [99, 0, 0, 7]])

  def timed(cls):
    class Timed(cls):
      def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds, self.faults = iter(next(seconds)), iter(next(page_faults))

      def run(self, prepared):
        out = super().run(prepared)
        clock.advance(next(self.seconds))
        faults[0] += next(self.faults)
        return out
    return Timed

  monkeypatch.setattr(bench, "OursTrainer", timed(bench.OursTrainer))
  monkeypatch.setattr(bench, "ClrsTrainer", timed(bench.ClrsTrainer))
  res = ab_heaps.ab("bfs", blocks=3, hidden=8, batch=2, lengths=(4,))
  assert res["sizes"] == [4]
  expected = {"heaps": (2.0, 2.0, 2), "one": (4.0, 5.0, 5), "clrs": (6.0, 7.0, 0)}
  for name, (median, mean, median_faults) in expected.items():
    r = res[name]
    assert r["ms_median_by_nb_nodes"] == {"4": pytest.approx(median)}, name
    assert r["ms_median"] == pytest.approx(median) and r["ms_mean"] == pytest.approx(mean)
    assert r["faults_median_by_nb_nodes"] == {"4": median_faults}, name
  assert res["ratio_heaps"] == pytest.approx(3.0) and res["ratio_one"] == pytest.approx(1.5)
  assert res["ratio_mean_heaps"] == pytest.approx(3.5)
  assert res["ratio_mean_one"] == pytest.approx(1.4)


def test_ab_heaps_refuses_a_report_with_other_settings(tmp_path):
  out = tmp_path / "ab.json"
  out.write_text(json.dumps({"schema": ab_heaps.SCHEMA, "algorithms": {},
                             "settings": {"blocks": 6, "hidden": 128, "batch": 32,
                                          "heap_mib": 4}}))
  with pytest.raises(SystemExit, match="heap_mib"):
    ab_heaps.main(["bfs", "--heap-mib", "30", "--out", str(out)])
