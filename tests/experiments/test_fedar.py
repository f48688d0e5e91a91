"""experiments/fedar.py: cell configs, the bias-table cells, the --quick binary, TFDS data."""

import csv
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from experiments import fedar
from experiments.configs import fedar as fedar_config
from fedjax_sel.metrics import results

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEAN_STD = re.compile(r"^(\d+\.\d+) ± (\d+\.\d+)$")


def read_csv(path):
  with open(path) as f:
    return list(csv.reader(f))


def test_cell_configs_follow_the_paper():
  config = fedar.prepare_config(fedar_config.get_config())
  base = config.base
  assert (base.num_clients, base.local_steps, base.batch_size, base.client_lr) == (100, 5, 64, 0.1)
  assert base.partition == "shards" and base.labels_per_client == 2
  names = [n for n, _, _ in fedar.cells(config)]
  assert len(names) == 1 + 2 * 6 and names[0] == "fedavg_full"
  fedar_cell = fedar.cell_config(config, "fedar", 0.1)
  assert fedar_cell.aggregator == "fedar" and fedar_cell.aggregator_hparams.rho == 0.1
  assert fedar_cell.availability == "bernoulli"
  assert fedar_cell.availability_hparams.p_min == 0.1
  assert fedar_cell.selection == "full" and fedar_cell.clients_per_round == 100
  s50 = fedar.cell_config(config, "fedavg_s50", 0.5)
  assert (s50.selection, s50.clients_per_round, s50.aggregator) == ("uniform", 50, "fedavg")
  assert s50.availability_hparams.p_min == 0.5
  scaffold = fedar.cell_config(config, "scaffold", 0.1)
  assert (scaffold.client_update, scaffold.aggregator) == ("scaffold", "fedavg")
  full = fedar.cell_config(config, "fedavg_full", None)
  assert full.availability == "always" and dict(full.availability_hparams) == {}
  assert fedar.cell_config(config, "fedavg_is", 0.1).aggregator == "fedavg_is"


def test_bias_row_matches_the_paper_format():
  # FedAR Table 3's FedAR row: mean 40.9, var 325 -> std 18.0 across clients.
  records = [
    {
      "client_acc_mean": 0.409,
      "client_acc_var": 0.0325,
      "client_acc_worst10": 0.20,
      "client_acc_best10": 0.70,
    },
    {
      "client_acc_mean": 0.409,
      "client_acc_var": 0.0325,
      "client_acc_worst10": 0.22,
      "client_acc_best10": 0.66,
    },
  ]
  assert fedar.bias_row(records) == ["40.9 ± 18.0", "325.0", "21.0 ± 1.0", "68.0 ± 2.0"]


