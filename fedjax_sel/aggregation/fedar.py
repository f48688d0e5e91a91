"""FedAR: local update approximation (memory) and rectification (staleness weights)."""

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

CUTOFFS = ("convex", "nonconvex", "none")


class FedARState(NamedTuple):
  """FedAR's server memory.

  Attributes:
    memory: pytree of [N, ...], each client's latest received update D_i = -eta_i G_i
      (local minus global params, zeros if never seen); G_i = -D_i / memory_lr_i.
    staleness: i32[N], tau(i, t): rounds since the client's update last arrived (Eq. 5).
    seen: bool[N], the paper's "temporary client set E" (clients that ever answered).
    num_contributing: f32[], N_t of the last round (diagnostic).
    rounds: i32[], how many times ``apply`` ran.
    memory_lr: f32[N], eta_i, the client lr each memory row was trained with (1 if never
      seen).
  """

  memory: PyTree
  staleness: Array
  seen: Array
  num_contributing: Array
  rounds: Array
  memory_lr: Array


def staleness_cutoff(
  t: Array,
  cutoff: str = "convex",
  t0: float = 10.0,
  b: float = 4.0,
  scale: float = 1.0,
) -> Array:
  """g(t), the staleness at and above which an update is dropped (FedAR Eq. 6).

  Args:
    t: i32[] or f32[...], the paper's 1-based round number.
    cutoff: "convex" (Theorem 1: ``g(t) = t0 + t / b``), "nonconvex" (Theorem 2:
      ``g(t) = scale * max(sqrt(t), sqrt(t0))``, where the paper's scale is
      ``(1/4) sqrt(L / ((L^2 + beta lambda N) K N))``, problem constants we cannot know) or
      "none" (g = inf, nothing is dropped).
    t0: the constant t0 > 0 of both forms.
    b: the slope divisor b > 2 of the convex form.
    scale: the constant factor of the non-convex form.

  Returns:
    f32 with the shape of t.

  References:
    Jiang et al., "FedAR", Theorems 1 and 2 (definitions of g(t)).
  """
  t = jnp.asarray(t, jnp.float32)
  if cutoff == "convex":
    return t0 + t / b
  if cutoff == "nonconvex":
    return scale * jnp.sqrt(jnp.maximum(t, t0))
  if cutoff == "none":
    return jnp.full_like(t, jnp.inf)
  raise ValueError(f"cutoff={cutoff!r} is not allowed; allowed: {list(CUTOFFS)}")


def staleness_weight(
  tau: Array,
  t: Array,
  rho: float = 0.1,
  cutoff: str = "convex",
  t0: float = 10.0,
  b: float = 4.0,
  scale: float = 1.0,
  psi_max: float = 2.0,
) -> Array:
  """psi_{i,t} = 0 if tau >= g(t) else min((tau + 1)^rho, psi_max)  (FedAR Eq. 6).

  Args:
    tau: i32[...] or f32[...], staleness tau(i, t) (0 for a client that answered at t).
    t: the paper's 1-based round number (scalar or broadcastable to tau).
    rho: exponent in [0, 1]; the paper's experiments use 0.1.
    cutoff, t0, b, scale: the form and constants of g(t), see ``staleness_cutoff``.
    psi_max: the cap, 2 in the paper (needed by its convergence proof).

  Returns:
    f32 with the broadcast shape of tau and t.

  References:
    Jiang et al., "FedAR", Eq. (6).
  """
  tau = jnp.asarray(tau, jnp.float32)
  g = staleness_cutoff(t, cutoff, t0, b, scale)
  psi = jnp.minimum(jnp.power(tau + 1.0, rho), psi_max)
  return jnp.where(tau >= g, 0.0, psi)


