"""Config-driven experiments: build a Simulation from a config, run it, write results.

This is the importable logic behind ``python -m experiments.run`` (the binary only parses
flags). Outputs in ``output_dir``: ``config.json`` (resolved config + versions + devices),
``metrics.jsonl`` (one JSON object per evaluation), ``summary.json``, ``curves.png`` and
``checkpoints/``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np
from absl import logging

from fedjax_sel import aggregation, availability, client, data, models, selection
from fedjax_sel.core import batch as batch_lib
from fedjax_sel.core import checkpoint, distributed
from fedjax_sel.core import engine as engine_lib
from fedjax_sel.core import simulation as sim_lib
from fedjax_sel.core.registry import check_range, is_integer
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
  c.mlp_hidden = 200  # width of model="mlp"'s hidden layer (Clustered Sampling's MNIST MLP: 50)
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
  c.client_momentum = 0.0  # 0 = none (client_optimizer="momentum" alone means 0.9)
  c.client_weight_decay = 0.0  # coupled L2, as PyTorch SGD's weight_decay
  c.lr_schedule = "exponential"  # client_lr * lr_decay**t; or "step" (StepLR)
  c.lr_step_size = 0  # rounds per step of lr_schedule="step" (required there, >= 1)
  c.lr_step_gamma = 0.1  # lr factor per step of lr_schedule="step"
  # t of the lr schedule: "round" or "participation" (each client's own count of local
  # trainings, a per-client PyTorch scheduler: FedEMD)
  c.lr_schedule_unit = "round"
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
  c.synthetic_recipe = "fedprox"  # or "fedgs": the FedGS paper's exact instance
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


class ConfigError(ValueError):
  """A user error in the config, its files or the output folder (one-line message)."""


class NonFiniteModelError(FloatingPointError):
  """The global model became non-finite; raised after the results so far are written."""

  def __init__(self, round_index: int, output_dir: str):
    super().__init__(
      f"the global model became non-finite at round {round_index}; results up to round "
      f"{round_index} are in {output_dir}; lower client_lr or server_lr"
    )
    self.round_index = round_index


def _positive_int(name, v):
  _integer(name, v, 1)


def _integer(name, v, low):
  if not is_integer(v, strict=True):
    raise ValueError(f"{name}={v!r} must be an integer >= {low}")
  check_range(name, v, low)


def _name(field, value, allowed):
  if not isinstance(value, str) or value not in allowed:
    raise ValueError(f"unknown {field} {value!r}; known {field} names: {', '.join(allowed)}")


def validate_config(c: ml_collections.ConfigDict) -> None:
  """One ValueError, naming the bad value and what is allowed, for a bad config.

  Checks names (model, dataset, partition, optimizers, the four registries), integer and
  range constraints, clients_per_round <= num_clients, and that --data_dir (when given
  for a TFDS dataset) is a folder and --output_dir is not a file. Component
  hyper-parameters are checked by their constructors (``make_components``).
  """
  _name("model", c.model, models.names())
  _name("dataset", c.dataset, list(data.DATASETS))
  if c.partition:
    _name("partition", c.partition, ["natural", *data.PARTITIONS])
  for name in (
    "num_clients",
    "clients_per_round",
    "rounds",
    "eval_every",
    "batch_size",
    "sketch_dim",
    "labels_per_client",
    "num_groups",
    "mlp_hidden",
  ):
    _positive_int(name, c[name])
  if c.clients_per_round > c.num_clients:
    raise ValueError(
      f"clients_per_round={c.clients_per_round} is out of range; allowed: "
      f"[1, num_clients={c.num_clients}]"
    )
  _integer("local_steps", c.local_steps, 0)
  if not c.local_steps:
    _positive_int("local_epochs", c.local_epochs)
  for name in ("examples_per_client", "chunk_size", "checkpoint_every", "seed", "data_seed"):
    _integer(name, c[name], 0)
  _integer("availability_seed", c.availability_seed, -1)
  check_range("client_lr", c.client_lr, 0.0, low_inclusive=False)
  check_range("server_lr", c.server_lr, 0.0, low_inclusive=False)
  check_range("lr_decay", c.lr_decay, 0.0, 1.0, low_inclusive=False)
  check_range("synthetic_alpha", c.synthetic_alpha, 0.0)
  check_range("synthetic_beta", c.synthetic_beta, 0.0)
  check_range("partition_alpha", c.partition_alpha, 0.0, low_inclusive=False)
  check_range("test_fraction", c.test_fraction, 0.0, 1.0, high_inclusive=False)
  for name in ("client_lr", "server_lr", "synthetic_alpha", "synthetic_beta", "partition_alpha"):
    if not np.isfinite(float(c[name])):
      raise ValueError(f"{name}={c[name]!r} is out of range; allowed: finite numbers")
  _name("synthetic_recipe", c.synthetic_recipe, list(data.synthetic_lib.RECIPES))
  if c.dataset == "synthetic" and c.synthetic_recipe == "fedgs":
    if c.synthetic_alpha != c.synthetic_beta or c.examples_per_client:
      raise ValueError(
        "synthetic_recipe='fedgs' (the FedGS paper's instance) has one skewness and its own "
        f"client sizes; got synthetic_alpha={c.synthetic_alpha!r}, synthetic_beta="
        f"{c.synthetic_beta!r}, examples_per_client={c.examples_per_client!r} (allowed: "
        "synthetic_alpha == synthetic_beta, examples_per_client=0)"
      )
  _name("server_optimizer", c.server_optimizer, list(sim_lib.SERVER_OPTIMIZERS))
  _name("client_optimizer", c.client_optimizer, list(sim_lib.CLIENT_OPTIMIZERS))
  _name("lr_schedule", c.lr_schedule, list(sim_lib.LR_SCHEDULES))
  _name("lr_schedule_unit", c.lr_schedule_unit, list(sim_lib.LR_SCHEDULE_UNITS))
  _integer("lr_step_size", c.lr_step_size, 0)
  check_range("lr_step_gamma", c.lr_step_gamma, 0.0, 1.0, low_inclusive=False)
  sim_lib.make_client_optimizer(c.client_optimizer, c.client_momentum, c.client_weight_decay)
  sim_lib.make_client_lr_schedule(
    c.client_lr, c.lr_schedule, c.lr_decay, c.lr_step_size, c.lr_step_gamma
  )
  _name("parallelism", c.parallelism, list(engine_lib.PARALLELISM))
  for part, module in PARTS.items():
    _name(part, c[part], module.names())
  reads_data_dir = c.dataset not in ("synthetic", "digits")  # the IDX / TFDS datasets
  if reads_data_dir and c.data_dir and not os.path.isdir(os.path.expanduser(str(c.data_dir))):
    raise ValueError(
      f"data_dir={c.data_dir!r} is not a folder; give a folder holding the four IDX files "
      "(MNIST, Fashion-MNIST) or a TFDS data_dir with the prepared dataset (see README, 'Data')"
    )
  if c.output_dir and os.path.exists(c.output_dir) and not os.path.isdir(c.output_dir):
    raise ValueError(f"output_dir={c.output_dir!r} is a file; allowed: a folder (new or existing)")


def load_data(c: ml_collections.ConfigDict) -> data.FederatedData:
  kwargs: dict[str, Any] = {}
  if c.dataset == "synthetic":
    kwargs.update(alpha=c.synthetic_alpha, beta=c.synthetic_beta)
    if c.synthetic_recipe != "fedprox":
      kwargs["recipe"] = c.synthetic_recipe
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


class Components(NamedTuple):
  availability: Any
  selection: Any
  aggregator: Any
  client_update: Any


def make_components(c: ml_collections.ConfigDict) -> Components:
  """The four pluggable parts of a config; their constructors validate the hyper-parameters
  (ValueError naming the bad value; a TypeError from a constructor is turned into one)."""
  made = {}
  for part, module in PARTS.items():
    hparams = _hparams(c, part)
    if part == "selection":
      hparams["num_selected"] = c.clients_per_round
    try:
      made[part] = module.make(c[part], **hparams)
    except TypeError as e:
      raise ValueError(f"{part} {c[part]!r} rejected its hyper-parameters {hparams}: {e}") from e
  return Components(**made)


def build(c: ml_collections.ConfigDict, dataset: data.FederatedData | None = None):
  """Builds ``(Simulation, FederatedData)`` from a validated config."""
  validate_config(c)
  avail, sel, agg, upd = make_components(c)
  dataset = dataset if dataset is not None else load_data(c)
  hp = {"hidden": (int(c.mlp_hidden),)} if c.model == "mlp" else {}
  model = models.make(c.model, dataset.input_shape, dataset.num_classes, **hp)
  config = sim_lib.SimulationConfig(
    client_lr=c.client_lr,
    lr_decay=c.lr_decay,
    client_optimizer=c.client_optimizer,
    client_momentum=c.client_momentum,
    client_weight_decay=c.client_weight_decay,
    lr_schedule=c.lr_schedule,
    lr_step_size=c.lr_step_size,
    lr_step_gamma=c.lr_step_gamma,
    lr_schedule_unit=c.lr_schedule_unit,
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
  _check_inits(model, dataset, avail, sel, agg, upd)
  return sim_lib.Simulation(dataset, model, avail, sel, agg, upd, config), dataset


def _check_inits(model, dataset, avail, sel, agg, upd) -> None:
  """Runs every component's ``init`` abstractly (``jax.eval_shape``: no compile, no
  compute), so shape errors that need N (e.g. a trace of another width) surface at once."""
  key = jax.random.PRNGKey(0)
  info = dataset.client_info()
  params = jax.eval_shape(model.init, key)
  jax.eval_shape(avail.init, key, info)
  jax.eval_shape(sel.init, key, info)
  jax.eval_shape(agg.init, params, info)
  jax.eval_shape(lambda p: upd.init(p, dataset.num_clients), params)


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
  """Turns SIGINT/SIGTERM into a flag checked between chunks of rounds.

  A second signal raises KeyboardInterrupt at once (the escape hatch).
  """

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


# Fields that may change between a run and its resumption (they do not change the rounds).
RESUMABLE_CHANGES = ("rounds", "eval_every", "checkpoint_every", "output_dir", "resume")


def _fingerprint(c: ml_collections.ConfigDict) -> dict:
  """The config fields a checkpoint must agree with, as JSON-able values."""
  cfg = json.loads(results.dumps_line(c.to_dict()))
  return {k: v for k, v in cfg.items() if k not in RESUMABLE_CHANGES}


def _check_same_config(saved: dict | None, now: dict, output_dir: str) -> None:
  if saved is None:
    return
  # a field missing from an older checkpoint ran with that field's default
  defaults = _fingerprint(default_config())
  diff = sorted(k for k in set(saved) | set(now) if saved.get(k, defaults.get(k)) != now.get(k))
  if diff:
    changes = ", ".join(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in diff)
    raise ConfigError(
      f"--resume: the checkpoint in {output_dir} was written with another config ({changes}); "
      f"only {', '.join(RESUMABLE_CHANGES)} may change, or use a new --output_dir"
    )


def _params_finite(params) -> bool:
  leaves = jax.tree_util.tree_leaves(jax.device_get(params))
  return all(bool(np.all(np.isfinite(x))) for x in leaves)


class _Setup(NamedTuple):
  sim: sim_lib.Simulation
  dataset: data.FederatedData
  state: Any
  history: list
  seconds_before: float


def _setup(c, output_dir, resume, dataset, simulation) -> _Setup:
  """Builds the simulation and its state (restored when resuming); user errors -> ConfigError."""
  try:
    if not output_dir:
      raise ValueError("output_dir is empty; give a folder for the results (--output_dir)")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
      raise ValueError(f"output_dir={output_dir!r} is a file; allowed: a folder")
    validate_config(c)
    if simulation is not None:
      dataset = simulation.data
    elif dataset is None:
      dataset = load_data(c)
    data.federated.check_has_training_examples(dataset)
    # several processes: each loaded (or generated) the data itself; they must agree
    tr = dataset.train
    distributed.check_same_everywhere("the config", _fingerprint(c))
    distributed.check_same_everywhere(
      "the training data", tr.counts, tr.y, np.asarray(tr.x[:4096]), np.asarray(tr.x[-4096:])
    )
    sim = simulation if simulation is not None else build(c, dataset)[0]
    if distributed.is_primary():
      os.makedirs(output_dir, exist_ok=True)
    state = sim.init(c.seed, None if c.availability_seed < 0 else c.availability_seed)
    history: list[dict] = []
    seconds_before = 0.0
    metrics_path = os.path.join(output_dir, "metrics.jsonl")
    if resume and checkpoint.latest_round(output_dir) is not None:
      state, extra = checkpoint.restore(output_dir, state)
      _check_same_config(extra.get("config"), _fingerprint(c), output_dir)
      done = int(state.round)
      history = [r for r in results.read_jsonl(metrics_path) if r["round"] <= done]
      expected = extra.get("num_records")
      if expected is not None and len(history) != expected:
        logging.warning(
          "%s holds %d of the %d evaluations up to round %d; continuing with those",
          metrics_path,
          len(history),
          expected,
          done,
        )
      seconds_before = float(extra.get("seconds", 0.0))
      logging.info("resuming %s from round %d", output_dir, done)
    else:
      if resume:
        logging.info("--resume: no checkpoint in %s; starting at round 0", output_dir)
      elif checkpoint.all_rounds(output_dir) and distributed.is_primary():
        logging.warning("starting afresh in %s: removing its old checkpoints", output_dir)
        checkpoint.clear(output_dir)
  except (ValueError, TypeError, OSError) as e:
    if isinstance(e, ConfigError):
      raise
    raise ConfigError(one_line(e)) from e
  return _Setup(sim, dataset, state, history, seconds_before)


def one_line(e: BaseException) -> str:
  """The exception's message on one line (for command-line errors)."""
  text = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
  return text or type(e).__name__


