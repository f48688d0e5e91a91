"""experiments/fedar.py: the MIFA controls, the significance table (Table 2) and the p_min /
N sweeps (Figs. 4-5)."""

import csv
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from experiments import common, fedar
from experiments.configs import fedar as fedar_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_csv(path):
  with open(path) as f:
    return list(csv.reader(f))


def tiny(sweep="none", **fields):
  """The --quick study config at 2 rounds, with ``fields`` set."""
  config = fedar_config.get_config()
  config.sweep = sweep
  config = fedar.prepare_config(config, quick=True, rounds=2)
  config.base.eval_every = 2
  for name, value in fields.items():
    config[name] = value
  return config


# ----------------------------------------------------------------------------- the controls


def test_mifa_controls_are_named_methods():
  config = fedar.prepare_config(fedar_config.get_config())
  seen = fedar.cell_config(config, "mifa_seen", 0.1)
  assert (seen.aggregator, dict(seen.aggregator_hparams)) == ("mifa", {"average_over": "seen"})
  step = fedar.cell_config(config, "mifa_step", 0.5)
  assert (step.aggregator, dict(step.aggregator_hparams)) == ("mifa", {"step_scale": 1.05})
  assert step.availability_hparams.p_min == 0.5
  config.mifa_step_scale = 1.02  # the config field is the step
  assert fedar.cell_config(config, "mifa_step", 0.5).aggregator_hparams.step_scale == 1.02
  # everything but the aggregator's options is the MIFA cell's
  for cell, p in ((seen, 0.1), (step, 0.5)):
    mifa = fedar.cell_config(config, "mifa", p).to_dict()
    assert mifa["aggregator_hparams"] == {}
    cell = cell.to_dict()
    assert {**cell, "aggregator_hparams": {}} == mifa
  assert fedar.METHODS["mifa_seen"] != fedar.METHODS["mifa_step"]


def test_mean_absence_makes_on_off_chains_and_leaves_default_cells_alone():
  config = fedar.prepare_config(fedar_config.get_config())
  # default 0: the committed cells' availability hparams, unchanged (so --resume finds them)
  for method in ("fedar", "mifa", "fedavg_is", "scaffold", "fedavg_s50"):
    assert dict(fedar.cell_config(config, method, 0.1).availability_hparams) == {"p_min": 0.1}
  config.mean_absence = 10.0
  for method in ("fedar", "fedavg_is", "scaffold"):
    cell = fedar.cell_config(config, method, 0.5)
    assert cell.availability == "bernoulli"
    assert dict(cell.availability_hparams) == {"p_min": 0.5, "mean_absence": 10.0}
  assert fedar.cell_config(config, "fedavg_full", None).availability == "always"


@pytest.mark.parametrize(
  "value, message",
  [
    (5.0, "mean_absence=5.0 is too short for a smallest availability probability of 0.1"),
    (-1.0, "mean_absence=-1.0 is out of range; allowed: 0 (independent rounds) or >= 1"),
  ],
)
def test_bad_mean_absence_is_named(value, message):
  config = fedar_config.get_config()
  config.mean_absence = value
  with pytest.raises(ValueError, match=re.escape(message)):
    fedar.prepare_config(config)


def test_main_study_cell_names_are_unchanged():
  config = fedar.prepare_config(fedar_config.get_config())
  assert [n for n, *_ in fedar.study_cells(config)] == ["fedavg_full"] + [
    f"pmin{p}_{m}"
    for p in ("0.1", "0.5")
    for m in ("fedar", "mifa", "fedvarp", "fedavg_is", "fedavg_s50", "scaffold")
  ]
  config.methods = ("fedar", "mifa_seen", "mifa_step")
  assert [n for n, *_ in fedar.cells(config)][:3] == [
    "pmin0.1_fedar",
    "pmin0.1_mifa_seen",
    "pmin0.1_mifa_step",
  ]


# ----------------------------------------------------------------------------- the t-test


