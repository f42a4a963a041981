"""benchmarks/profile_step.py: a tiny profile of both implementations attributes the
step's thunks to stages and to duration buckets that add up to the busy time."""

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # pytest puts tests/ on sys.path, not the repo root
  sys.path.insert(0, str(ROOT))

from benchmarks import profile_step  # noqa: E402


def test_duration_buckets():
  assert [profile_step.duration_bucket(us) for us in (3, 10, 99.9, 100, 5000)] == [
      "<10us", "10-100us", "10-100us", ">=100us", ">=100us"]


def test_tiny_profile_of_both_impls(tmp_path):
  out = tmp_path / "prof.json"
  assert profile_step.main(["--algorithms", "bfs", "--impl", "ours,clrs", "--hidden", "8",
                            "--batch", "2", "--lengths", "4", "--reps", "1",
                            "--out", str(out)]) == 0
  report = json.loads(out.read_text())
  for impl in ("ours", "clrs"):
    s = report["algorithms"]["bfs"][impl]["summary"]
    assert s["thunks"] > 0 and s["busy_ms"] > 0
    assert sum(s["busy_share_by_duration"].values()) == pytest.approx(1.0)
    assert sum(row["share"] for row in s["stages"].values()) == pytest.approx(1.0)