def run(
  c: ml_collections.ConfigDict,
  output_dir: str | None = None,
  *,
  resume: bool | None = None,
  progress: Callable[[int, int, dict], None] | None = None,
  dataset: data.FederatedData | None = None,
  write_plots: bool = True,
  simulation: sim_lib.Simulation | None = None,
) -> dict:
  """Runs one experiment and writes its results; returns the summary dict.

  The run survives interruptions: the whole state is checkpointed every
  ``checkpoint_every`` rounds (default: at every evaluation) and when SIGINT/SIGTERM
  arrives (then ``Interrupted`` is raised once the checkpoint and result files are
  written). With ``resume=True`` it continues from the newest checkpoint in
  ``output_dir`` and ends with exactly the metrics of an uninterrupted run (same device
  and backend). metrics.jsonl gets one complete line per evaluation (fsynced before the
  checkpoint that covers it); every other file is written atomically.

  Args:
    c: the config (see ``default_config``).
    output_dir: results folder (default ``c.output_dir``).
    resume: continue from the newest checkpoint (default ``c.resume``); the config must
      match the checkpoint's except for ``RESUMABLE_CHANGES``.
    progress: called as ``progress(round, rounds, record)`` after each evaluation.
    dataset: a prebuilt dataset (default: loaded from the config).
    write_plots: write curves.png.
    simulation: a prebuilt Simulation for this config (reuses its compiled functions).

  Raises:
    ConfigError: a user error (bad config, unreadable file, mismatching checkpoint).
    Interrupted: after SIGINT/SIGTERM (checkpoint and results written).
    NonFiniteModelError: the global model became non-finite (results written).
  """
  output_dir = output_dir or c.output_dir
  resume = c.resume if resume is None else resume
  with _StopRequested() as stop:
    setup = _setup(c, output_dir, resume, dataset, simulation)
    sim, dataset, state, history, seconds_before = setup
    metrics_path = os.path.join(output_dir, "metrics.jsonl")
    # several processes (jax.distributed): process 0 writes the files, all run the rounds
    primary = distributed.is_primary()
    cfg = c.to_dict()
    cfg["output_dir"] = output_dir
    if primary:
      results.write_jsonl(metrics_path, history)
      results.write_json(
        os.path.join(output_dir, "config.json"),
        {"config": cfg, "environment": environment(), "dataset": dataset.name},
      )
    fingerprint = _fingerprint(c)
    checkpoint_every = c.checkpoint_every or c.eval_every
    start = time.time()
    last_ckpt = int(state.round)

    def save(t, seconds):
      checkpoint.save(
        output_dir,
        state,
        t,
        {"seconds": seconds, "num_records": len(history), "config": fingerprint},
      )

    def finish(**why):
      summary = _summary(history, state, sim, c, **why)
      if primary:
        _write_outputs(output_dir, history, summary, c, dataset.name, write_plots)
      return summary

    def stopping() -> bool:  # a signal in any process stops all of them at the same round
      return distributed.any_process(stop.signum is not None)

    def signum() -> int:  # the signal of another process: reported as SIGTERM
      return stop.signum or int(signal.SIGTERM)

    while int(state.round) < c.rounds:
      t0 = int(state.round)
      if stopping():  # arrived during setup or compilation
        save(t0, seconds_before + time.time() - start)
        finish(stopped=f"signal {signum()}")
        raise Interrupted(signum(), t0)
      n = min(c.eval_every - t0 % c.eval_every, c.rounds - t0)
      state, round_metrics = sim.run_rounds(state, n)
      t = int(state.round)
      ev = sim_lib.to_host(sim.evaluate(state))
      rm = sim_lib.to_host(round_metrics)
      record = {
        "round": t,
        "test_loss": ev["test_loss"],
        "test_accuracy": ev["test_accuracy"],
        "train_loss": float(np.mean(rm["train_loss"])),
        "seconds": seconds_before + time.time() - start,
        "num_available_mean": float(np.mean(rm["num_available"])),
        "num_selected_mean": float(np.mean(rm["num_selected"])),
      }
      record.update({k: v for k, v in ev.items() if k not in record})
      dropped = int(np.sum(rm["num_nonfinite"]))
      if dropped:
        logging.warning(
          "rounds %d-%d: %d non-finite client update(s) dropped from aggregation (%d so far)",
          t0 + 1,
          t,
          dropped,
          int(state.nonfinite_updates),
        )
      history.append(record)
      if primary:
        results.append_jsonl(metrics_path, record)
      if not _params_finite(state.params):
        finish(stopped="non-finite model")  # no checkpoint of a broken model
        raise NonFiniteModelError(t, output_dir)
      if progress is not None and primary:
        progress(t, c.rounds, record)
      stop_now = stopping()
      if t - last_ckpt >= checkpoint_every or t >= c.rounds or stop_now:
        save(t, record["seconds"])
        last_ckpt = t
      if stop_now and t < c.rounds:
        finish(stopped=f"signal {signum()}")
        raise Interrupted(signum(), t)
    return finish()


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


