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


# scipy.stats.ttest_ind(a, b, equal_var=False): statistic's p, df, confidence_interval(0.95)
WELCH = [
  ([73.78, 75.68, 74.9], [82.03, 85.21, 83.9],
   0.002642452794618401, 3.266868533076841, -12.194762528546843, -5.658570804786482),
  ([1.0, 2.0, 4.0, 8.0], [3.0, 3.5],
   0.76977751350346, 3.152127980682161, -4.356273865820844, 5.356273865820844),
]


@pytest.mark.parametrize("a, b, p, dof, low, high", WELCH)
def test_welch_t_is_scipys(a, b, p, dof, low, high):
  w = stats.welch_t(a, b)
  assert (w.n_a, w.n_b) == (len(a), len(b))
  assert w.mean == pytest.approx(sum(a) / len(a) - sum(b) / len(b))
  assert w.dof == pytest.approx(dof, rel=1e-12)
  assert w.p == pytest.approx(p, rel=1e-6)
  assert (w.low, w.high) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))


def test_welch_t_without_spread_or_samples_is_nan():
  assert math.isnan(stats.welch_t([1.0, 1.0], [2.0, 2.0]).p)
  assert math.isnan(stats.welch_t([1.0], [2.0, 3.0]).p)
  assert stats.welch_t([1.0], [2.0, 3.0]).mean == pytest.approx(-1.5)
  assert math.isnan(stats.welch_t([], [2.0, 3.0]).mean)


def test_one_sample_t_is_scipys():
  # scipy.stats.ttest_1samp([73.78, 75.68, 74.9], 63.67): p, confidence_interval().low
  t = stats.one_sample_t([73.78, 75.68, 74.9], 63.67)
  assert t.p == pytest.approx(0.0024512565497761068, rel=1e-6)
  assert t.low == pytest.approx(8.744174258265701, rel=1e-9)
  assert t.n == 3 and t.mean == pytest.approx(74.78666666666666 - 63.67)