def test_paired_test_matches_the_hand_worked_example():
  # differences 1, 2, 3 points: mean 2, sample std 1, t = 2 / (1 / sqrt 3) = 2 sqrt 3; with
  # 2 degrees of freedom the t CDF is 1/2 + t / (2 sqrt(2 + t^2)), so p = 1 - t / sqrt(2 + t^2)
  fedar_acc = {0: 82.0, 1: 84.0, 2: 86.0}
  other = {2: 83.0, 0: 81.0, 1: 82.0}  # another order: pairs are matched by seed
  diff, t, p, n = fedar.paired_test(fedar_acc, other)
  assert (diff, n) == (2.0, 3)
  assert t == pytest.approx(2 * math.sqrt(3), rel=1e-12)
  assert p == pytest.approx(1 - t / math.sqrt(2 + t**2), rel=1e-12)  # 0.07418
  assert p == pytest.approx(0.07417990, abs=1e-8)
  # the other way round: -t, the same p
  assert fedar.paired_test(other, fedar_acc)[1:3] == pytest.approx((-t, p))
  # only the seeds both hold are pairs
  assert fedar.paired_test(fedar_acc, {**other, 7: 0.0})[3] == 3


def test_paired_test_edge_cases():
  one = fedar.paired_test({0: 82.0}, {0: 80.5})
  assert one[0] == 1.5 and math.isnan(one[1]) and math.isnan(one[2]) and one[3] == 1
  # no spread in the differences: scipy's limits without its warning
  with np.errstate(all="raise"):
    same = fedar.paired_test({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0})
    shift = fedar.paired_test({0: 1.0, 1: 2.0}, {0: 0.5, 1: 1.5})
  assert same[0] == 0.0 and math.isnan(same[1]) and math.isnan(same[2])
  assert shift[:3] == (0.5, math.inf, 0.0)


def per_seed_of(values):
  """``per_seed_rows`` of {(method, p_min): {seed: acc (%)}} through fake runs."""
  rows = []
  for (method, p), by_seed in values.items():
    seeds = list(by_seed)
    runs = {
      "cell": [({"final_test_accuracy": by_seed[s] / 100}, [{"train_loss": 0.5}]) for s in seeds]
    }
    rows += fedar.per_seed_rows(runs, seeds, [("cell", method, p)])
  return rows


def test_significance_rows_pair_by_seed():
  values = {
    ("fedar", 0.1): {0: 82.0, 1: 84.0, 2: 86.0},
    ("mifa", 0.1): {2: 83.0, 0: 81.0, 1: 82.0},  # listed in another seed order
    ("fedar", 0.5): {5: 90.0},
    ("mifa", 0.5): {5: 89.25},
    ("fedar", 0.3): {0: 80.0, 1: 81.0},
    ("mifa", 0.3): {1: 79.5, 0: 79.0},
  }
  per_seed = per_seed_of(values)
  # each row carries its own seed: the runs' order is the seeds'
  assert [r[3] for r in per_seed[3:6]] == [2, 0, 1]
  assert [r[4] for r in per_seed[3:6]] == [83.0, 81.0, 82.0]
  rows = fedar.significance_rows(per_seed, [0.1, 0.5, 0.3], ["FedAR", "MIFA"])
  t = 2 * math.sqrt(3)
  # two seeds: differences 1 and 1.5, t = 1.25 / (sqrt(0.125) / sqrt 2) = 5; one degree of
  # freedom (Cauchy): p = 1 - 2 arctan(5) / pi
  assert rows == [
    ["MIFA", 0.1, "+2.00", f"{t:.3f}", f"{1 - t / math.sqrt(2 + t**2):.3g}", 3],
    ["MIFA", 0.5, "+0.75", "n/a", "n/a", 1],
    ["MIFA", 0.3, "+1.25", "5.000", f"{1 - 2 * math.atan(5) / math.pi:.3g}", 2],
  ]
  assert rows[0][3:5] == ["3.464", "0.0742"] and rows[2][4] == "0.126"
  # paired by position instead of seed, the numbers differ (differences -1, 3, 4)
  wrong = stats.ttest_rel([82.0, 84.0, 86.0], [83.0, 81.0, 82.0])
  assert f"{wrong.statistic:.3f}" != rows[0][3]


def test_per_seed_rows_round_what_the_csv_holds():
  runs = {"c": [({"final_test_accuracy": 0.123456789}, [{"train_loss": 0.1234567891}])]}
  assert fedar.per_seed_rows(runs, [4], [("c", "fedavg_full", 0.1)]) == [
    ["c", fedar.METHODS["fedavg_full"], 0.1, 4, 12.3457, 0.123457]
  ]
  with pytest.raises(ValueError):  # a run per seed, no fewer
    fedar.per_seed_rows(runs, [4, 5], [("c", "fedar", 0.1)])


