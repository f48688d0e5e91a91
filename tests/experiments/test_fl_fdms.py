"""experiments/fl_fdms.py: the --quick binary's tables, the cell configs, and TFDS data."""

import csv
import json
import os
import re
import subprocess
import sys

import pytest

from experiments import fl_fdms
from experiments.configs import fl_fdms as fl_fdms_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEAN_STD = re.compile(r"^(\d+\.\d+) ± (\d+\.\d+)$")


def read_csv(path):
  with open(path) as f:
    return list(csv.reader(f))


def test_quick_binary_writes_tables_and_figures(tmp_path):
  out = tmp_path / "fdms"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  p = subprocess.run(
    [sys.executable, "-m", "experiments.fl_fdms", "--quick", f"--output_dir={out}"],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert p.returncode == 0, p.stderr[-3000:]
  acc = read_csv(out / "accuracy.csv")
  assert acc[0] == ["method", "α=0.5: final test acc (%)"]
  labels = [fl_fdms.METHODS[m] for m in fl_fdms_config.get_config().quick_methods]
  assert [r[0] for r in acc[1:]] == labels
  for row in acc[1:]:
    m = MEAN_STD.match(row[1])
    assert m, row
    assert 0.0 <= float(m.group(1)) <= 100.0 and float(m.group(2)) == 0.0  # one seed
  cx = read_csv(out / "complexity.csv")
  assert cx[0] == ["method", "α=0.5: similarity computations saved (%)", "α=0.5: scores computed"]
  rows = {r[0]: r for r in cx[1:]}
  assert set(rows) == {"FL-FDMS", fl_fdms.METHODS["fdms_cr_half"]}
  # Without complexity reduction nothing is saved; with it, at most everything.
  assert rows["FL-FDMS"][1] == "0.00 ± 0.00"
  assert 0.0 <= float(MEAN_STD.match(rows[fl_fdms.METHODS["fdms_cr_half"]][1]).group(1)) <= 100
  # Plain FL-FDMS scores every co-active pair: floor(0.5 * 20) = 10 clients drop each
  # round, so C(10, 2) = 45 pairs a round over 4 rounds.
  assert int(rows["FL-FDMS"][2]) == 4 * 45
  cv = read_csv(out / "convergence.csv")
  assert cv[0] == [
    "method",
    "α=0.5: mean test acc over rounds (%)",
    "α=0.5: rounds to 90 % acc",
    "α=0.5: mean |Δ acc| between evaluations (pp)",
  ]
  assert [r[0] for r in cv[1:]] == labels
  assert all(MEAN_STD.match(r[1]) and (r[2] == ">4" or MEAN_STD.match(r[2])) for r in cv[1:])
  assert all(MEAN_STD.match(r[3]) for r in cv[1:])
  summary = json.loads((out / "cells" / "full" / "seed0" / "summary.json").read_text())
  assert summary["rounds"] == 4 and summary["complete"]
  assert "| Full |" in p.stdout
  for png in ("fig1_alpha0.5.png", "fig4_similarity.png"):
    assert (out / png).stat().st_size > 5000


def test_cell_configs_follow_the_paper():
  config = fl_fdms.prepare_config(fl_fdms_config.get_config())
  names = [name for name, _, _ in fl_fdms.cells(config)]
  assert len(names) == 1 + 3 * 6 and names[0] == "full"  # Full has no dropout: run once
  full = fl_fdms.cell_config(config, "full", None)
  assert (full.availability, full.aggregator, full.selection) == ("always", "full", "full")
  assert full.clients_per_round == full.num_clients == 20
  cr = fl_fdms.cell_config(config, "fdms_cr_half", 0.5)
  hp = cr.aggregator_hparams
  assert cr.availability == "cluster_dropout" and cr.availability_hparams.dropout_rate == 0.5
  assert cr.availability_hparams.mode == "fl_fdms"
  assert hp.complexity_reduction and hp.theta_scale == 0.5 and hp.num_rounds == 200
  assert hp.beta == pytest.approx(0.25)  # (1 - alpha)^2 co-active rounds
  assert hp.max_friends == 3  # 4 clients per cluster
  assert fl_fdms.cell_config(config, "fdms_cr", 0.3).aggregator_hparams.beta == pytest.approx(0.49)
  assert "complexity_reduction" not in fl_fdms.cell_config(config, "fdms", 0.7).aggregator_hparams
  assert "friend" not in fl_fdms.cell_config(config, "fdms", 0.7).aggregator_hparams
  oracle = fl_fdms.cell_config(config, "fdms_oracle", 0.7)
  assert (oracle.aggregator, oracle.aggregator_hparams.friend) == ("fdms", "oracle")
  assert oracle.availability == "cluster_dropout"  # the default process is the redrawn one
  assert "min_similarity" not in fl_fdms.cell_config(config, "fdms", 0.7).aggregator_hparams
  assert "fdms_floor" not in config.methods  # not the paper's: only when asked for
  floor = fl_fdms.cell_config(config, "fdms_floor", 0.7).aggregator_hparams
  assert floor.to_dict() == {"weighting": "uniform", "min_similarity": 0.65}


def test_markov_process_cells():
  config = fl_fdms_config.get_config()
  config.process = "markov"
  config.mean_absence = 20.0
  config = fl_fdms.prepare_config(config)
  for method in ("dropout", "stale", "fdms", "fdms_cr", "fdms_oracle"):
    c = fl_fdms.cell_config(config, method, 0.7)
    assert c.availability == "markov_dropout"
    assert c.availability_hparams.to_dict() == {"dropout_rate": 0.7, "mean_absence": 20.0}
  assert fl_fdms.cell_config(config, "full", None).availability == "always"
  assert "absences of 20 rounds" in fl_fdms.process_text(config)
  config.assumption5 = True
  c = fl_fdms.cell_config(config, "stale", 0.5)
  assert c.availability_hparams.keep_per_cluster == 5  # the 5 clusters of the partition
  assert "one client per cluster kept" in fl_fdms.process_text(config)


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("process", "bursty", "process='bursty'"),
    ("mean_absence", 2.0, r"mean_absence=2.0 is too short for dropout_rate=0.7"),
    ("mean_absence", 0.5, "mean_absence=0.5"),
    ("fdms_min_similarity", 1.5, "min_similarity=1.5"),
  ],
)
def test_process_fields_are_validated(field, value, match):
  config = fl_fdms_config.get_config()
  config.process = "markov"
  config.methods = ("stale", "fdms", "fdms_floor")
  config[field] = value
  with pytest.raises(ValueError, match=match):
    fl_fdms.prepare_config(config)


