"""FedAvg: the selection's weighted average of the cohort's updates."""

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


class FedAvgState(NamedTuple):
  """FedAvg keeps no memory; the state only counts rounds.

  Attributes:
    rounds: i32[], how many times ``apply`` ran.
  """

  rounds: Array


FEDAVG_WEIGHTINGS = ("selection", "uniform")


@register("fedavg")
def make_fedavg(weighting: str = "selection") -> Aggregator:
  """FedAvg: ``update = sum_m weights[m] * delta[m]`` with the selection's weights.

  The weights are those the selection strategy prescribes (uniform sampling: n_k / sum n over
  the cohort; MD sampling: 1/M). When some valid slots did not arrive (non-finite update,
  ``aux.finite`` False, or the client unavailable) the received weights are rescaled to the
  total weight of the valid slots, so the update stays a weighted *average*.

  Args:
    weighting: ``"selection"`` (default): the selection's weights, as above.
      ``"uniform"``: 1 / (number of valid slots) for every valid slot, whatever the
      selection prescribes: the plain mean of the cohort's models, as in FedEMD's code, whose
      aggregation averages the selected clients' parameters without their sizes.

  References:
    McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
    Data", AISTATS 2017, Algorithm 1.
  """

  if weighting not in FEDAVG_WEIGHTINGS:
    raise ValueError(f"weighting={weighting!r} is not allowed; allowed: {list(FEDAVG_WEIGHTINGS)}")

  def init(params: Params, info: ClientInfo) -> FedAvgState:
    del params, info
    return FedAvgState(rounds=jnp.zeros((), jnp.int32))

  def apply(
    state: FedAvgState,
    deltas: PyTree,
    selection: Selection,
    avail: Array,
    t: Array,
    aux: AggregationAux | None = None,
  ) -> tuple[Params, FedAvgState]:
    """One aggregation.

    Args:
      state: FedAvgState.
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
    if weighting == "uniform":
      num_valid = jnp.maximum(jnp.sum(selection.valid), 1).astype(jnp.float32)
      valid_weights = jnp.where(selection.valid, 1.0 / num_valid, 0.0).astype(jnp.float32)
    else:
      valid_weights = jnp.where(selection.valid, selection.weights, 0.0).astype(jnp.float32)
    weights = jnp.where(received, valid_weights, 0.0)
    scale = _common.safe_divide(valid_weights.sum(), weights.sum())
    update = _common.weighted_sum(weights * scale, _common.zero_unreceived(deltas, received))
    return update, FedAvgState(rounds=state.rounds + 1)

  return Aggregator(init=init, apply=apply)
