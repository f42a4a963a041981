"""The same seed gives the same run: tiny runs of every model, a calibrated G-ForgetNet,
multi-task and K = 2 seeds in one job give the result.json files of a golden set, up to
what says when, where and by which code a run was trained.

XLA compiles for the CPU's SIMD extensions, so one CPU kind rounds otherwise than another
and after a few steps trains another trajectory: tests/fixtures/golden_runs/ holds one set
per CPU kind (each file records the CPU that trained it), and a run is compared with the
set of its own kind, to the last bit.  On a kind without a set it is compared with the
nearest set (the most SIMD extensions in common) to OTHER_KIND_RTOL, not skipped.
xeon_amx/ was first written by the code from before the training loop was split from the
net; a set for another kind is written by code that passes on a kind that has one, so the
sets agree on what the code computes. A change that is meant to
change numbers rewrites every set it can, and says so in its commit:
  PYTHONPATH=.:tests python tests/test_golden_runs.py --write tests/fixtures/golden_runs/<kind>
"""

import dataclasses
import json
import math
import pathlib
import sys

import pytest

from nar_markov.config import components
from nar_markov.config import gin_files as config
from nar_markov.config.netconfig import NetConfig
from nar_markov.training import calibrate
from nar_markov.training import devices

import flat

GOLDEN_ROOT = pathlib.Path(__file__).resolve().parent / "fixtures" / "golden_runs"
# tests/test_runs.py's tiny runs (their compilations are shared), 10 steps.
TINY = dict(hidden_size=16, nb_triplet_fts=4, batch_size=8, train_lengths=(4, 7),
            train_steps=10, eval_every_steps=5, log_every_steps=5, checkpoint_every_steps=5,
            val_max_samples=8, test_max_samples=8)
RUNS = {
    "baseline": dict(model="baseline", algorithm="bfs", seed=0),
    "forget": dict(model="forget", algorithm="bfs", seed=0),
    "gforget": dict(model="gforget", algorithm="bfs", seed=0, lambda_gate=0.1),
    "gforget_nopenalty": dict(model="gforget_nopenalty", algorithm="bfs", seed=0),
    # G-ForgetNet as gin/gforget.gin trains it: λ from its calibration record (schedule
    # reading: penalty from the calibration step on, continuing from the λ = 0 run).
    "gforget_calibrated": dict(model="gforget", algorithm="bfs", seed=0, lambda_gate=None,
                               train_steps=20),
    "gforget_multitask": dict(model="gforget_multitask", algorithm=["bfs", "minimum"], seed=0,
                             lambda_gate={"bfs": 0.1, "minimum": 0.05}),
    "forget_k2": dict(model="forget", algorithm="bfs", seed=[0, 1]),
}
# What says when, where and by which code a run was trained, not what it computed (and
# the gin text, whose form is replay's: docs/formats.md).  The machine ("device") is
# kept: it says whether the numbers can be the same to the bit.
NOT_NUMBERS = ("wall_time_s", "train_time_s", "eval_time_s", "steps_per_s", "versions",
               "commit", "dirty", "created", "gin_config")
# Recorded since the golden files were written, beside their numbers: the test score of
# each selection rule, and in "settings" the fields that done-ness compares since.
ADDED = {"selection"}
# And in "device": XLA:CPU's thread count (nar_markov/training/devices.py), 2 for every golden file.
# These tiny runs gave the same bits with 1 and 4 (too little work to split); a protocol-size
# step does not.
DEVICE_ADDED = {"xla_cpu_threads"}
GOLDEN_XLA_CPU_THREADS = 2
COMPONENT_FIELDS = {f.name for c in (components.Protocol, NetConfig, components.GatePenalty)
                    for f in dataclasses.fields(c)}
# A kind without its own set is held to the nearest set within this relative tolerance
# (floats only: every count, step and string the same).  The sets of two kinds differ by
# 3.6e-5 relative at most (epyc_avx512 against xeon_amx and xeon_avx512: 120 of 409 numbers,
# all losses, norms and λ; test scores the same); 1e-3 leaves room for a kind further away
# and still fails a changed trajectory or score.  OTHER_KIND_ATOL for numbers near 0.
OTHER_KIND_RTOL = 1e-3
OTHER_KIND_ATOL = 1e-8