def test_prepare_config_quick_and_data_dir():
  c = fl_fdms.prepare_config(fl_fdms_config.get_config(), quick=True, data_dir="/data")
  assert c.base.rounds == 4 and tuple(c.alphas) == (0.5,)
  assert (c.base.dataset, c.base.model, c.base.data_dir) == ("mnist", "cnn_mnist", "/data")
  bad = fl_fdms_config.get_config()
  bad.methods = ("full", "oracle")
  with pytest.raises(ValueError, match="oracle"):
    fl_fdms.prepare_config(bad)


def test_rounds_to_target():
  history = [{"round": 5, "test_accuracy": 0.8}, {"round": 10, "test_accuracy": 0.91}]
  assert fl_fdms.rounds_to(history, 0.9) == 10 and fl_fdms.rounds_to(history, 0.95) is None
  assert fl_fdms.curve_of(history) == [0.8, 0.91]


def test_fluctuation_by_hand():
  # |0.82 - 0.80| = 0.02 and |0.78 - 0.82| = 0.04: mean 0.03.
  history = [{"test_accuracy": a} for a in (0.80, 0.82, 0.78)]
  assert fl_fdms.fluctuation(history) == pytest.approx(0.03)
  assert fl_fdms.fluctuation(history[:1]) == 0.0


