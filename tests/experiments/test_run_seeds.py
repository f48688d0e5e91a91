"""Several seeds (and swept numbers) as one program: files, equality, resume (issue 17)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import run as run_lib
from fedjax_sel import data, experiment
from fedjax_sel.core import batch as batch_lib
from fedjax_sel.core import checkpoint
from fedjax_sel.metrics import results

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALUES = ("test_loss", "test_accuracy", "train_loss", "num_available_mean", "num_selected_mean")


@pytest.fixture(scope="module")
def dataset():
  return data.load("synthetic", 10, seed=0, alpha=0.5, beta=0.5)


def config(**kw):
  c = experiment.default_config()
  c.num_clients, c.clients_per_round = 10, 3
  c.local_steps, c.rounds, c.eval_every = 2, 6, 2
  c.availability, c.availability_hparams.beta = "ln", 0.5
  for k, v in kw.items():
    c[k] = v
  return c


def assert_same_run(folder_a, folder_b):
  """Two result folders hold the same run: discrete outcomes equal, numbers to 1e-5."""
  a = results.read_jsonl(os.path.join(folder_a, "metrics.jsonl"))
  b = results.read_jsonl(os.path.join(folder_b, "metrics.jsonl"))
  assert [r["round"] for r in a] == [r["round"] for r in b]
  for x, y in zip(a, b):
    for key in VALUES:
      assert x[key] == pytest.approx(y[key], abs=1e-5), key
  sa = json.load(open(os.path.join(folder_a, "summary.json")))
  sb = json.load(open(os.path.join(folder_b, "summary.json")))
  for key in ("sampling_counts", "rounds", "complete", "nonfinite_updates", "empty_rounds"):
    assert sa[key] == sb[key], key
  assert sa["best_test_loss"] == pytest.approx(sb["best_test_loss"], abs=1e-5)


def test_run_seeds_files_and_equal_single_runs(tmp_path, dataset):
  seeds = [0, 1, 4]
  combined = experiment.run_seeds(config(), seeds, str(tmp_path / "b"), dataset=dataset)
  for s in seeds:
    folder = tmp_path / "b" / f"seed{s}"
    for name in ("config.json", "metrics.jsonl", "summary.json", "curves.png"):
      assert (folder / name).exists(), name
    assert json.load(open(folder / "config.json"))["config"]["seed"] == s
    experiment.run(config(seed=s), str(tmp_path / f"single{s}"), dataset=dataset)
    assert_same_run(str(folder), str(tmp_path / f"single{s}"))
  assert (tmp_path / "b" / "curves.png").exists()
  on_disk = json.load(open(tmp_path / "b" / "summary.json"))
  assert on_disk["seeds"] == seeds and on_disk["complete"]
  finals = [
    json.load(open(tmp_path / f"single{s}" / "summary.json"))["final_test_loss"] for s in seeds
  ]
  assert combined["final_test_loss"]["mean"] == pytest.approx(np.mean(finals), abs=1e-5)
  assert combined["final_test_loss"]["std"] == pytest.approx(np.std(finals), abs=1e-5)
  assert combined["final_test_loss"]["std"] > 0  # the seeds are different runs


def test_resume_continues_the_batch(tmp_path, dataset):
  """run_seeds checkpoints the batch in one file per checkpoint; resumed at a later
  --rounds it equals the uninterrupted batch."""
  ref = str(tmp_path / "ref")
  experiment.run_seeds(config(rounds=8), [0, 1, 2], ref, dataset=dataset)
  out = str(tmp_path / "out")
  experiment.run_seeds(config(rounds=4), [0, 1, 2], out, dataset=dataset)
  assert checkpoint.all_rounds(out) == [2, 4]  # the batch's, the newest two
  assert not os.path.exists(os.path.join(out, "seed0", "checkpoints"))
  combined = experiment.run_seeds(config(rounds=8), [0, 1, 2], out, resume=True, dataset=dataset)
  assert combined["complete"] and combined["rounds"]["values"] == [8, 8, 8]
  for s in (0, 1, 2):
    assert_same_run(os.path.join(out, f"seed{s}"), os.path.join(ref, f"seed{s}"))
  with pytest.raises(experiment.ConfigError, match="is of the experiments"):
    experiment.run_seeds(config(rounds=10), [0, 1, 3], out, resume=True, dataset=dataset)
  with pytest.raises(experiment.ConfigError, match="different configuration; use a new"):
    experiment.run_seeds(config(rounds=10), [0, 1], out, resume=True, dataset=dataset)


def test_run_batch_catches_up_per_experiment_checkpoints(tmp_path, dataset):
  """Without a batch folder every experiment checkpoints in its own folder; one that is
  ahead waits while the others catch up, and each equals its uninterrupted run."""
  cfgs = [config(seed=s, rounds=8) for s in (0, 1, 2)]
  ref = [str(tmp_path / f"ref{s}") for s in (0, 1, 2)]
  experiment.run_batch(cfgs, ref, dataset=dataset, write_plots=False)
  out = [str(tmp_path / f"out{s}") for s in (0, 1, 2)]
  experiment.run_batch([config(seed=s, rounds=2) for s in (0, 1, 2)], out, dataset=dataset)
  experiment.run(config(seed=1, rounds=6), out[1], resume=True, dataset=dataset)
  summaries = experiment.run_batch(cfgs, out, resume=True, dataset=dataset, write_plots=False)
  assert [s["rounds"] for s in summaries] == [8, 8, 8]
  for a, b in zip(out, ref):
    assert_same_run(a, b)


@pytest.mark.slow
def test_swept_floats_share_one_program_and_equal_single_runs(tmp_path, dataset):
  """FedGS alpha and LN beta differ per experiment: one program of K = 3, each experiment
  as its own run."""
  cfgs = []
  for seed, alpha, beta in ((0, 0.0, 0.3), (1, 1.0, 0.5), (2, 5.0, 0.9)):
    c = config(seed=seed, selection="fedgs")
    c.selection_hparams.alpha = alpha
    c.availability_hparams.beta = beta
    cfgs.append(c)
  assert len(experiment.batch_groups(cfgs)) == 1
  dirs = [str(tmp_path / f"b{i}") for i in range(3)]
  summaries = experiment.run_batch(cfgs, dirs, dataset=dataset, write_plots=False)
  assert [s["experiments_in_program"] for s in summaries] == [3, 3, 3]
  for i, c in enumerate(cfgs):
    experiment.run(c, str(tmp_path / f"s{i}"), dataset=dataset, write_plots=False)
    assert_same_run(dirs[i], str(tmp_path / f"s{i}"))


def test_untraceable_sweep_falls_back_to_one_program_per_value(tmp_path, dataset, monkeypatch):
  monkeypatch.setattr(
    batch_lib.BatchedSimulation, "trace_error", lambda self, s, h: TypeError("not traceable")
  )
  cfgs = [config(seed=s, client_lr=lr) for s, lr in ((0, 0.1), (1, 0.05), (2, 0.1))]
  dirs = [str(tmp_path / f"b{i}") for i in range(3)]
  summaries = experiment.run_batch(cfgs, dirs, dataset=dataset, write_plots=False)
  # lr 0.1 together, 0.05 alone
  assert [s["experiments_in_program"] for s in summaries] == [2, 1, 2]
  experiment.run(cfgs[1], str(tmp_path / "s1"), dataset=dataset, write_plots=False)
  assert_same_run(dirs[1], str(tmp_path / "s1"))


def test_global_train_loss_in_a_batch_equals_single_runs(tmp_path, dataset):
  """run_batch writes global_train_loss / global_train_accuracy on every line, equal to each
  experiment's own run (one program of two seeds and a swept client lr); without the flag
  the key is absent, and the flag splits the configs into separate programs."""
  cfgs = [config(seed=s, client_lr=lr, global_train_loss=True) for s, lr in ((0, 0.1), (1, 0.05))]
  assert len(experiment.batch_groups(cfgs + [config(seed=2)])) == 2
  dirs = [str(tmp_path / f"b{i}") for i in range(2)]
  summaries = experiment.run_batch(cfgs, dirs, dataset=dataset, write_plots=False)
  assert [s["experiments_in_program"] for s in summaries] == [2, 2]
  for i, c in enumerate(cfgs):
    single = str(tmp_path / f"s{i}")
    experiment.run(c, single, dataset=dataset, write_plots=False)
    a = results.read_jsonl(os.path.join(dirs[i], "metrics.jsonl"))
    b = results.read_jsonl(os.path.join(single, "metrics.jsonl"))
    assert [r["round"] for r in a] == [2, 4, 6]
    for x, y in zip(a, b):
      for key in ("global_train_loss", "global_train_accuracy"):
        assert x[key] == pytest.approx(y[key], abs=1e-5), key
  assert a[0]["global_train_loss"] != a[-1]["global_train_loss"]  # the model moved
  experiment.run(config(seed=0), str(tmp_path / "off"), dataset=dataset, write_plots=False)
  off = results.read_jsonl(os.path.join(tmp_path / "off", "metrics.jsonl"))
  assert "global_train_loss" not in off[0]


def test_batch_groups_split_what_cannot_share_a_program():
  a, b = config(seed=0), config(seed=1, client_lr=0.05)
  c = config(client_update="fedprox")  # another client update: another program
  d = config(seed=3)
  d.client_update = "fedprox"
  d.client_update_hparams.mu = 0.1  # the client update's numbers are not swept
  e = config(local_steps=3)
  assert experiment.batch_groups([a, b, c, d, e]) == [[0, 1], [2], [3], [4]]
  with pytest.raises(experiment.ConfigError, match=r"configs differ in \['local_steps'\]"):
    experiment.run_batch([a, e], ["/tmp/x0", "/tmp/x1"])
  with pytest.raises(experiment.ConfigError, match="repeat a folder"):
    experiment.run_batch([a, b], ["/tmp/x0", "/tmp/x0"])


@pytest.mark.parametrize(
  "seeds, message",
  [
    ("0,a", "must be comma-separated integers"),
    ("0,0", "a seed repeats"),
    ("-1", "negative"),
    (",", "is empty"),
  ],
)
def test_bad_seeds_flag(seeds, message):
  with pytest.raises(run_lib.UsageError, match=message):
    run_lib.config_from_argv(["run", f"--seeds={seeds}"])


def test_seed_and_seeds_together_is_an_error():
  with pytest.raises(run_lib.UsageError, match="--seed and --seeds are both given"):
    run_lib.config_from_argv(["run", "--seeds=0,1", "--seed=3"])


def test_binary_seeds(tmp_path):
  out = tmp_path / "cli"
  p = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.run",
      "--progress=false",
      "--seeds=0,1",
      "--rounds=4",
      "--eval_every=2",
      "--num_clients=8",
      "--clients_per_round=3",
      "--local_steps=2",
      f"--output_dir={out}",
    ],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert p.returncode == 0, p.stderr[-2000:]
  assert "| seed | final test loss |" in p.stdout and "mean over seeds" in p.stdout
  for name in ("summary.json", "curves.png", "seed0/metrics.jsonl", "seed1/summary.json"):
    assert (out / name).exists(), name
