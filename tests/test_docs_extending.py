"""docs/extending.md runs as written: its files, its checks, its Simulation and its command.

Each ```python block whose first line is ``# <name>.py`` is written to a temporary folder
under that name; the command in the ```bash block is run there with ``python`` replaced by
this interpreter. Everything runs in fresh processes, so the page's registrations
(``diurnal``, ``prefer_available``, ``clipped_fedavg``) never reach this test session's
registries (the registry-wide tests count the registered names).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "extending.md")


def _blocks(language: str) -> list[str]:
  with open(PAGE) as f:
    text = f.read()
  return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _files() -> dict[str, str]:
  out = {}
  for block in _blocks("python"):
    first = block.splitlines()[0]
    m = re.fullmatch(r"# (\w+\.py)", first.strip())
    if m:
      out[m.group(1)] = block
  return out


def _run(args, cwd, check=True):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  proc = subprocess.run(
    [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
  )
  if check and proc.returncode != 0:
    raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
  return proc


@pytest.fixture(scope="module")
def page_dir(tmp_path_factory):
  folder = tmp_path_factory.mktemp("extending")
  files = _files()
  assert set(files) == {
    "my_methods.py",
    "check_my_methods.py",
    "simulate.py",
    "my_run.py",
    "my_strategy.py",
  }
  for name, code in files.items():
    (folder / name).write_text(code)
  return folder


def test_contract_checks_pass_and_simulation_runs(page_dir):
  out = _run(["check_my_methods.py"], page_dir).stdout
  assert "contracts hold" in out
  out = _run(["simulate.py"], page_dir).stdout
  accuracy = float(re.search(r"test accuracy after 20 rounds: ([0-9.]+)", out).group(1))
  assert 0.0 <= accuracy <= 1.0


def test_command_line_runs_the_methods_and_refuses_a_bad_value(page_dir):
  (command,) = [b for b in _blocks("bash") if "my_run.py" in b]
  command = command.replace("\\\n", " ")
  args = [a for a in shlex.split(command, comments=True) if a != "python"]
  assert args[0] == "my_run.py"
  _run(args + ["--progress=false"], page_dir)
  run_dir = page_dir / "runs" / "my_methods"
  with open(run_dir / "config.json") as f:
    config = json.load(f)["config"]
  assert (config["availability"], config["selection"], config["aggregator"]) == (
    "diurnal",
    "prefer_available",
    "clipped_fedavg",
  )
  assert config["selection_hparams"] == {"temperature": 0.2}
  assert config["aggregator_hparams"] == {"clip": 1.0}
  with open(run_dir / "summary.json") as f:
    assert json.load(f)["rounds"] == 20
  # The page's bad value: one error line naming it, exit code 2.
  bad = [a for a in args if not a.startswith("--selection_temperature")]
  proc = _run(bad + ["--selection_temperature=0"], page_dir, check=False)
  assert proc.returncode == 2, proc.stderr
  assert "error: temperature=0 is out of range; allowed: (0.0, inf]" in proc.stderr + proc.stdout


def _csv(path):
  import csv

  with open(path) as f:
    return list(csv.DictReader(f))


def test_the_atlas_command_ranks_the_strategy_running_only_its_own_cells(page_dir):
  """The page's atlas command at --quick size on the built-in Synthetic data: a committed
  grid stands in for results/atlas/fashion_mnist_sizes (a --quick selection panel), and the
  command reuses all of it, training only fewest_picks's cells."""
  (command,) = [b for b in _blocks("bash") if "experiments.atlas" in b]
  args = shlex.split(command.replace("\\\n", " "))
  assert args[:3] == ["python", "-m", "experiments.atlas"]
  assert "--import=my_strategy.py" in args and "--config.panels=selection" in args
  assert "--reuse=results/atlas/fashion_mnist_sizes" in args
  # Two built-in strategies under two availability models keep both runs to a few programs
  # (the whole --quick cross is tests/experiments/test_atlas.py's).
  small = ["--config.availabilities=idl,bernoulli"]
  base = page_dir / "atlas_base"
  _run(
    ["-m", "experiments.atlas", "--quick", "--config.panels=selection", f"--output_dir={base}"]
    + small
    + ["--config.selections=uniform,md"],
    page_dir,
  )
  quick = [
    a
    for a in args[1:]
    if not a.startswith(("--config.datasets", "--data_dir", "--reuse", "--output_dir"))
  ]
  out = page_dir / "atlas_mine"
  mine = ["--config.selections=uniform,md,fewest_picks"]
  _run(quick + ["--quick", f"--reuse={base}", f"--output_dir={out}"] + small + mine, page_dir)
  rows = _csv(out / "atlas.csv")
  assert {r["selection"] for r in rows} == {"uniform", "md", "fewest_picks"}
  ours = [r for r in rows if r["selection"] == "fewest_picks"]
  assert ours and {r["status"] for r in ours} == {"ok"}
  # every other run is the committed one, byte for byte (reused, not trained again)
  for r in rows:
    if r["selection"] == "fewest_picks" or r["status"] != "ok":
      continue
    cell = f"{r['selection']}+{r['aggregator']}+{r['availability']}"
    rel = os.path.join("cells", r["dataset"], cell, f"seed{r['seed']}", "metrics.jsonl")
    with open(base / rel, "rb") as a, open(out / rel, "rb") as b:
      assert a.read() == b.read(), rel
  with open(out / "atlas.md") as f:
    md = f.read()
  assert "fewest_picks" in md and "minus uniform's (points), paired by seed" in md
