"""The verdict engine (experiments/claims.py): its reading of committed files, its checks and
the schema's one-line errors (the rule itself: tests/metrics/test_verdicts.py)."""

import json
import math
import pathlib

import pytest

from experiments import claims as C


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


def test_a_bound_names_its_side():
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


def test_json_value(tmp_path):
  (tmp_path / "o.json").write_text(json.dumps({"ratios": {"tifl": [2.32, 9]}}))
  s = C.read_value(tmp_path, {"json": "o.json", "key": "ratios.tifl.0"}, [0], "t")
  assert (s.mean, s.n) == (2.32, 1)
  with pytest.raises(C.ClaimsError, match="o.json has no 'ratios.fedfast'"):
    C.read_value(tmp_path, {"json": "o.json", "key": "ratios.fedfast"}, [0], "t")
