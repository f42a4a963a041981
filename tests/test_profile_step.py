"""benchmarks/profile_step.py: a tiny profile of both implementations attributes the
step's thunks to stages and to duration buckets that add up to the busy time."""

import json
import mmap
import resource

import pytest

from benchmarks import profile_step


def test_duration_buckets():
  assert [profile_step.duration_bucket(us) for us in (3, 10, 99.9, 100, 5000)] == [
      "<10us", "10-100us", "10-100us", ">=100us", ">=100us"]


@pytest.mark.timeout(900)  # 3.5 minutes on a loaded 2-core machine
def test_tiny_profile_of_both_impls(tmp_path):
  out = tmp_path / "prof.json"
  assert profile_step.main(["--algorithms", "bfs", "--impl", "ours,clrs", "--hidden", "8",
                            "--batch", "2", "--lengths", "4", "--reps", "1",
                            "--out", str(out)]) == 0
  report = json.loads(out.read_text())
  for impl in ("ours", "clrs"):
    s = report["algorithms"]["bfs"][impl]["summary"]
    run = report["algorithms"]["bfs"][impl]["per_size"]["4"]
    # Each thunk of the trace is counted once by stage, once by duration and once as a
    # product or the rest: the three sums are the same busy time.
    assert run["thunks"] == int(run["thunks"]) >= len(run["top_ops"]) > 0  # one rep: a count
    assert sum(run["ms"].values()) == pytest.approx(run["busy_ms"])
    assert sum(run["busy_ms_by_duration"].values()) == pytest.approx(run["busy_ms"])
    assert (sum(run["products_ms"].values()) + run["rest_ms"]
            == pytest.approx(run["busy_ms"]))
    assert run["rest_gbps"] == pytest.approx(run["rest_mb"] / run["rest_ms"])
    # One size: the summary is that size's figures, split by stage and phase.
    for key in ("busy_ms", "thunks", "wall_ms", "untraced_ms", "minor_faults", "rest_mb"):
      assert s[key] == pytest.approx(run[key]), key
    assert s["rest_gbps"] == pytest.approx(run["rest_gbps"])
    for row in s["stages"].values():
      assert row["total"] == pytest.approx(row["fwd"] + row["remat"] + row["bwd"])
      assert row["share"] == pytest.approx(row["total"] / s["busy_ms"])
    assert sum(s["busy_share_by_duration"].values()) == pytest.approx(1.0)
    assert sum(row["share"] for row in s["stages"].values()) == pytest.approx(1.0)
    # Page faults and CPU time per untraced step, read by getrusage.
    # (getrusage splits CPU time by ticks, so a tiny step may show none of either.)
    assert s["minor_faults"] >= 0 and s["user_ms"] >= 0 and s["sys_ms"] >= 0
    assert s["first_touch_mb"] == pytest.approx(
        s["minor_faults"] * resource.getpagesize() / 2**20)
  assert "glibc_tunables" in report["settings"]
  c = report["algorithms"]["bfs"]["ceiling"]
  ours_run = report["algorithms"]["bfs"]["ours"]["per_size"]["4"]
  clrs_run = report["algorithms"]["bfs"]["clrs"]["per_size"]["4"]
  # dm-clrs's untraced step over ours; the message MLP's FLOPs at the product's rate
  # over ours' step.
  assert c["ratio_now_cycle"] == pytest.approx(clrs_run["untraced_ms"]
                                               / ours_run["untraced_ms"])
  assert ours_run["mlp_floor_ms"] == pytest.approx(
      1e3 * ours_run["mlp_flops"] / 1e9 / ours_run["matmul_limit_gflops"])
  assert c["median_size"] == "4" and c["at_limit_share_cycle"] == pytest.approx(
      ours_run["mlp_floor_ms"] / ours_run["untraced_ms"])
  # dm-clrs's step over ours, and over the message MLP's floor under ours' step.
  assert c["ratio_ceiling_cycle"] == pytest.approx(c["ratio_now_cycle"]
                                                   / c["at_limit_share_cycle"])
  # The products outside the remat: a floor under ours' step, dm-clrs's over it.
  products = report["algorithms"]["bfs"]["ours"]["per_size"]["4"]["products_ms"]
  assert products["fwd"] > 0 and products["bwd"] > 0
  wall = report["algorithms"]["bfs"]["ours"]["per_size"]["4"]["products_wall_ms"]
  assert 0 < wall <= products["fwd"] + products["bwd"] + 1e-9
  # Shares of the untraced step, from times under the profiler: no upper bound holds
  # for a step this small (dm-clrs's read 1.74 in one CI run, its products' traced
  # busy time against its fastest untraced step, on a machine running two tests).
  assert c["products_share_cycle"] > 0 and c["clrs_products_share_cycle"] > 0
  assert c["ratio_products_ceiling_cycle"] == pytest.approx(c["ratio_now_cycle"]
                                                            / c["products_share_cycle"])
  # The other passes: their bytes, and the step with them at a plain pass's rate.
  ours = report["algorithms"]["bfs"]["ours"]
  run = ours["per_size"]["4"]
  assert run["rest_mb"] > 0 and run["rest_ms"] > 0 and run["stream_limit_gbps"] > 0
  assert run["rest_stream_ms"] == pytest.approx(run["rest_mb"] / run["stream_limit_gbps"])
  # Both timed under the profiler: a share of the traced step, applied to the untraced.
  assert c["stream_share_cycle"] == pytest.approx(
      (run["products_wall_ms"] + run["rest_stream_ms"]) / run["wall_ms"])
  assert c["ratio_stream_ceiling_cycle"] == pytest.approx(c["ratio_now_cycle"]
                                                          / c["stream_share_cycle"])
  assert run["rest_dram_ms"] == pytest.approx(run["rest_mb"] / run["dram_limit_gbps"])
  assert c["ratio_dram_ceiling_cycle"] > 0
  # The products' arithmetic at the machine's peak: the strictest floor.
  assert ours["peak_gflops"] > 0 and sum(run["products_gflop"].values()) > 0
  assert run["products_peak_ms"] == pytest.approx(
      1e3 * (run["products_gflop"]["fwd"] + run["products_gflop"]["bwd"])
      / ours["peak_gflops"])
  assert c["peak_share_cycle"] > 0
  assert c["ratio_peak_ceiling_cycle"] == pytest.approx(c["ratio_now_cycle"]
                                                        / c["peak_share_cycle"])
  # Products of a few rows run far below a [2048]^2 product's rate.
  assert 0 < c["products_of_peak_cycle"] < 1