def test_quick_binary_writes_tables_and_figures(tmp_path):
  out = tmp_path / "fedar"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  p = subprocess.run(
    [sys.executable, "-m", "experiments.fedar", "--quick", "--tensorboard", f"--output_dir={out}"],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert p.returncode == 0, p.stderr[-3000:]
  acc = read_csv(out / "accuracy.csv")
  assert acc[0] == ["method", "p_min=0.1: final test acc (%)", "p_min=0.1: final train loss"]
  quick = fedar_config.get_config().quick_methods
  assert [r[0] for r in acc[1:]] == [fedar.METHODS[m] for m in quick]
  for row in acc[1:]:
    acc_value = float(MEAN_STD.match(row[1]).group(1))
    loss_value = float(MEAN_STD.match(row[2]).group(1))
    assert 0.0 <= acc_value <= 100.0 and 0.0 < loss_value < 10.0
  bias = read_csv(out / "bias.csv")
  assert bias[0] == ["method", "Mean (%)", "Var (%²)", "Worst 10% (%)", "Best 10% (%)"]
  # Table 3's rows first (FedAR, FedAvg ideal), then the other quick methods.
  assert [r[0] for r in bias[1:]] == [
    "FedAR",
    fedar.METHODS["fedavg_full"],
    "FedAvg-IS",
    "Scaffold",
  ]
  for row in bias[1:]:
    mean, std = (float(v) for v in MEAN_STD.match(row[1]).groups())
    assert std == pytest.approx(float(row[2]) ** 0.5, abs=0.06)  # ± is sqrt(Var)
    worst = float(MEAN_STD.match(row[3]).group(1))
    best = float(MEAN_STD.match(row[4]).group(1))
    assert 0.0 <= worst <= mean <= best <= 100.0
  summary = json.loads((out / "cells" / "pmin0.1_fedar" / "seed0" / "summary.json").read_text())
  assert summary["rounds"] == 4 and len(summary["sampling_counts"]) == 100
  # --tensorboard: every cell's seed folder is a TensorBoard run of its metrics.jsonl
  cell = out / "cells" / "pmin0.1_fedar" / "seed0"
  acc = event_accumulator.EventAccumulator(str(cell))
  acc.Reload()
  records = results.read_jsonl(str(cell / "metrics.jsonl"))
  assert [e.step for e in acc.Scalars("test_loss")] == [r["round"] for r in records]
  np.testing.assert_allclose(
    [e.value for e in acc.Scalars("test_loss")], [r["test_loss"] for r in records], rtol=1e-6
  )
  assert (out / "fig2_pmin0.1.png").stat().st_size > 5000


def test_runs_on_tfds_mnist(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  config = fedar.prepare_config(
    fedar_config.get_config(), quick=True, data_dir=str(tmp_path), rounds=2
  )
  config.methods = ("fedar",)
  with tfds.testing.mock_data(num_examples=600):
    out = fedar.run_study(config, str(tmp_path / "out"), [0])
  assert (config.base.dataset, config.base.model) == ("mnist", "logreg")
  ((summary, history),) = out["runs"]["pmin0.1_fedar"]
  assert summary["rounds"] == 2
  # the bias table's FedAR row is the last record's client-accuracy distribution (one seed)
  last = history[-1]
  assert 0.0 <= last["client_acc_worst10"] <= last["client_acc_mean"]
  assert last["client_acc_mean"] <= last["client_acc_best10"] <= 1.0
  assert out["bias"][1][0] == [
    "FedAR",
    f"{100 * last['client_acc_mean']:.1f} ± {100 * last['client_acc_var'] ** 0.5:.1f}",
    f"{1e4 * last['client_acc_var']:.1f}",
    f"{100 * last['client_acc_worst10']:.1f} ± 0.0",
    f"{100 * last['client_acc_best10']:.1f} ± 0.0",
  ]


def test_real_dataset_and_model_choose_what_data_dir_runs():
  config = fedar_config.get_config()
  config.real_dataset, config.real_model = "svhn_cropped", "resnet18"
  base = fedar.prepare_config(config, data_dir="/tmp").base
  assert (base.dataset, base.model, base.data_dir) == ("svhn_cropped", "resnet18", "/tmp")
  for field, bad, allowed in (
    ("real_dataset", "svhn", "mnist, fashion_mnist, cifar10, svhn_cropped, stl10, emnist"),
    ("real_model", "resnet", "cnn_cifar, cnn_mnist, cnn_stl10, logreg, mlp, resnet18"),
  ):
    config = fedar_config.get_config()
    config[field] = bad
    with pytest.raises(ValueError) as err:
      fedar.prepare_config(config, data_dir="/tmp")
    assert str(err.value) == f"{field}={bad!r}; allowed: {allowed}"


def _svhn_smoke(tmp_path, model, num_examples, num_clients=100):
  tfds = pytest.importorskip("tensorflow_datasets")
  config = fedar_config.get_config()
  config.real_dataset, config.real_model = "svhn_cropped", model
  config = fedar.prepare_config(config, quick=True, data_dir=str(tmp_path), rounds=2)
  config.methods = ("fedar",)
  config.base.num_clients = config.base.clients_per_round = num_clients
  with tfds.testing.mock_data(num_examples=num_examples):
    out = fedar.run_study(config, str(tmp_path / "out"), [0])
  ((summary, history),) = out["runs"]["pmin0.1_fedar"]
  assert summary["rounds"] == 2 and 0.0 <= history[-1]["test_accuracy"] <= 1.0
  return config


@pytest.mark.slow  # ~20 s; the SVHN data path is tests/data/test_tfds_svhn_stl10.py's
def test_runs_on_tfds_svhn(tmp_path):
  # the binary on SVHN's 32x32x3 (mock images) with logistic regression: a small compile
  config = _svhn_smoke(tmp_path, "logreg", 600)
  assert config.base.dataset == "svhn_cropped"


@pytest.mark.slow
def test_runs_on_tfds_svhn_with_resnet18(tmp_path):
  """The paper's SVHN set-up on mock data with ResNet-18 (full width), 10 clients, 2 rounds
  (100 clients ran > 20 min on a loaded 2-core CPU)."""
  assert _svhn_smoke(tmp_path, "resnet18", 100, num_clients=10).base.model == "resnet18"
