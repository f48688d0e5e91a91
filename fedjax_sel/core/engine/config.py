"""The engine's settings and the data it trains on: ``EngineConfig``, ``TrainArrays``,
``CohortResult``, the local step counts, and the decoding of stored inputs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_sel.core.registry import check_range

PARALLELISM = ("auto", "vmap", "map", "chunked", "lanes")


class EngineConfig(NamedTuple):
  """Static settings of local training.

  Attributes:
    batch_size: B, examples per local step.
    local_epochs: E, passes over the client's data (used when ``local_steps`` is None).
    local_steps: K, a fixed number of local steps per client (wins over epochs).
    parallelism: one of ``PARALLELISM``.
    chunk_size: clients per chunk for ``chunked``, lanes per device for ``lanes`` (0: 8;
      ``auto`` picks its own).
    sort_by_steps: sort the cohort by step count before chunking (step bucketing).
  """

  batch_size: int = 10
  local_epochs: int = 1
  local_steps: int | None = None
  parallelism: str = "auto"
  chunk_size: int = 0
  sort_by_steps: bool = True


class TrainArrays(NamedTuple):
  """The training data as the compiled round reads it: an argument, never a constant.

  Attributes:
    x: [n_total, ...] all clients' examples, client after client, in their stored dtype
      (float32, or uint8 images decoded to float32 inside the batch gather).
    y: i32[n_total] labels.
    offsets: i32[N] index of each client's first example.
    counts: i32[N] examples of each client.
    table: f32[256] (or f32[65536]) decoding table of unsigned 8/16-bit inputs
      (``table[x]`` is the model's input), or f32[0] when x is used as it is (float data)
      or decoded by ``x.astype(float32) / divisor`` (other integer types).
  """

  x: jax.Array
  y: jax.Array
  offsets: jax.Array
  counts: jax.Array
  table: jax.Array


def decode_table(
  dtype: Any, divisor: float = 1.0, mean: float = 0.0, std: float = 1.0
) -> np.ndarray:
  """The f32 table that maps stored unsigned 8/16-bit values to model inputs.

  ``np.arange(2**bits, dtype=float32) / float32(divisor)``: a lookup in it is bitwise the
  host's ``x.astype(float32) / float32(divisor)`` (XLA:CPU's division by a constant is not:
  it multiplies by the reciprocal, off by one ulp on about half of the 256 values). With
  ``mean`` / ``std`` other than 0 / 1, each entry is then standardized in float32,
  ``(v - float32(mean)) / float32(std)``: bitwise ``data.federated.decode(x, divisor, mean,
  std)`` on the host (the released FedGS code's ``Normalize((0.1307,), (0.3081,))``).
  Empty (f32[0]) for float data and for other integer types.
  """
  dtype = np.dtype(dtype)
  if dtype.kind == "u" and dtype.itemsize <= 2:
    table = np.arange(1 << (8 * dtype.itemsize), dtype=np.float32) / np.float32(divisor)
    if mean != 0.0 or std != 1.0:
      table = (table - np.float32(mean)) / np.float32(std)
    return table
  return np.zeros((0,), np.float32)


def decode_inputs(x: jax.Array, table: jax.Array, divisor: float = 1.0) -> jax.Array:
  """Model inputs f32 from stored examples (inside jit): float32 data pass unchanged."""
  if table.shape[0]:
    return table[x.astype(jnp.int32)]
  if x.dtype == jnp.float32 and divisor == 1.0:
    return x
  x = x.astype(jnp.float32)
  return x if divisor == 1.0 else x / jnp.float32(divisor)


def train_arrays(x, y, offsets, counts, divisor: float = 1.0, put=None) -> TrainArrays:
  """``TrainArrays`` on device (``put``: a ``jax.device_put``-like placement; default the
  default device). x keeps its dtype; y becomes int32."""
  put = put or jax.device_put
  x = np.asarray(x) if not isinstance(x, jax.Array) else x
  table = decode_table(x.dtype, divisor)
  return TrainArrays(
    x=put(x),
    y=put(jnp.asarray(y, jnp.int32) if isinstance(y, jax.Array) else np.asarray(y, np.int32)),
    offsets=put(np.asarray(offsets, np.int32)),
    counts=put(np.asarray(counts, np.int32)),
    table=put(table),
  )


class CohortResult(NamedTuple):
  """What local training returns for the M cohort slots.

  Attributes:
    deltas: pytree of [M, ...], local params minus global params (zero for invalid slots).
    loss: f32[M], mean training loss over the client's local steps.
    num_steps: i32[M], local steps each slot ran (0 for invalid slots).
    padded_steps: f32[], steps executed including masked padding (per client lane).
  """

  deltas: Any
  loss: jax.Array
  num_steps: jax.Array
  padded_steps: jax.Array


def validate_engine_config(cfg: EngineConfig) -> None:
  check_range("batch_size", cfg.batch_size, 1)
  if cfg.local_steps is not None:
    check_range("local_steps", cfg.local_steps, 1)
  else:
    check_range("local_epochs", cfg.local_epochs, 1)
  if cfg.parallelism not in PARALLELISM:
    raise ValueError(f"parallelism={cfg.parallelism!r}; allowed: {', '.join(PARALLELISM)}")
  check_range("chunk_size", cfg.chunk_size, 0)


def cross_entropy_loss(apply_fn: Callable) -> Callable:
  """loss(params, (x, y, mask)) = masked mean softmax cross-entropy over the batch."""

  def loss_fn(params, batch):
    x, y, mask = batch
    logits = apply_fn(params, x)
    per_example = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    mask = mask.astype(per_example.dtype)
    return jnp.sum(per_example * mask) / jnp.maximum(jnp.sum(mask), 1.0)

  return loss_fn


def steps_per_client(num_examples: jax.Array, cfg: EngineConfig) -> jax.Array:
  """i32[N]: local steps of each client (0 for a client without data)."""
  n = jnp.asarray(num_examples, jnp.int32)
  if cfg.local_steps is not None:
    return jnp.where(n > 0, cfg.local_steps, 0).astype(jnp.int32)
  return (cfg.local_epochs * ((n + cfg.batch_size - 1) // cfg.batch_size)).astype(jnp.int32)


def max_steps(max_examples: int, cfg: EngineConfig) -> int:
  if cfg.local_steps is not None:
    return int(cfg.local_steps)
  return int(cfg.local_epochs * math.ceil(max(max_examples, 1) / cfg.batch_size))


def _check_train_arrays(data: TrainArrays, like: TrainArrays, n_max: int) -> None:
  """``with_data``'s check: the same shapes and dtypes as the data the plan was made for;
  counts are checked against the plan's longest client when they are concrete."""
  for name, a, b in zip(TrainArrays._fields, data, like):
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
      raise ValueError(
        f"training data {name}: {a.dtype}{list(a.shape)}; allowed: {b.dtype}{list(b.shape)} "
        "(the shapes and dtypes the trainer was built for)"
      )
  if not isinstance(data.counts, jax.core.Tracer) and data.counts.size:
    longest = int(np.max(np.asarray(data.counts)))
    if longest > n_max:
      raise ValueError(
        f"training data counts: a client holds {longest} examples; allowed: at most {n_max} "
        "(the longest client the trainer was built for)"
      )