def runs_of(curves):
  """Fake ``runs[cell]`` of {cell: [{round: test acc (fraction)} per seed]}."""
  return {
    cell: [
      (
        {"final_test_accuracy": c[max(c)]},
        [{"round": t, "test_accuracy": c[t], "train_loss": 0.5} for t in c],
      )
      for c in seeds
    ]
    for cell, seeds in curves.items()
  }


def test_rounds_pairing_matches_the_hand_worked_example():
  # two seeds each; seed means FedAR 50, 60, 70 % and MIFA 49, 58, 67 % at rounds 10, 20, 30:
  # differences 1, 2, 3 points, so t = 2 sqrt 3 and p = 1 - t / sqrt(2 + t^2) = 0.0742, as in
  # the seed example (2 degrees of freedom)
  runs = runs_of(
    {
      "a": [{10: 0.49, 20: 0.61, 30: 0.70}, {10: 0.51, 20: 0.59, 30: 0.70}],
      "b": [{10: 0.48, 20: 0.58, 30: 0.66}, {10: 0.50, 20: 0.58, 30: 0.68}],
    }
  )
  per_round = fedar.per_round_rows(runs, [("a", "fedar", 0.1), ("b", "mifa", 0.1)])
  assert per_round == [
    ["a", "FedAR", 0.1, 10, 50.0],
    ["a", "FedAR", 0.1, 20, 60.0],
    ["a", "FedAR", 0.1, 30, 70.0],
    ["b", "MIFA", 0.1, 10, 49.0],
    ["b", "MIFA", 0.1, 20, 58.0],
    ["b", "MIFA", 0.1, 30, 67.0],
  ]
  rows = fedar.significance_rows(per_round, [0.1], ["FedAR", "MIFA"])
  t = 2 * math.sqrt(3)
  assert rows == [["MIFA", 0.1, "+2.00", f"{t:.3f}", f"{1 - t / math.sqrt(2 + t**2):.3g}", 3]]
  assert rows[0][3:5] == ["3.464", "0.0742"]
  # the final accuracies of the same runs, paired by seed: another test (differences 4, 2)
  per_seed = fedar.per_seed_rows(runs, [0, 1], [("a", "fedar", 0.1), ("b", "mifa", 0.1)])
  assert fedar.significance_rows(per_seed, [0.1], ["FedAR", "MIFA"])[0][2:] == [
    "+3.00",
    "3.000",
    f"{1 - 2 * math.atan(3) / math.pi:.3g}",  # one degree of freedom (Cauchy)
    2,
  ]


def test_rounds_pair_by_round_number_and_intersect():
  # FedAR's seed 1 stopped after round 30: the cell's curve is rounds 10-30 (a mean over the
  # same seeds at every round), so round 40 is left out; MIFA evaluated round 15 too, which
  # FedAR did not: left out. The pairs are rounds 10, 20, 30, the hand-worked example's.
  runs = runs_of(
    {
      "a": [{10: 0.49, 20: 0.61, 30: 0.70, 40: 0.90}, {10: 0.51, 20: 0.59, 30: 0.70}],
      "b": [
        {10: 0.48, 15: 0.10, 20: 0.58, 30: 0.66, 40: 0.20},
        {10: 0.50, 15: 0.10, 20: 0.58, 30: 0.68, 40: 0.20},
      ],
    }
  )
  per_round = fedar.per_round_rows(runs, [("a", "fedar", 0.1), ("b", "mifa", 0.1)])
  assert [r[3] for r in per_round] == [10, 20, 30, 10, 15, 20, 30, 40]
  assert [r[4] for r in per_round[:3]] == [50.0, 60.0, 70.0]
  rows = fedar.significance_rows(per_round, [0.1], ["FedAR", "MIFA"])
  assert rows == [["MIFA", 0.1, "+2.00", "3.464", "0.0742", 3]]
  # paired by position instead of round number, the numbers differ (50, 60, 70 against
  # 49, 10, 58)
  wrong = stats.ttest_rel([50.0, 60.0, 70.0], [49.0, 10.0, 58.0])
  assert f"{wrong.statistic:.3f}" != rows[0][3]
  # no round in common, or one: no test
  one = fedar.significance_rows(
    [r for r in per_round if r[3] in (10, 15, 40)], [0.1], ["FedAR", "MIFA"]
  )
  assert one == [["MIFA", 0.1, "+1.00", "n/a", "n/a", 1]]


