"""The CLRS-30 data layer: official draws, run.py's train stream, cache, shapes."""

import json
import math
import pickle
import subprocess
import sys

import clrs
import gin
import numpy as np
import pytest

from nar_markov.config import clrs30
from nar_markov.data import batching
from nar_markov.data import pipeline
from nar_markov.data import preprocessing
from nar_markov.data import split_cache
from nar_markov.data import splits
from nar_markov.data import train_stream


def _points(feedback):
  return (list(feedback.features.inputs) + list(feedback.features.hints) +
          list(feedback.outputs))


def assert_same_feedback(a, b):
  """Same DataPoints (names, order, location, type, dtype, values) and lengths."""
  np.testing.assert_array_equal(a.features.lengths, b.features.lengths)
  assert a.features.lengths.dtype == b.features.lengths.dtype
  pa, pb = _points(a), _points(b)
  assert [(p.name, p.location, p.type_) for p in pa] == [
      (p.name, p.location, p.type_) for p in pb]
  for x, y in zip(pa, pb):
    assert x.data.dtype == y.data.dtype, x.name
    assert x.data.shape == y.data.shape, x.name
    # Bit-for-bit, not just ==: -0.0 and NaN payloads would survive ==.
    assert x.data.tobytes() == y.data.tobytes(), x.name


def _official_draw(algorithm, split):
  """The CLRS-30 dataset builder's draw, written out (dataset.py _create_data)."""
  multiplier = clrs.CLRS_30_ALGS_SETTINGS[algorithm]["num_samples_multiplier"]
  sampler, _ = clrs.build_sampler(
      algorithm, seed=clrs.CLRS30[split]["seed"], num_samples=32 * multiplier,
      length=clrs.CLRS30[split]["length"])
  return sampler.next(None)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("nar_markov_cache"))


@pytest.fixture(scope="module")
def nsm_test(cache):
  """naive_string_matcher test (2,048 samples): generated, then reloaded."""
  generated, how_1 = splits.load_raw_split("naive_string_matcher", "test", cache)
  cached, how_2 = splits.load_raw_split("naive_string_matcher", "test", cache)
  assert (how_1, how_2) == ("generated", "cached")
  return generated, cached


# ---------------------------------------------------------------- names


def test_algorithms_are_clrs30_in_order():
  assert clrs30.ALGORITHMS == tuple(clrs.specs.CLRS_30_ALGS)
  assert len(clrs30.ALGORITHMS) == 30
  assert clrs30.check_algorithm("bfs") == "bfs"


def test_unknown_algorithm_lists_the_30_valid_names(cache):
  with pytest.raises(ValueError) as e:
    clrs30.check_algorithm("bfs_typo")
  assert "bfs_typo" in str(e.value)
  assert all(name in str(e.value) for name in clrs30.ALGORITHMS)
  with pytest.raises(ValueError, match="naive_string_matcher"):
    splits.load_split("dijkstraa", "test", cache_dir=cache)
  with pytest.raises(ValueError, match="floyd_warshall"):
    train_stream.TrainStream("sort", seed=0)
  with pytest.raises(ValueError, match="unknown algorithm 'sort'"):  # was a KeyError
    preprocessing.preprocess_feedback("sort", None)
  with pytest.raises(ValueError, match="val, test"):
    splits.load_split("bfs", "train", cache_dir=cache)


def test_cli_unknown_algorithm_exits_nonzero_listing_names(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "nar_markov.data.pipeline", "--algorithm", "bogus",
       "--split", "test", "--cache-dir", str(tmp_path)],
      capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode != 0
  assert "bogus" in proc.stderr
  assert all(name in proc.stderr for name in clrs30.ALGORITHMS)
  assert not list(tmp_path.iterdir())  # nothing sampled or cached


def test_cli_describes_a_split(cache, capsys):
  assert pipeline.main(["--algorithm", "bfs", "--split", "test",
                        "--cache-dir", cache]) == 0
  out = capsys.readouterr().out
  assert "bfs test: 32 samples of 64 nodes" in out
  assert "clrs-2.0.3" in out


