"""The rule every reproduction verdict follows (fedjax_sel/metrics/verdicts.py), on cases
worked out by hand: each planted effect gives its word."""

import math

import numpy as np
import pytest
from scipy import stats

from fedjax_sel.metrics import stats as fs
from fedjax_sel.metrics import verdicts as V


def paired(a, b):
  return V.Effect(V.difference(V.Sample.of(dict(enumerate(a))), V.Sample.of(dict(enumerate(b)))))


# d = a - b = (0.5, 0.6, 0.4): mean 0.5, sd 0.1, se 0.1 / sqrt(3) = 0.05774, t = 8.660 with 2
# degrees of freedom; for df = 2 the two-sided p is 1 - t / sqrt(t^2 + 2) = 0.01307 and
# t_0.975(2) = 4.303, so the interval is 0.5 ± 0.2484.
A, B = (1.0, 2.0, 3.0), (0.5, 1.4, 2.6)


def test_paired_effect_by_hand():
  e = paired(A, B)
  assert e.mean == pytest.approx(0.5)
  assert e.t == pytest.approx(8.660, abs=1e-3)
  assert e.p == pytest.approx(1 - 8.6603 / math.sqrt(8.6603**2 + 2), abs=1e-4)
  assert e.p == pytest.approx(0.01307, abs=1e-4)
  assert (e.low, e.high) == pytest.approx((0.5 - 0.2484, 0.5 + 0.2484), abs=1e-3)
  assert e.p == pytest.approx(stats.ttest_rel(A, B).pvalue)


def test_direction_words():
  assert V.direction_verdict(paired(A, B), higher=True).word == V.REPRODUCED
  # the opposite sign, significant
  assert V.direction_verdict(paired(A, B), higher=False).word == V.NOT_REPRODUCED
  # the paper's sign and significant, but the paper states a size of 3 the interval misses
  assert V.direction_verdict(paired(A, B), higher=True, size=3.0).word == V.NOT_REPRODUCED
  # ... and a size of 0.7 the interval [0.25, 0.75] reaches
  assert V.direction_verdict(paired(A, B), higher=True, size=0.7).word == V.REPRODUCED
  # two seeds of a large effect: below 3 seeds, inconclusive
  assert V.direction_verdict(paired(A[:2], B[:2]), higher=True).word == V.INCONCLUSIVE
  # noise: d = (1, -1, 0.5): not significant
  assert V.direction_verdict(paired((1, 0, 1), (0, 1, 0.5)), higher=True).word == V.INCONCLUSIVE


def test_one_seed_is_marked():
  v = V.direction_verdict(paired(A[:1], B[:1]), higher=True)
  assert (v.word, v.label()) == (V.INCONCLUSIVE, "inconclusive (one seed)")
  v = V.value_verdict(V.Sample.of({0: 0.31}), paper=0.30, tolerance=0.02)
  assert v.label() == "reproduced (one seed)"


def test_welch_from_a_tables_mean_and_std():
  # 10 ± 1 and 8 ± 1 over 3 seeds (population std): sample sd sqrt(1.5), se 1/sqrt(2) each,
  # the difference's se 1, t = 2, Welch's df (0.5 + 0.5)^2 / (0.25/2 + 0.25/2) = 4.
  e = V.Effect(V.difference(V.Sample.from_stats(10, 1, 3), V.Sample.from_stats(8, 1, 3)))
  assert (e.mean, e.t, e.sample.df) == pytest.approx((2.0, 2.0, 4.0))
  sd = math.sqrt(1.5)
  want = stats.ttest_ind_from_stats(10, sd, 3, 8, sd, 3, equal_var=False)
  assert e.p == pytest.approx(want.pvalue)
  assert e.p == pytest.approx(0.1161, abs=1e-4)
  assert V.direction_verdict(e, higher=True).word == V.INCONCLUSIVE


def test_value_words():
  check = lambda vals: V.value_verdict(V.Sample.of(dict(enumerate(vals))), 19.8, 2.0).word
  assert check((19.0, 20.5, 21.5)) == V.REPRODUCED  # every seed in [17.8, 21.8]
  # 22 is out, but the mean's interval 20.5 ± 3.73 overlaps the band
  assert check((19.0, 20.5, 22.0)) == V.INCONCLUSIVE
  assert check((30.0, 31.0, 32.0)) == V.NOT_REPRODUCED  # 31 ± 2.48 lies above 21.8
  assert check((25.0,)) == V.NOT_REPRODUCED  # one seed, outside


