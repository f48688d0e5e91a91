"""From a validated config to a ``Simulation``: the data, the four components, the model."""

from __future__ import annotations

import platform
import sys
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np

from fedjax_sel import client as client_lib
from fedjax_sel import data, models
from fedjax_sel.core import engine as engine_lib
from fedjax_sel.core import simulation as sim_lib
from fedjax_sel.experiment.config import PARTS, _hparams, validate_config


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
    elif partition == "easyfl_quantity":
      kwargs["labels_per_client"] = c.labels_per_client
      kwargs["rule"] = c.get("label_rule", "least_used")
    if c.get("partition_sizes", "") and partition in ("iid", "dirichlet", "shards"):
      kwargs["sizes"] = c.partition_sizes
      kwargs["sigma"] = c.get("partition_sigma", 1.0)
    kwargs["test_fraction"] = c.test_fraction
    if c.get("input_normalization", "unit") != "unit":
      kwargs["input_normalization"] = c.input_normalization
      kwargs["input_mean"] = c.input_mean
      kwargs["input_std"] = c.input_std
  return data.load(
    c.dataset,
    c.num_clients,
    (c.partition or None) if c.dataset == "synthetic" else (c.partition or "iid"),
    seed=c.data_seed,
    data_dir=c.data_dir or None,
    examples_per_client=c.examples_per_client or None,
    **kwargs,
  )


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
  if c.client_update == "fedsgd" and "client_counts" not in c.client_update_hparams:
    # FedSGD weighs each batch's gradient by its share of the client's examples
    counts = [int(n) for n in np.asarray(dataset.train.counts)]
    upd = client_lib.make("fedsgd", client_counts=counts)
  hp = {"hidden": (int(c.mlp_hidden),)} if c.model == "mlp" else {}
  hp["param_init"] = c.get("param_init", "flax")
  hp["half_precision"] = bool(c.get("half_precision", False))
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
    global_train_loss=bool(c.get("global_train_loss", False)),
    client_accuracy=bool(c.get("client_accuracy", True)),
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


# The instruction-set extensions that change which kernels XLA:CPU emits (and so the order
# of float sums): the same program on two hosts that differ here gives accuracies that
# differ from the first round, in the third or fourth digit (BUILD_NOTES, "Across CPUs").
SIMD_FLAGS = (
  "sse4_2",
  "avx",
  "avx2",
  "fma",
  "avx512f",
  "avx512_bf16",
  "avx512_fp16",
  "amx_tile",
  "amx_bf16",
  "asimd",
  "sve",
)


def cpu_info(cpuinfo: str | None = None) -> dict:
  """The host CPU as ``{"model", "family", "model_number", "simd"}``, read from
  ``/proc/cpuinfo`` (or the given text; ``platform`` where there is none).

  Bit-for-bit equality of two runs holds on hosts with the same CPU model and SIMD flags;
  results record this so that a reader knows which comparison to expect.
  """
  if cpuinfo is None:
    try:
      with open("/proc/cpuinfo") as f:
        cpuinfo = f.read()
    except OSError:
      cpuinfo = ""
  fields: dict[str, str] = {}
  for line in cpuinfo.splitlines():
    key, sep, value = line.partition(":")
    key = key.strip()
    if sep and key not in fields:  # the first processor's block
      fields[key] = value.strip()
  flags = set((fields.get("flags") or fields.get("Features") or "").split())
  return {
    "model": fields.get("model name") or platform.processor() or platform.machine(),
    "family": fields.get("cpu family") or fields.get("CPU architecture", ""),
    "model_number": fields.get("model") or fields.get("CPU part", ""),
    "simd": [f for f in SIMD_FLAGS if f in flags],
  }


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
    "cpu": cpu_info(),
  }
