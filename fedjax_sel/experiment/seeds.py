"""Several seeds of one config as one program: ``output_dir/seed<k>/`` per seed, plus a
combined ``summary.json`` (mean and std over seeds) and one plot with every seed."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import ml_collections
import numpy as np

from fedjax_sel import data
from fedjax_sel.experiment.batch import run_batch
from fedjax_sel.experiment.outputs import _read_summary, _title, plot_seeds
from fedjax_sel.metrics import results


def seed_dir(output_dir: str, seed: int) -> str:
  """Where ``run_seeds`` writes seed ``seed``'s usual files."""
  return os.path.join(output_dir, f"seed{seed}")


def parse_seeds(text: str) -> list[int]:
  """``"0,1,2"`` -> [0, 1, 2]; ValueError naming the bad value otherwise."""
  parts = [s.strip() for s in str(text).split(",") if s.strip()]
  try:
    seeds = [int(s) for s in parts]
  except ValueError:
    raise ValueError(f"seeds={text!r} must be comma-separated integers >= 0, e.g. 0,1,2") from None
  if not seeds:
    raise ValueError(f"seeds={text!r} is empty; allowed: comma-separated integers >= 0")
  bad = [s for s in seeds if s < 0]
  if bad or len(set(seeds)) != len(seeds):
    raise ValueError(
      f"seeds={text!r}: {'negative ' + str(bad) if bad else 'a seed repeats'}; allowed: "
      "distinct integers >= 0"
    )
  return seeds


# Summary numbers averaged over seeds in the combined summary.json of ``run_seeds``.
SEED_STATS = (
  "final_test_loss",
  "final_test_accuracy",
  "best_test_loss",
  "best_test_accuracy",
  "useful_step_fraction",
  "rounds",
  "nonfinite_updates",
  "empty_rounds",
  "skipped_updates",
)


def combine_summaries(summaries: list[dict], seeds: list[int]) -> dict:
  """The combined summary of several seeds: mean and std (population, ddof 0) of the
  summary numbers, every seed's value, and the batch's wall time."""
  out: dict[str, Any] = {"seeds": list(seeds)}
  for key in SEED_STATS:
    values = [s.get(key) for s in summaries]
    if any(v is None for v in values):
      out[key] = {"mean": None, "std": None, "values": values}
      continue
    a = np.asarray(values, np.float64)
    out[key] = {"mean": float(a.mean()), "std": float(a.std()), "values": values}
  out["complete"] = all(bool(s.get("complete")) for s in summaries)
  out["seconds"] = max(float(s.get("seconds") or 0.0) for s in summaries)
  out["seconds_per_round"] = out["seconds"] / max(max(int(s["rounds"]) for s in summaries), 1)
  out["compile_seconds_batch"] = summaries[0].get("compile_seconds_batch")
  return out


def run_seeds(
  c: ml_collections.ConfigDict,
  seeds: list[int],
  output_dir: str | None = None,
  *,
  resume: bool | None = None,
  progress: Callable[[int, int, dict], None] | None = None,
  dataset: data.FederatedData | None = None,
  write_plots: bool = True,
  loop: str = "map",
) -> dict:
  """Runs ``c`` for every seed as one batched program (``run_batch``, ``loop`` as there).

  Seed s writes its usual files under ``output_dir/seed<s>/`` (its availability seed is
  s too, unless ``c.availability_seed`` is set); ``output_dir`` gets the combined
  ``summary.json`` (``combine_summaries``), ``curves.png`` with every seed, and the batch's
  checkpoints (``output_dir/checkpoints/``, one file per checkpoint for all seeds;
  ``resume=True`` continues the batch from there).
  Returns the combined summary.
  """
  output_dir = output_dir or c.output_dir
  configs = []
  for s in seeds:
    cs = ml_collections.ConfigDict(c.to_dict())
    cs.seed = int(s)
    cs.output_dir = seed_dir(output_dir, s)
    configs.append(cs)
  try:
    run_batch(  # each seed's summary is read back from its folder below
      configs,
      [cs.output_dir for cs in configs],
      resume=resume,
      progress=progress,
      dataset=dataset,
      write_plots=write_plots,
      loop=loop,
      checkpoint_dir=output_dir,
    )
  finally:
    done = [_read_summary(cs.output_dir) for cs in configs]
    combined = None
    if all(d is not None for d in done):
      combined = combine_summaries(done, seeds)
      results.write_json(os.path.join(output_dir, "summary.json"), combined)
      if write_plots:
        histories = [
          results.read_jsonl(os.path.join(cs.output_dir, "metrics.jsonl")) for cs in configs
        ]
        plot_seeds(histories, seeds, os.path.join(output_dir, "curves.png"), _title(c, "seeds"))
  return combined
