"""FedAvg-IS: FedAvg over the available clients, importance-weighted by 1 / p_i."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from fedjax_sel.aggregation import _common
from fedjax_sel.aggregation.registry import register
from fedjax_sel.core.registry import check_range
from fedjax_sel.core.types import (
  AggregationAux,
  Aggregator,
  Array,
  ClientInfo,
  Params,
  PyTree,
  Selection,
)


class FedAvgISState(NamedTuple):
  """FedAvg-IS keeps no memory.

  Attributes:
    rounds: i32[], how many times ``apply`` ran.
  """

  rounds: Array


@register("fedavg_is")
def make_fedavg_is(
  weighting: str = "num_examples",
  self_normalize: bool = False,
  min_prob: float = 1e-3,
) -> Aggregator:
  """FedAvg with inverse-availability-probability (importance) weights.

  ``update = sum_{m received} q_{c_m} / p_{c_m} * delta[m]`` where ``q_i`` is client i's
  share of the full population's weight (``n_i / sum_{j<=N} n_j`` for
  ``weighting="num_examples"``, ``1/N`` for ``"uniform"``) and ``p_i = aux.avail_probs[i]``.
  When the cohort holds every available client (the FedAR setting: client i answers with
  probability p_i, independently), this Horvitz-Thompson estimator is unbiased:
  ``E[update] = sum_i q_i delta_i``, the full-participation average. With
  ``self_normalize=True`` the weights are divided by their sum (Hajek estimator: biased but
  lower variance, and the update is always an average).

  FedAR describes this baseline only as "local updates weighted by clients' availability
  probabilities"; we read it as the usual importance weighting 1/p_i (the reading that makes
  the baseline unbiased). The selection's own weights are not used.

  Args:
    weighting: "num_examples" (q_i proportional to n_i, FedAvg's objective) or "uniform".
    self_normalize: divide the importance weights by their sum over the received slots.
    min_prob: p_i is floored at this value before inverting, in (0, 1].

  References:
    Jiang et al., "FedAR: Addressing Client Unavailability in Federated Learning with Local
    Update Approximation and Rectification", Sec. 6.1 (baseline FedAvg-IS).
  """
  _common.check_weighting(weighting)
  check_range("min_prob", min_prob, 0.0, 1.0, low_inclusive=False)
  if not isinstance(self_normalize, bool):
    raise ValueError(f"self_normalize={self_normalize!r} is not allowed; allowed: [True, False]")

  def init(params: Params, info: ClientInfo) -> FedAvgISState:
    del params, info
    return FedAvgISState(rounds=jnp.zeros((), jnp.int32))

  def apply(
    state: FedAvgISState,
    deltas: PyTree,
    selection: Selection,
    avail: Array,
    t: Array,
    aux: AggregationAux | None = None,
  ) -> tuple[Params, FedAvgISState]:
    """One aggregation.

    Args:
      state: FedAvgISState.
      deltas: pytree of [M, ...], local params minus global params per cohort slot.
      selection: Selection(cohort i32[M], valid bool[M], weights f32[M]).
      avail: bool[N], who could answer this round.
      t: i32[], the round index (unused).
      aux: AggregationAux; ``avail_probs`` f32[N] are the p_i (all ones when None).

    Returns:
      (update shaped like params, new state).
    """
    del t
    aux = _common.resolve_aux(aux, avail, selection)
    received = _common.received_mask(deltas, selection, avail, aux)
    share = _common.client_weights(aux, weighting)
    share = _common.safe_divide(share, share.sum())
    cohort = jnp.clip(selection.cohort, 0, avail.shape[0] - 1)
    probs = jnp.maximum(aux.avail_probs.astype(jnp.float32), min_prob)
    weights = jnp.where(received, share[cohort] / probs[cohort], 0.0)
    if self_normalize:
      weights = _common.safe_divide(weights, weights.sum())
    update = _common.weighted_sum(weights, _common.zero_unreceived(deltas, received))
    return update, FedAvgISState(rounds=state.rounds + 1)

  return Aggregator(init=init, apply=apply)
