"""experiments/fedemd.py: Maverick partitions, R@99, selection replay, the --quick binary."""

import csv
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from experiments import fedemd
from experiments.configs import fedemd as fedemd_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUNDS = re.compile(r"^(\d+\.\d+) ± (\d+\.\d+)$|^>(\d+)$")


def read_csv(path):
  with open(path) as f:
    return list(csv.reader(f))


def test_exclusive_mavericks_own_whole_classes():
  labels = np.repeat(np.arange(10), 30)  # 300 examples, 30 per class
  parts = fedemd.maverick_partition(labels, 20, 2, False, (0, 1, 2), np.random.default_rng(0))
  assert len(parts) == 20
  assert sorted(np.concatenate(parts).tolist()) == list(range(300))  # each example once
  assert set(labels[parts[0]]) == {0} and len(parts[0]) == 30
  assert set(labels[parts[1]]) == {1} and len(parts[1]) == 30
  others = parts[2:]
  assert all(not np.isin(labels[p], [0, 1]).any() for p in others)
  sizes = [len(p) for p in others]
  assert sum(sizes) == 240 and max(sizes) - min(sizes) <= 1  # 240 / 18 -> 13 or 14


def test_shared_mavericks_split_one_class():
  labels = np.repeat(np.arange(10), 30)
  parts = fedemd.maverick_partition(labels, 20, 3, True, (4, 1, 2), np.random.default_rng(1))
  assert [len(p) for p in parts[:3]] == [10, 10, 10]
  assert all(set(labels[p]) == {4} for p in parts[:3])
  assert not any(np.isin(labels[p], [4]).any() for p in parts[3:])
  # Class 1 is not a Maverick class when the Mavericks share class 4.
  assert sum(int(np.sum(labels[p] == 1)) for p in parts[3:]) == 30


def test_bad_scenarios():
  assert fedemd.parse_scenario("3_shared") == (3, True)
  for bad in ("x_excl", "2_both", "0_excl"):
    with pytest.raises(ValueError, match="scenario"):
      fedemd.parse_scenario(bad)
  with pytest.raises(ValueError, match="maverick_classes"):
    fedemd.maverick_partition(np.arange(20) % 10, 10, 3, False, (0, 1), np.random.default_rng(0))


def test_r_at_99_is_relative_to_random_best():
  def hist(accs):
    return [{"round": t + 1, "test_accuracy": a} for t, a in enumerate(accs)]

  random = [hist([0.5, 0.7, 0.8, 0.79]), hist([0.6, 0.9, 0.85, 0.88])]
  method = [hist([0.6, 0.79, 0.792, 0.9]), hist([0.5, 0.6, 0.7, 0.8])]
  # Targets 0.99 * 0.8 = 0.792 and 0.99 * 0.9 = 0.891.
  assert fedemd.r_at(method, random) == [3, None]
  assert fedemd.r_at(random, random) == [3, 2]
  assert fedemd.format_rounds([None, None], 200) == ">200"
  assert fedemd.format_rounds([10, 20], 200) == "15.0 ± 5.0"
  assert fedemd.format_rounds([10, None], 200).startswith("10.0 ± 0.0 (1/2 seeds reached")


def test_maverick_data_sizes_on_digits():
  config = fedemd_config.get_config()
  data = fedemd.maverick_data(config, "1_excl")
  counts = data.train.counts
  labels = data.client_info().label_counts
  assert data.num_clients == 50 and int(counts.sum()) == 1437  # test_fraction 0: all data
  assert int(labels[0, 0]) == int(counts[0]) == int(labels[:, 0].sum())  # owns class 0
  # The Maverick holds about 5x a non-Maverick (FedEMD App. A.4: "K times as much data").
  assert 4.5 < counts[0] / np.mean(counts[1:]) < 6.5


