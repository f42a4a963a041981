"""make_tables never puts runs of two protocols in one table unless told how (analysis.protocols)."""

import json
import pathlib
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from analysis import make_tables
from analysis import protocols

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "tests" / "fixtures" / "analysis" / "results"


def _edit(path, **changes):
  data = json.loads(path.read_text())
  settings = dict(data.get("settings") or {})
  for key, value in changes.items():
    if key in data:
      data[key] = value
    settings[key] = value
  data["settings"] = settings
  path.write_text(json.dumps(data))


@pytest.fixture
def mixed(tmp_path):
  """The fixture results with the baseline's bfs runs trained 1,500 steps at hidden 64."""
  results = tmp_path / "results"
  shutil.copytree(RESULTS, results)
  for seed in range(3):
    _edit(results / "baseline" / "bfs" / f"seed{seed}" / "result.json", train_steps=1500,
          hidden_size=64)
  return results


def _cli(*args, cwd):
  return subprocess.run([sys.executable, str(ROOT / "analysis" / "make_tables.py"), *args],
                        cwd=cwd, capture_output=True, text=True, timeout=120)


def test_mixed_protocols_are_refused_in_one_line_that_names_the_groups(mixed, tmp_path):
  proc = _cli("--results", str(mixed), "--out", str(tmp_path / "out"), cwd=tmp_path)
  assert proc.returncode == 2, proc.stderr
  line = proc.stderr.strip().splitlines()[-1]
  assert line == (
    f"make_tables.py: error: --results {mixed} holds runs of 2 protocols "
    "(train_steps=500,schedule_steps=500,hidden_size=16: 30 runs; "
    "train_steps=1500,schedule_steps=1500,hidden_size=64: 3 runs); pass --split-by "
    "train_steps,schedule_steps,hidden_size for one table set per protocol, or --allow-mixed "
    "for one table of them all")
  assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_split_by_writes_one_table_set_per_group(mixed, tmp_path):
  out = tmp_path / "out"
  proc = _cli("--results", str(mixed), "--out", str(out), "--split-by", "train_steps",
              cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr
  assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
    "train_steps=1500", "train_steps=500"]
  short = pd.read_csv(out / "train_steps=1500" / "seeds.csv")
  assert list(zip(short["model"], short["algorithm"], short["n_seeds"])) == [
    ("baseline", "bfs", 3)]
  full = pd.read_csv(out / "train_steps=500" / "seeds.csv")
  assert not ((full["model"] == "baseline") & (full["algorithm"] == "bfs")).any()
  assert (out / "train_steps=500" / "three_models.tex").exists()


def test_split_by_that_leaves_a_group_mixed_is_refused(mixed, tmp_path):
  for seed in range(3):  # now batch size alone tells the two groups apart
    _edit(mixed / "baseline" / "bfs" / f"seed{seed}" / "result.json", train_steps=500,
          hidden_size=16, batch_size=8)
  proc = _cli("--results", str(mixed), "--out", str(tmp_path / "out"), "--split-by",
              "train_steps", cwd=tmp_path)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1] == (
    "make_tables.py: error: --split-by train_steps leaves runs of 2 protocols in "
    "train_steps=500 (batch_size=4: 30 runs; batch_size=8: 3 runs); add batch_size to "
    "--split-by, or pass --allow-mixed")


