"""The verdict engine (experiments/claims.py): its rule on hand-worked cases, its reading of
committed files, and the schema's one-line errors."""

import json
import math
import pathlib

import numpy as np
import pytest
from scipy import stats

from experiments import claims as C
from fedjax_sel.metrics import verdicts as V


def paired(a, b):
  return C.Effect(C.difference(C.Sample.of(dict(enumerate(a))), C.Sample.of(dict(enumerate(b)))))


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
  assert C.direction_verdict(paired(A, B), higher=True).word == C.REPRODUCED
  # the opposite sign, significant
  assert C.direction_verdict(paired(A, B), higher=False).word == C.NOT_REPRODUCED
  # the paper's sign and significant, but the paper states a size of 3 the interval misses
  assert C.direction_verdict(paired(A, B), higher=True, size=3.0).word == C.NOT_REPRODUCED
  # ... and a size of 0.7 the interval [0.25, 0.75] reaches
  assert C.direction_verdict(paired(A, B), higher=True, size=0.7).word == C.REPRODUCED
  # two seeds of a large effect: below 3 seeds, inconclusive
  assert C.direction_verdict(paired(A[:2], B[:2]), higher=True).word == C.INCONCLUSIVE
  # noise: d = (1, -1, 0.5): not significant
  assert C.direction_verdict(paired((1, 0, 1), (0, 1, 0.5)), higher=True).word == C.INCONCLUSIVE


def test_one_seed_is_marked():
  v = C.direction_verdict(paired(A[:1], B[:1]), higher=True)
  assert (v.word, v.label()) == (C.INCONCLUSIVE, "inconclusive (one seed)")
  v = C.value_verdict(C.Sample.of({0: 0.31}), paper=0.30, tolerance=0.02)
  assert v.label() == "reproduced (one seed)"


def test_welch_from_a_tables_mean_and_std():
  # 10 ± 1 and 8 ± 1 over 3 seeds (population std): sample sd sqrt(1.5), se 1/sqrt(2) each,
  # the difference's se 1, t = 2, Welch's df (0.5 + 0.5)^2 / (0.25/2 + 0.25/2) = 4.
  e = C.Effect(C.difference(C.Sample.from_stats(10, 1, 3), C.Sample.from_stats(8, 1, 3)))
  assert (e.mean, e.t, e.sample.df) == pytest.approx((2.0, 2.0, 4.0))
  sd = math.sqrt(1.5)
  want = stats.ttest_ind_from_stats(10, sd, 3, 8, sd, 3, equal_var=False)
  assert e.p == pytest.approx(want.pvalue)
  assert e.p == pytest.approx(0.1161, abs=1e-4)
  assert C.direction_verdict(e, higher=True).word == C.INCONCLUSIVE


def test_value_words():
  check = lambda vals: C.value_verdict(C.Sample.of(dict(enumerate(vals))), 19.8, 2.0).word
  assert check((19.0, 20.5, 21.5)) == C.REPRODUCED  # every seed in [17.8, 21.8]
  # 22 is out, but the mean's interval 20.5 ± 3.73 overlaps the band
  assert check((19.0, 20.5, 22.0)) == C.INCONCLUSIVE
  assert check((30.0, 31.0, 32.0)) == C.NOT_REPRODUCED  # 31 ± 2.48 lies above 21.8
  assert check((25.0,)) == C.NOT_REPRODUCED  # one seed, outside


def test_equivalence_and_not_worse():
  eq = lambda d, m: C.equivalence_verdict(paired(d, (0, 0, 0)), m).word
  assert eq((0.1, -0.1, 0.0), 1.0) == C.REPRODUCED  # 0 ± 0.248 inside ± 1
  assert eq((5.0, 5.1, 4.9), 1.0) == C.NOT_REPRODUCED  # 5 ± 0.248, significant, outside
  assert eq((1.0, -1.0, 0.5), 1.0) == C.INCONCLUSIVE  # 0.17 ± 2.5
  nw = lambda d, m: C.equivalence_verdict(paired(d, (0, 0, 0)), m, worse_only=1).word
  assert nw((-0.2, -0.1, 0.0), 1.0) == C.REPRODUCED  # worse end -0.348 above -1
  assert nw((-5.0, -5.1, -4.9), 1.0) == C.NOT_REPRODUCED
  assert nw((5.0, 5.1, 4.9), 1.0) == C.REPRODUCED  # better is never worse


