"""Full participation (oracle): every client trains every round."""

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


class FullState(NamedTuple):
  """The oracle keeps no memory.

  Attributes:
    rounds: i32[], how many times ``apply`` ran.
  """

  rounds: Array


@register("full")
def make_full(weighting: str = "num_examples") -> Aggregator:
  """Full participation: ``update = sum_i n_i delta_i / sum_i n_i`` over all N clients.

  The oracle upper bound of FL-FDMS: it expects the cohort to hold all N clients (M = N,
  used with the ``always`` availability model). Weights are ``n_i / sum n`` from
  ``aux.num_examples`` (``weighting="uniform"`` gives 1/N), renormalized over the slots
  that actually arrived, so it degrades to FedAvg on whoever answered if the cohort is not
  complete. The selection's weights are not used.

  Args:
    weighting: "num_examples" (n_i / sum n) or "uniform" (1/N).

  References:
    Wang & Xu, "Combating Client Dropout in Federated Learning via Friend Model
    Substitution", Sec. 6 (baseline "Full"), Eq. (4) with S_t = K.
  """
  _common.check_weighting(weighting)

  def init(params: Params, info: ClientInfo) -> FullState:
    del params, info
    return FullState(rounds=jnp.zeros((), jnp.int32))

  def apply(
    state: FullState,
    deltas: PyTree,
    selection: Selection,
    avail: Array,
    t: Array,
    aux: AggregationAux | None = None,
  ) -> tuple[Params, FullState]:
    """One aggregation.

    Args:
      state: FullState.
      deltas: pytree of [M, ...] (M = N expected), local minus global params per slot.
      selection: Selection(cohort i32[M], valid bool[M], weights f32[M]).
      avail: bool[N], who could answer this round (all True under ``always``).
      t: i32[], the round index (unused).
      aux: AggregationAux; ``num_examples`` f32[N] gives n_i (ones when None).

    Returns:
      (update shaped like params, new state).
    """
    del t
    aux = _common.resolve_aux(aux, avail, selection)
    update = _common.received_average(deltas, selection, avail, aux, weighting)
    return update, FullState(rounds=state.rounds + 1)

  return Aggregator(init=init, apply=apply)
