"""results.compare (issue 40): rows equal the runs' summary.json files, "differs" equals what
their config.json files disagree on, a --seeds folder gives mean and std over its seeds, and a
folder that is not a run gives one line naming it."""

import csv
import io
import json
import os
import shutil

import numpy as np
import pytest

from fedjax_sel import data, experiment
from fedjax_sel.metrics import results


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """README's FedGS-vs-uniform pair under log-normal availability (tiny), and a --seeds
  folder of the uniform run."""
  root = tmp_path_factory.mktemp("runs")
  dataset = data.load("synthetic", 10, seed=0, alpha=0.5, beta=0.5)

  def config(**kw):
    c = experiment.default_config()
    c.num_clients, c.clients_per_round = 10, 3
    c.local_steps, c.rounds, c.eval_every = 2, 4, 2
    c.availability, c.availability_hparams.beta = "ln", 0.5
    for k, v in kw.items():
      c[k] = v
    return c

  fedgs = config(selection="fedgs", tensorboard=True)  # as the README's pair: bookkeeping
  fedgs.selection_hparams.alpha = 1.0
  folders = {name: str(root / name) for name in ("fedgs_ln", "uniform_ln", "seeds")}
  experiment.run(fedgs, folders["fedgs_ln"], dataset=dataset, write_plots=False)
  experiment.run(config(), folders["uniform_ln"], dataset=dataset, write_plots=False)
  experiment.run_seeds(config(), [0, 3], folders["seeds"], dataset=dataset, write_plots=False)
  return folders


def read(folder, name):
  with open(os.path.join(folder, name)) as f:
    return json.load(f)


def flat(config, prefix=""):
  out = {}
  for k, v in config.items():
    out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
  return out


def test_rows_equal_summaries_and_differs_equals_configs(runs):
  names = ["fedgs_ln", "uniform_ln"]
  rows = results.compare([runs[n] for n in names])
  assert [r["name"] for r in rows] == [os.path.normpath(runs[n]) for n in names]
  for row, name in zip(rows, names):
    summary = read(runs[name], "summary.json")
    for key in results.COMPARED:
      assert row[key] == {"mean": summary[key], "std": 0.0, "values": [summary[key]]}, key
    assert row["rounds"]["mean"] == summary["rounds"] == 4
    assert row["seconds_per_round"] == summary["seconds_per_round"]
    assert row["seeds"] == [0] and row["complete"] is True
  # "differs": exactly the config keys whose values are not the same in both config.json
  configs = [flat(read(runs[n], "config.json")["config"]) for n in names]
  differing = {
    k
    for k in set(configs[0]) | set(configs[1])
    if configs[0].get(k) != configs[1].get(k) and k not in results.NOT_SETTINGS
  }
  assert differing == {"selection", "selection_hparams.alpha"}
  assert configs[0]["tensorboard"] != configs[1]["tensorboard"]  # differs, but not a setting
  for row, config in zip(rows, configs):
    assert row["differs"] == {k: config.get(k) for k in sorted(differing)}
  assert rows[0]["differs"] == {"selection": "fedgs", "selection_hparams.alpha": 1.0}
  assert rows[1]["differs"] == {"selection": "uniform", "selection_hparams.alpha": None}
  assert results.differs_text(rows[1]) == "selection=uniform, selection_hparams.alpha=(unset)"


def test_curve_is_metrics_jsonl(runs):
  (row,) = results.compare([runs["fedgs_ln"]], metric="train_loss")
  records = results.read_jsonl(os.path.join(runs["fedgs_ln"], "metrics.jsonl"))
  assert row["curve"] == {
    "round": [2, 4],
    "mean": [r["train_loss"] for r in records],
    "std": [0.0, 0.0],
  }
  assert row["final_metric"]["mean"] == records[-1]["train_loss"]
  assert row["differs"] == {}  # one folder differs from nothing