def train_run(name: str, results_dir: pathlib.Path):
  """The result dict(s) of golden run `name`, trained into `results_dir`."""
  kwargs = dict(TINY, **RUNS[name])
  if name == "gforget_calibrated":
    config.parse_gin([], ["LambdaHeuristic.seeds = [0]"])
    c = flat.components(**kwargs)
    calibrate.calibrate_algorithm(kwargs["algorithm"], results_dir, net=c["net"],
                                  protocol=c["protocol"])
  results = flat.run(results_dir=str(results_dir), **kwargs)
  # The golden's shape: one run's result; {algorithm: result} (multi-task, one seed);
  # [result of each seed] (K seeds, one algorithm).
  if isinstance(kwargs["algorithm"], list):
    return {a: by_seed[kwargs["seed"]] for a, by_seed in results.items()}
  (by_seed,) = results.values()
  seeds = kwargs["seed"]
  return [by_seed[s] for s in seeds] if isinstance(seeds, list) else by_seed[seeds]


def comparable(result, results_dir) -> dict:
  """`result` (one run's, or a dict or list of them) as JSON, without NOT_NUMBERS, its
  paths relative to `results_dir` (older results named them in full)."""
  prefix = str(results_dir).rstrip("/") + "/"

  def strip(x):
    if isinstance(x, dict):
      return {k: strip(v) for k, v in x.items() if k not in NOT_NUMBERS}
    if isinstance(x, list):
      return [strip(v) for v in x]
    if isinstance(x, str):
      return x.replace(prefix, "")
    return x

  return strip(json.loads(json.dumps(result, default=_plain)))


def _plain(x):
  import numpy as np  # pylint: disable=g-import-not-at-top
  if isinstance(x, np.generic):
    return x.item()
  if isinstance(x, np.ndarray):
    return x.tolist()
  raise TypeError(f"{type(x).__name__} in a result")


def differences(got, want, where="", rtol: float = 0.0) -> list:
  """Where `got` differs from `want`: every value of the golden the same, floats to the
  last bit (`rtol` > 0, a set of another CPU kind: to that tolerance, and the CPU it
  records is not compared); what is recorded beside them since (ADDED, settings) may be
  new."""
  if isinstance(want, dict) and isinstance(got, dict):
    out = [f"{where}.{k}: only in the golden" for k in want if k not in got]
    added = (COMPONENT_FIELDS if where.endswith(".settings") else
             DEVICE_ADDED if where.endswith(".device") else
             ADDED if "schema" in want else set())
    out += [f"{where}.{k}: not in the golden" for k in got if k not in want and k not in added]
    for k in want:
      if k in got and not (rtol and k == "host_cpu" and where.endswith(".device")):
        out += differences(got[k], want[k], f"{where}.{k}", rtol)
    return out
  if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
    return [d for i, (g, w) in enumerate(zip(got, want))
            for d in differences(g, w, f"{where}[{i}]", rtol)]
  same = (got == want or (isinstance(got, float) and isinstance(want, float)
                          and math.isnan(got) and math.isnan(want))
          or (rtol and isinstance(got, float) and isinstance(want, float)
              and math.isclose(got, want, rel_tol=rtol, abs_tol=OTHER_KIND_ATOL)))
  return [] if same else [f"{where}: {got!r}, golden {want!r}"]


def _simd(result) -> list:
  """The SIMD extensions of the CPU that trained `result` (one run's, or several)."""
  while not (isinstance(result, dict) and "device" in result):
    result = next(iter(result.values() if isinstance(result, dict) else result))
  return result["device"]["host_cpu"]["simd"]


def golden_sets() -> dict:
  """{folder: the SIMD extensions of the CPU its runs were trained on}, one per CPU kind."""
  return {folder: _simd(json.loads((folder / "forget.json").read_text()))
          for folder in sorted(GOLDEN_ROOT.iterdir()) if (folder / "forget.json").exists()}


def golden_set_for(simd) -> tuple:
  """(the golden set of the CPU kind with SIMD extensions `simd`, 0.0), or where there is
  none (the nearest set, OTHER_KIND_RTOL): the most extensions in common."""
  sets = golden_sets()
  for folder, theirs in sets.items():
    if theirs == simd:
      return folder, 0.0
  nearest = min(sets, key=lambda f: (len(set(sets[f]) ^ set(simd)), f.name))
  return nearest, OTHER_KIND_RTOL


