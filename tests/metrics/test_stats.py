"""``fedjax_sel.metrics.stats``: the paired comparison over seeds, worked out by hand."""

import math

import pytest

from fedjax_sel.metrics import stats


def test_paired_by_hand():
  """Differences 2, 3, 1 (keys 0-2; key 9 has no pair): mean 2, sd 1, t = 2 / (1 / sqrt 3)
  = 3.4641 on 2 degrees of freedom, two-sided p = 0.07418; the 95 % interval is
  2 ± 4.3027 / sqrt 3 = 2 ± 2.4841."""
  r = stats.paired({0: 12.0, 1: 13.0, 2: 11.0, 9: 5.0}, {0: 10.0, 1: 10.0, 2: 10.0})
  assert r.n == 3 and r.mean == pytest.approx(2.0)
  assert r.t == pytest.approx(2 * math.sqrt(3))
  assert r.p == pytest.approx(0.07418, abs=1e-5)
  assert (r.low, r.high) == pytest.approx((2 - 2.48414, 2 + 2.48414), abs=1e-5)
  assert not r.significant()
  assert stats.paired({0: 10.0, 1: 10.0, 2: 10.0}, {0: 12.0, 1: 13.0, 2: 11.0}).t == pytest.approx(
    -2 * math.sqrt(3)
  )
  assert stats.effect_size({0: 12.0, 1: 13.0, 2: 11.0}, {0: 10.0, 1: 10.0, 2: 10.0}) == 2.0


def test_paired_edge_cases():
  one = stats.paired({0: 3.0}, {0: 1.0})
  assert one.mean == 2.0 and one.n == 1 and math.isnan(one.low) and math.isnan(one.p)
  shift = stats.paired({0: 1.0, 1: 2.0}, {0: 0.5, 1: 1.5})
  assert (shift.low, shift.high, shift.p) == (0.5, 0.5, 0.0) and shift.t == math.inf
  assert shift.significant()
  same = stats.paired({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0})
  assert same.mean == 0.0 and math.isnan(same.p) and not same.significant()
  assert math.isnan(stats.effect_size({0: 1.0}, {0: 0.0}))
