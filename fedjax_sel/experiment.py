"""Config-driven experiments: build a Simulation from a config, run it, write results.

This is the importable logic behind ``python -m experiments.run`` (the binary only parses
flags). Outputs in ``output_dir``: ``config.json`` (resolved config + versions + devices),
``metrics.jsonl`` (one JSON object per evaluation), ``summary.json``, ``curves.png`` and
``checkpoints/``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, Callable

import jax
import ml_collections
import numpy as np

from fedjax_sel import aggregation, availability, client, data, models, selection
from fedjax_sel.core import checkpoint
from fedjax_sel.core import engine as engine_lib
from fedjax_sel.core import simulation as sim_lib
from fedjax_sel.core.registry import check_range
from fedjax_sel.metrics import results

PARTS = {
    "availability": availability,
    "selection": selection,
    "aggregator": aggregation,
    "client_update": client,
}


def default_config() -> ml_collections.ConfigDict:
  """The defaults of ``experiments/run.py``: FedAvg on Synthetic(0.5, 0.5), 30 clients."""
  c = ml_collections.ConfigDict()
  c.dataset = "synthetic"
  c.partition = ""  # "" = the dataset's natural split (Synthetic) or "iid"
  c.model = "logreg"
  c.num_clients = 30
  c.clients_per_round = 6
  c.examples_per_client = 0  # 0 = the dataset's or partition's own sizes
  c.rounds = 200
  c.eval_every = 10
  c.local_steps = 0  # 0 = use local_epochs
  c.local_epochs = 1
  c.batch_size = 10
  c.client_lr = 0.1
  c.lr_decay = 0.998
  c.client_optimizer = "sgd"
  c.server_lr = 1.0
  c.server_optimizer = "sgd"
  c.availability = "idl"
  c.selection = "uniform"
  c.aggregator = "fedavg"
  c.client_update = "sgd"
  c.availability_hparams = ml_collections.ConfigDict()
  c.selection_hparams = ml_collections.ConfigDict()
  c.aggregator_hparams = ml_collections.ConfigDict()
  c.client_update_hparams = ml_collections.ConfigDict()
  c.seed = 0
  c.availability_seed = -1  # -1 = same as seed
  c.data_seed = 0
  c.synthetic_alpha = 0.5
  c.synthetic_beta = 0.5
  c.partition_alpha = 0.5  # Dirichlet concentration
  c.labels_per_client = 2  # shards partition
  c.num_groups = 5  # clustered partition
  c.test_fraction = 0.2
  c.data_dir = ""
  c.parallelism = "auto"
  c.chunk_size = 0
  c.sketch_dim = 256
  c.checkpoint_every = 0  # 0 = at every evaluation
  c.output_dir = ""
  c.resume = False
  return c


def _positive_int(name, v):
  if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
    raise ValueError(f"{name}={v!r} must be an integer")
  check_range(name, v, 1)


def validate_config(c: ml_collections.ConfigDict) -> None:
  """One ValueError, naming the bad value and what is allowed, for a bad config."""
  if c.model not in models.names():
    raise ValueError(f"unknown model {c.model!r}; known model names: {', '.join(models.names())}")
  if c.dataset not in data.DATASETS:
    raise ValueError(
        f"unknown dataset {c.dataset!r}; known dataset names: {', '.join(data.DATASETS)}"
    )
  if c.partition and c.partition not in (*data.PARTITIONS, "natural"):
    raise ValueError(
        f"unknown partition {c.partition!r}; known partition names: "
        f"{', '.join(('natural', *data.PARTITIONS))}"
    )
  for name in ("num_clients", "clients_per_round", "rounds", "eval_every", "batch_size"):
    _positive_int(name, c[name])
  if c.clients_per_round > c.num_clients:
    raise ValueError(
        f"clients_per_round={c.clients_per_round} is out of range; allowed: "
        f"[1, num_clients={c.num_clients}]"
    )
  if c.local_steps:
    _positive_int("local_steps", c.local_steps)
  else:
    _positive_int("local_epochs", c.local_epochs)
  check_range("local_steps", c.local_steps, 0)
  check_range("examples_per_client", c.examples_per_client, 0)
  check_range("client_lr", c.client_lr, 0.0, low_inclusive=False)
  check_range("server_lr", c.server_lr, 0.0, low_inclusive=False)
  check_range("lr_decay", c.lr_decay, 0.0, 1.0, low_inclusive=False)
  check_range("synthetic_alpha", c.synthetic_alpha, 0.0)
  check_range("synthetic_beta", c.synthetic_beta, 0.0)
  check_range("partition_alpha", c.partition_alpha, 0.0, low_inclusive=False)
  check_range("checkpoint_every", c.checkpoint_every, 0)
  if c.server_optimizer not in sim_lib.SERVER_OPTIMIZERS:
    raise ValueError(
        f"server_optimizer={c.server_optimizer!r}; allowed: {', '.join(sim_lib.SERVER_OPTIMIZERS)}"
    )
  if c.client_optimizer not in sim_lib.CLIENT_OPTIMIZERS:
    raise ValueError(
        f"client_optimizer={c.client_optimizer!r}; allowed: {', '.join(sim_lib.CLIENT_OPTIMIZERS)}"
    )
  if c.parallelism not in engine_lib.PARALLELISM:
    raise ValueError(
        f"parallelism={c.parallelism!r}; allowed: {', '.join(engine_lib.PARALLELISM)}"
    )
  for part, module in PARTS.items():
    if c[part] not in module.names():
      raise ValueError(
          f"unknown {part} {c[part]!r}; known {part} names: {', '.join(module.names())}"
      )


def load_data(c: ml_collections.ConfigDict) -> data.FederatedData:
  kwargs: dict[str, Any] = {}
  if c.dataset == "synthetic":
    kwargs.update(alpha=c.synthetic_alpha, beta=c.synthetic_beta)
  else:
    partition = c.partition or "iid"
    if partition == "dirichlet":
      kwargs["alpha"] = c.partition_alpha
    elif partition == "shards":
      kwargs["labels_per_client"] = c.labels_per_client
    elif partition == "clustered":
      kwargs["num_groups"] = c.num_groups
    kwargs["test_fraction"] = c.test_fraction
  return data.load(
      c.dataset,
      c.num_clients,
      (c.partition or None) if c.dataset == "synthetic" else (c.partition or "iid"),
      seed=c.data_seed,
      data_dir=c.data_dir or None,
      examples_per_client=c.examples_per_client or None,
      **kwargs,
  )


def _hparams(c, part):
  return {k: v for k, v in dict(c[part + "_hparams"]).items()}


def build(c: ml_collections.ConfigDict, dataset: data.FederatedData | None = None):
  """Builds ``(Simulation, FederatedData)`` from a validated config."""
  validate_config(c)
  dataset = dataset if dataset is not None else load_data(c)
  model = models.make(c.model, dataset.input_shape, dataset.num_classes)
  avail = availability.make(c.availability, **_hparams(c, "availability"))
  sel = selection.make(c.selection, num_selected=c.clients_per_round, **_hparams(c, "selection"))
  agg = aggregation.make(c.aggregator, **_hparams(c, "aggregator"))
  upd = client.make(c.client_update, **_hparams(c, "client_update"))
  config = sim_lib.SimulationConfig(
      client_lr=c.client_lr,
      lr_decay=c.lr_decay,
      client_optimizer=c.client_optimizer,
      server_optimizer=c.server_optimizer,
      server_lr=c.server_lr,
      sketch_dim=c.sketch_dim,
      engine=engine_lib.EngineConfig(
          batch_size=c.batch_size,
          local_epochs=c.local_epochs,
          local_steps=c.local_steps or None,
          parallelism=c.parallelism,
          chunk_size=c.chunk_size,
      ),
  )
  return sim_lib.Simulation(dataset, model, avail, sel, agg, upd, config), dataset


def environment() -> dict:
  import fedjax_sel

  try:
    import jaxlib

    jaxlib_version = jaxlib.__version__
  except Exception:  # pragma: no cover
    jaxlib_version = "unknown"
  return {
      "fedjax_sel": getattr(fedjax_sel, "__version__", "unknown"),
      "jax": jax.__version__,
      "jaxlib": jaxlib_version,
      "numpy": np.__version__,
      "python": sys.version.split()[0],
      "backend": jax.default_backend(),
      "devices": [str(d) for d in jax.devices()],
  }


class _StopRequested:
  """Turns SIGINT/SIGTERM into a flag checked between chunks of rounds."""

  def __init__(self):
    self.signum = None
    self._old = {}

  def __enter__(self):
    for s in (signal.SIGINT, signal.SIGTERM):
      try:
        self._old[s] = signal.signal(s, self._handle)
      except ValueError:  # not the main thread
        pass
    return self

  def _handle(self, signum, frame):
    del frame
    if self.signum is not None:  # a second signal: stop now
      raise KeyboardInterrupt
    self.signum = signum

  def __exit__(self, *exc):
    for s, h in self._old.items():
      signal.signal(s, h)
    return False


class Interrupted(Exception):
  """Raised after a SIGINT/SIGTERM once the checkpoint and results are written."""

  def __init__(self, signum, round_index):
    super().__init__(f"interrupted by signal {signum} after round {round_index}")
    self.signum = signum
    self.round_index = round_index


def run(
    c: ml_collections.ConfigDict,
    output_dir: str | None = None,
    *,
    resume: bool | None = None,
    progress: Callable[[int, int, dict], None] | None = None,
    dataset: data.FederatedData | None = None,
    write_plots: bool = True,
) -> dict:
  """Runs one experiment and writes its results; returns the summary dict.

  The run can be interrupted (SIGINT/SIGTERM) or killed: with ``resume=True`` it continues
  from the newest checkpoint in ``output_dir`` and ends with exactly the metrics of an
  uninterrupted run.
  """
  output_dir = output_dir or c.output_dir
  if not output_dir:
    raise ValueError("output_dir is empty; give a folder for the results (--output_dir)")
  resume = c.resume if resume is None else resume
  sim, dataset = build(c, dataset)
  os.makedirs(output_dir, exist_ok=True)
  metrics_path = os.path.join(output_dir, "metrics.jsonl")
  state = sim.init(c.seed, None if c.availability_seed < 0 else c.availability_seed)
  history: list[dict] = []
  seconds_before = 0.0
  if resume and checkpoint.latest_round(output_dir) is not None:
    state, extra = checkpoint.restore(output_dir, state)
    done = int(state.round)
    history = [r for r in results.read_jsonl(metrics_path) if r["round"] <= done]
    seconds_before = float(extra.get("seconds", 0.0))
  results.write_jsonl(metrics_path, history)
  cfg = c.to_dict()
  cfg["output_dir"] = output_dir
  results.write_json(
      os.path.join(output_dir, "config.json"),
      {"config": cfg, "environment": environment(), "dataset": dataset.name},
  )
  checkpoint_every = c.checkpoint_every or c.eval_every
  start = time.time()
  last_ckpt = int(state.round)
  with _StopRequested() as stop:
    while int(state.round) < c.rounds:
      t0 = int(state.round)
      n = min(c.eval_every - t0 % c.eval_every, c.rounds - t0)
      state, round_metrics = sim.run_rounds(state, n)
      ev = sim_lib.to_host(sim.evaluate(state))
      rm = sim_lib.to_host(round_metrics)
      record = {
          "round": int(state.round),
          "test_loss": ev["test_loss"],
          "test_accuracy": ev["test_accuracy"],
          "train_loss": float(np.mean(rm["train_loss"])),
          "seconds": seconds_before + time.time() - start,
          "num_available_mean": float(np.mean(rm["num_available"])),
          "num_selected_mean": float(np.mean(rm["num_selected"])),
      }
      record.update({k: v for k, v in ev.items() if k not in record})
      history.append(record)
      results.append_jsonl(metrics_path, record)
      if int(state.round) - last_ckpt >= checkpoint_every or int(state.round) >= c.rounds or (
          stop.signum is not None
      ):
        checkpoint.save(
            output_dir, state, int(state.round), {"seconds": record["seconds"]}
        )
        last_ckpt = int(state.round)
      if progress is not None:
        progress(int(state.round), c.rounds, record)
      if not all(np.isfinite(jax.tree_util.tree_leaves(jax.device_get(state.params))[0].ravel())):
        raise FloatingPointError(
            f"the global model became non-finite at round {int(state.round)}; "
            "lower client_lr/server_lr"
        )
      if stop.signum is not None:
        summary = _summary(history, state, sim, c)
        _write_outputs(output_dir, history, summary, c, dataset.name, write_plots)
        raise Interrupted(stop.signum, int(state.round))
  summary = _summary(history, state, sim, c)
  _write_outputs(output_dir, history, summary, c, dataset.name, write_plots)
  return summary


def _summary(history, state, sim, c) -> dict:
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
      "complete": rounds >= c.rounds,
      "seconds": seconds,
      "seconds_per_round": seconds / max(rounds, 1),
      "useful_step_fraction": last.get("useful_step_fraction"),
      "sampling_counts": np.asarray(state.sampling_counts).tolist(),
      "nonfinite_updates": int(state.nonfinite_updates),
      "empty_rounds": int(state.empty_rounds),
      "skipped_updates": int(state.skipped_updates),
      "chunk_size": int(sim.trainer.chunk_size),
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