def test_equivalence_and_not_worse():
  eq = lambda d, m: V.equivalence_verdict(paired(d, (0, 0, 0)), m).word
  assert eq((0.1, -0.1, 0.0), 1.0) == V.REPRODUCED  # 0 ± 0.248 inside ± 1
  assert eq((5.0, 5.1, 4.9), 1.0) == V.NOT_REPRODUCED  # 5 ± 0.248, significant, outside
  assert eq((1.0, -1.0, 0.5), 1.0) == V.INCONCLUSIVE  # 0.17 ± 2.5
  nw = lambda d, m: V.equivalence_verdict(paired(d, (0, 0, 0)), m, worse_only=1).word
  assert nw((-0.2, -0.1, 0.0), 1.0) == V.REPRODUCED  # worse end -0.348 above -1
  assert nw((-5.0, -5.1, -4.9), 1.0) == V.NOT_REPRODUCED
  assert nw((5.0, 5.1, 4.9), 1.0) == V.REPRODUCED  # better is never worse


def test_combine_words():
  v = lambda w: V.Verdict(w, "", (0, 1, 2), 3)
  R, N, Inc, P, M = (
    v(w) for w in (V.REPRODUCED, V.NOT_REPRODUCED, V.INCONCLUSIVE, V.PARTLY, V.NOT_MEASURABLE)
  )
  word = lambda *ps: V.combine([(str(i), p) for i, p in enumerate(ps)]).word
  assert word(R, R) == V.REPRODUCED
  assert word(N, N) == V.NOT_REPRODUCED
  assert word(R, N) == V.PARTLY
  assert word(R, Inc) == V.INCONCLUSIVE
  assert word(N, Inc) == V.NOT_REPRODUCED  # one refuted part refutes the claim
  assert word(Inc, Inc) == V.INCONCLUSIVE
  assert word(R, P) == V.PARTLY
  assert word(M) == V.NOT_MEASURABLE
  assert word(R, M) == V.REPRODUCED


def test_no_spread_over_seeds_the_sign_decides():
  # CR saving 0.00 ± 0.00 % against 0.00 ± 0.00 %: exactly no difference on every seed
  zero = V.Effect(V.difference(V.Sample.from_stats(0, 0, 3), V.Sample.from_stats(0, 0, 3)))
  assert V.direction_verdict(zero, higher=True).word == V.NOT_REPRODUCED
  same = V.Effect(
    V.difference(V.Sample.of({0: 2.0, 1: 3.0, 2: 4.0}), V.Sample.of({0: 1.0, 1: 2.0, 2: 3.0}))
  )
  assert (same.mean, same.p) == (1.0, 0.0)
  assert V.direction_verdict(same, higher=True).word == V.REPRODUCED
  assert V.direction_verdict(same, higher=False).word == V.NOT_REPRODUCED
  assert V.direction_verdict(same, higher=True, size=2.0).word == V.NOT_REPRODUCED
  # the same constant difference on two seeds: below 3 seeds, no word from the sign alone
  two = V.Effect(V.difference(V.Sample.of({0: 2.0, 1: 3.0}), V.Sample.of({0: 1.0, 1: 2.0})))
  assert V.direction_verdict(two, higher=True).word == V.INCONCLUSIVE


def test_spread_by_levene():
  wide = V.Sample.of({0: 100.0, 1: 160.0, 2: 110.0, 3: 130.0})
  narrow = V.Sample.of({0: 101.0, 1: 103.0, 2: 108.0, 3: 104.0})
  v = V.spread_verdict(wide, narrow, higher=True)
  want = stats.levene([100, 160, 110, 130], [101, 103, 108, 104]).pvalue
  assert v.detail.endswith(f"Levene's p = {V._p(want)}") and want < 0.05
  assert v.word == V.REPRODUCED
  assert V.spread_verdict(wide, narrow, higher=False).word == V.NOT_REPRODUCED
  two = V.Sample.of({0: 1.0, 1: 9.0})
  assert V.spread_verdict(two, V.Sample.of({0: 1.0, 1: 1.1}), higher=True).word == V.INCONCLUSIVE
  with pytest.raises(V.ClaimsError, match="per-seed values"):
    V.spread_verdict(V.Sample.from_stats(1, 1, 3), narrow, higher=True)