def test_combine_words():
  v = lambda w: C.Verdict(w, "", (0, 1, 2), 3)
  R, N, Inc, P, M = (
    v(w) for w in (C.REPRODUCED, C.NOT_REPRODUCED, C.INCONCLUSIVE, C.PARTLY, C.NOT_MEASURABLE)
  )
  word = lambda *ps: C.combine([(str(i), p) for i, p in enumerate(ps)]).word
  assert word(R, R) == C.REPRODUCED
  assert word(N, N) == C.NOT_REPRODUCED
  assert word(R, N) == C.PARTLY
  assert word(R, Inc) == C.INCONCLUSIVE
  assert word(N, Inc) == C.NOT_REPRODUCED  # one refuted part refutes the claim
  assert word(Inc, Inc) == C.INCONCLUSIVE
  assert word(R, P) == C.PARTLY
  assert word(M) == C.NOT_MEASURABLE
  assert word(R, M) == C.REPRODUCED


def write_run(folder, seed, accuracies, losses=None, rounds=None):
  d = folder / f"seed{seed}"
  d.mkdir(parents=True)
  losses = losses or [1.0 - a for a in accuracies]
  with open(d / "metrics.jsonl", "w") as f:
    for r, (a, loss) in enumerate(zip(accuracies, losses), start=1):
      f.write(json.dumps({"round": r, "test_accuracy": a, "test_loss": loss}) + "\n")
  summary = {
    "final_test_accuracy": accuracies[-1],
    "final_test_loss": losses[-1],
    "rounds": rounds or len(accuracies),
    "sampling_counts": [1, 2, 3],
  }
  (d / "summary.json").write_text(json.dumps(summary))


def test_cell_metrics_and_a_censored_round(tmp_path):
  cells = tmp_path / "study" / "cells"
  for seed in range(3):
    write_run(cells / "random", seed, [0.5, 0.8, 0.9, 0.9])
    write_run(cells / "new", seed, [0.5, 0.85 + 0.01 * seed, 0.9, 0.95])
  spec = lambda cell, metric, **kw: {"cells": "study/cells", "cell": cell, "metric": metric, **kw}
  read = lambda s: C.read_value(tmp_path, s, [0, 1, 2], "test")
  assert read(spec("new", "final_accuracy")).values == pytest.approx({0: 95, 1: 95, 2: 95})
  assert read(spec("random", "best_loss")).mean == pytest.approx(0.1)
  assert read(spec("random", "mean_accuracy")).mean == pytest.approx(77.5)
  # |0.8-0.5|, |0.9-0.8|, 0: mean 0.1333 (in points: 13.33)
  assert read(spec("random", "fluctuation", of="test_accuracy")).mean == pytest.approx(40 / 3)
  assert read(spec("random", "sampling_count_std")).mean == pytest.approx(math.sqrt(2 / 3))
  # R@99 of Random's best (0.9): target 0.891, reached at round 3 by both
  r = read(spec("new", "rounds_to", reference="random"))
  assert r.values == {0: 3.0, 1: 3.0, 2: 3.0} and r.censored == 0
  # a target no run reaches: the bound rounds + 1, counted as censored
  r = read(spec("random", "rounds_to", target=99))
  assert r.values == {0: 5.0, 1: 5.0, 2: 5.0} and r.censored == 3
  # only the seeds asked for
  assert C.read_value(tmp_path, spec("new", "final_accuracy"), [1], "t").seeds == (1,)


