"""The one rule every reproduction verdict follows (``experiments.claims`` applies it).

* A **direction** ("A is better than B") is *reproduced* when the effect A - B has the
  paper's sign with p < 0.05 over at least 3 seeds (and, where the paper states a size, the
  95 % interval reaches it), *not reproduced* when the opposite sign is significant (p <
  0.05) or the interval lies below the paper's size, and *inconclusive* otherwise (fewer
  than 3 seeds included).
* A **value** (a number of the paper within a stated tolerance) is *reproduced* when every
  seed is within the tolerance, *not reproduced* when the 95 % interval of our mean lies
  outside paper ± tolerance (with one seed: when that seed is outside), *inconclusive*
  otherwise.
* A **spread** ("A varies more over runs than B") is decided as a direction on the
  difference of the standard deviations over seeds, with Levene's test (scipy's).
* A **bound** ("at most 5 %") is decided as a value: kept by every seed, or exceeded by the
  95 % interval of our mean.
* An **equivalence** ("A does as well as B", within a stated margin) is *reproduced* when the
  95 % interval of A - B lies inside ± margin, *not reproduced* when the difference is
  significant and its interval lies outside ± margin, *inconclusive* otherwise. A
  **non-inferiority** ("A never does worse than B", margin m) is *reproduced* when the
  interval's worse end is above -m, *not reproduced* when it is significantly worse by more
  than m.
* A claim of several parts (an order of methods, a trend over a swept parameter, one claim
  in several modes) is *reproduced* when every part is, *not reproduced* when some part is
  not and none is (the claim asserts every part), *partly* when some parts are reproduced
  and some are not, *inconclusive* otherwise.
* *Not measurable* names what is missing (a dataset, a model) and its cost.

Effects pair by seed where both arms' per-seed files are committed: Student's t over the
seeds both arms hold, the test of ``fedjax_sel.metrics.stats.paired`` (the same mean,
interval, t and p: tested; scipy's ``ttest_rel``), here on a ``Sample`` so that a
difference of differences (a gain at each point of a trend) is tested the same way; where a
committed table holds only "mean ± std" over n seeds (population std), the comparison is
Welch's t-test from those statistics (scipy's ``ttest_ind_from_stats``). A verdict resting
on one seed is marked "(one seed)".
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as scipy_stats

ALPHA = 0.05
MIN_SEEDS = 3
CONFIDENCE = 0.95

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
PARTLY = "partly"
NOT_MEASURABLE = "not measurable"
WORDS = (REPRODUCED, NOT_REPRODUCED, PARTLY, INCONCLUSIVE, NOT_MEASURABLE)

RULE_PARTS = (
  "A direction (A better than B) is reproduced when A - B has the paper's sign with p < 0.05 "
  "over at least 3 seeds and its 95 % interval reaches the paper's size where one is stated; "
  "not reproduced when the opposite sign is significant or the interval lies below the "
  "paper's size; inconclusive otherwise (fewer than 3 seeds included). With no spread over "
  "the seeds the sign alone decides, and no difference is not the paper's direction.",
  "A value is reproduced when every seed is within the stated tolerance of the paper's "
  "number, not reproduced when the 95 % interval of our mean lies outside it (one seed: when "
  "that seed does), inconclusive otherwise; a bound the paper states (at most, at least) "
  "likewise.",
  "A spread over seeds (A varies more than B) is decided as a direction, by Levene's test.",
  "An equivalence within a margin is reproduced when the interval of A - B lies inside "
  "± margin, not reproduced when A - B is significant and outside it; where the paper states "
  "no margin, it is one accuracy point, the same for every paper.",
  "A claim of several parts (every mode, every baseline, each step of a trend) is reproduced "
  "when every part is, not reproduced when some part is not and none is, partly when some "
  "parts are and some are not, inconclusive otherwise.",
)
RULE = " ".join(RULE_PARTS)


class ClaimsError(ValueError):
  """A claims file that does not follow the schema, or a committed file it names that is
  missing or does not hold what the claim reads: the message names the claim and the
  field."""


# ---------------------------------------------------------------------------------------
# Samples: one arm's values over seeds, or its committed mean ± std over n seeds.


@dataclasses.dataclass(frozen=True)
class Sample:
  """A quantity measured over seeds: per-seed ``values`` where committed, else the table's
  ``mean``, its standard error ``se`` and degrees of freedom ``df`` (n - 1; Welch's
  for a difference of two unpaired arms)."""

  mean: float
  se: float
  df: float
  n: int
  values: dict[int, float] | None = None
  censored: int = 0  # seeds whose value is a bound ("not reached in R rounds" -> R + 1)

  @classmethod
  def of(cls, values: dict[int, float], censored: int = 0) -> Sample:
    if not values:
      raise ClaimsError("no committed seed holds this value")
    a = np.asarray([values[k] for k in sorted(values)], np.float64)
    n = len(a)
    se = float(np.std(a, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return cls(float(a.mean()), se, float(n - 1), n, dict(values), censored)

  @classmethod
  def from_stats(cls, mean: float, std: float, n: int) -> Sample:
    """A table's "mean ± std" over n seeds, std the population std (ddof 0)."""
    if n < 2:
      return cls(mean, math.nan, 0.0, n)
    sd = std * math.sqrt(n / (n - 1))
    return cls(mean, sd / math.sqrt(n), float(n - 1), n)

  @property
  def seeds(self) -> tuple[int, ...]:
    return tuple(sorted(self.values)) if self.values is not None else ()