def test_quick_binary_writes_tables_and_replays_selection(tmp_path):
  out = tmp_path / "fedemd"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  p = subprocess.run(
    [sys.executable, "-m", "experiments.fedemd", "--quick", f"--output_dir={out}"],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert p.returncode == 0, p.stderr[-3000:]
  r99 = read_csv(out / "r99.csv")
  assert r99[0] == ["method", "1 excl"]
  assert [r[0] for r in r99[1:]] == [
    "Random",
    "TiFL",
    "FedFast",
    "FedProx",
    "Shapley (SVB)",
    "FedEMD",
  ]
  for row in r99[1:]:
    assert ROUNDS.match(row[1]), row
  # Random reaches 99 % of its own best accuracy within the run, by definition.
  assert float(r99[1][1].split(" ")[0]) <= 4
  for name in ("final_accuracy", "maverick_share"):
    table = read_csv(out / f"{name}.csv")
    assert table[0] == ["method", "1 excl"] and len(table) == 7
    assert all(0.0 <= float(r[1].split(" ± ")[0]) <= 100.0 for r in table[1:])
  # The replayed selections (no training) match the runs' sampling counts exactly; --quick
  # leaves out the methods whose cohorts depend on training (TiFL, FedFast, SVB).
  part = read_csv(out / "participation.csv")
  assert part[0] == ["round", "Random", "FedProx", "FedEMD"] and len(part) == 5
  for method, column in (("random", 1), ("fedprox", 2), ("fedemd", 3)):
    summary = json.loads(
      (out / "cells" / f"1_excl_{method}" / "seed0" / "summary.json").read_text()
    )
    assert int(part[-1][column]) == summary["sampling_counts"][0]  # client 0 = the Maverick
  assert "participation trace" not in p.stderr  # no mismatch warning
  counts = {
    m: json.loads((out / "cells" / f"1_excl_{m}" / "seed0" / "summary.json").read_text())[
      "sampling_counts"
    ]
    for m in fedemd.METHODS
  }
  # FedProx is Random's selection (same seed, same cohorts) with another local update
  assert counts["fedprox"] == counts["random"]
  # FedFast (one pick per cluster) and TiFL pick 5 clients a round
  assert sum(counts["tifl"]) == sum(counts["fedfast"]) == 4 * 5
  for png in ("accuracy_1_excl.png", "fig4_r99.png", "participation.png"):
    assert (out / png).stat().st_size > 5000


@pytest.mark.parametrize("reading", ["epoch", "gradient"])
def test_quick_binary_fedsgd_cells(tmp_path, reading):
  """--config.aggregation_setup=fedsgd writes ``<scenario>_<method>_fedsgd`` cells (the epoch
  reading: FedAvg's local epoch, batch 4, and the plain mean) or ``..._fedsgd_gradient`` cells
  (one full-batch step per client: client update fedsgd over batches of 128, plain SGD)."""
  out = tmp_path / "fedsgd"
  p = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.fedemd",
      "--quick",
      f"--output_dir={out}",
      "--config.aggregation_setup=fedsgd",
      f"--config.fedsgd_reading={reading}",
      "--config.methods=('random','tifl')",
    ],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert p.returncode == 0, p.stderr[-3000:]
  assert [r[0] for r in read_csv(out / "r99.csv")[1:]] == ["Random", "TiFL"]
  suffix = "_fedsgd" if reading == "epoch" else "_fedsgd_gradient"
  for method in ("random", "tifl"):
    cell = out / "cells" / f"1_excl_{method}{suffix}" / "seed0"
    cfg = json.loads((cell / "config.json").read_text())["config"]
    sizes = json.loads((cell / "summary.json").read_text())
    assert cfg["aggregator_hparams"] == {"weighting": "uniform"}
    assert (cfg["local_epochs"], cfg["local_steps"]) == (1, 0)
    assert sizes["complete"]
    if reading == "epoch":
      assert (cfg["batch_size"], cfg["client_update"]) == (4, "sgd")
    else:
      assert (cfg["batch_size"], cfg["client_update"]) == (128, "fedsgd")
      assert (cfg["client_optimizer"], cfg["client_momentum"]) == ("sgd", 0.0)


def test_dodge_offsets_are_centred_on_the_tick():
  # One series sits on the tick; several are spaced by the width and symmetric about it.
  np.testing.assert_allclose(fedemd.dodge_offsets(1), [0.0])
  np.testing.assert_allclose(fedemd.dodge_offsets(2), [-0.04, 0.04])
  np.testing.assert_allclose(fedemd.dodge_offsets(3, width=0.1), [-0.1, 0.0, 0.1])