def test_table_values(tmp_path):
  (tmp_path / "t.csv").write_text(
    "method,acc,seed\nA,81.26 ± 0.17,0\nB,−1.5,0\nA,80,1\nA,82,2\n", encoding="utf-8"
  )
  read = lambda s, seeds=(0, 1, 2): C.read_value(tmp_path, s, list(seeds), "test")
  per_seed = read(
    {"table": "t.csv", "row": {"method": "A"}, "column": "acc", "seed_column": "seed"}
  )
  assert per_seed.values == {0: 81.26, 1: 80.0, 2: 82.0}
  s = read({"table": "t.csv", "row": {"method": "B"}, "column": "acc"}, seeds=(0,))
  assert (s.mean, s.n) == (-1.5, 1)
  with pytest.raises(C.ClaimsError, match="3 rows of t.csv match"):
    read({"table": "t.csv", "row": {"method": "A"}, "column": "acc"})
  with pytest.raises(C.ClaimsError, match="no column 'nope'"):
    read({"table": "t.csv", "row": {"method": "B"}, "column": "nope"})
  with pytest.raises(C.ClaimsError, match="missing.csv is not committed"):
    read({"table": "missing.csv", "row": {}, "column": "acc"})


def test_schema_errors_name_the_field(tmp_path):
  with pytest.raises(C.ClaimsError, match="kind 'bigger'; allowed: direction"):
    C.evaluate(tmp_path, {"kind": "bigger"}, [0], "claim 1")
  with pytest.raises(C.ClaimsError, match="metric 'speed'; allowed"):
    C.read_value(tmp_path, {"cells": "x", "cell": "y", "metric": "speed"}, [0], "claim 1")
  with pytest.raises(C.ClaimsError, match="not_measurable needs a 'reason'"):
    C.evaluate(tmp_path, {"kind": "not_measurable"}, [0], "claim 1")
  claims_dir = tmp_path / C.CLAIMS_DIR
  claims_dir.mkdir(parents=True)
  (claims_dir / "fedgs.yaml").write_text("paper: FedGS\npage: fedgs.md\nclaims: []\n")
  with pytest.raises(C.ClaimsError, match=r"--paper='fedxx'; allowed: fedgs"):
    C.load(tmp_path, ["fedxx"])
  (claims_dir / "fedgs.yaml").write_text("paper: FedGS\nclaims: []\n")
  with pytest.raises(C.ClaimsError, match="fedgs.yaml: needs 'paper', 'page' and 'claims'"):
    C.load(tmp_path)
  (claims_dir / "fedgs.yaml").write_text(
    "paper: FedGS\npage: fedgs.md\nclaims:\n- {id: 1, claim: c, setups: [], verdict: x}\n"
  )
  with pytest.raises(C.ClaimsError, match="claim 1: keys .*'verdict'.*; allowed"):
    C.load(tmp_path)


def test_trend_is_a_chain_of_directions(tmp_path):
  # per-seed gains at three swept values: 1.0 -> 2.0 (up on every seed) -> 1.5 (down)
  rows = [
    f"{x},{s},{g + 0.1 * (s - 1)}"
    for x, g in (("a", 1.0), ("b", 2.0), ("c", 1.5))
    for s in range(3)
  ]
  (tmp_path / "t.csv").write_text("x,seed,gain\n" + "\n".join(rows) + "\n")
  point = lambda x: {
    "table": "t.csv",
    "row": {"x": x},
    "column": "gain",
    "seed_column": "seed",
    "label": x,
  }
  check = {"kind": "trend", "increasing": True, "points": [point("a"), point("b"), point("c")]}
  v = C.evaluate(tmp_path, check, [0, 1, 2], "claim")
  assert [(label, p.word) for label, p in v.parts] == [
    ("a → b", C.REPRODUCED),
    ("b → c", C.NOT_REPRODUCED),
  ]
  assert v.word == C.PARTLY
  check["points"] = check["points"][:2]
  assert C.evaluate(tmp_path, check, [0, 1, 2], "claim").word == C.REPRODUCED