# ------------------------------------------------------------------ many experiments at once

# Fields in which the experiments of one batched program may differ besides the swept
# hyper-parameters (each experiment has its own output folder and random streams).
BATCH_FREE = ("seed", "availability_seed", "output_dir", "resume")
# Where numeric (float) values may differ within one program: they become traced
# per-experiment values (``fedjax_sel.core.batch``). Other hyper-parameters (the client
# update's, e.g. FedProx's mu, which the cohort trainer closes over; ints; strings) split
# the experiments into separate programs.
SWEEPABLE_PARTS = ("availability", "selection", "aggregator")
SWEEPABLE_FIELDS = ("client_lr",)


def _is_sweepable(path: tuple[str, ...], value) -> bool:
  if not isinstance(value, float):
    return False
  if len(path) == 1:
    return path[0] in SWEEPABLE_FIELDS
  return len(path) == 2 and path[0] in tuple(p + "_hparams" for p in SWEEPABLE_PARTS)


def _flat(c: ml_collections.ConfigDict) -> dict[tuple[str, ...], Any]:
  out = {}
  for k, v in c.items():
    if isinstance(v, ml_collections.ConfigDict):
      for kk, vv in v.items():
        out[(k, kk)] = vv
    else:
      out[(k,)] = v
  return out


def _signature(f, mask_floats: bool, depth: int = 0):
  """What a component's round function computes, as comparable data: its code and the
  values it closes over (nested functions recursively; floats masked when asked)."""
  code = getattr(f, "__code__", None)
  if code is None or depth > 8:
    return ["obj", id(f)]
  cells = []
  for cell in f.__closure__ or ():
    try:
      v = cell.cell_contents
    except ValueError:  # an empty cell
      v = None
    if callable(v):
      cells.append(_signature(v, mask_floats, depth + 1))
    elif isinstance(v, float):
      cells.append("<float>" if mask_floats else repr(v))
    elif v is None or isinstance(v, (bool, int, str)):
      cells.append(repr(v))
    else:
      cells.append(["obj", id(v)])
  return [code.co_filename, code.co_firstlineno, code.co_name, cells]