@register("fedar")
def make_fedar(
  rho: float = 0.1,
  cutoff: str = "convex",
  t0: float = 10.0,
  b: float = 4.0,
  scale: float = 1.0,
  psi_max: float = 2.0,
  weighting: str = "uniform",
) -> Aggregator:
  """FedAR: ``w <- w - eta / N_t * sum_i psi_{i,t} G_i[t]``  (Eq. 7, Algorithm 1).

  Mapping to delta space: the paper's G_i = (w_t - w^i_{t,K}) / eta_t is a gradient-like
  quantity (Eq. 4), so a client that trained with lr eta_i sent ``delta_i = -eta_i G_i``
  (local minus global params). The memory keeps G_i as the pair (D_i, eta_i) of its latest
  delta and lr (``memory_lr``), and this aggregator returns ``update = -(eta_t / N_t) sum_i
  psi_{i,t} G_i = (1/N_t) sum_i psi_{i,t} (eta_t / eta_i) D_i`` with eta_t this round's lr
  (``aux.lr``); with server_lr = 1 the server step is exactly Eq. 7 under any lr schedule.
  Under a constant lr eta_t / eta_i = 1 exactly. Without ``aux.lr`` every eta is 1.

  Each round: D_i <- delta_i and tau(i,t) = 0 for clients whose update arrived, tau(i,t) =
  tau(i,t-1) + 1 for the others (Eq. 4-5; tau starts at 0); psi by Eq. 6 with the paper's
  1-based round ``t + 1``; N_t = number of clients that ever answered (the set E) and have
  psi > 0. Clients never seen have D_i = 0 and are not counted. With
  ``weighting="num_examples"`` every term is also weighted by n_i and N_t becomes the sum of
  n_i over contributing clients. Under full availability every psi is 1 and N_t = N, so
  FedAR equals MIFA and FedAvg with 1/N weights. Memory: O(N * P), a pytree of [N, ...]
  arrays.

  The paper does not give t0, b or the non-convex constant used in its experiments; our
  defaults (convex g, t0 = 10, b = 4) drop updates staler than 10 + t/4 rounds.

  Args:
    rho: exponent of Eq. 6 in [0, 1] (paper: 0.1).
    cutoff: "convex", "nonconvex" or "none", the form of g(t) (see ``staleness_cutoff``).
    t0: g's constant, > 0.
    b: the convex g's slope divisor, > 2.
    scale: the non-convex g's constant factor, > 0.
    psi_max: cap of psi, >= 1 (paper: 2).
    weighting: "uniform" (the paper) or "num_examples".

  References:
    Jiang et al., "FedAR: Addressing Client Unavailability in Federated Learning with Local
    Update Approximation and Rectification", Eq. (4)-(7), Algorithm 1, Theorems 1-2.
  """
  check_range("rho", rho, 0.0, 1.0)
  if cutoff not in CUTOFFS:
    raise ValueError(f"cutoff={cutoff!r} is not allowed; allowed: {list(CUTOFFS)}")
  check_range("t0", t0, 0.0, None, low_inclusive=False)
  check_range("b", b, 2.0, None, low_inclusive=False)
  check_range("scale", scale, 0.0, None, low_inclusive=False)
  check_range("psi_max", psi_max, 1.0, None)
  _common.check_weighting(weighting)

  def init(params: Params, info: ClientInfo) -> FedARState:
    num_clients = info.num_clients
    return FedARState(
      memory=_common.zeros_memory(params, num_clients),
      staleness=jnp.zeros((num_clients,), jnp.int32),
      seen=jnp.zeros((num_clients,), bool),
      num_contributing=jnp.zeros((), jnp.float32),
      rounds=jnp.zeros((), jnp.int32),
      memory_lr=jnp.ones((num_clients,), jnp.float32),
    )

  def apply(
    state: FedARState,
    deltas: PyTree,
    selection: Selection,
    avail: Array,
    t: Array,
    aux: AggregationAux | None = None,
  ) -> tuple[Params, FedARState]:
    """One aggregation.

    Args:
      state: FedARState.
      deltas: pytree of [M, ...], local params minus global params per cohort slot.
      selection: Selection(cohort i32[M], valid bool[M], weights f32[M]).
      avail: bool[N], who could answer this round.
      t: i32[], the 0-based round index (the paper's round is t + 1).
      aux: AggregationAux or None.

    Returns:
      (update shaped like params, new state).
    """
    num_clients = avail.shape[0]
    aux = _common.resolve_aux(aux, avail, selection)
    received = _common.received_mask(deltas, selection, avail, aux)
    deltas = _common.zero_unreceived(deltas, received)
    arrived = _common.scatter_mask(num_clients, selection.cohort, received)
    memory = _common.scatter_rows(state.memory, deltas, selection.cohort, received)
    lr_now = _common.client_lr(aux, num_clients)
    memory_lr = _common.memory_lr_after(state.memory_lr, lr_now, arrived)
    staleness = jnp.where(arrived, 0, state.staleness + 1)
    seen = state.seen | arrived
    psi = staleness_weight(staleness, jnp.asarray(t) + 1, rho, cutoff, t0, b, scale, psi_max)
    contributing = seen & (psi > 0)
    client_q = _common.client_weights(aux, weighting)
    num_contributing = jnp.where(contributing, client_q, 0.0).sum()
    weights = _common.safe_divide(jnp.where(contributing, psi * client_q, 0.0), num_contributing)
    weights = weights * _common.lr_rescale(lr_now, memory_lr)  # eta_t G_i = (eta_t/eta_i) D_i
    update = _common.weighted_sum(weights, memory)
    new_state = FedARState(
      memory=memory,
      staleness=staleness,
      seen=seen,
      num_contributing=num_contributing,
      rounds=state.rounds + 1,
      memory_lr=memory_lr,
    )
    return update, new_state

  return Aggregator(init=init, apply=apply)