def test_generated_block_replacement_and_staleness():
  text = f"head\n{C.begin('x')}\nold\n{C.end('x')}\ntail\n"
  new = C.replace_block(text, "x", "new", "f.md")
  assert new == f"head\n{C.begin('x')}\nnew\n{C.end('x')}\ntail\n"
  assert C.replace_block(new, "x", "new", "f.md") == new
  with pytest.raises(C.ClaimsError, match="f.md has no generated block 'y'"):
    C.replace_block(text, "y", "new", "f.md")


def test_markdown_table_values(tmp_path):
  (tmp_path / "t.md").write_text(
    "# picks\n\n| scenario | rounds 1-50 |\n|---|---|\n| 1 excl | 21 ± 3.0 |\n\ntext\n\n"
    "| other | x |\n|---|---|\n| a | 1 |\n"
  )
  s = C.read_value(
    tmp_path,
    {"table": "t.md", "row": {"scenario": "1 excl"}, "column": "rounds 1-50"},
    [0, 1, 2],
    "t",
  )
  assert (s.mean, s.n) == (21.0, 3)
  assert s.se == pytest.approx(3.0 * math.sqrt(3 / 2) / math.sqrt(3))


def test_pending_runs_are_not_measurable_and_a_typo_is_an_error(tmp_path):
  claims_dir = tmp_path / C.CLAIMS_DIR
  claims_dir.mkdir(parents=True)
  (tmp_path / "results").mkdir()
  check = "{kind: value, paper: 1, tolerance: 1, of: {cells: s/cells, cell: x, metric: final_loss}}"
  setup = f"{{setup: a, check: {check}, pending: 'python -m experiments.x (1 h)'}}"
  (claims_dir / "p.yaml").write_text(
    f"paper: P\npage: p.md\nclaims:\n- {{id: 1, claim: c, setups: [{setup}]}}\n"
  )
  (v,) = C.load(tmp_path)
  assert (v.main.word, v.main.evidence) == (
    C.NOT_MEASURABLE,
    "runs not committed: python -m experiments.x (1 h)",
  )
  (claims_dir / "p.yaml").write_text(
    f"paper: P\npage: p.md\nclaims:\n- {{id: 1, claim: c, setups: [{{check: {check}}}]}}\n"
  )
  with pytest.raises(C.ClaimsError, match="s/cells/x is not committed"):
    C.load(tmp_path)


def test_no_spread_over_seeds_the_sign_decides():
  # CR saving 0.00 ± 0.00 % against 0.00 ± 0.00 %: exactly no difference on every seed
  zero = C.Effect(C.difference(C.Sample.from_stats(0, 0, 3), C.Sample.from_stats(0, 0, 3)))
  assert C.direction_verdict(zero, higher=True).word == C.NOT_REPRODUCED
  same = C.Effect(
    C.difference(C.Sample.of({0: 2.0, 1: 3.0, 2: 4.0}), C.Sample.of({0: 1.0, 1: 2.0, 2: 3.0}))
  )
  assert (same.mean, same.p) == (1.0, 0.0)
  assert C.direction_verdict(same, higher=True).word == C.REPRODUCED
  assert C.direction_verdict(same, higher=False).word == C.NOT_REPRODUCED
  assert C.direction_verdict(same, higher=True, size=2.0).word == C.NOT_REPRODUCED


def test_bound_words():
  at_most = lambda vals, b=5.0: C.bound_verdict(C.Sample.of(dict(enumerate(vals))), b, True).word
  assert at_most((4.0, 4.5, 5.0)) == C.REPRODUCED  # every seed at most 5
  assert at_most((9.0, 10.0, 11.0)) == C.NOT_REPRODUCED  # 10 ± 2.48 lies above 5
  assert at_most((4.0, 5.0, 6.5)) == C.INCONCLUSIVE
  at_least = C.bound_verdict(C.Sample.of({0: 4.0, 1: 4.5, 2: 5.0}), 3.0, False)
  assert (at_least.word, at_least.detail) == (
    C.REPRODUCED,
    "4.5 [3.26, 5.74] vs paper ≥ 3",
  )  # sd 0.5, 4.303 x 0.5 / sqrt(3) = 1.24
  with pytest.raises(C.ClaimsError, match="a bound needs one of 'at_most', 'at_least'"):
    C.evaluate(pathlib.Path("."), {"kind": "bound", "of": {"table": "x"}}, [0], "claim")


