"""analysis.stats: Student's t without scipy, against values from scipy.stats 1.17."""

import math

import pytest

from analysis import stats

# scipy.stats.t.ppf(q, dof)
QUANTILES = [
  (0.975, 1, 12.706204736174694), (0.975, 2, 4.302652729749462), (0.975, 3, 3.1824463052837078),
  (0.975, 9, 2.262157162798205), (0.975, 29, 2.045229642132703), (0.95, 4, 2.1318467863266495),
  (0.025, 2, -4.302652729749462), (0.6, 5, 0.2671808657041451),
]
# 2 * scipy.stats.t.sf(|t|, dof)
TAILS = [
  (2.5, 4, 0.06676654481198814), (16.0, 2, 0.0038835098164954705), (1.0, 1, 0.5),
  (0.1, 9, 0.9225364479566812), (-3.0, 29, 0.005499192133903412),
  (40.0, 100, 2.462107602140071e-63),
]


@pytest.mark.parametrize("q, dof, expected", QUANTILES)
def test_t_quantile(q, dof, expected):
  assert stats.t_quantile(q, dof) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("t, dof, expected", TAILS)
def test_two_sided_tail(t, dof, expected):
  assert stats.t_sf_two_sided(t, dof) == pytest.approx(expected, rel=1e-4)


def test_betainc_known_values():
  assert stats.betainc(1.0, 1.0, 0.3) == pytest.approx(0.3)  # uniform
  assert stats.betainc(2.0, 3.0, 0.4) == pytest.approx(0.5248)  # scipy.special.betainc
  assert stats.betainc(0.5, 0.5, 0.5) == pytest.approx(0.5)
  with pytest.raises(ValueError):
    stats.betainc(1.0, 1.0, 1.5)


def test_paired_t_matches_scipy_ttest_rel():
  # scipy.stats.ttest_rel([6.2, 8.4, 4.5], [5, 5, 5]).pvalue: 0.3496977; the CI by hand.
  r = stats.paired_t([1.2, 3.4, -0.5])
  assert r.n == 3 and r.mean == pytest.approx(1.3666667)
  assert r.p == pytest.approx(0.3496977, rel=1e-6)
  half = 4.302652729749464 * math.sqrt(((1.2 - r.mean) ** 2 + (3.4 - r.mean) ** 2
                                        + (-0.5 - r.mean) ** 2) / 2) / math.sqrt(3)
  assert (r.low, r.high) == pytest.approx((r.mean - half, r.mean + half))


def test_paired_t_edge_cases():
  assert math.isnan(stats.paired_t([2.0]).p) and stats.paired_t([2.0]).mean == 2.0
  assert stats.paired_t([]).n == 0
  same = stats.paired_t([3.0, 3.0, 3.0])
  assert (same.p, same.low, same.high) == (0.0, 3.0, 3.0)
  assert stats.paired_t([0.0, 0.0]).p == 1.0
