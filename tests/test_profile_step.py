"""benchmarks/profile_step.py: a tiny profile of both implementations attributes the
step's thunks to stages and to duration buckets that add up to the busy time."""

import json

import pytest

from benchmarks import profile_step


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
  c = report["algorithms"]["bfs"]["ceiling"]
  assert c["median_size"] == "4" and c["at_limit_share_cycle"] > 0
  # dm-clrs's step over ours, and over the message MLP's floor under ours' step.
  assert c["ratio_ceiling_cycle"] == pytest.approx(c["ratio_now_cycle"]
                                                   / c["at_limit_share_cycle"])
