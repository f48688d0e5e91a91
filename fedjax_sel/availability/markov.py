"""Two-state (on/off) Markov availability per client."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.availability.base import (
  bernoulli_draw,
  broadcast_to_clients,
  check_probability_array,
)
from fedjax_sel.availability.registry import register
from fedjax_sel.core.registry import check_range, is_integer, is_traced
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey

_INITIAL = ("stationary", "on", "off")


class MarkovState(NamedTuple):
  """State of the on/off chains.

  Attributes:
    on: bool[N], whether each client was on in the previous round (or initially).
    p_on_to_off: f32[N], P(off at t | on at t - 1).
    p_off_to_on: f32[N], P(on at t | off at t - 1).
  """

  on: Array
  p_on_to_off: Array
  p_off_to_on: Array


def stationary_on(p_on_to_off: Array, p_off_to_on: Array) -> Array:
  """The chain's stationary probability of being on: p_off_to_on / (p_on_to_off + p_off_to_on)."""
  return p_off_to_on / (p_on_to_off + p_off_to_on)


@register("markov")
def make_markov(
  p_on_to_off: object = 0.2, p_off_to_on: object = 0.3, initial: str = "stationary"
) -> AvailabilityModel:
  """Each client is an independent two-state chain: on -> off w.p. p_on_to_off, off -> on
  w.p. p_off_to_on, once per round.

  ``probs(state, t)`` is the probability of being on this round given last round's state:
  ``1 - p_on_to_off`` for clients that were on, ``p_off_to_on`` for those that were off.
  The long-run on-frequency is p_off_to_on / (p_on_to_off + p_off_to_on).
  Needs from ClientInfo: only N.

  Args:
    p_on_to_off: scalar or f32[N] in [0, 1].
    p_off_to_on: scalar or f32[N] in [0, 1]; p_on_to_off + p_off_to_on must be > 0.
    initial: the state before round 0: "stationary" (drawn from the stationary law with
      the init key), "on" or "off".

  References:
    Two-state (Gilbert-Elliott) on/off chain, as used for intermittent availability in
    e.g. Ribero et al. (2022); stationary law of a two-state Markov chain.
  """
  to_off = check_probability_array("p_on_to_off", p_on_to_off)
  to_on = check_probability_array("p_off_to_on", p_off_to_on)
  try:
    total = np.add(to_off, to_on)
  except ValueError:
    raise ValueError(
      f"p_on_to_off (shape {to_off.shape}) and p_off_to_on (shape {to_on.shape}) "
      "must have the same length"
    ) from None
  if np.any(total <= 0):
    raise ValueError(
      f"p_on_to_off + p_off_to_on must be > 0; got p_on_to_off={p_on_to_off!r}, "
      f"p_off_to_on={p_off_to_on!r}"
    )
  if initial not in _INITIAL:
    raise ValueError(f"initial={initial!r} is not allowed; allowed: {list(_INITIAL)}")

  def init(key: PRNGKey, info: ClientInfo) -> MarkovState:
    n = info.num_clients
    p10 = broadcast_to_clients("p_on_to_off", to_off, n)
    p01 = broadcast_to_clients("p_off_to_on", to_on, n)
    if initial == "stationary":
      on = bernoulli_draw(key, stationary_on(p10, p01))
    else:
      on = jnp.full((n,), initial == "on")
    return MarkovState(on=on, p_on_to_off=p10, p_off_to_on=p01)

  return make_markov_from_init(init)


def make_markov_from_init(init) -> AvailabilityModel:
  """The on/off chains' model with a given ``init(key, info) -> MarkovState``."""
  return AvailabilityModel(init=init, probs=_probs, sample=_sample)


def _probs(state: MarkovState, t: Array) -> Array:
  """P(on this round | last round's state)."""
  del t
  return jnp.where(state.on, 1.0 - state.p_on_to_off, state.p_off_to_on)


def _sample(state: MarkovState, key: PRNGKey, t: Array) -> tuple[Array, MarkovState]:
  on = bernoulli_draw(key, _probs(state, t))
  return on, state._replace(on=on)


def dropout_transitions(dropout_rate, mean_absence):
  """(p_on_to_off, p_off_to_on) of the chain with stationary off-probability ``dropout_rate``
  and mean absence ``mean_absence`` rounds.

  An absence is a run of off rounds; it ends each round w.p. q = p_off_to_on, so its length
  is geometric with mean 1 / q: q = 1 / mean_absence. The stationary off-probability is
  p / (p + q) with p = p_on_to_off; setting it to alpha gives p = alpha q / (1 - alpha) =
  alpha / ((1 - alpha) mean_absence), and the mean presence 1 / p = mean_absence (1 - alpha)
  / alpha. Works on floats and traced scalars.
  """
  to_on = 1.0 / mean_absence
  return dropout_rate * to_on / (1.0 - dropout_rate), to_on