def test_claim_tables_by_hand():
  alphas = [0.3, 0.7]
  final = {("full", 0.3): 81.0, ("full", 0.7): 81.0, ("stale", 0.3): 80.0, ("stale", 0.7): 70.5}
  final |= {("fdms", 0.3): 80.5, ("fdms", 0.7): 78.0}
  speed = {k: v - 2.0 for k, v in final.items()}
  speed["stale", 0.7] = 60.0
  (dh, drows), (sh, srows) = fl_fdms.claim_tables(final, speed, ["full", "stale", "fdms"], alphas)
  assert dh == [
    "comparison",
    "α=0.3: final acc (pp)",
    "α=0.7: final acc (pp)",
    "α=0.3: mean acc over rounds (pp)",
    "α=0.7: mean acc over rounds (pp)",
  ]
  # Only the comparisons whose methods both ran: no Dropout, no oracle.
  assert drows == [
    ["FL-FDMS − Stale", "+0.50", "+7.50", "+0.50", "+16.00"],
    ["Full − FL-FDMS", "+0.50", "+3.00", "+0.50", "+3.00"],
  ]
  assert sh[1] == "final acc α=0.3 → α=0.7 (%)"
  assert srows == [
    ["Stale", "80.00 → 70.50", "9.50", "78.00 → 60.00", "18.00"],
    ["FL-FDMS", "80.50 → 78.00", "2.50", "78.50 → 76.00", "2.50"],
  ]


def test_saved_share():
  assert fl_fdms.saved_share(30.0, 90.0) == 0.25
  assert fl_fdms.saved_share(0.0, 0.0) == 0.0


def test_runs_on_tfds_mnist(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  config = fl_fdms.prepare_config(
    fl_fdms_config.get_config(), quick=True, data_dir=str(tmp_path), rounds=2
  )
  config.methods = ("fdms",)
  config.base.model = "logreg"  # the data path is the point; keep the compile small
  with tfds.testing.mock_data(num_examples=200):
    out = fl_fdms.run_study(config, str(tmp_path / "out"), [0])
  ((summary, history),) = out["runs"]["alpha0.5_fdms"]
  assert summary["rounds"] == 2 and history[-1]["round"] == 2
  config_json = json.loads(
    (tmp_path / "out" / "cells" / "alpha0.5_fdms" / "seed0" / "config.json").read_text()
  )
  assert config_json["dataset"].startswith("mnist/clustered")
  assert out["accuracy"][1][0][0] == "FL-FDMS"


def test_runs_read_back_without_checkpoints(tmp_path):
  # results/ keeps each run's config.json, metrics.jsonl and summary.json, not its
  # checkpoints: the study reads such runs back and writes every table but the complexity
  # one (whose counters are in the checkpoints) instead of failing on the missing file.
  from fedjax_sel.core import checkpoint

  config = fl_fdms.prepare_config(fl_fdms_config.get_config(), quick=True, rounds=2)
  config.methods = ("stale", "fdms")
  config.base.model = "logreg"
  out_dir = tmp_path / "out"
  first = fl_fdms.run_study(config, str(out_dir), [0])
  assert first["complexity"][1] and (out_dir / "complexity.csv").exists()
  for name in ("alpha0.5_stale", "alpha0.5_fdms"):
    checkpoint.clear(str(out_dir / "cells" / name / "seed0"))
  (out_dir / "complexity.csv").unlink()
  (out_dir / "accuracy.csv").unlink()
  again = fl_fdms.run_study(config, str(out_dir), [0])
  assert again["accuracy"] == first["accuracy"]  # read back, not rerun
  assert again["complexity"][1] == []
  assert (out_dir / "accuracy.csv").exists() and not (out_dir / "complexity.csv").exists()