def test_each_golden_set_is_every_run_on_one_cpu_kind():
  sets = golden_sets()
  assert sets, f"no golden set under {GOLDEN_ROOT}"
  for folder, simd in sets.items():
    assert sorted(p.stem for p in folder.glob("*.json")) == sorted(RUNS), folder
    for name in RUNS:
      assert _simd(json.loads((folder / f"{name}.json").read_text())) == simd, (folder, name)
  kinds = [tuple(simd) for simd in sets.values()]
  assert len(set(kinds)) == len(kinds), f"two golden sets for one CPU kind: {sets}"


def _shared(x, y):
  """`x` with only the keys `y` has too (the sets were written by code of different
  days: a newer one records more beside the same numbers)."""
  if isinstance(x, dict) and isinstance(y, dict):
    return {k: _shared(v, y[k]) for k, v in x.items() if k in y}
  if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
    return [_shared(a, b) for a, b in zip(x, y)]
  return x


def test_the_sets_of_two_cpu_kinds_agree_within_the_tolerance():
  """What a kind without a set is held to holds between the kinds that have one."""
  sets = sorted(golden_sets())
  not_the_same_bits = 0
  for i, a in enumerate(sets):
    for b in sets[i + 1:]:
      for name in RUNS:
        x, y = (json.loads((f / f"{name}.json").read_text()) for f in (a, b))
        x, y = _shared(x, y), _shared(y, x)
        diffs = differences(x, y, rtol=OTHER_KIND_RTOL)
        assert not diffs, (a.name, b.name, name, diffs[:10])
        not_the_same_bits += len([d for d in differences(x, y) if ".host_cpu" not in d])
  assert not_the_same_bits > 0  # else the sets would be one, and no tolerance needed


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_tiny_run_gives_its_golden_numbers(name, tmp_path, monkeypatch, data_cache_dir):
  here = devices.describe_host_cpu()["simd"]
  # nar_markov/training/devices.py: XLA compiles for the CPU's extensions; other rounding, and
  # after a few steps another trajectory: the set of another kind, to a tolerance.
  golden, rtol = golden_set_for(here)
  want = json.loads((golden / f"{name}.json").read_text())
  monkeypatch.setenv("NAR_MARKOV_CACHE", str(data_cache_dir))
  results_dir = tmp_path / "results"
  got = comparable(train_run(name, results_dir), results_dir)
  diffs = differences(got, want, rtol=rtol)
  against = (f" (no set for a CPU with {here}: compared with the nearest, {golden.name}, "
             f"to rtol {rtol}; write this kind's set with this module's --write from code "
             "that passes on a kind that has one)" if rtol else "")
  assert not diffs, (f"{golden.name}/{name}: {len(diffs)} differences{against} (XLA:CPU "
                     f"threads here {devices.xla_cpu_threads()}, in the golden runs "
                     f"{GOLDEN_XLA_CPU_THREADS}):\n" + "\n".join(diffs[:40]))


def test_a_cpu_kind_without_a_set_is_compared_not_skipped(tmp_path, monkeypatch,
                                                          data_cache_dir):
  """A CI machine of a new kind ran "7 skipped"; an AVX2-only kind (no set) is compared
  with the nearest set, xeon_avx512, to the tolerance."""
  kind = {"model": "a CPU without a golden set", "simd": ["sse4_2", "avx", "avx2", "fma"]}
  monkeypatch.setattr(devices, "describe_host_cpu", lambda: dict(kind))
  assert golden_set_for(kind["simd"]) == (GOLDEN_ROOT / "xeon_avx512", OTHER_KIND_RTOL)
  try:
    test_a_tiny_run_gives_its_golden_numbers("forget", tmp_path, monkeypatch, data_cache_dir)
  except pytest.skip.Exception as e:
    pytest.fail(f"skipped: {e}")


def _write(folder: pathlib.Path) -> None:
  import tempfile  # pylint: disable=g-import-not-at-top
  folder.mkdir(parents=True, exist_ok=True)
  for name in sorted(RUNS):
    with tempfile.TemporaryDirectory() as tmp:
      results_dir = pathlib.Path(tmp) / "results"
      got = comparable(train_run(name, results_dir), results_dir)
    import gin  # pylint: disable=g-import-not-at-top
    gin.clear_config()
    (folder / f"{name}.json").write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    print(f"wrote {folder / name}.json", file=sys.stderr)


if __name__ == "__main__":
  if sys.argv[1:2] != ["--write"] or len(sys.argv) != 3:
    sys.exit("usage: PYTHONPATH=.:tests python tests/test_golden_runs.py --write "
             "tests/fixtures/golden_runs/<CPU kind>")
  _write(pathlib.Path(sys.argv[2]))