def difference(a: Sample, b: Sample) -> Sample:
  """a - b: paired by seed where both hold per-seed values for at least the same seeds,
  else unpaired with Welch's standard error and degrees of freedom."""
  if a.values is not None and b.values is not None:
    common = sorted(set(a.values) & set(b.values))
    if common:
      return Sample.of(
        {k: a.values[k] - b.values[k] for k in common}, censored=a.censored + b.censored
      )
  mean = a.mean - b.mean
  if a.n < 2 or b.n < 2:
    return Sample(mean, math.nan, 0.0, min(a.n, b.n), censored=a.censored + b.censored)
  var = a.se**2 + b.se**2
  df_denominator = a.se**4 / a.df + b.se**4 / b.df
  df = var**2 / df_denominator if df_denominator > 0 else float(a.df + b.df)
  return Sample(mean, math.sqrt(var), df, min(a.n, b.n), censored=a.censored + b.censored)


def relative(a: Sample, b: Sample) -> Sample:
  """(a - b) / b in percent, per seed where both arms pair by seed; else from the means
  (its error propagated to first order)."""
  if a.values is not None and b.values is not None:
    common = sorted(set(a.values) & set(b.values))
    if common:
      return Sample.of({k: 100 * (a.values[k] - b.values[k]) / b.values[k] for k in common})
  mean = 100 * (a.mean - b.mean) / b.mean
  if a.n < 2 or b.n < 2:
    return Sample(mean, math.nan, 0.0, min(a.n, b.n))
  se = 100 * math.sqrt((a.se / b.mean) ** 2 + (a.mean * b.se / b.mean**2) ** 2)
  return Sample(mean, se, float(min(a.df, b.df)), min(a.n, b.n))


class Effect:
  """The test of a Sample against 0: its mean, the 95 % interval, t and two-sided p."""

  def __init__(self, s: Sample):
    self.sample = s
    self.mean = s.mean
    self.n = s.n
    if s.n < 2 or not math.isfinite(s.se):
      self.low = self.high = self.t = self.p = math.nan
    elif s.se == 0:
      self.low = self.high = s.mean
      self.t = math.nan if s.mean == 0 else math.copysign(math.inf, s.mean)
      self.p = math.nan if s.mean == 0 else 0.0
    else:
      half = float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, s.df)) * s.se
      self.low, self.high = s.mean - half, s.mean + half
      self.t = s.mean / s.se
      self.p = float(2 * scipy_stats.t.sf(abs(self.t), s.df))

  def significant(self) -> bool:
    return math.isfinite(self.p) and self.p < ALPHA

  def text(self, unit: str = "", digits: int = 3) -> str:
    """``+0.014 [+0.010, +0.018], p = 0.003`` (the interval and p only where defined)."""
    f = functools.partial(_num, digits=digits)
    out = f"{f(self.mean, signed=True)}{unit}"
    if math.isfinite(self.low):
      out += f" [{f(self.low, signed=True)}, {f(self.high, signed=True)}]"
    if math.isfinite(self.p):
      out += f", p = {_p(self.p)}"
    return out


def _num(x: float, digits: int = 3, signed: bool = False) -> str:
  if not math.isfinite(x):
    return "n/a"
  return f"{x:+.{digits}g}" if signed else f"{x:.{digits}g}"


def _p(p: float) -> str:
  if p == 0:
    return "0"
  if p < 1e-4:
    return f"{p:.0e}"
  return f"{p:.2g}" if p < 0.01 else f"{p:.2f}"


# ---------------------------------------------------------------------------------------
# Verdicts


