"""experiments/run.py end to end: output files, and one-line errors with exit code 2."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args, timeout=300):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run(
      [sys.executable, "-m", "experiments.run", "--progress=false", *args],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
  )


def test_run_writes_results(tmp_path):
  out = tmp_path / "run"
  p = run("--rounds=6", "--eval_every=3", "--num_clients=8", "--clients_per_round=3",
          "--selection=fedgs", "--selection_alpha=1.0", "--availability=ln",
          "--availability_beta=0.5", "--local_steps=2", f"--output_dir={out}")
  assert p.returncode == 0, p.stderr[-2000:]
  assert "| round | test loss |" in p.stdout
  lines = (out / "metrics.jsonl").read_text().splitlines()
  records = [json.loads(x) for x in lines]
  assert [r["round"] for r in records] == [3, 6]
  for key in ("round", "test_loss", "test_accuracy", "train_loss", "seconds"):
    assert key in records[0]
  summary = json.loads((out / "summary.json").read_text())
  for key in ("final_test_loss", "final_test_accuracy", "best_test_loss", "rounds",
              "seconds_per_round", "useful_step_fraction", "sampling_counts"):
    assert key in summary
  assert summary["rounds"] == 6 and len(summary["sampling_counts"]) == 8
  assert sum(summary["sampling_counts"]) <= 6 * 3
  config = json.loads((out / "config.json").read_text())
  assert config["config"]["selection_hparams"] == {"alpha": 1.0}
  assert config["environment"]["jax"] and config["environment"]["devices"]
  assert (out / "curves.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model=resnet"], "unknown model 'resnet'"),
        (["--dataset=imagenet"], "unknown dataset 'imagenet'"),
        (["--partition=random"], "unknown partition 'random'"),
        (["--selection=fedgss"], "unknown selection 'fedgss'; known selection names"),
        (["--availability=sometimes"], "unknown availability 'sometimes'"),
        (["--aggregator=median"], "unknown aggregator 'median'"),
        (["--clients_per_round=50"], "clients_per_round=50 is out of range"),
        (["--client_lr=-0.1"], "client_lr=-0.1 is out of range"),
        (["--batch_size=0"], "batch_size=0"),
        (["--local_epochs=0"], "local_epochs=0"),
        (["--partition_alpha=0"], "partition_alpha=0"),
        (["--availability=ln", "--availability_beta=1.5"], "beta=1.5"),
        (["--selection_alpha=1"], "do not belong to selection 'uniform'"),
        (["--no_such_flag=1"], "no_such_flag"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, args, message):
  p = run(*args, "--rounds=2", f"--output_dir={tmp_path / 'bad'}", timeout=120)
  assert p.returncode == 2, (p.returncode, p.stderr[-1500:])
  assert message in p.stderr
  assert "Traceback" not in p.stderr
