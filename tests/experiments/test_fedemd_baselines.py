"""experiments/fedemd.py's ``baselines``: TiFL and FedFast as their papers describe them
(default, the committed cells' configs and names) or as the FedEMD authors' code runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from experiments import common, fedemd
from experiments.configs import fedemd as fedemd_config
from fedjax_sel import selection

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(**changes):
  config = fedemd_config.get_config()
  for key, value in changes.items():
    node = config
    *path, last = key.split(".")
    for part in path:
      node = node[part]
    node[last] = value
  return fedemd.prepare_config(config)


def test_papers_default_keeps_the_committed_cell_configs_and_names():
  config = _config()
  assert config.baselines == "papers"
  assert "short_tier" not in fedemd.cell_config(config, "tifl").selection_hparams
  assert "init" not in fedemd.cell_config(config, "fedfast").selection_hparams
  for method in fedemd.METHODS:
    assert fedemd.cell_name(config, "1_excl", method) == f"1_excl_{method}"


def test_authors_baselines_cell_configs_and_names():
  config = _config(baselines="authors")
  tifl = fedemd.cell_config(config, "tifl")
  assert tifl.selection == "tifl"
  assert tifl.selection_hparams.to_dict() == {"rule": "accuracy_weighted"}
  fast = fedemd.cell_config(config, "fedfast")
  assert fast.selection_hparams.to_dict() == {
    "num_clusters": 5,
    "features": "label_counts",
    "allocation": "equal",
    "kmeans_iters": 20,
    "init": "random_points",
  }
  assert not selection.make("fedfast", num_selected=5, **fast.selection_hparams).uses_updates
  assert fedemd.cell_name(config, "1_excl", "tifl") == "1_excl_tifl_authors"
  assert fedemd.cell_name(config, "2_shared", "fedfast") == "2_shared_fedfast_authors"
  assert fedemd.cell_name(config, "1_excl", "random") == "1_excl_random"
  assert fedemd.cell_config(config, "fedemd") == fedemd.cell_config(_config(), "fedemd")
  fedsgd = _config(baselines="authors", aggregation_setup="fedsgd")
  assert fedemd.cell_name(fedsgd, "1_excl", "tifl") == "1_excl_tifl_authors_fedsgd"
  assert "authors' code" in fedemd.protocol_name(config)
  assert "authors' code" not in fedemd.protocol_name(_config())


def test_papers_readings_pass_short_tier_and_init():
  config = _config(**{"tifl.short_tier": "tier_only", "fedfast.init": "random_points"})
  assert fedemd.cell_config(config, "tifl").selection_hparams.short_tier == "tier_only"
  assert fedemd.cell_config(config, "fedfast").selection_hparams.init == "random_points"
  common.validate_cells(fedemd.cell_configs(config), [0])


def test_bad_baselines_is_one_line():
  with pytest.raises(ValueError, match=r"^baselines='paper'; allowed: papers, authors$"):
    _config(baselines="paper")


@pytest.mark.parametrize(
  "key, value, message",
  [
    ("tifl.short_tier", "bar", "short_tier='bar'; allowed: fill, tier_only"),
    ("fedfast.init", "bar", "init='bar'; allowed: kmeans++, random_points"),
    ("fedfast.features", "bar", "features='bar'; allowed: updates, labels, label_counts"),
  ],
)
def test_bad_reading_is_one_line_naming_it(key, value, message):
  config = _config(**{key: value})
  with pytest.raises(ValueError) as err:
    common.validate_cells(fedemd.cell_configs(config), [0])
  assert message in str(err.value) and "\n" not in str(err.value)


def test_quick_run_of_the_authors_baselines(tmp_path):
  """--quick with the authors' TiFL and FedFast: their cells are ``*_authors``, their
  configs carry the readings, and each cohort round selected 5 distinct clients."""
  out = tmp_path / "authors"
  p = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.fedemd",
      "--quick",
      f"--output_dir={out}",
      "--config.baselines=authors",
      "--config.methods=('random','tifl','fedfast')",
    ],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert p.returncode == 0, p.stderr[-3000:]
  for method, rule in (("tifl", "rule"), ("fedfast", "features")):
    cell = out / "cells" / f"1_excl_{method}_authors" / "seed0"
    cfg = json.loads((cell / "config.json").read_text())["config"]
    summary = json.loads((cell / "summary.json").read_text())
    assert cfg["selection_hparams"][rule] in ("accuracy_weighted", "label_counts")
    assert summary["complete"] and sum(summary["sampling_counts"]) == 4 * 5
  fast = json.loads(
    (out / "cells" / "1_excl_fedfast_authors" / "seed0" / "summary.json").read_text()
  )
  assert fast["sampling_counts"][0] == 4  # the Maverick, alone in its cluster, every round


def test_bad_baselines_flag_ends_in_one_error_line(tmp_path):
  p = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.fedemd",
      "--quick",
      f"--output_dir={tmp_path}",
      "--config.baselines=paper",
    ],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert p.returncode == 2
  lines = [line for line in p.stderr.splitlines() if line.strip()]
  assert lines[-1].endswith("baselines='paper'; allowed: papers, authors"), p.stderr[-2000:]