# ------------------------------------------------------- official splits


@pytest.mark.parametrize("algorithm,n", [("bfs", 32), ("dfs", 32)])
def test_test_split_is_the_official_draw(algorithm, n, cache):
  generated = splits.load_split(algorithm, "test", cache_dir=cache,
                                preprocess=False)
  cached = splits.load_split(algorithm, "test", cache_dir=cache,
                             preprocess=False)
  official = _official_draw(algorithm, "test")
  assert_same_feedback(generated, official)
  assert_same_feedback(cached, official)
  assert batching.nb_samples_of(official) == n
  assert batching.nb_nodes_of(official) == 64


def test_naive_string_matcher_test_split_is_the_official_draw(nsm_test):
  generated, cached = nsm_test
  official = _official_draw("naive_string_matcher", "test")
  assert_same_feedback(generated, official)
  assert_same_feedback(cached, official)
  # CLRS-30's multiplier: 64 x 32 samples for the string matchers.
  assert batching.nb_samples_of(cached) == 2048
  assert batching.nb_nodes_of(cached) == 64


def test_a_cached_split_is_reloaded_without_sampling(tmp_path, monkeypatch,
                                                     nsm_test):
  # What the cache is for: a second load reads the file and never runs the
  # sampler. (How much faster that is, is a benchmark's business, not a
  # timed test's: on a shared 2-core box a ratio of CPU seconds is noise.)
  generated, how = splits.load_raw_split("jarvis_march", "val", str(tmp_path))
  assert how == "generated"

  def no_sampling(*args, **kwargs):
    raise AssertionError(f"sampled again: {args} {kwargs}")

  monkeypatch.setattr(splits, "generate_raw_split", no_sampling)
  cached, how = splits.load_raw_split("jarvis_march", "val", str(tmp_path))
  assert how == "cached"
  assert_same_feedback(cached, generated)
  _, cached_nsm = nsm_test  # its second load came from the file
  assert batching.nb_samples_of(cached_nsm) == 2048


def test_split_settings_apply_the_clrs30_multipliers():
  for algorithm in clrs30.ALGORITHMS:
    multiplier = clrs.CLRS_30_ALGS_SETTINGS[algorithm]["num_samples_multiplier"]
    test = splits.split_settings(algorithm, "test")
    assert test == {"seed": 3, "length": 64, "num_samples": 32 * multiplier}
    val = splits.split_settings(algorithm, "val")
    assert val["seed"] == 2 and val["num_samples"] == 32 * multiplier
    assert val["length"] == (20 if algorithm in clrs30.STRING_MATCHERS else 16)
  assert splits.split_settings("naive_string_matcher", "test")["num_samples"] == 2048
  assert splits.split_settings("bfs", "test")["num_samples"] == 32
  assert splits.split_settings("quickselect", "test")["num_samples"] == 2048
  assert splits.split_settings("find_maximum_subarray_kadane",
                               "test")["num_samples"] == 1024


def test_string_matchers_validate_at_their_training_size(cache):
  # run.py's needle of up to 8 does not fit a 16-node string in dm-clrs 2.0.3.
  with pytest.raises(ValueError, match="a must be greater than 0"):
    sampler, _ = clrs.build_sampler("naive_string_matcher", num_samples=64,
                                    seed=2, length=16, length_needle=-8)
  val = splits.load_split("kmp_matcher", "val", cache_dir=cache)
  assert batching.nb_nodes_of(val) == 20 == clrs30.train_lengths("kmp_matcher")[0]
  assert batching.nb_samples_of(val) == 2048