@register("markov_dropout")
def make_markov_dropout(
  dropout_rate: float = 0.5,
  mean_absence: float = 10.0,
  initial: str = "stationary",
  keep_per_cluster: int | None = None,
) -> AvailabilityModel:
  """``markov`` parametrised by its dropout ratio and mean absence: persistent dropout.

  Every client is an independent on/off chain (``make_markov``) with stationary
  off-probability ``dropout_rate`` (FL-FDMS's dropout ratio alpha, reached on average: the
  number of dropped clients varies from round to round) and absences of geometric length
  with mean ``mean_absence`` rounds (``dropout_transitions``). By default no client is
  protected, so a whole cluster can be away at once (FL-FDMS's Assumption 5 is a device of
  its analysis, "relaxed" in its App. B, and not a property of its experiments' dropout).

  ``keep_per_cluster=G`` imposes Assumption 5 (a diagnostic): clients form G contiguous
  clusters (as ``cluster_dropout``), and in a round where every chain of a cluster is off,
  one of its clients, uniformly chosen, answers anyway. The chains themselves are unchanged
  (the same draws as without the option), so only those rounds differ. ``probs`` is then
  P(on) + P(the whole cluster off) / cluster size. Needs from ClientInfo: only N.

  Args:
    dropout_rate: alpha in [0, 1).
    mean_absence: mean length of an absence in rounds, >= 1 and >= alpha / (1 - alpha) (a
      shorter one would need P(on -> off) > 1).
    initial: "stationary" (the state before round 0 drawn from the stationary law), "on"
      or "off".
    keep_per_cluster: None, or the number of contiguous clusters G >= 1 that each keep one
      active client (at most N).

  References:
    Wang & Xu, FL-FDMS, Sec. 3 (dropout ratio alpha) and Sec. 6 (Stale fails when "individual
    clients have few participating opportunities"); two-state Markov chain: stationary law
    p / (p + q), sojourn times geometric with means 1 / p (on) and 1 / q (off).
  """
  check_range("dropout_rate", dropout_rate, 0.0, 1.0, high_inclusive=False)
  check_range("mean_absence", mean_absence, 1.0, None)
  if initial not in _INITIAL:
    raise ValueError(f"initial={initial!r} is not allowed; allowed: {list(_INITIAL)}")
  if not (is_traced(dropout_rate) or is_traced(mean_absence)):
    shortest = float(dropout_rate) / (1.0 - float(dropout_rate))
    if float(mean_absence) < shortest:
      raise ValueError(
        f"mean_absence={mean_absence!r} is too short for dropout_rate={dropout_rate!r} "
        f"(P(on -> off) would exceed 1); allowed: mean_absence >= {shortest:.4g}"
      )
    dropout_rate, mean_absence = float(dropout_rate), float(mean_absence)
  if keep_per_cluster is not None and (not is_integer(keep_per_cluster) or keep_per_cluster < 1):
    raise ValueError(
      f"keep_per_cluster={keep_per_cluster!r} is out of range; allowed: None or integers >= 1"
    )

  def init(key: PRNGKey, info: ClientInfo) -> MarkovState:
    n = info.num_clients
    if keep_per_cluster is not None and keep_per_cluster > n:
      raise ValueError(f"keep_per_cluster={keep_per_cluster} exceeds the number of clients {n}")
    to_off, to_on = dropout_transitions(
      jnp.asarray(dropout_rate, jnp.float32), jnp.asarray(mean_absence, jnp.float32)
    )
    p10 = jnp.full((n,), jnp.minimum(to_off, 1.0), jnp.float32)
    p01 = jnp.full((n,), to_on, jnp.float32)
    if initial == "stationary":
      on = bernoulli_draw(key, stationary_on(p10, p01))
    else:
      on = jnp.full((n,), initial == "on")
    return MarkovState(on=on, p_on_to_off=p10, p_off_to_on=p01)

  if keep_per_cluster is None:
    return make_markov_from_init(init)
  num_clusters = int(keep_per_cluster)

  def cluster_ids(n: int) -> Array:
    return jnp.asarray((np.arange(n) * num_clusters) // n, jnp.int32)

  def probs(state: MarkovState, t: Array) -> Array:
    on = _probs(state, t)
    ids = cluster_ids(on.shape[0])
    all_off = jax.ops.segment_prod(1.0 - on, ids, num_segments=num_clusters)
    size = jax.ops.segment_sum(jnp.ones_like(on), ids, num_segments=num_clusters)
    return jnp.minimum(on + (all_off / size)[ids], 1.0)

  def sample(state: MarkovState, key: PRNGKey, t: Array) -> tuple[Array, MarkovState]:
    on, state = _sample(state, key, t)
    ids = cluster_ids(on.shape[0])
    score = jax.random.uniform(jax.random.fold_in(key, 1), on.shape, jnp.float32)
    chosen = score >= jax.ops.segment_max(score, ids, num_segments=num_clusters)[ids]
    cluster_on = jax.ops.segment_max(on.astype(jnp.int32), ids, num_segments=num_clusters) > 0
    return on | (chosen & ~cluster_on[ids]), state

  return AvailabilityModel(init=init, probs=probs, sample=sample)