@dataclasses.dataclass
class Verdict:
  word: str
  evidence: str  # the effect, interval, p and seeds, or the reason
  seeds: tuple[int, ...] = ()
  n: int = 0
  parts: list[tuple[str, Verdict]] = dataclasses.field(default_factory=list)
  detail: str = ""  # the evidence without its seeds (parts sharing their seeds name them once)

  @property
  def one_seed(self) -> bool:
    return self.word != NOT_MEASURABLE and self.n == 1

  def label(self) -> str:
    return self.word + (" (one seed)" if self.one_seed else "")


def seeds_text(seeds: Sequence[int], n: int) -> str:
  if seeds:
    s = list(seeds)
    if s == list(range(s[0], s[-1] + 1)) and len(s) > 2:
      return f"seeds {s[0]}-{s[-1]}"
    return ("seed " if len(s) == 1 else "seeds ") + ", ".join(str(k) for k in s)
  if n == 1:
    return "one run"
  return f"{n} seeds (mean ± std)"


def direction_verdict(
  effect: Effect, higher: bool, size: float | None = None, unit: str = "", digits: int = 3
) -> Verdict:
  """The rule for "A is better than B": ``effect`` is A - B, ``higher`` whether the paper
  says A's value is the larger, ``size`` the least |A - B| the paper states (if any)."""
  sign = 1.0 if higher else -1.0
  s = effect.sample
  if effect.n >= MIN_SEEDS and s.se == 0:
    # no spread over the seeds (a deterministic quantity, or a table's "x ± 0.00" arms):
    # the sign decides, and no difference at all is not the paper's direction
    reaches = size is None or effect.mean * sign >= size
    word = REPRODUCED if effect.mean * sign > 0 and reaches else NOT_REPRODUCED
  elif effect.n >= MIN_SEEDS and effect.significant():
    if effect.mean * sign > 0:
      reaches = size is None or max(effect.low * sign, effect.high * sign) >= size
      word = REPRODUCED if reaches else NOT_REPRODUCED
    else:
      word = NOT_REPRODUCED
  elif (
    size is not None
    and math.isfinite(effect.low)
    and max(effect.low * sign, effect.high * sign) < size
  ):
    word = NOT_REPRODUCED
  else:
    word = INCONCLUSIVE
  detail = effect.text(unit, digits)
  if s.censored:
    detail += f", {s.censored} value(s) a bound (not reached)"
  return Verdict(word, f"{detail} ({seeds_text(s.seeds, s.n)})", s.seeds, effect.n, detail=detail)


def _range_verdict(
  s: Sample, lo: float, hi: float, against: str, unit: str, digits: int
) -> Verdict:
  """A value the paper puts in [lo, hi]: reproduced when every seed is inside (with only a
  table's mean ± std: the mean ± std), not reproduced when the 95 % interval of our mean
  lies outside (one value: when it is), inconclusive otherwise."""
  effect = Effect(s)
  if s.values is not None:
    within = all(lo <= v <= hi for v in s.values.values())
  else:
    spread = s.se * math.sqrt(s.n) if s.n > 1 else 0.0
    within = lo <= s.mean - spread and s.mean + spread <= hi
  if within:
    word = REPRODUCED
  elif s.n == 1:
    word = NOT_REPRODUCED
  elif math.isfinite(effect.low) and (effect.low > hi or effect.high < lo):
    word = NOT_REPRODUCED
  else:
    word = INCONCLUSIVE
  f = functools.partial(_num, digits=digits)
  interval = f" [{f(effect.low)}, {f(effect.high)}]" if math.isfinite(effect.low) else ""
  detail = f"{f(s.mean)}{unit}{interval} vs paper {against}"
  return Verdict(word, f"{detail} ({seeds_text(s.seeds, s.n)})", s.seeds, s.n, detail=detail)


def value_verdict(
  s: Sample, paper: float, tolerance: float, unit: str = "", digits: int = 3
) -> Verdict:
  """The rule for "the paper's number, within ± tolerance"."""
  f = functools.partial(_num, digits=digits)
  against = f"{f(paper)}{unit} ± {f(tolerance)}"
  return _range_verdict(s, paper - tolerance, paper + tolerance, against, unit, digits)