def test_val_split_preprocessed_per_run_py(cache):
  val = splits.load_split("insertion_sort", "val", cache_dir=cache)
  raw = splits.load_split("insertion_sort", "val", cache_dir=cache,
                          preprocess=False)
  assert batching.nb_nodes_of(val) == 16 and batching.nb_samples_of(val) == 32
  spec = preprocessing.get_spec("insertion_sort")
  outputs = {o.name: o for o in val.outputs}
  # SHOULD_BE_PERMUTATION pred -> permutation pointer + mask (run.py).
  assert spec["pred"][2] == clrs.Type.PERMUTATION_POINTER
  assert outputs["pred"].data.shape == (32, 16, 16)
  assert outputs["pred_mask"].type_ == clrs.Type.MASK_ONE
  # No random pos for val/test: the sampler's evenly spaced pos is kept.
  pos_val = [p for p in val.features.inputs if p.name == "pos"][0].data
  pos_raw = [p for p in raw.features.inputs if p.name == "pos"][0].data
  np.testing.assert_array_equal(pos_val, pos_raw)
  np.testing.assert_allclose(pos_val[0], np.arange(16) / 16)


def test_spec_matches_the_preprocessed_batches(cache):
  # binary_search: pred_h becomes the input `pred` (PRED_AS_INPUT_ALGOS).
  for algorithm in ("binary_search", "insertion_sort", "bfs"):
    spec = preprocessing.get_spec(algorithm)
    feedback = splits.load_split(algorithm, "val", cache_dir=cache)
    seen = {}
    for stage, points in (("input", feedback.features.inputs),
                          ("hint", feedback.features.hints),
                          ("output", feedback.outputs)):
      for p in points:
        seen[p.name] = (stage, p.location, p.type_)
    assert seen == dict(spec), algorithm
  assert "pred" in preprocessing.get_spec("binary_search")
  assert "pred_h" not in preprocessing.get_spec("binary_search")


def test_same_seed_same_split_arrays():
  assert_same_feedback(splits.generate_raw_split("bfs", "val"),
                       splits.generate_raw_split("bfs", "val"))


# ------------------------------------------------------------------ cache


def test_cache_file_is_keyed_and_atomic(cache):
  splits.load_split("bfs", "val", cache_dir=cache)
  path = splits.cache_path("bfs", "val", cache)
  assert path.exists()
  assert path.parent.name == f"clrs-{clrs.__version__}"
  assert path.name == "bfs_val.npz"
  assert not list(path.parent.glob("*.tmp"))


