"""Shared masked, fixed-shape helpers for the aggregators.

Shapes: N clients, M cohort slots. ``deltas`` is a pytree of [M, ...] arrays, memories are
pytrees of [N, ...] arrays. Every helper is jittable and uses masks, never Python control
flow on traced values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_sel.core.types import AggregationAux, Array, Params, PyTree, Selection, empty_aux

WEIGHTINGS = ("uniform", "num_examples")


def check_weighting(weighting: str) -> None:
  """Raises ValueError unless ``weighting`` is one of WEIGHTINGS."""
  if weighting not in WEIGHTINGS:
    raise ValueError(f"weighting={weighting!r} is not allowed; allowed: {list(WEIGHTINGS)}")


def resolve_aux(aux: AggregationAux | None, avail: Array, selection: Selection) -> AggregationAux:
  """``aux`` or, when None, full availability, unit sizes and all-finite slots."""
  if aux is None:
    return empty_aux(avail.shape[0], selection.cohort.shape[0])
  return aux


def slot_is_finite(deltas: PyTree) -> Array:
  """bool[M]: whether every entry of a slot's update is finite."""
  leaves = jax.tree_util.tree_leaves(deltas)
  finite = [jnp.all(jnp.isfinite(leaf.reshape(leaf.shape[0], -1)), axis=1) for leaf in leaves]
  return jnp.stack(finite, 0).all(0)


def received_mask(deltas: PyTree, selection: Selection, avail: Array, aux: AggregationAux) -> Array:
  """bool[M]: slots whose update the server actually received this round.

  A slot counts when it is valid, flagged finite in ``aux``, actually finite, and its client
  is available (``avail[cohort]``). Invalid slots may hold any id, so ``avail`` is read
  with a clipped index and masked.
  """
  num_clients = avail.shape[0]
  cohort = jnp.clip(selection.cohort, 0, num_clients - 1)
  return (
    selection.valid.astype(bool)
    & aux.finite.astype(bool)
    & slot_is_finite(deltas)
    & avail.astype(bool)[cohort]
  )


def zero_unreceived(deltas: PyTree, received: Array) -> PyTree:
  """Replaces the updates of unreceived slots by zeros (NaN-safe, unlike multiplying)."""

  def mask(leaf):
    r = received.reshape((-1,) + (1,) * (leaf.ndim - 1))
    return jnp.where(r, leaf, jnp.zeros_like(leaf))

  return jax.tree_util.tree_map(mask, deltas)


def weighted_sum(weights: Array, stacked: PyTree) -> Params:
  """sum_k weights[k] * stacked[k] for every leaf: f32[K], pytree [K, ...] -> pytree [...]."""
  return jax.tree_util.tree_map(
    lambda leaf: jnp.tensordot(weights.astype(leaf.dtype), leaf, axes=1), stacked
  )


def scatter_rows(memory: PyTree, rows: PyTree, cohort: Array, received: Array) -> PyTree:
  """memory[cohort[m]] <- rows[m] for received slots m; other rows of memory unchanged.

  Unreceived slots scatter to the out-of-range index N and are dropped, so garbage or
  duplicate ids in invalid slots never touch the memory.
  """

  def scatter(mem, row):
    num_clients = mem.shape[0]
    index = jnp.where(received, cohort, num_clients)
    return mem.at[index].set(row.astype(mem.dtype), mode="drop")

  return jax.tree_util.tree_map(scatter, memory, rows)


def scatter_mask(num_clients: int, cohort: Array, received: Array) -> Array:
  """bool[N]: clients whose update arrived this round."""
  index = jnp.where(received, cohort, num_clients)
  return jnp.zeros((num_clients,), bool).at[index].set(True, mode="drop")


def client_weights(aux: AggregationAux, weighting: str) -> Array:
  """f32[N] unnormalized per-client weights: ones ("uniform") or n_i ("num_examples")."""
  if weighting == "uniform":
    return jnp.ones_like(aux.num_examples, dtype=jnp.float32)
  return aux.num_examples.astype(jnp.float32)


def client_lr(aux: AggregationAux, num_clients: int) -> Array:
  """f32[N]: every client's lr eta_t this round (``aux.lr``; ones without it)."""
  if aux.lr is None:
    return jnp.ones((num_clients,), jnp.float32)
  return jnp.broadcast_to(jnp.asarray(aux.lr, jnp.float32), (num_clients,))


def memory_lr_after(memory_lr: Array, lr_now: Array, arrived: Array) -> Array:
  """f32[N]: the lr each memory row was trained with, after this round's arrivals."""
  return jnp.where(arrived, lr_now, memory_lr)


def lr_rescale(lr_now: Array, memory_lr: Array) -> Array:
  """f32[N]: eta_t / eta_i, what turns a remembered delta D_i (trained with eta_i) into
  eta_t * G_i = eta_t * D_i / eta_i (FedAR Eq. 4 and 7, MIFA Algorithm 1).

  The memories keep G_i as the pair (D_i, eta_i) rather than the quotient: x / x is exactly
  1 in floating point, so under a constant lr (and for every fresh update) the factor is 1
  and the results are bit for bit those of a delta memory.
  """
  return safe_divide(lr_now, memory_lr)


def zeros_memory(params: Params, num_clients: int) -> PyTree:
  """A pytree of zeros shaped [N, ...] for every leaf of params (O(N * P) memory)."""
  return jax.tree_util.tree_map(
    lambda p: jnp.zeros((num_clients,) + jnp.shape(p), jnp.result_type(p)), params
  )


def safe_divide(numerator: Array, denominator: Array) -> Array:
  """numerator / denominator, or 0 where the denominator is 0."""
  positive = denominator > 0
  return jnp.where(positive, numerator / jnp.where(positive, denominator, 1.0), 0.0)


def received_average(
  deltas: PyTree, selection: Selection, avail: Array, aux: AggregationAux, weighting: str
) -> PyTree:
  """The weighted mean of the updates that arrived (Dropout and Full, FL-FDMS Eq. 4).

  Weights are ``client_weights`` of each slot's client, 0 for slots not received, and
  renormalized to sum to 1 over the received slots (all 0 if none arrived).
  """
  received = received_mask(deltas, selection, avail, aux)
  cohort = jnp.clip(selection.cohort, 0, avail.shape[0] - 1)
  weights = jnp.where(received, client_weights(aux, weighting)[cohort], 0.0)
  weights = safe_divide(weights, weights.sum())
  return weighted_sum(weights, zero_unreceived(deltas, received))