def test_runs_on_tfds_fashion_mnist(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  config = fedemd.prepare_config(
    fedemd_config.get_config(), quick=True, data_dir=str(tmp_path), rounds=2
  )
  config.methods = ("random",)
  config.base.model = "logreg"  # the data path is the point; keep the compile small
  with tfds.testing.mock_data(num_examples=300):
    out = fedemd.run_study(config, str(tmp_path / "out"), [0])
  assert config.base.dataset == "fashion_mnist"
  ((summary, _),) = out["runs"]["1_excl", "random"]
  assert summary["rounds"] == 2 and len(summary["sampling_counts"]) == 50
  assert out["r99"][1][0][0] == "Random"


FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
# The study before issue 41, named setting by setting.
OLD_SETTINGS = {
  "fedemd_current": "counts",
  "weighting": "uniform",
  "unit": "participation",
  "step": 10,
}


def old_study_config():
  config = fedemd_config.get_config()
  config.fedemd_current = OLD_SETTINGS["fedemd_current"]
  config.base.aggregator_hparams.weighting = OLD_SETTINGS["weighting"]
  config.base.lr_schedule_unit = OLD_SETTINGS["unit"]
  config.base.lr_step_size = OLD_SETTINGS["step"]
  config.methods = ("random", "fedemd")
  config.scenarios = ("1_excl",)
  config.maverick_classes = (1, 0, 2)
  return fedemd.prepare_config(config, data_dir=FMNIST_DIR)


def test_defaults_are_the_texts_reading_and_size_weighted_fedavg():
  config = fedemd_config.get_config()
  assert config.fedemd_current == "distribution"
  assert config.base.aggregator_hparams.weighting == "selection"  # n_k / sum n (Sec. 3)
  # the text's "step size 10" has no unit: 10 participations of a uniformly selected client
  # (one every N / M = 10 rounds), as rounds
  assert (config.base.lr_schedule_unit, config.base.lr_step_size) == ("round", 100)
  n, m = config.base.num_clients, config.base.clients_per_round
  assert config.base.lr_step_size == 10 * n // m
  assert fedemd.cell_config(config, "fedemd").selection_hparams.current == "distribution"
  assert fedemd.protocol_name(config) == (
    "FedEMD D_c from label distribution, FedAvg (size-weighted), StepLR 100 per round"
  )
  config.fedemd_current = "count"
  with pytest.raises(ValueError, match="fedemd_current"):
    fedemd.prepare_config(config)


@pytest.mark.skipif(not os.path.isdir(FMNIST_DIR), reason="dataset-fashion-mnist not installed")
def test_old_settings_give_the_committed_cells_config_and_cohorts():
  """``fedemd_current=counts``, ``weighting=uniform``, per-participation StepLR is the config
  of the committed ``results/fedemd_fmnist/first_reading_lr_per_participation/table1/`` cells
  field for field, and its replayed
  cohorts (selection only) are theirs: the sampling counts of seeds 1-2 and seed 0's
  cumulative Maverick picks over 200 rounds."""
  config = old_study_config()
  data = fedemd.maverick_data(config, "1_excl")
  folder = os.path.join(
    ROOT, "results", "fedemd_fmnist", "first_reading_lr_per_participation", "table1"
  )
  for method in ("random", "fedemd"):
    cfg = fedemd.cell_config(config, method)
    for seed in (1, 2):
      cell = os.path.join(folder, "cells", f"1_excl_{method}", f"seed{seed}")
      with open(os.path.join(cell, "config.json")) as f:
        committed = json.load(f)["config"]
      cfg.seed = seed
      mine = cfg.to_dict()
      for key in ("output_dir", "resume"):
        mine.pop(key), committed.pop(key)
      if method == "fedemd":  # the reading was implicit before issue 41
        assert mine["selection_hparams"].pop("current") == "counts"
      assert {k: mine[k] for k in committed} == committed
      cohorts, valid = fedemd.replay_selection(cfg, data, seed)
      counts = fedemd.counts_per_round(cohorts, valid, 50).sum(0)
      with open(os.path.join(cell, "summary.json")) as f:
        assert counts.tolist() == json.load(f)["sampling_counts"]
  cfg = fedemd.cell_config(config, "fedemd")
  cfg.seed = 0
  cohorts, valid = fedemd.replay_selection(cfg, data, 0)
  picks = np.cumsum(fedemd.counts_per_round(cohorts, valid, 50)[:, 0])
  rows = read_csv(os.path.join(folder, "participation.csv"))[1:]
  assert picks.tolist() == [int(r[2]) for r in rows]


def test_real_dataset_and_model_choose_what_data_dir_runs():
  config = fedemd_config.get_config()
  config.real_dataset, config.real_model = "stl10", "cnn_stl10"
  base = fedemd.prepare_config(config, data_dir="/tmp").base
  assert (base.dataset, base.model) == ("stl10", "cnn_stl10")
  for field, bad in (("real_dataset", "stl-10"), ("real_model", "cnn_stl")):
    config = fedemd_config.get_config()
    config[field] = bad
    with pytest.raises(ValueError, match=rf"^{field}='{bad}'; allowed: .*stl10") as err:
      fedemd.prepare_config(config, data_dir="/tmp")
    assert "\n" not in str(err.value)


def _stl10_smoke(tmp_path, model):
  tfds = pytest.importorskip("tensorflow_datasets")
  config = fedemd_config.get_config()
  config.real_dataset, config.real_model = "stl10", model
  config = fedemd.prepare_config(config, quick=True, data_dir=str(tmp_path), rounds=2)
  config.methods = ("random",)
  config.base.batch_size = 10  # A.10's STL-10 batch
  with tfds.testing.mock_data(num_examples=300):
    out = fedemd.run_study(config, str(tmp_path / "out"), [0])
  ((summary, _),) = out["runs"]["1_excl", "random"]
  assert summary["rounds"] == 2 and len(summary["sampling_counts"]) == 50
  return config


@pytest.mark.slow  # ~17 s; the STL-10 data path is tests/data/test_tfds_svhn_stl10.py's
def test_runs_on_tfds_stl10(tmp_path):
  # the binary on STL-10's 96x96x3 (mock images) with logistic regression: a small compile
  assert _stl10_smoke(tmp_path, "logreg").base.dataset == "stl10"


@pytest.mark.slow
def test_runs_on_tfds_stl10_with_its_cnn(tmp_path):
  assert _stl10_smoke(tmp_path, "cnn_stl10").base.model == "cnn_stl10"