@pytest.mark.parametrize("damage", ["truncate", "flip_byte"])
def test_damaged_cache_is_detected_and_regenerated(tmp_path, damage):
  cache = str(tmp_path)
  good, how = splits.load_raw_split("dfs", "val", cache)
  assert how == "generated"
  path = splits.cache_path("dfs", "val", cache)
  blob = bytearray(path.read_bytes())
  if damage == "truncate":
    blob = blob[:len(blob) // 2]
  else:
    blob[len(blob) // 2] ^= 0xFF
  path.write_bytes(bytes(blob))
  with pytest.warns(RuntimeWarning, match="unusable"):
    again, how = splits.load_raw_split("dfs", "val", cache)
  assert how == "generated"
  assert_same_feedback(again, good)
  # The regenerated file is whole again.
  reloaded, how = splits.load_raw_split("dfs", "val", cache)
  assert how == "cached"
  assert_same_feedback(reloaded, good)


def test_cache_with_other_settings_is_regenerated(tmp_path):
  cache = str(tmp_path)
  splits.load_raw_split("bfs", "val", cache)
  # A file holding another split's draw under this name must not be used.
  splits.cache_path("bfs", "test", cache).write_bytes(
      splits.cache_path("bfs", "val", cache).read_bytes())
  with pytest.warns(RuntimeWarning, match="expected"):
    test, how = splits.load_raw_split("bfs", "test", cache)
  assert how == "generated" and batching.nb_nodes_of(test) == 64


def test_cache_dir_resolution_order(tmp_path, monkeypatch):
  monkeypatch.delenv("NAR_MARKOV_CACHE", raising=False)
  home = tmp_path / "home"
  monkeypatch.setenv("HOME", str(home))
  assert split_cache.resolve_cache_dir() == home / ".cache" / "nar_markov"
  try:
    gin.bind_parameter("cache_dir.path", str(tmp_path / "gin"))
    assert split_cache.resolve_cache_dir() == tmp_path / "gin"
    monkeypatch.setenv("NAR_MARKOV_CACHE", str(tmp_path / "env"))
    assert split_cache.resolve_cache_dir() == tmp_path / "env"
    assert split_cache.resolve_cache_dir(str(tmp_path / "arg")) == tmp_path / "arg"
  finally:
    gin.clear_config()


# ------------------------------------------------------------------ train


def test_train_stream_is_run_py_make_multi_sampler():
  """Batch for batch what run.py's train sampler yields for the same seed
  (insertion_sort, heapsort: permutation outputs, processed in numpy here)."""
  from clrs.examples import run  # pylint: disable=g-import-not-at-top
  for algorithm in ("bfs", "insertion_sort", "heapsort", "naive_string_matcher"):
    stream = train_stream.TrainStream(algorithm, seed=7, batch_size=4)
    reference, _, spec = run.make_multi_sampler(
        list(stream.lengths), np.random.RandomState(7), algorithm=algorithm,
        split="train", batch_size=4, multiplier=-1, randomize_pos=True,
        enforce_pred_as_input=True, enforce_permutations=True, chunked=False,
        chunk_length=16,
        sampler_kwargs=dict(p=tuple([0.1 + 0.1 * i for i in range(9)]),
                            length_needle=-8))
    assert dict(spec) == dict(stream.spec)
    for _ in range(2 * len(stream.lengths)):
      ours = next(stream)
      theirs = next(reference)
      assert_same_feedback(
          ours, batching.pad_time(theirs, ours.features.hints[0].data.shape[0]))
  assert stream.lengths == (20,)  # string matchers: 16 * 5 // 4 only


def test_train_stream_same_seed_same_batches_other_seed_not():
  a = train_stream.TrainStream("bfs", seed=3, batch_size=8, lengths=(4, 7))
  b = train_stream.TrainStream("bfs", seed=3, batch_size=8, lengths=(4, 7))
  c = train_stream.TrainStream("bfs", seed=4, batch_size=8, lengths=(4, 7))
  for _ in range(4):
    x, y, z = next(a), next(b), next(c)
    assert_same_feedback(x, y)
  assert not np.array_equal(x.features.inputs[0].data, z.features.inputs[0].data)


def test_train_stream_resumes_exactly():
  stream = train_stream.TrainStream("bfs", seed=1, batch_size=8)
  for _ in range(7):  # stop mid-cycle of the 5 lengths
    next(stream)
  state = pickle.loads(pickle.dumps(stream.state_dict()))
  expected = [next(stream) for _ in range(8)]

  resumed = train_stream.TrainStream("bfs", seed=1, batch_size=8)
  next(resumed)  # a fresh stream in another state, overwritten by the load
  resumed.load_state_dict(state)
  assert resumed.batches_drawn == 7
  for batch in expected:
    assert_same_feedback(next(resumed), batch)

  with pytest.raises(ValueError, match="batch_size"):
    train_stream.TrainStream("bfs", seed=1, batch_size=16,
                             lengths=(4,)).load_state_dict(state)


def test_time_bucket_rule():
  # bfs at 16 nodes: measured max T = 10, bucket 10 + 2.
  assert batching.time_bucket("bfs", 16, 3) == 12
  assert batching.time_bucket("bfs", 16, 12) == 12
  assert batching.time_bucket("bfs", 16, 13) == 13
  assert batching.time_bucket("bfs", 16, 17) == 18
  assert batching.time_bucket("mst_kruskal", 16, 147) == 158   # measured 127
  assert batching.time_bucket("mst_kruskal", 16, 159) == 160
  # naive_string_matcher at 20 nodes: measured 26, bucket 26 + 6.
  assert batching.time_bucket("naive_string_matcher", 20, 26) == 32
  assert batching.time_bucket("naive_string_matcher", 20, 33) == 36
  assert batching.time_bucket("bfs", 5, 6) == 6  # size never measured
  assert batching.time_bucket("bfs", 5, 1) == 1


def test_trajectory_bounds_are_the_measured_maxima():
  table = json.loads(clrs30.TRAJECTORY_LENGTHS_FILE.read_text())["algorithms"]  # pylint: disable=protected-access
  for algorithm, bound in clrs30.T_BOUND.items():
    for n, measured in table[algorithm]["train_T"].items():
      assert measured == eval(bound, {"n": int(n), "ceil": math.ceil,  # pylint: disable=eval-used
                                      "log2": math.log2}), (algorithm, n)
      assert clrs30.trajectory_bound(algorithm, int(n)) == measured
  assert table["bubble_sort"]["test_T"] == 64 * 63 // 2 + 1   # reached at 64 nodes too
  assert clrs30.trajectory_bound("insertion_sort", 64) is None  # not a train size
  assert clrs30.trajectory_bound("bfs", 16) is None             # no bound
  # The bucket keeps its headroom (the padded shape is unchanged); past the bound is an error.
  assert batching.time_bucket("insertion_sort", 16, 16) == 20
  with pytest.raises(ValueError, match="past its bound n = 16"):
    batching.time_bucket("insertion_sort", 16, 17)


@pytest.mark.parametrize("algorithm", ["binary_search", "dijkstra", "dfs"])
def test_train_streams_stay_within_the_trajectory_bound(algorithm):
  stream = train_stream.TrainStream(algorithm, seed=0, batch_size=32, lengths=(4, 7))
  for _ in range(6):
    nb_nodes = stream.next_nb_nodes
    batch = next(stream)   # time_bucket raises past the bound
    assert batch.features.lengths.max() <= clrs30.trajectory_bound(algorithm, nb_nodes)


def test_bfs_train_stream_has_few_time_shapes():
  stream = train_stream.TrainStream("bfs", seed=0, batch_size=32)
  shapes = {}
  for _ in range(200):
    nb_nodes = stream.next_nb_nodes
    batch = next(stream)
    T = batch.features.hints[0].data.shape[0]
    assert T >= batch.features.lengths.max()
    # Each T is a bucket: the measured max or a finely rounded T.
    assert T == batching.time_bucket("bfs", nb_nodes, T)
    assert batching.nb_nodes_of(batch) == nb_nodes
    shapes.setdefault(nb_nodes, set()).add(batch.features.hints[0].data.shape)
  assert sorted(shapes) == [4, 7, 11, 13, 16]
  # What the rule gives for seed 0 (dm-clrs 2.0.3; RandomState is stable):
  # measured max T + headroom, one shape (one compilation) per train length.
  assert {n: sorted(s[0] for s in v) for n, v in shapes.items()} == {
      4: [6], 7: [9], 11: [10], 13: [12], 16: [12]}
  assert all(len(s) == 1 for s in shapes.values()), shapes


# ---------------------------------------------------------------- padding


def test_pad_time_keeps_lengths_and_valid_steps():
  stream = train_stream.TrainStream("bfs", seed=0, batch_size=8, lengths=(7,))
  batch = next(stream)
  T = batch.features.hints[0].data.shape[0]
  padded = batching.pad_time(batch, T + 5)
  np.testing.assert_array_equal(padded.features.lengths, batch.features.lengths)
  for h, p in zip(batch.features.hints, padded.features.hints):
    assert p.data.shape == (T + 5,) + h.data.shape[1:]
    np.testing.assert_array_equal(p.data[:T], h.data)
    assert not p.data[T:].any()
  assert padded.outputs is batch.outputs
  with pytest.raises(ValueError):
    batching.pad_time(batch, T - 1)


def _perturbed(points, rng):
  """Predictions: the truth with every 4th sample's pointers shuffled."""
  preds = {}
  for p in points:
    x = np.array(p.data, dtype=np.float64)
    if p.type_ == clrs.Type.POINTER:
      x[..., ::4, :] = rng.randint(0, x.shape[-1], x[..., ::4, :].shape)
    elif p.type_ == clrs.Type.MASK:
      x[..., ::4, :] = 1 - x[..., ::4, :]
    preds[p.name] = clrs.DataPoint(p.name, p.location, p.type_, x)
  return preds


def test_padding_does_not_change_clrs_scores(cache):
  """clrs.evaluate / evaluate_hints: same scores with a time-padded batch."""
  feedback = splits.load_split("bfs", "test", cache_dir=cache)
  rng = np.random.RandomState(0)
  output_preds = _perturbed(feedback.outputs, rng)
  before = clrs.evaluate(feedback.outputs, output_preds)
  assert 0.3 < before["score"] < 0.99  # the perturbation is visible

  T = feedback.features.hints[0].data.shape[0]
  padded = batching.pad_time(feedback, T + 7)
  after = clrs.evaluate(padded.outputs, output_preds)
  assert after == before

  # Hints: one prediction per step 1..T-1; a padded run also predicts the
  # padded steps, which lie beyond every trajectory's length.
  def hint_preds(fb):
    steps = fb.features.hints[0].data.shape[0]
    return [_perturbed([clrs.DataPoint(h.name, h.location, h.type_, h.data[t])
                        for h in fb.features.hints], np.random.RandomState(t))
            for t in range(1, steps)]
  hints_before = clrs.evaluate_hints(feedback.features.hints,
                                     feedback.features.lengths,
                                     hint_preds(feedback))
  hints_after = clrs.evaluate_hints(padded.features.hints,
                                    padded.features.lengths, hint_preds(padded))
  for name in ("reach_h", "pi_h"):
    assert hints_after[name] == hints_before[name]
    along = hints_after[name + "_along_time"]
    np.testing.assert_array_equal(along[:T - 1],
                                  hints_before[name + "_along_time"])
    assert not along[T - 1:].any()


# ------------------------------------------------------------------- eval


def test_eval_batches_fixed_size_cover_the_split_once(cache):
  feedback = splits.load_split("bfs", "val", cache_dir=cache)  # 32 samples
  batches = list(batching.eval_batches(feedback, 12))
  assert [n for _, n in batches] == [12, 12, 8]
  T = feedback.features.hints[0].data.shape[0]
  for batch, _ in batches:
    assert batching.nb_samples_of(batch) == 12
    assert batch.features.hints[0].data.shape[:2] == (T, 12)
  # Valid parts, in order, are the split; the fill repeats its first samples.
  for i, p in enumerate(feedback.outputs):
    np.testing.assert_array_equal(
        np.concatenate([b.outputs[i].data[:n] for b, n in batches]), p.data)
    np.testing.assert_array_equal(batches[-1][0].outputs[i].data[8:], p.data[:4])
  np.testing.assert_array_equal(
      np.concatenate([b.features.lengths[:n] for b, n in batches]),
      feedback.features.lengths)
  small = list(batching.eval_batches(batching.take_samples(feedback, 3), 8))
  assert len(small) == 1 and small[0][1] == 3
  assert batching.nb_samples_of(small[0][0]) == 8


def test_string_matcher_too_small_is_a_clear_error():
  with pytest.raises(ValueError, match="needs >= 17"):
    train_stream.TrainStream("naive_string_matcher", seed=0, batch_size=4, lengths=(4, 7))
  assert clrs30.train_lengths("kmp_matcher", (4, 16)) == (20,)


def test_clrs30_facts_without_clrs_are_clrs_s():
  """nar_markov.config.clrs30 (imported by the launcher, no clrs) agrees with dm-clrs."""
  import clrs  # pylint: disable=g-import-not-at-top
  from nar_markov.config import clrs30  # pylint: disable=g-import-not-at-top
  assert clrs30.ALGORITHMS == tuple(clrs.specs.CLRS_30_ALGS)
