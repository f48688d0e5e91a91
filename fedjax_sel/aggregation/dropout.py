"""Dropout: ignore the clients that dropped, average over those that returned."""

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


class DropoutState(NamedTuple):
  """Dropout keeps no memory.

  Attributes:
    rounds: i32[], how many times ``apply`` ran.
  """

  rounds: Array


@register("dropout")
def make_dropout(weighting: str = "uniform") -> Aggregator:
  """Averages the updates that returned: ``update = (1 / S_t) sum_{k in S_t} delta_k``.

  S_t is the set of received slots (valid, finite, client available). With
  ``weighting="num_examples"`` the average is weighted by n_k instead. Dropped clients
  contribute nothing; equivalently (FL-FDMS Eq. 5) each is substituted by the mean of the
  active updates. The selection's weights are not used.

  Args:
    weighting: "uniform" (the paper's 1/S_t) or "num_examples".

  References:
    Wang & Xu, "Combating Client Dropout in Federated Learning via Friend Model
    Substitution", Eq. (4) and Sec. 6 (baseline "Dropout").
  """
  _common.check_weighting(weighting)

  def init(params: Params, info: ClientInfo) -> DropoutState:
    del params, info
    return DropoutState(rounds=jnp.zeros((), jnp.int32))

  def apply(
    state: DropoutState,
    deltas: PyTree,
    selection: Selection,
    avail: Array,
    t: Array,
    aux: AggregationAux | None = None,
  ) -> tuple[Params, DropoutState]:
    """One aggregation.

    Args:
      state: DropoutState.
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
    update = _common.received_average(deltas, selection, avail, aux, weighting)
    return update, DropoutState(rounds=state.rounds + 1)

  return Aggregator(init=init, apply=apply)
