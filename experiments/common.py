"""Shared pieces of the per-paper binaries: common flags, seed sweeps, tables.

Each paper binary builds a set of named cells (one ml_collections config each), runs every
cell for every seed with ``fedjax_sel.experiment.run`` (so each cell/seed has its own
metrics.jsonl, summary.json and checkpoints, and ``--resume`` skips finished ones), and
reports mean +- std over seeds in the paper's table shape.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import ml_collections
import numpy as np
from absl import app, flags, logging

from fedjax_sel import experiment
from fedjax_sel.core import distributed
from fedjax_sel.metrics import results


def define_flags(default_seeds: str = "0,1,2") -> None:
  """--output_dir, --quick, --seeds, --rounds, --data_dir, --resume (every paper binary),
  and the multi-process launch flags (``--coordinator_address``, ``--num_processes``,
  ``--process_id``, ...; the processes join before ``main`` runs)."""
  distributed.define_flags()
  app.call_after_init(_join_processes)
  flags.DEFINE_string("output_dir", "", "folder for tables (CSV, Markdown) and figures (PNG)")
  flags.DEFINE_bool("quick", False, "a few rounds on tiny settings (smoke test)")
  flags.DEFINE_string("seeds", default_seeds, "comma-separated seeds; results are mean +- std")
  flags.DEFINE_integer("rounds", 0, "override the paper's number of rounds (0 = paper's)")
  flags.DEFINE_string("data_dir", "", "TFDS data_dir for the real-dataset columns")
  flags.DEFINE_bool("resume", True, "skip finished cells and resume unfinished ones")


def _join_processes() -> None:
  try:
    distributed.initialize_from_flags()
  except distributed.LaunchError as e:
    distributed.fail(str(e), 2)


def parse_seeds(text: str) -> list[int]:
  try:
    seeds = [int(s) for s in text.split(",") if s.strip()]
  except ValueError:
    raise ValueError(f"--seeds={text!r} must be comma-separated integers, e.g. 0,1,2") from None
  if not seeds:
    raise ValueError(f"--seeds={text!r} is empty; give at least one seed")
  return seeds


def seed_config(
  config: ml_collections.ConfigDict, seed: int, availability_seed_per_seed: bool = False
) -> ml_collections.ConfigDict:
  """A copy of ``config`` for one seed (see ``run_cell``)."""
  c = ml_collections.ConfigDict(config.to_dict())
  c.seed = seed
  if availability_seed_per_seed:
    if config.availability_seed < 0:
      raise ValueError(
        f"availability_seed={config.availability_seed} with availability_seed_per_seed; "
        "allowed: availability_seed >= 0"
      )
    c.availability_seed = config.availability_seed + seed
  return c


def run_cell(
  config: ml_collections.ConfigDict,
  output_dir: str,
  seeds: list[int],
  dataset_fn: Callable[[ml_collections.ConfigDict], object] | None = None,
  resume: bool = True,
  availability_seed_per_seed: bool = False,
) -> list[tuple[dict, list[dict]]]:
  """Runs one cell for every seed; returns ``[(summary, metrics history)]`` per seed.

  A finished seed (summary.json with ``complete``) is read back, not rerun. With
  ``availability_seed_per_seed``, seed s draws its availability from the config's
  ``availability_seed + s`` (a stream of its own, the same for every method of a seed);
  otherwise every seed shares the config's availability seed.
  """
  out = []
  for seed in seeds:
    c = seed_config(config, seed, availability_seed_per_seed)
    folder = os.path.join(output_dir, f"seed{seed}")
    summary_path = os.path.join(folder, "summary.json")
    if resume and os.path.exists(summary_path):
      with open(summary_path) as f:
        summary = json.load(f)
      if summary.get("complete") and summary.get("rounds") == c.rounds:
        out.append((summary, results.read_jsonl(os.path.join(folder, "metrics.jsonl"))))
        continue
    dataset = dataset_fn(c) if dataset_fn is not None else None
    logging.info("cell %s seed %d", output_dir, seed)
    summary = experiment.run(c, folder, resume=resume, dataset=dataset, write_plots=False)
    out.append((summary, results.read_jsonl(os.path.join(folder, "metrics.jsonl"))))
  return out


def mean_std(values) -> tuple[float, float]:
  a = np.asarray([v for v in values if v is not None], np.float64)
  if a.size == 0:
    return float("nan"), float("nan")
  return float(a.mean()), float(a.std())


def fmt(mean: float, std: float, digits: int = 4) -> str:
  return f"{mean:.{digits}f} ± {std:.{digits}f}"


def mean_curve(histories: list[list[dict]], key: str) -> tuple[list[int], list[float]]:
  """Rounds and the seed-mean of ``key`` over the evaluations all seeds share."""
  n = min(len(h) for h in histories)
  rounds = [r["round"] for r in histories[0][:n]]
  values = np.mean([[r[key] for r in h[:n]] for h in histories], axis=0)
  return rounds, values.tolist()
