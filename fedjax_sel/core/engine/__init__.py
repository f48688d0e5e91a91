"""The cohort engine: every selected client's local SGD as one vectorized computation.

Layout: the training examples live on device as one flat array; each round the engine
builds index arrays ``[M, S, B]`` (S = the most local steps any client can run) and each
local step gathers its batch from the flat arrays by index. Clients with different amounts
of data run different numbers of steps: a padded step is masked (``jnp.where`` on params
and optimizer state, so it changes nothing).

One module per loop, and the pieces they share:

* ``lanes`` (``auto`` for dense models on CPU): L lanes, each running its clients one after
  another, longest first to the least loaded lane (LPT);
* ``flat`` (``map``; ``auto`` for CNNs on one CPU device): one client at a time, no padding;
* ``chunked`` (``chunked``, and ``vmap`` = one chunk; ``auto`` on accelerators): chunks of c
  clients vmapped, each padded to its own longest client;
* ``local``: one client's batches, local step and run; ``config``: settings and data;
  ``cost``: how ``auto`` picks; ``sharding``: device placement; ``reference``: the
  per-client loop the others are checked against.

``make_cohort_trainer`` (here) makes the plan and dispatches to one loop. The engine reports
the useful-step fraction: real steps / (steps run by the padded loops).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_sel.core.engine.chunked import make_train_chunked
from fedjax_sel.core.engine.config import (
  PARALLELISM,
  CohortResult,
  EngineConfig,
  TrainArrays,
  _check_train_arrays,
  cross_entropy_loss,
  decode_inputs,
  decode_table,
  max_steps,
  steps_per_client,
  train_arrays,
  validate_engine_config,
)
from fedjax_sel.core.engine.cost import (
  AUTO_OVERHEAD_LANES_ACCELERATOR,
  LANE_OVERHEAD_CPU,
  LANE_PARAM_BUDGET,
  auto_chunk_size,
  auto_lane_count,
  lane_param_budget,
  lpt_makespan,
  resolve_chunk_size,
  resolve_kind,
)
from fedjax_sel.core.engine.flat import make_train_flat
from fedjax_sel.core.engine.lanes import LANE_BLOCK, assign_lanes, make_train_lanes
from fedjax_sel.core.engine.local import (
  LocalTraining,
  client_permutations,
  make_local_training,
  slot_keys,
)
from fedjax_sel.core.engine.reference import make_per_client
from fedjax_sel.core.engine.sharding import _client_mesh, replicated_put
from fedjax_sel.core.registry import check_range
from fedjax_sel.core.types import ClientUpdate
from fedjax_sel.data.federated import check_counts_have_examples

__all__ = [
  "AUTO_OVERHEAD_LANES_ACCELERATOR",
  "LANE_BLOCK",
  "LANE_OVERHEAD_CPU",
  "LANE_PARAM_BUDGET",
  "PARALLELISM",
  "CohortResult",
  "EngineConfig",
  "LocalTraining",
  "TrainArrays",
  "assign_lanes",
  "auto_chunk_size",
  "auto_lane_count",
  "client_permutations",
  "cross_entropy_loss",
  "decode_inputs",
  "decode_table",
  "lane_param_budget",
  "lpt_makespan",
  "make_cohort_trainer",
  "make_local_training",
  "max_steps",
  "replicated_put",
  "resolve_chunk_size",
  "resolve_kind",
  "slot_keys",
  "steps_per_client",
  "train_arrays",
  "validate_engine_config",
]


def make_cohort_trainer(
  apply_fn: Callable,
  client_update: ClientUpdate,
  client_optimizer: Callable[[jax.Array], optax.GradientTransformation],
  train_x: jax.Array,
  train_y: jax.Array,
  offsets: jax.Array,
  counts: jax.Array,
  cfg: EngineConfig,
  num_selected: int,
  conv: bool = False,
  num_params: int | None = None,
  x_divisor: float = 1.0,
  data: TrainArrays | None = None,
) -> Callable[..., CohortResult]:
  """Builds ``train(params, cohort, valid, key, lr, aux) -> CohortResult``.

  Args:
    apply_fn: ``apply(params, x) -> logits``.
    client_update: the local rule (sgd, fedprox, scaffold, fedsgd).
    client_optimizer: ``lr -> optax.GradientTransformation`` (e.g. ``optax.sgd``).
    train_x, train_y: the flat training arrays (on device).
    offsets, counts: i32[N], each client's slice of the flat arrays.
    cfg: EngineConfig.
    num_selected: M, the cohort slots.
    conv: whether the model is convolutional (for the ``auto`` parallelism rule).
    num_params: the model's parameter count (for the ``auto`` rule; None: assume small).
    x_divisor: model inputs are ``x / x_divisor`` in float32 (x may be stored as uint8;
      1.0 for float data).
    data: the ``TrainArrays`` already on device (then train_x ... counts only give shapes
      and sizes); None puts train_x ... counts on device (``train.put``: replicated on
      the client mesh when the loop uses several devices, else the default device).

  Returns:
    A pure, jittable function. ``cohort: i32[M]``, ``valid: bool[M]``, ``lr``: the client
    learning rate, one for the cohort (``f32[]``) or one per slot (``f32[M]``, e.g. a
    per-client schedule), ``aux``: per-slot pytree from ``client_update.prepare``. It reads
    the training data from ``train.data`` (closed over: a constant of whatever program calls
    it);
    ``train.with_data(data, params, cohort, valid, key, lr, aux)`` takes them as an
    argument instead, so a jitted caller compiles once per shape, whatever the values.
    The static plan (longest client, steps, lanes) comes from ``counts``: ``with_data``
    accepts data whose clients hold at most as many examples as the longest one here.
  """
  validate_engine_config(cfg)
  check_range("num_selected", num_selected, 1)
  check_range("x_divisor", x_divisor, 0.0, low_inclusive=False)
  counts_np = np.asarray(counts, np.int64)
  check_counts_have_examples(counts_np, "counts")  # else the gather fails inside JAX
  n_max = int(counts_np.max())
  steps_np = np.asarray(steps_per_client(counts_np, cfg))
  mesh = _client_mesh()
  num_devices = 1 if mesh is None else mesh.devices.size
  backend = jax.default_backend()
  kind = resolve_kind(cfg, conv, backend, num_devices)
  chunk = resolve_chunk_size(cfg, num_selected, conv, backend, steps_np, num_params, num_devices)
  if mesh is not None and kind == "chunked" and cfg.parallelism == "auto" and chunk < num_selected:
    # chunks a multiple of the device count, so each chunk is split over every device
    chunk = min(num_selected, -(-chunk // num_devices) * num_devices)
  if kind == "chunked" and chunk == 1:
    kind = "flat"
  uses_mesh = mesh is not None and kind in ("lanes", "chunked")
  # several processes: every array lives on the global mesh (a process's default device is
  # not a device of the others), even when the loop itself runs replicated (``flat``)
  placed_mesh = mesh if (uses_mesh or jax.process_count() > 1) else None
  put = replicated_put(placed_mesh)
  if data is None:
    data = train_arrays(train_x, train_y, offsets, counts_np, x_divisor, put)
  local = make_local_training(apply_fn, client_update, client_optimizer, cfg, n_max, x_divisor)

  if kind == "lanes":
    train_with = make_train_lanes(local, num_selected, chunk, mesh)
  elif kind == "flat":
    train_with = make_train_flat(local, num_selected)
  else:
    train_with = make_train_chunked(local, num_selected, chunk, mesh)

  def with_data(data_arg, global_params, cohort, valid, key, lr, aux) -> CohortResult:
    _check_train_arrays(data_arg, data, n_max)
    return train_with(data_arg, global_params, cohort, valid, key, lr, aux)

  def train(global_params, cohort, valid, key, lr, aux) -> CohortResult:
    return train_with(data, global_params, cohort, valid, key, lr, aux)

  train_single, per_client_loop = make_per_client(local, data, num_selected, steps_np)
  train.__name__ = train_with.__name__  # the loop it runs (train_lanes / train_flat / ...)
  train.with_data = with_data
  train.data = data
  train.x_divisor = x_divisor
  train.uses_mesh = uses_mesh
  train.mesh = placed_mesh
  train.put = put
  train.kind = kind
  train.chunk_size = chunk
  train.max_steps = local.s_max
  train.steps_per_client = jnp.asarray(steps_np, jnp.int32)
  train.per_client_loop = per_client_loop
  train.train_single = train_single
  # a slot's example order, for inspection: ``client_batches(data, slot_key, client, steps)``
  # gives i32[S, B] flat example indices and bool[S, B] mask; a fixed-steps run's p-th pass
  # over a client's data uses permutation p mod ``num_perms``
  train.client_batches = local.client_batches
  train.num_perms = local.num_perms
  return train