def test_the_paired_effect_is_the_studies_paired_test():
  rng = np.random.default_rng(0)
  for n in (3, 5):
    a = dict(enumerate(rng.normal(80, 2, n)))
    b = dict(enumerate(rng.normal(79, 2, n)))
    e = V.Effect(V.difference(V.Sample.of(a), V.Sample.of(b)))
    want = fs.paired(a, b)
    assert (e.mean, e.low, e.high, e.t, e.p) == pytest.approx(
      (want.mean, want.low, want.high, want.t, want.p)
    )


def test_bound_words():
  at_most = lambda vals, b=5.0: V.bound_verdict(V.Sample.of(dict(enumerate(vals))), b, True).word
  assert at_most((4.0, 4.5, 5.0)) == V.REPRODUCED  # every seed at most 5
  assert at_most((9.0, 10.0, 11.0)) == V.NOT_REPRODUCED  # 10 ± 2.48 lies above 5
  assert at_most((4.0, 5.0, 6.5)) == V.INCONCLUSIVE
  at_least = V.bound_verdict(V.Sample.of({0: 4.0, 1: 4.5, 2: 5.0}), 3.0, False)
  assert (at_least.word, at_least.detail) == (
    V.REPRODUCED,
    "4.5 [3.26, 5.74] vs paper ≥ 3",
  )  # sd 0.5, 4.303 x 0.5 / sqrt(3) = 1.24


def test_relative_change_by_hand():
  # per seed: (110 - 100) / 100 and (120 - 100) / 100
  s = V.relative(V.Sample.of({0: 110.0, 1: 120.0}), V.Sample.of({0: 100.0, 1: 100.0}))
  assert s.values == pytest.approx({0: 10.0, 1: 20.0}) and s.mean == pytest.approx(15.0)
  # from two tables' 110 ± 1 and 100 ± 1 over 3 seeds: se of each mean sqrt(1.5 / 3) = 0.7071;
  # se = 100 sqrt((0.7071 / 100)^2 + (110 x 0.7071 / 100^2)^2) = 1.0512, df = 2
  s = V.relative(V.Sample.from_stats(110, 1, 3), V.Sample.from_stats(100, 1, 3))
  assert (s.mean, s.se, s.df) == pytest.approx((10.0, 1.0512, 2.0), abs=1e-4)


def test_a_value_from_a_tables_mean_and_std():
  # "every seed" is read as mean ± sample std: 19.8 ± sqrt(1.5) = [18.58, 21.02] in [17.8, 21.8]
  word = lambda mean, std: V.value_verdict(V.Sample.from_stats(mean, std, 3), 19.8, 2.0).word
  assert word(19.8, 1.0) == V.REPRODUCED
  # 19.8 ± 2.449 leaves the band; the mean's interval 19.8 ± 4.303 x 1.414 overlaps it
  assert word(19.8, 2.0) == V.INCONCLUSIVE
  assert word(40.0, 1.0) == V.NOT_REPRODUCED  # 40 ± 3.04 lies above 21.8


def test_a_composite_counts_the_seeds_that_decide():
  three = V.Verdict(V.NOT_REPRODUCED, "x", (0, 1, 2), 3)
  one = V.Verdict(V.INCONCLUSIVE, "y", (0,), 1)
  v = V.combine([("a", three), ("b", one)])
  assert (v.word, v.label()) == (V.NOT_REPRODUCED, "not reproduced")  # decided on 3 seeds
  v = V.combine([("a", V.Verdict(V.INCONCLUSIVE, "x", (0, 1, 2), 3)), ("b", one)])
  assert v.label() == "inconclusive (one seed)"


def test_welch_with_unequal_arms_by_hand():
  # 10 ± 1 over 3 seeds and 8 ± 2 over 5 (population std): se^2 1.5 / 3 = 0.5 and
  # (2^2 x 5 / 4) / 5 = 1; the difference's se sqrt(1.5) = 1.2247, t = 1.633, Welch's df
  # 1.5^2 / (0.5^2 / 2 + 1^2 / 4) = 6
  e = V.Effect(V.difference(V.Sample.from_stats(10, 1, 3), V.Sample.from_stats(8, 2, 5)))
  assert (e.sample.se, e.t, e.sample.df) == pytest.approx((1.2247, 1.633, 6.0), abs=1e-3)
  want = stats.ttest_ind_from_stats(10, math.sqrt(1.5), 3, 8, math.sqrt(5.0), 5, equal_var=False)
  assert e.p == pytest.approx(want.pvalue)