def availability_round(c: ml_collections.ConfigDict, mask_floats: bool = False):
  """The availability model's round functions (``probs``, ``sample``) as comparable data, or
  None when the config does not build. Models with equal values compute the same rounds
  from their states (e.g. IDL, LN, LDF, MDF at any beta: Bernoulli draws of the per-client
  rates fixed at init), so they share one program; only their init differs."""
  try:
    model = availability.make(c.availability, **_hparams(c, "availability"))
  except (ValueError, TypeError):
    return None
  return [_signature(model.probs, mask_floats), _signature(model.sample, mask_floats)]


def batch_key(c: ml_collections.ConfigDict) -> str:
  """Configs with equal keys can run as one batched program: they differ only in
  ``BATCH_FREE`` fields, sweepable float hyper-parameters, and availability models that
  differ only in their init or in float hyper-parameters (``availability_round``)."""
  flat = _flat(c)
  avail = availability_round(c, mask_floats=True)
  shape = {
    ".".join(p): ("<swept>" if _is_sweepable(p, v) else v)
    for p, v in flat.items()
    if p[0] not in BATCH_FREE
    and (avail is None or p[0] not in ("availability", "availability_hparams"))
  }
  shape["<availability round>"] = avail
  return results.dumps_line(shape)


def batch_groups(configs: list[ml_collections.ConfigDict]) -> list[list[int]]:
  """Indices of ``configs`` grouped into batchable sets (``batch_key``), in first-seen order."""
  groups: dict[str, list[int]] = {}
  for i, c in enumerate(configs):
    groups.setdefault(batch_key(c), []).append(i)
  return list(groups.values())