def test_last_metric_and_a_table_number_without_spread(tmp_path):
  write_run(tmp_path / "s" / "cells" / "a", 0, [0.5, 0.9])
  with open(tmp_path / "s/cells/a/seed0/metrics.jsonl", "a") as f:
    f.write(json.dumps({"round": 2, "client_acc_mean": 0.85}) + "\n")
  spec = {"cells": "s/cells", "cell": "a", "metric": "last", "key": "client_acc_mean", "scale": 100}
  assert C.read_value(tmp_path, spec, [0], "t").values == {0: 85.0}
  (tmp_path / "t.csv").write_text("m,var\nA,59.6\nB,64.9\n")
  a, b = (
    C.read_value(tmp_path, {"table": "t.csv", "row": {"m": m}, "column": "var"}, [0, 1, 2], "t")
    for m in "AB"
  )
  assert a.n == 1 and C.Effect(C.difference(a, b)).mean == pytest.approx(-5.3)


def test_spread_by_levene():
  wide = C.Sample.of({0: 100.0, 1: 160.0, 2: 110.0, 3: 130.0})
  narrow = C.Sample.of({0: 101.0, 1: 103.0, 2: 108.0, 3: 104.0})
  v = C.spread_verdict(wide, narrow, higher=True)
  want = stats.levene([100, 160, 110, 130], [101, 103, 108, 104]).pvalue
  assert v.detail.endswith(f"Levene's p = {V._p(want)}") and want < 0.05
  assert v.word == C.REPRODUCED
  assert C.spread_verdict(wide, narrow, higher=False).word == C.NOT_REPRODUCED
  two = C.Sample.of({0: 1.0, 1: 9.0})
  assert C.spread_verdict(two, C.Sample.of({0: 1.0, 1: 1.1}), higher=True).word == C.INCONCLUSIVE
  with pytest.raises(C.ClaimsError, match="per-seed values"):
    C.spread_verdict(C.Sample.from_stats(1, 1, 3), narrow, higher=True)


def test_json_value_and_a_composite_counts_the_seeds_that_decide(tmp_path):
  (tmp_path / "o.json").write_text(json.dumps({"ratios": {"tifl": [2.32, 9]}}))
  s = C.read_value(tmp_path, {"json": "o.json", "key": "ratios.tifl.0"}, [0], "t")
  assert (s.mean, s.n) == (2.32, 1)
  with pytest.raises(C.ClaimsError, match="o.json has no 'ratios.fedfast'"):
    C.read_value(tmp_path, {"json": "o.json", "key": "ratios.fedfast"}, [0], "t")
  three = C.Verdict(C.NOT_REPRODUCED, "x", (0, 1, 2), 3)
  one = C.Verdict(C.INCONCLUSIVE, "y", (0,), 1)
  v = C.combine([("a", three), ("b", one)])
  assert (v.word, v.label()) == (C.NOT_REPRODUCED, "not reproduced")  # decided on 3 seeds
  v = C.combine([("a", C.Verdict(C.INCONCLUSIVE, "x", (0, 1, 2), 3)), ("b", one)])
  assert v.label() == "inconclusive (one seed)"


def test_the_paired_effect_is_the_studies_paired_test():
  from fedjax_sel.metrics import stats as fs

  rng = np.random.default_rng(0)
  for n in (3, 5):
    a = dict(enumerate(rng.normal(80, 2, n)))
    b = dict(enumerate(rng.normal(79, 2, n)))
    e = C.Effect(C.difference(C.Sample.of(a), C.Sample.of(b)))
    want = fs.paired(a, b)
    assert (e.mean, e.low, e.high, e.t, e.p) == pytest.approx(
      (want.mean, want.low, want.high, want.t, want.p)
    )
