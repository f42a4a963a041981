"""Paired comparisons over seeds: mean difference, its 95 % t interval and a two-sided paired
t-test, without scipy (the Student t distribution from the regularized incomplete beta)."""

import dataclasses
import math

CONFIDENCE = 0.95
DIRECTION_ONLY_P = 0.1  # a call whose p is above this reads "direction only"


def _beta_continued_fraction(a, b, x):
  """The continued fraction of the incomplete beta function (modified Lentz)."""
  tiny, eps = 1e-300, 1e-15
  qab, qap, qam = a + b, a + 1.0, a - 1.0
  c, d = 1.0, 1.0 - qab * x / qap
  d = 1.0 / (d if abs(d) > tiny else tiny)
  h = d
  for m in range(1, 10_000):
    m2 = 2 * m
    aa = m * (b - m) * x / ((qam + m2) * (a + m2))
    d = 1.0 + aa * d
    d = 1.0 / (d if abs(d) > tiny else tiny)
    c = 1.0 + aa / c
    c = c if abs(c) > tiny else tiny
    h *= d * c
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
    d = 1.0 + aa * d
    d = 1.0 / (d if abs(d) > tiny else tiny)
    c = 1.0 + aa / c
    c = c if abs(c) > tiny else tiny
    delta = d * c
    h *= delta
    if abs(delta - 1.0) < eps:
      return h
  raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")


def betainc(a, b, x):
  """The regularized incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1.

  Raises:
    ValueError: x is outside [0, 1].
    ArithmeticError: the continued fraction does not converge.
  """
  if not 0.0 <= x <= 1.0:
    raise ValueError(f"betainc: x={x} is outside [0, 1]")
  if x in (0.0, 1.0):
    return x
  log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
               + a * math.log(x) + b * math.log1p(-x))
  if x < (a + 1.0) / (a + b + 2.0):
    return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
  return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_sf_two_sided(t, dof):
  """P(|T| >= |t|) for Student's t with `dof` degrees of freedom."""
  if math.isinf(t):
    return 0.0
  return betainc(dof / 2.0, 0.5, dof / (dof + t * t))


def t_quantile(q, dof):
  """The q-quantile of Student's t with `dof` degrees of freedom, 0 < q < 1.

  By bisection on t_sf_two_sided, to a relative 1e-12.

  Raises:
    ValueError: q is outside (0, 1).
  """
  if not 0.0 < q < 1.0:
    raise ValueError(f"t_quantile: q={q} is outside (0, 1)")
  if q == 0.5:
    return 0.0
  tail = 2.0 * min(q, 1.0 - q)  # two-sided tail probability of |T| >= t
  lo, hi = 0.0, 1.0
  while t_sf_two_sided(hi, dof) > tail:
    hi *= 2.0
  for _ in range(200):
    mid = (lo + hi) / 2.0
    if t_sf_two_sided(mid, dof) > tail:
      lo = mid
    else:
      hi = mid
    if hi - lo < 1e-12 * max(1.0, hi):
      break
  t = (lo + hi) / 2.0
  return t if q > 0.5 else -t


@dataclasses.dataclass(frozen=True)
class Paired:
  """A paired comparison a - b over n seeds (`paired_t`).

  Attributes:
    n: the seeds.
    mean: the mean difference (NaN without seeds).
    low, high: its interval at the confidence asked for (95 % by default; t distribution,
      n - 1 degrees of freedom); NaN with fewer than 2 seeds, zero-width where every
      difference is the same.
    p: the two-sided paired t-test's p-value; NaN with fewer than 2 seeds; 0 where every
      difference is the same non-zero number, 1 where all are 0.
  """
  n: int
  mean: float
  low: float
  high: float
  p: float


def paired_t(differences, confidence=CONFIDENCE):
  """The paired comparison of `differences` (a - b per seed) at `confidence`: a Paired."""
  d = [float(x) for x in differences]
  n = len(d)
  if n == 0:
    return Paired(0, math.nan, math.nan, math.nan, math.nan)
  mean = sum(d) / n
  if n < 2:
    return Paired(n, mean, math.nan, math.nan, math.nan)
  sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
  se = sd / math.sqrt(n)
  half = t_quantile(0.5 + confidence / 2.0, n - 1) * se
  if se == 0.0:
    p = 1.0 if mean == 0.0 else 0.0
  else:
    p = t_sf_two_sided(mean / se, n - 1)
  return Paired(n, mean, mean - half, mean + half, p)


@dataclasses.dataclass(frozen=True)
class TwoSample:
  """Welch's comparison of two independent samples, mean(a) - mean(b) (`welch_t`).

  low, high, p and dof are NaN where either sample has fewer than 2 values, or both have
  no spread.

  Attributes:
    n_a, n_b: the samples' sizes.
    mean: the difference of their means (NaN where either is empty).
    low, high: its interval at the confidence asked for (95 % by default).
    p: the two-sided p-value on `dof`.
    dof: the Welch-Satterthwaite degrees of freedom.
  """
  n_a: int
  n_b: int
  mean: float
  low: float
  high: float
  p: float
  dof: float


def welch_t(a, b, confidence=CONFIDENCE):
  """Welch's comparison of two independent samples a, b (sequences of numbers): a TwoSample."""
  a, b = [float(x) for x in a], [float(x) for x in b]
  nan = math.nan
  if not a or not b:
    return TwoSample(len(a), len(b), nan, nan, nan, nan, nan)
  mean = sum(a) / len(a) - sum(b) / len(b)
  if len(a) < 2 or len(b) < 2:
    return TwoSample(len(a), len(b), mean, nan, nan, nan, nan)

  def var_of_mean(x):
    m = sum(x) / len(x)
    return sum((v - m) ** 2 for v in x) / (len(x) - 1) / len(x)

  va, vb = var_of_mean(a), var_of_mean(b)
  if va + vb == 0.0:
    return TwoSample(len(a), len(b), mean, nan, nan, nan, nan)
  se = math.sqrt(va + vb)
  dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
  half = t_quantile(0.5 + confidence / 2.0, dof) * se
  return TwoSample(len(a), len(b), mean, mean - half, mean + half,
                   t_sf_two_sided(mean / se, dof), dof)


def one_sample_t(values, mu, confidence=CONFIDENCE):
  """The one-sample t-test of `values` against a fixed mean `mu`: a Paired of values - mu.

  The paired test of each value against mu is the one-sample t-test.
  """
  return paired_t([float(v) - mu for v in values], confidence)
