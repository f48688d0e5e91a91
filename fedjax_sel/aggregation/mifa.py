"""MIFA: memory-augmented impatient federated averaging."""

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

AVERAGE_OVER = ("all", "seen")


class MIFAState(NamedTuple):
  """Per-client memory of the latest update.

  Attributes:
    memory: pytree of [N, ...], each client's latest received update D_i = -eta_i G_i
      (local minus global params, zeros if never seen).
    rounds: i32[], how many times ``apply`` ran.
    memory_lr: f32[N], eta_i, the client lr each memory row was trained with (1 if never
      seen).
    seen: bool[N], clients whose update ever arrived.
  """

  memory: PyTree
  rounds: Array
  memory_lr: Array
  seen: Array


@register("mifa")
def make_mifa(
  weighting: str = "uniform", average_over: str = "all", step_scale: float = 1.0
) -> Aggregator:
  """MIFA: ``w <- w - eta_t (1/N) sum_{i=1..N} G_i``, the average of every client's latest
  update (Gu et al., Algorithm 1).

  G_i = (w_t - w^i_{t,K}) / eta_t is replaced by the update received from client i this
  round and kept otherwise; the server steps by the current lr eta_t times the average. In
  delta space (local minus global params) a client that trained with eta_i sent
  ``D_i = -eta_i G_i``; the memory keeps the pair (D_i, eta_i) and the returned update is
  ``(1/N) sum_i (eta_t / eta_i) D_i`` (``aux.lr`` gives eta_t; without it every eta is 1),
  added to the params by the server optimizer. Under a constant lr this is the average of
  the latest deltas, bit for bit.

  MIFA assumes every client answers in the first round; we do not enforce it: a client never
  seen keeps G_i = 0 and still counts in the 1/N (so early rounds are shrunk towards zero,
  the bias FedAR points out). With ``weighting="num_examples"`` the average is
  ``sum_i n_i G_i / sum_i n_i``. Memory: O(N * P), a pytree of [N, ...] arrays.

  Two controls of the FedAR study (issue 38) are options here, MIFA's paper being the
  defaults: ``average_over="seen"`` averages over the clients seen so far (FedAR's set E;
  never-seen clients leave the denominator: this equals FedAR with rho = 0 and no cutoff),
  and ``step_scale`` multiplies the update (FedAR's step is about mean(sum psi / N_t) times
  MIFA-over-seen's; ``--server_lr`` scales the step the same way with server SGD).

  Args:
    weighting: "uniform" (q_i = 1/N, MIFA's objective) or "num_examples" (q_i = n_i/sum n).
    average_over: "all" (MIFA: every client, never-seen ones as zeros) or "seen".
    step_scale: factor on the update, finite and > 0 (1: MIFA).

  References:
    Gu et al., "Fast Federated Learning in the Presence of Arbitrary Device Unavailability",
    NeurIPS 2021, Algorithm 1; used as a baseline in FedAR (Jiang et al.), Sec. 6.1.
  """
  _common.check_weighting(weighting)
  if average_over not in AVERAGE_OVER:
    raise ValueError(f"average_over={average_over!r} is not allowed; allowed: {list(AVERAGE_OVER)}")
  check_range(
    "step_scale", step_scale, 0.0, float("inf"), low_inclusive=False, high_inclusive=False
  )  # finite: inf makes every update inf (found by test_properties)

  def init(params: Params, info: ClientInfo) -> MIFAState:
    num_clients = info.num_clients
    return MIFAState(
      memory=_common.zeros_memory(params, num_clients),
      rounds=jnp.zeros((), jnp.int32),
      memory_lr=jnp.ones((num_clients,), jnp.float32),
      seen=jnp.zeros((num_clients,), bool),
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
    num_clients = avail.shape[0]
    aux = _common.resolve_aux(aux, avail, selection)
    received = _common.received_mask(deltas, selection, avail, aux)
    deltas = _common.zero_unreceived(deltas, received)
    arrived = _common.scatter_mask(num_clients, selection.cohort, received)
    memory = _common.scatter_rows(state.memory, deltas, selection.cohort, received)
    lr_now = _common.client_lr(aux, num_clients)
    memory_lr = _common.memory_lr_after(state.memory_lr, lr_now, arrived)
    seen = state.seen | arrived
    weights = _common.client_weights(aux, weighting)
    if average_over == "seen":
      weights = jnp.where(seen, weights, 0.0)
    weights = _common.safe_divide(weights, weights.sum())
    weights = weights * (_common.lr_rescale(lr_now, memory_lr) * step_scale)
    update = _common.weighted_sum(weights, memory)
    new_state = MIFAState(memory=memory, rounds=state.rounds + 1, memory_lr=memory_lr, seen=seen)
    return update, new_state

  return Aggregator(init=init, apply=apply)