def _swept(configs) -> list[tuple[str, ...]]:
  flats = [_flat(c) for c in configs]
  paths = set().union(*flats)
  return sorted(
    p for p in paths if p[0] not in BATCH_FREE and len({repr(f.get(p)) for f in flats}) > 1
  )


def _make_parts_fn(c0: ml_collections.ConfigDict, swept: list[tuple[str, ...]]):
  """``hp -> Simulation.replace_parts kwargs``: c0's components with the swept values of hp
  (keyed "client_lr", "selection_hparams.alpha", ...)."""
  parts = sorted({p[0][: -len("_hparams")] for p in swept if len(p) == 2})

  def make_parts(hp: dict) -> dict:
    out = {}
    for part in parts:
      hparams = _hparams(c0, part)
      for p in swept:
        if len(p) == 2 and p[0] == part + "_hparams":
          hparams[p[1]] = hp[".".join(p)]
      if part == "selection":
        hparams["num_selected"] = c0.clients_per_round
      out[part] = PARTS[part].make(c0[part], **hparams)
    if ("client_lr",) in swept:
      out["client_lr"] = hp["client_lr"]
    return out

  return make_parts


def run_batch(
  configs: list[ml_collections.ConfigDict],
  output_dirs: list[str],
  *,
  resume: bool | None = None,
  progress: Callable[[int, int, dict], None] | None = None,
  dataset: data.FederatedData | None = None,
  write_plots: bool = True,
  loop: str = "map",
  checkpoint_dir: str | None = None,
) -> list[dict]:
  """Runs K experiments of one program shape as one vectorized computation (issue 17).

  The configs may differ only in ``BATCH_FREE`` fields (seeds, output folders) and in
  float hyper-parameters of the client lr, availability, selection and aggregator
  (``batch_key``); those become traced per-experiment values. Where a component cannot take
  a traced value, the distinct values run as separate programs (a logged note). Each
  experiment writes exactly what ``run`` writes to its own folder (config.json,
  metrics.jsonl, summary.json, curves.png, checkpoints/), with the same numbers up to float
  rounding (discrete outcomes identical), so any one of them can be continued alone by
  ``run(..., resume=True)``, and the batch by ``run_batch(..., resume=True)``. Blocks of
  ``eval_every`` rounds and their evaluations up to the next checkpoint run as one dispatch
  (``BatchedSimulation.run_evals``). ``seconds`` in the records is the batch's wall time.

  Args:
    configs: K configs (see ``default_config``).
    output_dirs: K distinct results folders.
    resume: continue every experiment from its newest checkpoint (default configs[0].resume).
    progress: ``progress(round, rounds, record)`` after each chunk, with experiment 0's
      last record.
    dataset: a prebuilt dataset (default: loaded once from configs[0]).
    write_plots: write each experiment's curves.png.
    loop: ``"map"`` (the experiments one after another inside the one program: bit for bit
      the sequential runs) or ``"vmap"`` (one vectorized computation: equal to float
      rounding, ~1e-7 per op, which training grows and a method that ranks clients by
      their losses, such as Power-of-Choice, can turn into another trajectory); see
      ``fedjax_sel.core.batch.LOOPS``.
    checkpoint_dir: None: each experiment checkpoints in its own folder (each can be
      continued alone by ``run``; K writes per checkpoint); a folder: one checkpoint of the
      whole batch there (one write per checkpoint whatever K; continued as this batch).

  Returns:
    The K summaries, in the order of ``configs``.

  Raises:
    ConfigError, Interrupted, NonFiniteModelError: as ``run`` (the last after every
      experiment has finished or stopped).
  """
  k_all = len(configs)
  try:
    if distributed.multiprocess():  # issue 18 shards one experiment's state, not a batch's
      raise ValueError(
        f"{k_all} batched experiments (--seeds) in a run of {jax.process_count()} processes; "
        "allowed: one process, or one multi-process run per experiment (--seed)"
      )
    if k_all < 1 or len(output_dirs) != k_all:
      raise ValueError(
        f"{k_all} configs and {len(output_dirs)} output_dirs; allowed: K >= 1 of each"
      )
    if loop not in batch_lib.LOOPS:
      raise ValueError(f"loop={loop!r}; allowed: {', '.join(batch_lib.LOOPS)}")
    if len({os.path.abspath(d) for d in output_dirs}) != k_all:
      raise ValueError(f"output_dirs {output_dirs} repeat a folder; allowed: distinct folders")
    keys = [batch_key(c) for c in configs]
    if len(set(keys)) > 1:
      bad = [
        ".".join(p)
        for p in _swept(configs)
        if not _is_sweepable(p, _flat(configs[0]).get(p))
      ]
      raise ValueError(
        f"configs differ in {bad}; allowed in one batch: {', '.join(BATCH_FREE)} and float "
        f"values of {', '.join(SWEEPABLE_FIELDS)} and the {', '.join(SWEEPABLE_PARTS)} "
        "hyper-parameters"
      )
    for c in configs:
      validate_config(c)
    concrete = [make_components(c) for c in configs]
  except (ValueError, TypeError) as e:
    raise ConfigError(one_line(e)) from e
  c0 = configs[0]
  resume = c0.resume if resume is None else resume
  dataset = dataset if dataset is not None else load_data(c0)
  sim = build(c0, dataset)[0]
  swept = _swept(configs)
  flats = [_flat(c) for c in configs]
  avail_paths = [p for p in swept if p[0] in ("availability", "availability_hparams")]
  rounds_equal = len({results.dumps_line(availability_round(c)) for c in configs}) == 1
  init_only = bool(avail_paths) and rounds_equal
  if avail_paths and not rounds_equal and len({c.availability for c in configs}) > 1:
    # the models' rounds differ in floats and in kind: no traced value can stand for both
    return _run_apart(
      configs,
      output_dirs,
      avail_paths,
      resume,
      progress,
      dataset,
      write_plots,
      loop,
      checkpoint_dir,
    )
  if init_only:  # the round is the same program: each experiment's model serves its init
    swept = [p for p in swept if p not in avail_paths]
  sweep_names = [".".join(p) for p in swept]
  hparams = {
    ".".join(p): np.asarray([f[p] for f in flats], np.float32) for p in swept
  }
  part_names = sorted({p[0][: -len("_hparams")] for p in swept if len(p) == 2})
  if init_only:
    part_names = sorted(set(part_names) | {"availability"})
  per_parts = [
    {**{part: getattr(comps, part) for part in part_names},
     **({"client_lr": c.client_lr} if ("client_lr",) in swept else {})}
    for c, comps in zip(configs, concrete)
  ]
  bsim = batch_lib.BatchedSimulation(
    sim, _make_parts_fn(c0, swept) if swept else None, loop=loop
  )
  if swept:
    probe = batch_lib.stack([sim.init(0)] * k_all)
    err = bsim.trace_error(probe, hparams)
    if err is not None:
      logging.warning(
        "run_batch: %s cannot be traced (%s); running each distinct value as its own "
        "program",
        ", ".join(sweep_names),
        one_line(err)[:200],
      )
      return _run_apart(
        configs,
        output_dirs,
        swept,
        resume,
        progress,
        dataset,
        write_plots,
        loop,
        checkpoint_dir,
      )
  return _BatchRun(
    configs,
    output_dirs,
    resume,
    progress,
    dataset,
    write_plots,
    bsim,
    hparams,
    per_parts,
    checkpoint_dir,
  ).run()


