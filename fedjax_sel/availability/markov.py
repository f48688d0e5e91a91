"""Two-state (on/off) Markov availability per client."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from fedjax_sel.availability.base import (
  bernoulli_draw,
  broadcast_to_clients,
  check_probability_array,
)
from fedjax_sel.availability.registry import register
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

  def probs(state: MarkovState, t: Array) -> Array:
    del t
    return jnp.where(state.on, 1.0 - state.p_on_to_off, state.p_off_to_on)

  def sample(state: MarkovState, key: PRNGKey, t: Array) -> tuple[Array, MarkovState]:
    on = bernoulli_draw(key, probs(state, t))
    return on, state._replace(on=on)

  return AvailabilityModel(init=init, probs=probs, sample=sample)