# ----------------------------------------------------------------------------- the sweeps


def test_sweeps_follow_the_paper():
  config = fedar_config.get_config()
  # Fig. 4: p_min from 0.1 to 0.5, FedAvg (S=50) left out; Fig. 5: N from 80 to 120 at 0.1
  assert tuple(config.sweep_p_mins) == (0.1, 0.2, 0.3, 0.4, 0.5)
  assert tuple(config.sweep_num_clients) == (80, 90, 100, 110, 120)
  assert config.sweep_fixed_p_min == 0.1
  assert tuple(config.sweep_methods) == ("fedar", "mifa", "fedvarp", "fedavg_is", "scaffold")
  config.sweep = "pmin"
  pmin = fedar.prepare_config(config)
  names = [n for n, *_ in fedar.study_cells(pmin)]
  assert len(names) == 25 and names[:2] == ["pmin0.1_fedar", "pmin0.1_mifa"]
  assert names[-1] == "pmin0.5_scaffold"
  cell = fedar.cell_config(pmin, *fedar.study_cells(pmin)[7][1:])  # p_min 0.2, FedVARP
  assert (cell.aggregator, cell.availability_hparams.p_min, cell.num_clients) == (
    "fedvarp",
    0.2,
    100,
  )
  config.sweep = "num_clients"
  n_sweep = fedar.prepare_config(config)
  todo = fedar.study_cells(n_sweep)
  assert [n for n, *_ in todo][::5] == [
    "n80_pmin0.1_fedar",
    "n90_pmin0.1_fedar",
    "pmin0.1_fedar",  # N = 100 is the main study's cell
    "n110_pmin0.1_fedar",
    "n120_pmin0.1_fedar",
  ]
  for _, method, p, n in todo:
    cell = fedar.cell_config(n_sweep, method, p, n)
    assert cell.availability_hparams.p_min == 0.1
    assert cell.num_clients == cell.clients_per_round == (n or 100)  # every available client
    main = fedar.cell_config(n_sweep, method, p).to_dict()
    assert cell.to_dict() == {**main, "num_clients": n or 100, "clients_per_round": n or 100}
  s50 = fedar.cell_config(n_sweep, "fedavg_s50", 0.1, 80)
  assert (s50.num_clients, s50.clients_per_round) == (80, 50)
  assert fedar.cell_config(n_sweep, "fedavg_s50", 0.1, 40).clients_per_round == 40
  full = fedar.cell_config(n_sweep, "fedavg_full", None, 120)
  assert (full.num_clients, full.clients_per_round, full.availability) == (120, 120, "always")
  assert fedar.name_of("fedavg_full", None, 120) == "n120_fedavg_full"
  # every sweep cell passes the checks run_cells makes
  common.validate_cells([fedar.cell_config(n_sweep, m, p, n) for _, m, p, n in todo], [0])


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("sweep", "fig4", "sweep='fig4' is not allowed; allowed: none, pmin, num_clients"),
    ("sweep_p_mins", (0.1, 1.5), "p_min=1.5 is out of range; allowed: [0, 1]"),
    ("sweep_fixed_p_min", -0.1, "p_min=-0.1 is out of range; allowed: [0, 1]"),
    ("sweep_num_clients", (80, 0), "num_clients=0 is out of range; allowed: integers >= 1"),
    ("sweep_num_clients", (80.5,), "num_clients=80.5 is out of range; allowed: integers >= 1"),
    ("sweep_num_clients", (), "sweep_num_clients=() is empty; allowed: one value or more"),
    (
      "sweep_p_mins",
      (0.1, 0.3, 0.1),
      "sweep_p_mins=(0.1, 0.3, 0.1) repeats a value; allowed: distinct values",
    ),
    (
      "sweep_methods",
      ("fedar", "fedavg_s5"),
      f"unknown method(s) ['fedavg_s5'] in sweep_methods; known: {', '.join(fedar.METHODS)}",
    ),
    (
      "mifa_step_scale",
      0.0,
      "mifa_step_scale=0.0 is out of range; allowed: (0.0, inf)",
    ),
    (
      "significance_pairs",
      "clients",
      "significance_pairs='clients' is not allowed; allowed: seeds, rounds",
    ),
  ],
)
def test_bad_sweep_values_are_named(field, value, message):
  config = fedar_config.get_config()
  config[field] = value
  with pytest.raises(ValueError) as err:
    fedar.prepare_config(config)
  assert str(err.value) == message