def test_allow_mixed_makes_one_table(mixed, tmp_path):
  proc = _cli("--results", str(mixed), "--out", str(tmp_path / "out"), "--allow-mixed",
              cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr
  seeds = pd.read_csv(tmp_path / "out" / "seeds.csv")
  assert ((seeds["model"] == "baseline") & (seeds["algorithm"] == "bfs")).any()


def test_a_run_in_two_protocols_is_two_runs_not_a_duplicate(mixed, tmp_path):
  """Was: the second copy (another protocol) was dropped as a duplicate before any
  grouping, so a table silently showed whichever path sorted first."""
  copy = mixed / "again" / "baseline" / "bfs" / "seed0"
  shutil.copytree(RESULTS / "baseline" / "bfs" / "seed0", copy)  # 500 steps, like the rest
  out = tmp_path / "out"
  logs = []
  make_tables.make_all(mixed, out, split_by=["train_steps"], log=logs.append)
  assert pd.read_csv(out / "train_steps=1500" / "seeds.csv")["n_seeds"].tolist() == [3]
  full = pd.read_csv(out / "train_steps=500" / "seeds.csv")
  assert full[(full["model"] == "baseline") & (full["algorithm"] == "bfs")]["seeds"].tolist() == ["0"]


def test_duplicates_end_with_one_line_that_says_what_to_do(tmp_path):
  results = tmp_path / "results"
  shutil.copytree(RESULTS, results / "a")
  shutil.copytree(RESULTS / "gforget", results / "b" / "gforget")
  proc = _cli("--results", str(results), "--out", str(tmp_path / "out"), cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr
  n = proc.stderr.count(": duplicate of ")
  assert n == 9  # gforget's valid fixture runs (3 algorithms x 3 seeds)
  assert (f"{n} duplicate runs left out (the same model, algorithm, seed and protocol under "
          "two paths; the first in path order is in the tables): point --results at one "
          "sweep's folder, or move the copies you do not want under an _archive/ folder"
          ) in proc.stderr.splitlines()


@pytest.mark.parametrize("args, message", [
  (["--expected-seeds", "0"], "argument --expected-seeds: wants a number of seeds >= 1, got '0'"),
  (["--expected-seeds", "x"], "argument --expected-seeds: wants a number of seeds >= 1, got 'x'"),
  (["--split-by", "stepz"], "--split-by 'stepz': stepz is not a protocol setting; valid: "),
])
def test_bad_flags_are_one_line(args, message, tmp_path):
  proc = _cli("--results", str(RESULTS), "--out", str(tmp_path / "out"), *args, cwd=tmp_path)
  assert proc.returncode == 2
  assert message in proc.stderr.strip().splitlines()[-1]
  assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def _run(algorithm, seed=0, **settings):
  base = {"algorithm": algorithm, "train_steps": 10000, "train_lengths": [4, 7, 11, 13, 16],
          "hidden_size": 128, "processor": "triplet_gmpnn"}
  return {"model": "gforget", "algorithm": algorithm, "seed": seed,
          "settings": dict(base, **settings)}


def test_a_string_matcher_joins_the_protocol_its_train_size_comes_from():
  runs = [_run("insertion_sort"), _run("naive_string_matcher", train_lengths=[20])]
  groups = protocols.protocol_groups(runs)
  assert len(groups) == 1 and len(groups[0].runs) == 2
  other = [_run("insertion_sort"), _run("naive_string_matcher", train_lengths=[40])]
  assert len(protocols.protocol_groups(other)) == 2


def test_model_variants_are_one_protocol_and_the_processor_is_not():
  variants = [_run("kadane", history_scope="processor"), _run("kadane", adaptive_every_steps=125),
              _run("kadane", gate_bias_init=1.0), _run("kadane")]
  assert len(protocols.protocol_groups(variants)) == 1
  groups = protocols.protocol_groups([_run("kadane"), _run("kadane", processor="triplet_mpnn")])
  assert protocols.differing(groups) == ["processor"]


def test_the_decoder_input_is_protocol_and_reads_as_dmclrs_where_unrecorded():
  """NetConfig.decoder_input is architecture, as the processor: 'processed' runs are
  another protocol; a result without the key (every committed one) is a 'dmclrs' run."""
  groups = protocols.protocol_groups([_run("kadane"), _run("kadane", decoder_input="processed")])
  assert protocols.differing(groups) == ["decoder_input"]
  assert protocols.protocol(_run("kadane"))["decoder_input"] == "dmclrs"
  assert len(protocols.protocol_groups([_run("kadane"),
                                        _run("kadane", decoder_input="dmclrs")])) == 1


def test_a_missing_setting_reads_as_its_default():
  old = _run("kadane")
  del old["settings"]["processor"]
  assert len(protocols.protocol_groups([old, _run("kadane")])) == 1