def test_seeds_folder_mean_and_std_over_its_seeds(runs):
  rows = results.compare([runs["uniform_ln"], runs["seeds"]], metric="test_accuracy")
  row = rows[1]
  combined = read(runs["seeds"], "summary.json")
  assert row["seeds"] == combined["seeds"] == [0, 3]
  for key in results.COMPARED:
    assert row[key]["mean"] == pytest.approx(combined[key]["mean"], rel=1e-12), key
    assert row[key]["std"] == pytest.approx(combined[key]["std"], rel=1e-12, abs=1e-15), key
    assert row[key]["values"] == combined[key]["values"]
  assert row["seconds_per_round"] == combined["seconds_per_round"]
  # the curve: mean and std over the seeds' metrics.jsonl at each round
  per_seed = [
    results.read_jsonl(os.path.join(runs["seeds"], f"seed{s}", "metrics.jsonl")) for s in (0, 3)
  ]
  acc = np.array([[r["test_accuracy"] for r in h] for h in per_seed])
  np.testing.assert_allclose(row["curve"]["mean"], acc.mean(0), rtol=1e-12)
  np.testing.assert_allclose(row["curve"]["std"], acc.std(0), rtol=1e-12, atol=1e-15)
  # the seeds folder differs from the single run (seed 0, same settings) in its seeds only
  assert rows[0]["differs"] == {"seed": 0} and row["differs"] == {"seed": [0, 3]}


def test_run_without_summary_is_read_from_metrics(runs, tmp_path):
  """A run still running (or killed before its summary) compares on its metrics.jsonl."""
  copy = str(tmp_path / "running")
  shutil.copytree(runs["fedgs_ln"], copy)
  os.remove(os.path.join(copy, "summary.json"))
  (row,) = results.compare([copy])
  summary = read(runs["fedgs_ln"], "summary.json")
  for key in results.COMPARED:
    assert row[key]["mean"] == summary[key], key
  assert row["rounds"]["mean"] == 4 and row["complete"] is False
  assert row["seconds_per_round"] == pytest.approx(summary["seconds_per_round"], rel=1e-12)


def test_table_md_and_csv(runs):
  rows = results.compare([runs["fedgs_ln"], runs["seeds"]])
  md = results.compare_table(rows, "md").splitlines()
  assert md[0].startswith("| run | seeds | final test loss |") and len(md) == 4
  s = read(runs["fedgs_ln"], "summary.json")
  assert f"| {s['final_test_loss']:.4f} | {s['best_test_loss']:.4f} |" in md[2]
  assert f"| {100 * s['final_test_accuracy']:.2f} |" in md[2]
  c = read(runs["seeds"], "summary.json")["final_test_loss"]
  assert f"| {c['mean']:.4f} ± {c['std']:.4f} |" in md[3]
  table = list(csv.DictReader(io.StringIO(results.compare_table(rows, "csv"))))
  assert [t["name"] for t in table] == [r["name"] for r in rows]
  assert float(table[0]["final_test_loss_mean"]) == s["final_test_loss"]
  assert float(table[1]["best_test_accuracy_std"]) == rows[1]["best_test_accuracy"]["std"]
  assert table[1]["seeds"] == "0 3" and table[1]["differs"].startswith("seed=[0,3]")
  with pytest.raises(ValueError, match="allowed: md, csv"):
    results.compare_table(rows, "html")


def test_plot_writes_one_png(runs, tmp_path):
  rows = results.compare([runs["fedgs_ln"], runs["seeds"]], metric="test_accuracy")
  path = tmp_path / "cmp.png"
  results.plot_compare(rows, str(path))
  assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


@pytest.mark.parametrize("kind", ["empty", "missing", "file", "no_metrics", "study"])
def test_not_a_run_gives_one_line(runs, tmp_path, kind):
  folder = tmp_path / kind
  if kind == "empty":
    folder.mkdir()
  elif kind == "file":
    folder.write_text("x")
  elif kind == "no_metrics":
    folder.mkdir()
    shutil.copy(os.path.join(runs["fedgs_ln"], "config.json"), folder)
  elif kind == "study":  # a folder of runs is not a run
    shutil.copytree(runs["fedgs_ln"], folder / "cell_a")
  with pytest.raises(ValueError) as e:
    results.compare([runs["fedgs_ln"], str(folder)])
  message = str(e.value)
  assert "\n" not in message and message.startswith(f"{folder}: ")
  if kind != "no_metrics":
    assert "expected a run folder" in message


def test_unknown_metric_lists_the_available_ones(runs):
  with pytest.raises(ValueError, match="'tst_loss' is not in .*available: .*test_loss"):
    results.compare([runs["fedgs_ln"]], metric="tst_loss")