@pytest.mark.parametrize(
  "flag, message",
  [
    ("--config.sweep=fig5", "sweep='fig5' is not allowed; allowed: none, pmin, num_clients"),
    (
      "--config.significance_pairs=round",
      "significance_pairs='round' is not allowed; allowed: seeds, rounds",
    ),
  ],
)
def test_binary_rejects_a_bad_choice_in_one_line(tmp_path, flag, message):
  p = subprocess.run(
    [sys.executable, "-m", "experiments.fedar", flag, f"--output_dir={tmp_path}"],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert p.returncode == 2
  assert p.stderr.strip().splitlines()[-1] == f"error: {message}"
  assert not os.listdir(tmp_path)


def check_significance_file(out, stem, key, pairs="seeds"):
  """``<stem>significance.csv`` is the paired t-test of ``<stem>per_seed.csv``'s numbers
  (``pairs="seeds"``) or of ``<stem>per_round.csv``'s (``"rounds"``)."""
  per_seed = read_csv(out / f"{stem}per_seed.csv")
  assert per_seed[0] == ["cell", "method", key, "seed", "final test acc (%)", "final train loss"]
  per_round = read_csv(out / f"{stem}per_round.csv")
  assert per_round[0] == ["cell", "method", key, "round", "mean test acc over seeds (%)"]
  acc = {}
  for _, label, value, pair, a, *_ in {"seeds": per_seed, "rounds": per_round}[pairs][1:]:
    acc.setdefault((label, value), {})[int(pair)] = float(a)
  rows = read_csv(out / f"{stem}significance.csv")
  assert rows[0] == [
    "method",
    key,
    "paired by",
    "FedAR minus method (points)",
    "t",
    "p (paired t-test)",
    "pairs",
  ]
  assert len(rows) > 1
  for label, value, paired_by, diff, t, p, n in rows[1:]:
    assert paired_by == pairs
    ref, other = acc[("FedAR", value)], acc[(label, value)]
    keys = sorted(set(ref) & set(other))
    a, b = [ref[k] for k in keys], [other[k] for k in keys]
    assert diff == f"{np.mean(np.subtract(a, b)):+.2f}" and int(n) == len(keys)
    if len(keys) < 2:
      assert (t, p) == ("n/a", "n/a")
    elif len(set(np.subtract(a, b))) > 1:
      test = stats.ttest_rel(a, b)
      assert (t, p) == (f"{test.statistic:.3f}", f"{test.pvalue:.3g}")
  return per_seed, per_round, rows


def test_main_study_writes_per_seed_and_significance(tmp_path, monkeypatch):
  config = tiny(methods=("fedar", "mifa_step"))
  config.base.eval_every = 1  # two evaluated rounds: a curve to pair
  assert config.significance_pairs == "rounds"  # the default: the reading of the paper's p-values
  config.significance_pairs = "seeds"
  out = fedar.run_study(config, str(tmp_path), [0, 1])
  per_seed, per_round, rows = check_significance_file(tmp_path, "", "p_min")
  # every run, with its summary's accuracy and last train loss
  assert len(per_seed) - 1 == 2 * 2
  for cell, _, _, seed, acc, loss in per_seed[1:]:
    summary, history = out["runs"][cell][[0, 1].index(int(seed))]
    assert float(acc) == pytest.approx(100 * summary["final_test_accuracy"], abs=5e-5)
    assert float(loss) == pytest.approx(history[-1]["train_loss"], abs=5e-7)
  assert [r[0] for r in rows[1:]] == [fedar.METHODS["mifa_step"]]
  folder = tmp_path / "cells" / "pmin0.1_mifa_step" / "seed1"
  hp = json.loads((folder / "config.json").read_text())["config"]["aggregator_hparams"]
  assert hp == {"step_scale": 1.05}
  assert (tmp_path / "significance.md").read_text().startswith("### FedAR Table 2")
  # per_round.csv: each cell's seed-mean test accuracy at rounds 1 and 2, from metrics.jsonl
  assert [r[3] for r in per_round[1:]] == ["1", "2"] * 2
  for cell, _, _, t, acc in per_round[1:]:
    records = [out["runs"][cell][k][1][int(t) - 1] for k in (0, 1)]
    assert [r["round"] for r in records] == [int(t)] * 2
    mean = 100 * np.mean([r["test_accuracy"] for r in records])
    assert float(acc) == pytest.approx(mean, abs=5e-5)
  # "rounds": the same cells read back (nothing trains), the test over the curve
  monkeypatch.setattr(common.experiment, "run_batch", pytest.fail)
  config.significance_pairs = "rounds"
  again = fedar.run_study(config, str(tmp_path), [0, 1])
  assert again["per_seed"] == out["per_seed"] and again["per_round"] == out["per_round"]
  _, _, rows = check_significance_file(tmp_path, "", "p_min", "rounds")
  assert [(r[2], r[6]) for r in rows[1:]] == [("rounds", "2")]
  title = (tmp_path / "significance.md").read_text().splitlines()[0]
  assert "paired t-test over evaluated rounds (the seed-mean test accuracy curve)" in title


def test_pmin_sweep_writes_table_figure_and_significance(tmp_path, monkeypatch):
  config = tiny("pmin")
  assert tuple(config.sweep_p_mins) == (0.1, 0.5) and tuple(config.sweep_methods) == (
    "fedar",
    "mifa",
  )
  out = fedar.run_study(config, str(tmp_path), [0, 1])
  table = read_csv(tmp_path / "sweep_pmin.csv")
  assert table[0] == [
    "method",
    "p_min=0.1: final test acc (%)",
    "p_min=0.5: final test acc (%)",
    "p_min=0.1: final train loss",
    "p_min=0.5: final train loss",
  ]
  per_seed, _, rows = check_significance_file(
    tmp_path, "sweep_pmin_", "p_min", "rounds"
  )  # the default
  # the table's mean ± std (ddof 0) is the per-seed values'
  for row in table[1:]:
    for j, p in enumerate(("0.1", "0.5")):
      values = [float(r[4]) for r in per_seed[1:] if r[1] == row[0] and r[2] == p]
      assert row[1 + j] == common.fmt(np.mean(values), np.std(values), 2)
  assert [r[:2] for r in rows[1:]] == [["MIFA", "0.1"], ["MIFA", "0.5"]]
  assert sorted(os.listdir(tmp_path / "cells")) == [
    "pmin0.1_fedar",
    "pmin0.1_mifa",
    "pmin0.5_fedar",
    "pmin0.5_mifa",
  ]
  for name in ("config.json", "metrics.jsonl", "summary.json"):
    assert (tmp_path / "cells" / "pmin0.5_mifa" / "seed1" / name).exists()
  assert (tmp_path / "sweep_pmin.png").stat().st_size > 5000
  # --resume reads every finished cell back: nothing trains, the same tables
  monkeypatch.setattr(common.experiment, "run_batch", pytest.fail)
  again = fedar.run_study(config, str(tmp_path), [0, 1])
  assert again["table"] == out["table"] and again["per_seed"] == out["per_seed"]


def test_num_clients_sweep_names_cells_by_n(tmp_path):
  config = tiny("num_clients", sweep_methods=("fedar",))
  assert tuple(config.sweep_num_clients) == (20, 40)
  out = fedar.run_study(config, str(tmp_path), [3])
  assert sorted(out["runs"]) == ["n20_pmin0.1_fedar", "n40_pmin0.1_fedar"]
  for n in (20, 40):
    folder = tmp_path / "cells" / f"n{n}_pmin0.1_fedar" / "seed3"
    cfg = json.loads((folder / "config.json").read_text())["config"]
    assert (cfg["num_clients"], cfg["clients_per_round"], cfg["seed"]) == (n, n, 3)
    assert cfg["availability_hparams"] == {"p_min": 0.1}
    assert len(out["runs"][f"n{n}_pmin0.1_fedar"][0][0]["sampling_counts"]) == n
  table = read_csv(tmp_path / "sweep_num_clients.csv")
  assert table[0][1:3] == ["N=20: final test acc (%)", "N=40: final test acc (%)"]
  assert [r[0] for r in table[1:]] == ["FedAR"]
  per_seed = read_csv(tmp_path / "sweep_num_clients_per_seed.csv")
  assert [(r[0], r[2], r[3]) for r in per_seed[1:]] == [
    ("n20_pmin0.1_fedar", "20", "3"),
    ("n40_pmin0.1_fedar", "40", "3"),
  ]
  assert not (tmp_path / "sweep_num_clients_significance.csv").exists()  # FedAR alone
  assert (tmp_path / "sweep_num_clients.png").exists()
