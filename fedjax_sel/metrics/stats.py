"""Paired comparisons over seeds: the one test every study and the atlas report.

Two methods run on the same seeds see the same availability draws and the same initial
model, so their results pair by seed. ``paired(reference, other)`` gives the mean difference
``reference - other`` over the keys both hold, its 95 % confidence interval (Student's t with
n - 1 degrees of freedom, ``scipy.stats.t``) and the two-sided paired t-test's t and p
(``scipy.stats.ttest_rel``). Pairs are matched by key (a seed, or an evaluated round), never
by position.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats


class Paired(NamedTuple):
  """``reference - other`` over ``n`` pairs: mean, 95 % interval [low, high], t and p."""

  mean: float
  low: float
  high: float
  t: float
  p: float
  n: int

  def significant(self, alpha: float = 0.05) -> bool:
    return bool(np.isfinite(self.p) and self.p < alpha)


def paired(reference: dict, other: dict, confidence: float = 0.95) -> Paired:
  """The paired comparison of ``reference`` and ``other`` ({key: value}).

  With fewer than two pairs the interval, t and p are nan. With no spread in the
  differences the interval is the point, and t, p are scipy's limits (t = ±inf, p = 0; nan
  when every difference is 0), computed without scipy's warning.
  """
  keys = sorted(set(reference) & set(other))
  a = np.asarray([reference[k] for k in keys], np.float64)
  b = np.asarray([other[k] for k in keys], np.float64)
  d = a - b
  n = len(keys)
  nan = float("nan")
  mean = float(np.mean(d)) if n else nan
  if n < 2:
    return Paired(mean, nan, nan, nan, nan, n)
  if np.all(d == d[0]):
    if mean == 0.0:
      return Paired(mean, mean, mean, nan, nan, n)
    return Paired(mean, mean, mean, float(np.copysign(np.inf, mean)), 0.0, n)
  test = stats.ttest_rel(a, b)
  half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * np.std(d, ddof=1) / np.sqrt(n))
  return Paired(mean, mean - half, mean + half, float(test.statistic), float(test.pvalue), n)


def effect_size(reference: dict, other: dict) -> float:
  """Cohen's d_z of the paired differences: mean / std (ddof 1); nan under two pairs or
  with no spread."""
  keys = sorted(set(reference) & set(other))
  d = np.asarray([reference[k] - other[k] for k in keys], np.float64)
  if len(d) < 2:
    return float("nan")
  sd = float(np.std(d, ddof=1))
  return float(np.mean(d) / sd) if sd > 0 else float("nan")
