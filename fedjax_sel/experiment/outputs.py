"""What a run leaves in its folder besides checkpoints: ``config.json``, ``metrics.jsonl``
lines, ``summary.json`` and the plots (every file written atomically or as complete lines)."""

from __future__ import annotations

import json
import os

import ml_collections
import numpy as np

from fedjax_sel.experiment.build import environment
from fedjax_sel.metrics import results, tensorboard


def _compile_seconds(history) -> float | None:
  """Compilation (and first-call) time: the first block's wall time minus its rounds at the
  steady per-round rate of the later blocks (evaluation included in both). None with fewer
  than two blocks."""
  if len(history) < 2:
    return None
  first, last = history[0], history[-1]
  rounds = last["round"] - first["round"]
  if rounds <= 0:
    return None
  steady = (last["seconds"] - first["seconds"]) / rounds
  return max(0.0, first["seconds"] - first["round"] * steady)


def _summary(history, state, sim, c, stopped: str | None = None) -> dict:
  last = history[-1] if history else {}
  seconds = last.get("seconds", 0.0)
  rounds = int(state.round)
  return {
    "final_test_loss": last.get("test_loss"),
    "final_test_accuracy": last.get("test_accuracy"),
    "best_test_loss": min((r["test_loss"] for r in history), default=None),
    "best_test_accuracy": max((r["test_accuracy"] for r in history), default=None),
    "rounds": rounds,
    "rounds_planned": c.rounds,
    "complete": rounds >= c.rounds and stopped is None,
    "stopped": stopped,
    "seconds": seconds,
    "seconds_per_round": seconds / max(rounds, 1),
    "useful_step_fraction": last.get("useful_step_fraction"),
    "sampling_counts": np.asarray(state.sampling_counts).tolist(),
    "nonfinite_updates": int(state.nonfinite_updates),
    "empty_rounds": int(state.empty_rounds),
    "skipped_updates": int(state.skipped_updates),
    "chunk_size": int(sim.trainer.chunk_size),
    "parallelism": sim.trainer.kind,
    "compile_seconds": _compile_seconds(history),
    # bfloat16 compute over float32 parameters (``half_precision``), or float32 throughout
    "half_precision": bool(c.get("half_precision", False)),
    "compute_dtype": getattr(sim.model, "compute_dtype", "float32"),
  }


def _write_outputs(output_dir, history, summary, c, name, write_plots):
  results.write_json(os.path.join(output_dir, "summary.json"), summary)
  if write_plots and history:
    plot_run(history, os.path.join(output_dir, "curves.png"), _title(c, name))


def _title(c, name):
  return (
    f"{name}, N={c.num_clients}, M={c.clients_per_round}: {c.selection} / "
    f"{c.availability} / {c.aggregator}"
  )


def plot_run(history: list[dict], path: str, title: str) -> None:
  """Test loss and test accuracy against rounds, side by side."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  rounds = [r["round"] for r in history]
  fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
  a.plot(rounds, [r["test_loss"] for r in history], label="test loss")
  a.plot(rounds, [r["train_loss"] for r in history], label="train loss (cohort)", alpha=0.7)
  a.set_xlabel("communication round")
  a.set_ylabel("cross-entropy loss (nats)")
  a.legend()
  a.grid(alpha=0.3)
  b.plot(rounds, [100 * r["test_accuracy"] for r in history], color="C2", label="test accuracy")
  b.set_xlabel("communication round")
  b.set_ylabel("test accuracy (%)")
  b.legend()
  b.grid(alpha=0.3)
  fig.suptitle(title)
  results.save_figure(fig, path)
  plt.close(fig)


def _append_lines(path: str, records: list[dict]) -> None:
  """Appends complete lines with one fsync (``results.append_lines``: a failed write leaves
  the file as it was and raises ``results.WriteError``)."""
  results.append_lines(path, records)


def _read_summary(folder: str) -> dict | None:
  path = os.path.join(folder, "summary.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def plot_seeds(histories: list[list[dict]], seeds: list[int], path: str, title: str) -> None:
  """Test loss and test accuracy against rounds, one line per seed."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
  for i, (s, h) in enumerate(zip(seeds, histories)):
    rounds = [r["round"] for r in h]
    a.plot(rounds, [r["test_loss"] for r in h], color=f"C{i % 10}", label=f"seed {s}", lw=1)
    b.plot(rounds, [100 * r["test_accuracy"] for r in h], color=f"C{i % 10}", lw=1)
  a.set_xlabel("communication round")
  a.set_ylabel("test loss (cross-entropy, nats)")
  a.legend(fontsize=7)
  a.grid(alpha=0.3)
  b.set_xlabel("communication round")
  b.set_ylabel("test accuracy (%)")
  b.grid(alpha=0.3)
  fig.suptitle(title)
  results.save_figure(fig, path)
  plt.close(fig)


def write_config(output_dir: str, c: ml_collections.ConfigDict, dataset_name: str) -> None:
  """``config.json``: the resolved config (with this run's folder), versions and devices."""
  cfg = c.to_dict()
  cfg["output_dir"] = output_dir
  results.write_json(
    os.path.join(output_dir, "config.json"),
    {"config": cfg, "environment": environment(), "dataset": dataset_name},
  )


def open_board(c: ml_collections.ConfigDict, output_dir: str, history: list[dict]):
  """The run's TensorBoard writer when ``c.tensorboard`` (its event files rewritten from
  ``history``, the records the run keeps), else a writer that writes nothing."""
  if not c.get("tensorboard", False):
    return tensorboard.NullWriter()
  return tensorboard.open_writer(output_dir, history)
