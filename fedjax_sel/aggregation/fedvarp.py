"""FedVARP: SAGA-style variance reduction for partial client participation."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sel.aggregation import _common
from fedjax_sel.aggregation.registry import register
from fedjax_sel.core.types import (
  AggregationAux,
  Aggregator,
  Array,
  ClientInfo,
  Params,
  PyTree,
  Selection,
)


class FedVARPState(NamedTuple):
  """Per-client memory of the latest update.

  Attributes:
    memory: pytree of [N, ...], each client's latest received update y_i (zeros if never
      seen).
    rounds: i32[], how many times ``apply`` ran.
    memory_lr: f32[N], the client lr each memory row was trained with (1 if never seen).
  """

  memory: PyTree
  rounds: Array
  memory_lr: Array


@register("fedvarp")
def make_fedvarp(weighting: str = "uniform") -> Aggregator:
  """FedVARP: memory average plus a SAGA correction on the cohort.

  ``update = sum_j qbar_j y_j + sum_{m in S} w_m (delta_m - y_{c_m})`` and then
  ``y_{c_m} <- delta_m`` for the received slots, where ``y`` holds the memory *before* this
  round, ``qbar_j = q_j / sum_{k<=N} q_k`` and ``w_m = q_{c_m} / sum_{m' in S} q_{c_m'}``
  (uniform: 1/N and 1/|S|, the paper's Algorithm 1 with uniform sampling of |S| clients).
  Under full participation the two memory terms cancel and this is FedAvg. Available
  clients' fresh updates get weight 1/|S| > 1/N while the stale ones keep 1/N (FedAR's
  description). Memory: O(N * P), a pytree of [N, ...] arrays.

  The memory holds gradient-like y_i = delta_i / eta_i, as MIFA's and FedAR's (the pair
  (delta_i, eta_i)), and the update is taken at this round's lr eta_t (``aux.lr``): a
  remembered delta enters as ``(eta_t / eta_i) y_i``. Under a constant lr the factor is 1
  exactly and this is the delta-space rule above bit for bit.

  Args:
    weighting: "uniform" (q_i = 1) or "num_examples" (q_i = n_i).

  References:
    Jhunjhunwala et al., "FedVARP: Tackling the Variance Due to Partial Client Participation
    in Federated Learning", UAI 2022, Algorithm 1; a baseline in FedAR (Jiang et al.),
    Sec. 6.1.
  """
  _common.check_weighting(weighting)

  def init(params: Params, info: ClientInfo) -> FedVARPState:
    return FedVARPState(
      memory=_common.zeros_memory(params, info.num_clients),
      rounds=jnp.zeros((), jnp.int32),
      memory_lr=jnp.ones((info.num_clients,), jnp.float32),
    )

  def apply(
    state: FedVARPState,
    deltas: PyTree,
    selection: Selection,
    avail: Array,
    t: Array,
    aux: AggregationAux | None = None,
  ) -> tuple[Params, FedVARPState]:
    """One aggregation.

    Args:
      state: FedVARPState.
      deltas: pytree of [M, ...], local params minus global params per cohort slot.
      selection: Selection(cohort i32[M], valid bool[M], weights f32[M]).
      avail: bool[N], who could answer this round.
      t: i32[], the round index (unused).
      aux: AggregationAux or None.

    Returns:
      (update shaped like params, new state).
    """
    del t
    num_clients = avail.shape[0]
    aux = _common.resolve_aux(aux, avail, selection)
    received = _common.received_mask(deltas, selection, avail, aux)
    deltas = _common.zero_unreceived(deltas, received)
    cohort = jnp.clip(selection.cohort, 0, num_clients - 1)
    client_q = _common.client_weights(aux, weighting)
    memory_weights = _common.safe_divide(client_q, client_q.sum())
    slot_weights = jnp.where(received, client_q[cohort], 0.0)
    slot_weights = _common.safe_divide(slot_weights, slot_weights.sum())
    # eta_t / eta_i of the memory before this round (fresh deltas were trained at eta_t)
    lr_now = _common.client_lr(aux, num_clients)
    rescale = _common.lr_rescale(lr_now, state.memory_lr)
    old_rows = jax.tree_util.tree_map(lambda mem: mem[cohort], state.memory)
    old_scale = rescale[cohort]

    def correction(d, y):
      return d - old_scale.reshape((-1,) + (1,) * (d.ndim - 1)).astype(d.dtype) * y.astype(d.dtype)

    corrections = jax.tree_util.tree_map(correction, deltas, old_rows)
    corrections = _common.zero_unreceived(corrections, received)
    update = jax.tree_util.tree_map(
      lambda a, b: a + b,
      _common.weighted_sum(memory_weights * rescale, state.memory),
      _common.weighted_sum(slot_weights, corrections),
    )
    memory = _common.scatter_rows(state.memory, deltas, selection.cohort, received)
    arrived = _common.scatter_mask(num_clients, selection.cohort, received)
    memory_lr = _common.memory_lr_after(state.memory_lr, lr_now, arrived)
    return update, FedVARPState(memory=memory, rounds=state.rounds + 1, memory_lr=memory_lr)

  return Aggregator(init=init, apply=apply)
