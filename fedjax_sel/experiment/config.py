"""The experiment config: its defaults, its validation, and what a checkpoint must agree with.

``default_config`` is the contract of ``python -m experiments.run``'s flags (every flag is a
field); ``validate_config`` turns a bad value into one ``ValueError`` naming it and what is
allowed, before anything is built.
"""

from __future__ import annotations

import json
import os

import ml_collections
import numpy as np

from fedjax_sel import aggregation, availability, client, data, models, selection
from fedjax_sel.core import engine as engine_lib
from fedjax_sel.core import optimizers
from fedjax_sel.core.registry import check_range, is_integer
from fedjax_sel.data import easyfl as data_easyfl
from fedjax_sel.data import loaders as data_loaders
from fedjax_sel.metrics import results, tensorboard

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
  # initial parameters: "flax" (lecun_normal kernels, zero biases) or "torch" (PyTorch's
  # Conv2d / Linear defaults, the papers' released code)
  c.param_init = "flax"
  # model compute in bfloat16 over float32 parameters, optimizer state and aggregation
  # (fedjax_sel.models.precision); off: float32 throughout
  c.half_precision = False
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
  # client sizes of the iid, dirichlet and shards partitions: "" (equal), "lognormal" (sizes
  # ~ lognormal(0, partition_sigma), all examples used) or "size_groups"
  c.partition_sizes = ""
  c.partition_sigma = 1.0
  c.num_groups = 5  # clustered partition
  c.test_fraction = 0.2
  # easyfl_quantity partition (FedGS's Fashion-MNIST task): how labels are drawn,
  # "least_used" (the easyFL FedGS ran) or "index_mod" (earlier easyFL: label i % C + random)
  c.label_rule = "least_used"
  # model inputs of image datasets: "unit" ([0, 1]) or "standardize" ((x - mean) / std;
  # the FedGS code's Normalize((0.1307,), (0.3081,)), MNIST's statistics)
  c.input_normalization = "unit"
  c.input_mean = 0.1307
  c.input_std = 0.3081
  c.data_dir = ""
  c.parallelism = "auto"
  c.chunk_size = 0
  c.sketch_dim = 256
  c.checkpoint_every = 0  # 0 = at every evaluation
  c.output_dir = ""
  c.resume = False
  c.tensorboard = False  # also write TensorBoard event files (the [tensorboard] extra)
  # also evaluate the global model on every client's training split (metrics
  # global_train_loss / global_train_accuracy, example-weighted, as the papers plot)
  c.global_train_loss = False
  # evaluate the global model on every client's local test split (metrics client_acc_mean,
  # _var, _worst10, _best10); False skips that pass where nothing reads them
  c.client_accuracy = True
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
  _name("param_init", c.get("param_init", "flax"), list(models.PARAM_INITS))
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
  sizes = c.get("partition_sizes", "")
  if sizes:
    _name("partition_sizes", sizes, list(data.partitions.SIZE_SCHEMES))
    if c.partition not in ("iid", "dirichlet", "shards"):
      raise ValueError(
        f"partition_sizes={sizes!r} with partition={c.partition!r}; allowed with iid, "
        "dirichlet or shards (the other partitions set their own sizes)"
      )
  check_range("partition_sigma", c.get("partition_sigma", 1.0), 0.0, low_inclusive=False)
  check_range("test_fraction", c.test_fraction, 0.0, 1.0, high_inclusive=False)
  for name in ("client_lr", "server_lr", "synthetic_alpha", "synthetic_beta", "partition_alpha"):
    if not np.isfinite(float(c[name])):
      raise ValueError(f"{name}={c[name]!r} is out of range; allowed: finite numbers")
  _name("synthetic_recipe", c.synthetic_recipe, list(data.synthetic_lib.RECIPES))
  _name("label_rule", c.get("label_rule", "least_used"), list(data_easyfl.RULES))
  data_loaders.check_normalization(
    c.get("input_normalization", "unit"), c.get("input_mean", 0.1307), c.get("input_std", 0.3081)
  )
  if c.dataset == "synthetic" and c.get("input_normalization", "unit") != "unit":
    raise ValueError(
      f"input_normalization={c.input_normalization!r} is not available for synthetic; "
      "allowed: 'unit'"
    )
  if c.dataset == "synthetic" and c.synthetic_recipe == "fedgs":
    if c.synthetic_alpha != c.synthetic_beta or c.examples_per_client:
      raise ValueError(
        "synthetic_recipe='fedgs' (the FedGS paper's instance) has one skewness and its own "
        f"client sizes; got synthetic_alpha={c.synthetic_alpha!r}, synthetic_beta="
        f"{c.synthetic_beta!r}, examples_per_client={c.examples_per_client!r} (allowed: "
        "synthetic_alpha == synthetic_beta, examples_per_client=0)"
      )
  _name("server_optimizer", c.server_optimizer, list(optimizers.SERVER_OPTIMIZERS))
  _name("client_optimizer", c.client_optimizer, list(optimizers.CLIENT_OPTIMIZERS))
  _name("lr_schedule", c.lr_schedule, list(optimizers.LR_SCHEDULES))
  _name("lr_schedule_unit", c.lr_schedule_unit, list(optimizers.LR_SCHEDULE_UNITS))
  _integer("lr_step_size", c.lr_step_size, 0)
  check_range("lr_step_gamma", c.lr_step_gamma, 0.0, 1.0, low_inclusive=False)
  optimizers.make_client_optimizer(c.client_optimizer, c.client_momentum, c.client_weight_decay)
  optimizers.make_client_lr_schedule(
    c.client_lr, c.lr_schedule, c.lr_decay, c.lr_step_size, c.lr_step_gamma
  )
  _name("parallelism", c.parallelism, list(engine_lib.PARALLELISM))
  if c.client_update == "fedsgd":
    _check_fedsgd(c)
  for part, module in PARTS.items():
    _name(part, c[part], module.names())
  reads_data_dir = c.dataset not in ("synthetic", "digits")  # the IDX / TFDS datasets
  if reads_data_dir and c.data_dir and not os.path.isdir(os.path.expanduser(str(c.data_dir))):
    raise ValueError(
      f"data_dir={c.data_dir!r} is not a folder; give a folder holding the four IDX files "
      "(MNIST, Fashion-MNIST) or a TFDS data_dir with the prepared dataset (see README, 'Data')"
    )
  if not isinstance(c.get("half_precision", False), bool):
    raise ValueError(f"half_precision={c.half_precision!r}; allowed: True or False")
  if not isinstance(c.get("global_train_loss", False), bool):
    raise ValueError(f"global_train_loss={c.global_train_loss!r}; allowed: True or False")
  if not isinstance(c.get("client_accuracy", True), bool):
    raise ValueError(f"client_accuracy={c.client_accuracy!r}; allowed: True or False")
  if not isinstance(c.get("tensorboard", False), bool):
    raise ValueError(f"tensorboard={c.tensorboard!r}; allowed: True or False")
  if c.get("tensorboard", False):
    try:
      tensorboard.check_available()
    except tensorboard.TensorBoardUnavailable as e:
      raise ValueError(str(e)) from None
  if c.output_dir and os.path.exists(c.output_dir) and not os.path.isdir(c.output_dir):
    raise ValueError(f"output_dir={c.output_dir!r} is a file; allowed: a folder (new or existing)")


