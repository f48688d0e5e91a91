"""experiments/compare.py (issue 40): on the README's FedGS and uniform runs (tiny) it prints
the table, writes the plot; a folder that is not a run or a bad flag: one line, exit code 2."""

import csv
import io
import json
import os
import subprocess
import sys

import pytest

from fedjax_sel import data, experiment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def compare(*args, cwd=ROOT):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  return subprocess.run(
    [sys.executable, "-m", "experiments.compare", *args],
    cwd=cwd,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The README's `runs/fedgs_ln` and `runs/uniform_ln`, with 4 rounds of 10 clients."""
  root = tmp_path_factory.mktemp("runs")
  dataset = data.load("synthetic", 10, seed=0, alpha=0.5, beta=0.5)
  folders = {}
  for name in ("fedgs", "uniform"):
    c = experiment.default_config()
    c.num_clients, c.clients_per_round = 10, 3
    c.local_steps, c.rounds, c.eval_every = 2, 4, 2
    c.availability, c.availability_hparams.beta = "ln", 0.5
    c.selection = name
    if name == "fedgs":
      c.selection_hparams.alpha = 1.0
    folders[name] = str(root / f"{name}_ln")
    experiment.run(c, folders[name], dataset=dataset, write_plots=False)
  return folders


def summary(folder):
  with open(os.path.join(folder, "summary.json")) as f:
    return json.load(f)


def test_prints_table_and_writes_plot(runs, tmp_path):
  plot = tmp_path / "plots" / "fedgs_vs_uniform.png"
  p = compare(runs["fedgs"], runs["uniform"], f"--output={plot}", "--metric=test_accuracy")
  assert p.returncode == 0, p.stderr[-2000:]
  lines = p.stdout.splitlines()
  assert lines[0].startswith("| run | seeds | final test loss | best test loss |")
  assert len(lines) == 4
  for line, name in zip(lines[2:], ("fedgs", "uniform")):
    s = summary(runs[name])
    assert line.startswith(f"| {runs[name]} | 0 | {s['final_test_loss']:.4f} |")
    assert f"| {100 * s['final_test_accuracy']:.2f} | {100 * s['best_test_accuracy']:.2f} |" in (
      line
    )
    assert f"| 4 | {s['seconds_per_round']:.4g} |" in line
  assert lines[2].endswith("| selection=fedgs, selection_hparams.alpha=1.0 |")
  assert lines[3].endswith("| selection=uniform, selection_hparams.alpha=(unset) |")
  assert plot.read_bytes()[:4] == b"\x89PNG" and plot.stat().st_size > 5000
  assert f"plot: {plot}" in p.stderr


def test_csv_and_output_dir(runs, tmp_path):
  out = tmp_path / "cmp"
  p = compare(runs["uniform"], runs["fedgs"], "--format=csv", f"--output_dir={out}")
  assert p.returncode == 0, p.stderr[-2000:]
  table = list(csv.DictReader(io.StringIO(p.stdout)))
  assert [t["name"] for t in table] == [runs["uniform"], runs["fedgs"]]
  for t, name in zip(table, ("uniform", "fedgs")):
    s = summary(runs[name])
    for key in ("final_test_loss", "best_test_loss", "final_test_accuracy", "best_test_accuracy"):
      assert float(t[f"{key}_mean"]) == s[key] and float(t[f"{key}_std"]) == 0.0
    assert float(t["seconds_per_round"]) == s["seconds_per_round"]
  assert table[1]["differs"] == "selection=fedgs; selection_hparams.alpha=1.0"
  assert (out / "compare.csv").read_text() == p.stdout
  assert (out / "compare.md").read_text().startswith("| run | seeds |")
  assert (out / "compare.png").stat().st_size > 5000


@pytest.mark.parametrize(
  "args, message",
  [
    (["{fedgs}", "{tmp}"], "{tmp}: no config.json, metrics.jsonl or seed<k>/ folders; expected"),
    (["{fedgs}", "{tmp}/nothing"], "{tmp}/nothing: no such folder; expected a run folder"),
    ([], "no folders to compare; give one or more run folders"),
    (["{fedgs}", "--format=html"], "--format='html'; allowed: md, csv"),
    (["{fedgs}", "--output={tmp}/plot.pdf"], "the plot is a PNG; allowed: a path ending in .png"),
    (["{fedgs}", "--metric=tst_loss"], "metric 'tst_loss' is not in every record of"),
    (["{fedgs}", "--no_such_flag"], "Unknown command line flag 'no_such_flag'"),
  ],
)
def test_bad_input_one_line_exit_2(runs, tmp_path, args, message):
  fill = dict(fedgs=runs["fedgs"], tmp=str(tmp_path))
  p = compare(*[a.format(**fill) for a in args], cwd=str(tmp_path))
  assert p.returncode == 2, (p.stdout, p.stderr)
  assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
  assert message.format(**fill) in p.stderr
  assert "Traceback" not in p.stderr and p.stdout == ""
  assert not os.path.exists(tmp_path / "compare.png")
