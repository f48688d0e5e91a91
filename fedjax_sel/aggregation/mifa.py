"""MIFA: memory-augmented impatient federated averaging."""

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


class MIFAState(NamedTuple):
  """Per-client memory of the latest update.

  Attributes:
    memory: pytree of [N, ...], each client's latest received update G_i (zeros if never seen).
    rounds: i32[], how many times ``apply`` ran.
  """

  memory: PyTree
  rounds: Array


@register("mifa")
def make_mifa(weighting: str = "uniform") -> Aggregator:
  """MIFA: ``update = (1/N) sum_{i=1..N} G_i``, the average of every client's latest update.

  G_i is replaced by the update received from client i this round and kept otherwise.
  MIFA assumes every client answers in the first round; we do not enforce it: a client never
  seen keeps G_i = 0 and still counts in the 1/N (so early rounds are shrunk towards zero,
  the bias FedAR points out). With ``weighting="num_examples"`` the average is
  ``sum_i n_i G_i / sum_i n_i``. In the paper's notation the server step is
  ``w <- w - eta * (1/N) sum_i G_i`` with G_i a gradient-like quantity; here G_i is stored
  in delta space (local minus global params), so the returned update is added to the params.
  Memory: O(N * P), a pytree of [N, ...] arrays.

  Args:
    weighting: "uniform" (q_i = 1/N, MIFA's objective) or "num_examples" (q_i = n_i/sum n).

  References:
    Gu et al., "Fast Federated Learning in the Presence of Arbitrary Device Unavailability",
    NeurIPS 2021, Algorithm 1; used as a baseline in FedAR (Jiang et al.), Sec. 6.1.
  """
  _common.check_weighting(weighting)

  def init(params: Params, info: ClientInfo) -> MIFAState:
    return MIFAState(
      memory=_common.zeros_memory(params, info.num_clients),
      rounds=jnp.zeros((), jnp.int32),
    )

  def apply(
    state: MIFAState,
    deltas: PyTree,
    selection: Selection,
    avail: Array,
    t: Array,
    aux: AggregationAux | None = None,
  ) -> tuple[Params, MIFAState]:
    """One aggregation.

    Args:
      state: MIFAState.
      deltas: pytree of [M, ...], local params minus global params per cohort slot.
      selection: Selection(cohort i32[M], valid bool[M], weights f32[M]).
      avail: bool[N], who could answer this round.
      t: i32[], the round index (unused).
      aux: AggregationAux or None.

    Returns:
      (update shaped like params, new state).
    """
    del t
    aux = _common.resolve_aux(aux, avail, selection)
    received = _common.received_mask(deltas, selection, avail, aux)
    deltas = _common.zero_unreceived(deltas, received)
    memory = _common.scatter_rows(state.memory, deltas, selection.cohort, received)
    weights = _common.client_weights(aux, weighting)
    weights = _common.safe_divide(weights, weights.sum())
    update = _common.weighted_sum(weights, memory)
    return update, MIFAState(memory=memory, rounds=state.rounds + 1)

  return Aggregator(init=init, apply=apply)