def _check_fedsgd(c: ml_collections.ConfigDict) -> None:
  """FedSGD adds up one epoch of batch gradients taken at the global model into one step:
  that needs plain SGD (linear in the gradient) and exactly one epoch."""
  momentum = optimizers.client_momentum(c.client_optimizer, c.client_momentum)
  bad = []
  if momentum:
    bad.append(f"client_optimizer={c.client_optimizer!r} with momentum {momentum}")
  if c.client_weight_decay:
    bad.append(f"client_weight_decay={c.client_weight_decay!r}")
  if c.local_steps:
    bad.append(f"local_steps={c.local_steps!r}")
  elif c.local_epochs != 1:
    bad.append(f"local_epochs={c.local_epochs!r}")
  if bad:
    raise ValueError(
      f"client_update='fedsgd' cannot run with {', '.join(bad)}; allowed: client_optimizer="
      "'sgd' with client_momentum=0 and client_weight_decay=0, local_steps=0, local_epochs=1 "
      "(one full-batch gradient step per client)"
    )


def _hparams(c, part):
  return {k: v for k, v in dict(c[part + "_hparams"]).items()}


# Fields that may change between a run and its resumption (they do not change the rounds).
RESUMABLE_CHANGES = (
  "rounds",
  "eval_every",
  "checkpoint_every",
  "output_dir",
  "resume",
  "tensorboard",
  "global_train_loss",  # adds two metrics to each evaluation; the rounds are the same
  "client_accuracy",  # adds four metrics to each evaluation; the rounds are the same
)


def _fingerprint(c: ml_collections.ConfigDict) -> dict:
  """The config fields a checkpoint must agree with, as JSON-able values."""
  cfg = json.loads(results.dumps_line(c.to_dict()))
  return {k: v for k, v in cfg.items() if k not in RESUMABLE_CHANGES}


def config_differences(saved: dict, now: dict, ignore: tuple[str, ...] = ()) -> list[str]:
  """``"field: saved there, now here"`` for each field in which a run's saved config
  (``config.json``'s ``config``) differs from ``now``; a field missing from an older file
  ran with that field's default."""
  defaults = json.loads(results.dumps_line(default_config().to_dict()))
  saved = json.loads(results.dumps_line(saved))
  now = json.loads(results.dumps_line(now))
  return [
    f"{k}: {saved.get(k, defaults.get(k))!r} there, {now.get(k, defaults.get(k))!r} here"
    for k in sorted(set(saved) | set(now))
    if k not in ignore and saved.get(k, defaults.get(k)) != now.get(k, defaults.get(k))
  ]


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


def one_line(e: BaseException) -> str:
  """The exception's message on one line (for command-line errors)."""
  text = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
  return text or type(e).__name__