def spread_verdict(a: Sample, b: Sample, higher: bool, unit: str = "", digits: int = 3) -> Verdict:
  """The rule for "A varies more over seeds than B" (``higher``; less: False): the effect is
  the difference of the standard deviations over seeds (ddof 1), tested by Levene's test
  (scipy's, median-centred), and decided as a direction."""
  if a.values is None or b.values is None:
    raise ClaimsError("a spread needs both arms' per-seed values")
  va = np.asarray(list(a.values.values()), np.float64)
  vb = np.asarray(list(b.values.values()), np.float64)
  n = min(len(va), len(vb))
  diff = float(np.std(va, ddof=1) - np.std(vb, ddof=1)) if n > 1 else math.nan
  p = math.nan
  if n >= MIN_SEEDS and (np.ptp(va) > 0 or np.ptp(vb) > 0):
    with np.errstate(divide="ignore", invalid="ignore"):
      p = float(scipy_stats.levene(va, vb).pvalue)
  sign = 1.0 if higher else -1.0
  if n >= MIN_SEEDS and math.isfinite(p) and p < ALPHA:
    word = REPRODUCED if diff * sign > 0 else NOT_REPRODUCED
  else:
    word = INCONCLUSIVE
  f = functools.partial(_num, digits=digits)
  detail = f"std {f(float(np.std(va, ddof=1)))} vs {f(float(np.std(vb, ddof=1)))}{unit}"
  if math.isfinite(p):
    detail += f", Levene's p = {_p(p)}"
  seeds = tuple(sorted(set(a.values) & set(b.values)))
  return Verdict(word, f"{detail} ({seeds_text(seeds, n)})", seeds, n, detail=detail)


def bound_verdict(
  s: Sample, bound: float, at_most: bool, unit: str = "", digits: int = 3
) -> Verdict:
  """The rule for "at most / at least the paper's bound", decided as a value."""
  against = f"{'≤' if at_most else '≥'} {_num(bound, digits)}{unit}"
  lo, hi = (-math.inf, bound) if at_most else (bound, math.inf)
  return _range_verdict(s, lo, hi, against, unit, digits)


def equivalence_verdict(
  effect: Effect, margin: float, unit: str = "", digits: int = 3, worse_only: int = 0
) -> Verdict:
  """The rule for "A does as well as B" (|A - B| <= margin; ``worse_only`` = +1 / -1: only
  A - B below -margin / above +margin counts against it, "A never does worse")."""
  s = effect.sample
  if effect.n >= 2 and math.isfinite(effect.low):
    if worse_only == 0:
      inside = -margin <= effect.low and effect.high <= margin
      outside = effect.significant() and (effect.low > margin or effect.high < -margin)
    else:  # +1: higher is better, so the bad end is the low one
      bad = effect.low * worse_only if worse_only > 0 else -effect.high
      inside = bad >= -margin
      worst = effect.high * worse_only if worse_only > 0 else -effect.low
      outside = effect.significant() and worst < -margin
    word = REPRODUCED if inside else NOT_REPRODUCED if outside else INCONCLUSIVE
  elif effect.n == 1:
    bad = effect.mean if worse_only == 0 else effect.mean * worse_only
    ok = abs(bad) <= margin if worse_only == 0 else bad >= -margin
    word = REPRODUCED if ok else NOT_REPRODUCED
  else:
    word = INCONCLUSIVE
  detail = f"{effect.text(unit, digits)} within ± {_num(margin, digits)}{unit}"
  return Verdict(word, f"{detail} ({seeds_text(s.seeds, s.n)})", s.seeds, effect.n, detail=detail)


def combine(parts: list[tuple[str, Verdict]]) -> Verdict:
  """The rule for a claim of several parts."""
  words = [v.word for _, v in parts]
  measured = [w for w in words if w != NOT_MEASURABLE]
  if not measured:
    word = NOT_MEASURABLE
  elif all(w == REPRODUCED for w in measured):
    word = REPRODUCED
  elif NOT_REPRODUCED in measured and REPRODUCED not in measured and PARTLY not in measured:
    word = NOT_REPRODUCED  # a claim of several parts asserts each: one refuted part refutes it
  elif REPRODUCED in measured and (NOT_REPRODUCED in measured or PARTLY in measured):
    word = PARTLY
  elif PARTLY in measured:
    word = PARTLY
  else:
    word = INCONCLUSIVE
  counts = {w: words.count(w) for w in WORDS if words.count(w)}
  tally = ", ".join(f"{c} {w}" for w, c in counts.items())
  evidence = f"{len(parts)} parts: {tally}"
  # the seeds behind the word are those of the parts that decide it
  deciding = {
    REPRODUCED: (REPRODUCED,),
    NOT_REPRODUCED: (NOT_REPRODUCED,),
    PARTLY: (REPRODUCED, NOT_REPRODUCED, PARTLY),
  }.get(word, (REPRODUCED, NOT_REPRODUCED, PARTLY, INCONCLUSIVE))
  decisive = [v for _, v in parts if v.word in deciding]
  weakest = min(decisive, key=lambda v: v.n, default=None)
  seeds, n = (weakest.seeds, weakest.n) if weakest else ((), 0)
  return Verdict(word, evidence, seeds, n, parts)