_HLO = """HloModule m

%fused_computation.1 (p0: f32[4,8], p1: f32[8,8]) -> f32[4,8] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %p1 = f32[8,8]{1,0} parameter(1)
  ROOT %dot.9 = f32[4,8]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_computation.2 (p0: f32[4,8]) -> f32[4] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %c = f32[] constant(0)
  ROOT %reduce.3 = f32[4]{0} reduce(%p0, %c), dimensions={1}, to_apply=%add
}

ENTRY %main.5 (a: f32[4,8], w: f32[8,8]) -> f32[4] {
  %a = f32[4,8]{1,0} parameter(0)
  %w = f32[8,8]{1,0} parameter(1)
  %ynn_fusion = f32[4,8]{1,0} fusion(%a, %w), kind=kCustom, calls=%fused_computation.1
  %dot.4 = f32[4,8]{1,0} dot(%ynn_fusion, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %ynn_fusion.1 = f32[4]{0} fusion(%dot.4), kind=kCustom, calls=%fused_computation.2
}
"""


def test_the_impls_take_turns_size_by_size(monkeypatch):
  """One impl profiled whole before the other lets the machine's drift over minutes
  fall on one of them; they alternate per size, which goes first alternating."""
  calls = []

  class Done(Exception):
    pass

  def fake_profile_size(impl, algorithm, feedback, spec, hidden, reps, seed):
    calls.append((impl, profile_step.batching.nb_nodes_of(feedback)))
    return {"wall_ms": 1.0}

  def stop(per_size):
    raise Done

  monkeypatch.setattr(profile_step, "profile_size", fake_profile_size)
  monkeypatch.setattr(profile_step, "summarize", stop)
  with pytest.raises(Done):
    profile_step.profile_algorithm("bfs", ["ours", "clrs"], hidden=8, batch=2,
                                   lengths=[4, 7, 11], reps=1, seed=0)
  assert calls == [("ours", 4), ("clrs", 4), ("clrs", 7), ("ours", 7),
                   ("ours", 11), ("clrs", 11)]