def _run_apart(
  configs, output_dirs, paths, resume, progress, dataset, write_plots, loop, checkpoint_dir
):
  """``run_batch`` of each group of configs with equal values at ``paths`` (a batch
  checkpoint folder gets a subfolder per group)."""
  flats = [_flat(c) for c in configs]
  groups: dict[tuple, list[int]] = {}
  for i, f in enumerate(flats):
    groups.setdefault(tuple(repr(f.get(p)) for p in paths), []).append(i)
  out: list[dict | None] = [None] * len(configs)
  for g, idx in enumerate(groups.values()):
    summaries = run_batch(
      [configs[i] for i in idx],
      [output_dirs[i] for i in idx],
      resume=resume,
      progress=progress,
      dataset=dataset,
      write_plots=write_plots,
      loop=loop,
      checkpoint_dir=checkpoint_dir and os.path.join(checkpoint_dir, f"group{g}"),
    )
    for i, s in zip(idx, summaries):
      out[i] = s
  return out


class _BatchRun:
  """The loop of ``run_batch`` over one BatchedSimulation (see there)."""

  def __init__(
    self,
    configs,
    output_dirs,
    resume,
    progress,
    dataset,
    write_plots,
    bsim,
    hparams,
    parts,
    batch_dir=None,
  ):
    self.batch_dir = batch_dir
    self.configs, self.dirs = configs, output_dirs
    self.progress, self.dataset, self.write_plots = progress, dataset, write_plots
    self.bsim, self.hparams = bsim, hparams
    self.c0 = configs[0]
    self.k = len(configs)
    self.resume = resume
    self.parts = parts
    self.compiled: dict[tuple, Any] = {}
    self.compile_seconds = 0.0

  # ---------------------------------------------------------------- helpers
  def _hp(self, idx):
    return {n: v[np.asarray(idx)] for n, v in self.hparams.items()}

  def _program(self, idx, states, num_evals, block):
    key = (len(idx), num_evals, block)
    if key not in self.compiled:
      t = time.time()
      self.compiled[key] = self.bsim._run_evals.lower(
        self.bsim.sim.device_data, states, self._hp(idx), num_evals, block
      ).compile()
      self.compile_seconds += time.time() - t
    return self.compiled[key]

  def _io(self, fn, *args):
    """Runs file writes in order on one writer thread, overlapping the next chunk's rounds
    (metrics lines before the checkpoint that covers them, as ``run`` orders them)."""
    pending = self._pending  # FIFO: the writer finishes them in order
    while pending and (pending[0].done() or len(pending) > 4 * self.k + 8):
      pending.popleft().result()  # a writer's error surfaces here; bounded backlog
    pending.append(self._writer.submit(fn, *args))

  def _drain(self):
    while self._pending:
      self._pending.popleft().result()

  def _save(self, k, state_k, t, seconds):
    extra = {"seconds": seconds, "num_records": len(self.history[k]), "config": self.fps[k]}
    self._io(checkpoint.save, self.dirs[k], state_k, t, extra)
    self.last_ckpt[k] = t

  def _save_batch(self, host, rounds, seconds, failed):
    """One checkpoint of the whole batch in ``batch_dir`` (named by its newest round)."""
    extra = {
      "seconds": [float(x) for x in seconds],
      "num_records": [len(h) for h in self.history],
      "configs": self.fps,
      "dirs": [os.path.abspath(d) for d in self.dirs],
      "failed": {str(k): int(t) for k, t in failed.items()},
    }
    live = [r for k, r in enumerate(rounds) if k not in failed] or rounds
    self._io(checkpoint.save, self.batch_dir, host, max(live), extra)
    self.last_ckpt = list(rounds)

  def _restore_batch(self, states, before):
    """(states, seconds so far, failed) from the batch's newest checkpoint when resuming;
    the fresh ones otherwise (removing an old batch checkpoint)."""
    bdir = self.batch_dir
    if not self.resume or checkpoint.latest_round(bdir) is None:
      if self.resume:
        logging.info("--resume: no checkpoint in %s; starting at round 0", bdir)
      elif checkpoint.all_rounds(bdir):
        logging.warning("starting afresh in %s: removing its old checkpoints", bdir)
        checkpoint.clear(bdir)
      return states, before, {}
    try:
      states, extra = checkpoint.restore(bdir, states)
    except ValueError as e:
      raise ConfigError(f"--resume: {one_line(e)}; use a new output_dir") from e
    dirs = [os.path.abspath(d) for d in self.dirs]
    if extra.get("dirs") != dirs:
      raise ConfigError(
        f"--resume: the checkpoint in {bdir} is of the experiments {extra.get('dirs')}; "
        f"allowed: the same experiments ({dirs}), or a new output_dir"
      )
    for saved, now, d in zip(extra["configs"], self.fps, self.dirs):
      _check_same_config(saved, now, d)
    rounds = [int(r) for r in np.asarray(states.round)]
    for k, d in enumerate(self.dirs):
      path = os.path.join(d, "metrics.jsonl")
      self.history[k] = [r for r in results.read_jsonl(path) if r["round"] <= rounds[k]]
    logging.info("resuming the batch in %s from round %d", bdir, max(rounds))
    failed = {int(k): int(t) for k, t in extra.get("failed", {}).items()}
    return states, [float(x) for x in extra["seconds"]], failed

  def _finish(self, k, state_k, **why):
    self._drain()
    summary = _summary(self.history[k], state_k, self.bsim.sim, self.configs[k], **why)
    summary["compile_seconds_batch"] = self.compile_seconds
    summary["experiments_in_program"] = self.k  # K of the one program (not the client batch size)
    _write_outputs(
      self.dirs[k], self.history[k], summary, self.configs[k], self.dataset.name,
      self.write_plots,
    )
    self.summaries[k] = summary
    return summary

  # ---------------------------------------------------------------- the loop
  def run(self) -> list[dict]:
    self._writer = concurrent.futures.ThreadPoolExecutor(1)
    self._pending = collections.deque()
    try:
      return self._run()
    finally:
      try:
        self._drain()
      finally:
        self._writer.shutdown()

  def _run(self) -> list[dict]:
    c0, k_all = self.c0, self.k
    bdir = self.batch_dir
    with _StopRequested() as stop:
      setups = [
        _setup(c, d, self.resume and not bdir, self.dataset, self.bsim.sim.replace_parts(**p))
        for c, d, p in zip(self.configs, self.dirs, self.parts)
      ]
      self.history = [s.history for s in setups]
      self.fps = [_fingerprint(c) for c in self.configs]
      before = [s.seconds_before for s in setups]
      states = batch_lib.stack([s.state for s in setups])
      del setups
      failed: dict[int, int] = {}
      if bdir:
        states, before, failed = self._restore_batch(states, before)
      rounds = [int(r) for r in np.asarray(states.round)]
      self.last_ckpt = list(rounds)
      self.summaries: list[dict | None] = [None] * k_all
      for c, d, h in zip(self.configs, self.dirs, self.history):
        results.write_jsonl(os.path.join(d, "metrics.jsonl"), h)
        cfg = c.to_dict()
        cfg["output_dir"] = d
        results.write_json(
          os.path.join(d, "config.json"),
          {"config": cfg, "environment": environment(), "dataset": self.dataset.name},
        )
      total, every = c0.rounds, c0.eval_every
      checkpoint_every = c0.checkpoint_every or every
      start = time.time()
      seconds = list(before)

      def active():
        return [k for k in range(k_all) if rounds[k] < total and k not in failed]

      while active():
        act = active()
        t0 = min(rounds[k] for k in act)
        idx = [k for k in act if rounds[k] == t0]
        if stop.signum is not None:
          host = jax.device_get(states)
          now = [before[k] + time.time() - start for k in range(k_all)]
          if bdir:
            self._save_batch(host, rounds, now, failed)
          for k in act:
            st = batch_lib.unstack(host, k)
            if not bdir:
              self._save(k, st, rounds[k], now[k])
            self._finish(k, st, stopped=f"signal {stop.signum}")
          raise Interrupted(stop.signum, t0)
        end = min([total] + [rounds[k] for k in act if rounds[k] > t0])
        to_eval = every - t0 % every
        if t0 % every or t0 + every > end:
          num_evals, block = 1, min(to_eval, end - t0)
        else:
          due = min(self.last_ckpt[k] for k in idx) + checkpoint_every
          due = -(-due // every) * every  # the first evaluation at which a checkpoint is due
          num_evals = max(1, (min(end, due) - t0) // every)
          block = every
        sub = batch_lib.take(states, idx) if len(idx) < k_all else states
        program = self._program(idx, sub, num_evals, block)
        chunk_start = time.time()
        sub, (rm, ev) = program(self.bsim.sim.device_data, sub, self._hp(idx))
        rm, ev = jax.device_get((rm, ev))
        chunk_end = time.time()
        states = sub if len(idx) == k_all else batch_lib.put_back(states, idx, sub)
        host = None
        batch_due, done_now = False, []
        for j, k in enumerate(idx):
          lines = []
          for i in range(num_evals):
            t = t0 + (i + 1) * block
            record = {
              "round": t,
              "test_loss": float(ev["test_loss"][j, i]),
              "test_accuracy": float(ev["test_accuracy"][j, i]),
              "train_loss": float(np.mean(np.asarray(rm["train_loss"][j, i], np.float64))),
              "seconds": before[k]
              + (chunk_start - start)
              + (chunk_end - chunk_start) * (i + 1) / num_evals,
              "num_available_mean": float(
                np.mean(np.asarray(rm["num_available"][j, i], np.float64))
              ),
              "num_selected_mean": float(np.mean(np.asarray(rm["num_selected"][j, i], np.float64))),
            }
            for name, v in ev.items():
              if name not in record and name != "params_finite":
                record[name] = np.asarray(v[j, i]).item()
            dropped = int(np.sum(rm["num_nonfinite"][j, i]))
            if dropped:
              logging.warning(
                "%s rounds %d-%d: %d non-finite client update(s) dropped from aggregation",
                self.dirs[k], t - block + 1, t, dropped,
              )
            lines.append(record)
            if not bool(ev["params_finite"][j, i]):
              failed[k] = t
              break
          self.history[k].extend(lines)
          self._io(_append_lines, os.path.join(self.dirs[k], "metrics.jsonl"), lines)
          rounds[k] = t if k in failed else t0 + num_evals * block
          seconds[k] = lines[-1]["seconds"] if lines else seconds[k]
          if k in failed or rounds[k] - self.last_ckpt[k] >= checkpoint_every or (
            rounds[k] >= total
          ):
            if host is None:
              host = jax.device_get(states)
            st = batch_lib.unstack(host, k)
            if k in failed:  # no checkpoint of a broken model
              self._finish(k, st, stopped="non-finite model")
              continue
            if bdir:
              batch_due = True
            else:
              self._save(k, st, rounds[k], seconds[k])
            if rounds[k] >= total:
              done_now.append((k, st))
        if batch_due:
          self._save_batch(host, rounds, seconds, failed)
        for k, st in done_now:
          self._finish(k, st)
        if self.progress is not None and 0 in idx and self.history[0]:
          self.progress(rounds[0], total, self.history[0][-1])
        if stop.signum is not None and active():
          continue  # the top of the loop saves and raises
      host = None
      for k in range(k_all):
        if self.summaries[k] is None:  # complete before this call (resumed at its end)
          host = jax.device_get(states) if host is None else host
          self._finish(k, batch_lib.unstack(host, k))
      self._drain()
      if failed:
        k = min(failed)
        raise NonFiniteModelError(failed[k], self.dirs[k])
    return self.summaries


def _append_lines(path: str, records: list[dict]) -> None:
  """Appends complete lines with one fsync (``results.append_jsonl`` for many records)."""
  if not records:
    return
  with open(path, "a") as f:
    f.write("".join(results.dumps_line(r) + "\n" for r in records))
    f.flush()
    os.fsync(f.fileno())


def seed_dir(output_dir: str, seed: int) -> str:
  """Where ``run_seeds`` writes seed ``seed``'s usual files."""
  return os.path.join(output_dir, f"seed{seed}")


def parse_seeds(text: str) -> list[int]:
  """``"0,1,2"`` -> [0, 1, 2]; ValueError naming the bad value otherwise."""
  parts = [s.strip() for s in str(text).split(",") if s.strip()]
  try:
    seeds = [int(s) for s in parts]
  except ValueError:
    raise ValueError(
      f"seeds={text!r} must be comma-separated integers >= 0, e.g. 0,1,2"
    ) from None
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
