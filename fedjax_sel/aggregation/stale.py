"""Stale: a dropped client's last received update stands in for its current one."""

from __future__ import annotations

from typing import NamedTuple

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


class StaleState(NamedTuple):
  """Per-client memory of the latest update.

  Attributes:
    memory: pytree of [N, ...], each client's latest received update (zeros if never seen).
    seen: bool[N], whether the client ever returned an update.
    rounds: i32[], how many times ``apply`` ran.
  """

  memory: PyTree
  seen: Array
  rounds: Array


@register("stale")
def make_stale(weighting: str = "uniform") -> Aggregator:
  """Stale substitution: average of every seen client's latest update.

  ``update = sum_{i seen} q_i D_i / sum_{i seen} q_i`` where D_i is the update received this
  round for active clients and the last received one for dropped clients; clients that never
  answered have no update to reuse and are left out of the sum and of the denominator (this
  is what separates Stale from MIFA, which divides by N). Memory: O(N * P), a pytree of
  [N, ...] arrays.

  Args:
    weighting: "uniform" (q_i = 1, the paper's 1/K average) or "num_examples" (q_i = n_i).

  References:
    Wang & Xu, "Combating Client Dropout in Federated Learning via Friend Model
    Substitution", Sec. 6 (baseline "Stale"), Eq. (5) with the stale update as substitute.
  """
  _common.check_weighting(weighting)

  def init(params: Params, info: ClientInfo) -> StaleState:
    num_clients = info.num_clients
    return StaleState(
      memory=_common.zeros_memory(params, num_clients),
      seen=jnp.zeros((num_clients,), bool),
      rounds=jnp.zeros((), jnp.int32),
    )

  def apply(
    state: StaleState,
    deltas: PyTree,
    selection: Selection,
    avail: Array,
    t: Array,
    aux: AggregationAux | None = None,
  ) -> tuple[Params, StaleState]:
    """One aggregation.

    Args:
      state: StaleState.
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
    memory = _common.scatter_rows(state.memory, deltas, selection.cohort, received)
    seen = state.seen | _common.scatter_mask(num_clients, selection.cohort, received)
    weights = jnp.where(seen, _common.client_weights(aux, weighting), 0.0)
    weights = _common.safe_divide(weights, weights.sum())
    update = _common.weighted_sum(weights, memory)
    return update, StaleState(memory=memory, seen=seen, rounds=state.rounds + 1)

  return Aggregator(init=init, apply=apply)