def test_covered_counts_overlaps_once():
  assert profile_step.covered_us([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17
  assert profile_step.covered_us([]) == 0


def test_products_are_dots_and_fusions_of_one():
  products = set(profile_step.product_flops(_HLO))
  assert {"ynn_fusion", "dot.4"} <= products
  assert "ynn_fusion.1" not in products and "reduce.3" not in products


def test_product_flops_count_each_dot_and_the_dots_a_fusion_holds():
  flops = profile_step.product_flops(_HLO)
  # [4, 8] x [8, 8]: 4 * 8 outputs, 8 products and sums each.
  assert flops["ynn_fusion"] == flops["dot.4"] == 2 * 4 * 8 * 8
  assert "ynn_fusion.1" not in flops
  batched = _HLO.replace(
      "%dot.4 = f32[4,8]{1,0} dot(%ynn_fusion, %w), lhs_contracting_dims={1}",
      "%dot.4 = f32[8]{0} dot(%ynn_fusion, %w), lhs_contracting_dims={0}")
  assert profile_step.product_flops(batched)["dot.4"] == 2 * 8 * 4


def test_untraced_counts_the_pages_a_call_touches_fresh():
  page = resource.getpagesize()

  def touch():  # a fresh anonymous mapping: every page faults on its first write
    m = mmap.mmap(-1, 256 * page)
    for i in range(0, 256 * page, page):
      m[i] = 1
    m.close()

  res = profile_step.untraced(touch, reps=3)
  assert res["minor_faults"] >= 256
  assert res["untraced_ms"] > 0 and res["sys_ms"] >= 0


_HLO_BYTES = """HloModule m

%fused_computation.7 (p0: f32[10,4,8], p1: f32[4,8], p2: s32[]) -> f32[10,4,8] {
  %p0 = f32[10,4,8]{2,1,0} parameter(0)
  %p1 = f32[4,8]{1,0} parameter(1)
  %p2 = s32[] parameter(2)
  %z = s32[] constant(0)
  %m = f32[4,8]{1,0} maximum(%p1, %p1)
  %b = f32[1,4,8]{2,1,0} bitcast(%m)
  ROOT %dus = f32[10,4,8]{2,1,0} dynamic-update-slice(%p0, %b, %p2, %z, %z)
}

%fused_computation.8 (q0: f32[10,4,8], q1: s32[]) -> f32[4,8] {
  %q0 = f32[10,4,8]{2,1,0} parameter(0)
  %q1 = s32[] parameter(1)
  %z.1 = s32[] constant(0)
  %ds = f32[1,4,8]{2,1,0} dynamic-slice(%q0, %q1, %z.1, %z.1), dynamic_slice_sizes={1,4,8}
  %r = f32[4,8]{1,0} bitcast(%ds)
  ROOT %neg = f32[4,8]{1,0} negate(%r)
}

ENTRY %main (s: f32[10,4,8], x: f32[4,8], i: s32[]) -> f32[4,8] {
  %s = f32[10,4,8]{2,1,0} parameter(0)
  %x = f32[4,8]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %upd = f32[10,4,8]{2,1,0} fusion(%s, %x, %i), kind=kLoop, calls=%fused_computation.7
  %rd = f32[4,8]{1,0} fusion(%upd, %i), kind=kLoop, calls=%fused_computation.8
  %cp = pred[4,8]{1,0} copy(%rd)
  ROOT %add = f32[4,8]{1,0} add(%rd, %x)
}
"""


def test_thunk_bytes_counts_slices_and_in_place_updates():
  # (Instruction names are unique in a module, as XLA prints them.)
  nbytes = profile_step.thunk_bytes(_HLO_BYTES)
  assert set(nbytes) == {"s", "x", "i", "upd", "rd", "cp", "add"}
  # In place: reads x and the index, writes one [4, 8] slice; the stack is not read.
  assert nbytes["upd"] == 4 * 32 + 4 + 4 * 32
  # Reads one slice of the stack and the index, writes [4, 8].
  assert nbytes["rd"] == 4 * 32 + 4 + 4 * 32
  assert nbytes["cp"] == 2 * 32          # a copy: its result's size, read and written
  assert nbytes["add"] == 3 * 4 * 32     # two operands and the result
