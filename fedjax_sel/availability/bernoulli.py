"""Independent Bernoulli availability with fixed per-client probabilities (FedAR's set-up)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.availability.base import (
  bernoulli_draw,
  broadcast_to_clients,
  check_probability_array,
  fixed_rate_model,
)
from fedjax_sel.availability.markov import MarkovState, make_markov_from_init
from fedjax_sel.availability.registry import register
from fedjax_sel.core.registry import check_range
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey


@register("bernoulli")
def make_bernoulli(
  probs: object | None = None, p_min: float = 0.1, mean_absence: float | None = None
) -> AvailabilityModel:
  """Client i is active each round with a fixed probability p_i.

  Either ``probs`` gives p (a scalar for a homogeneous rate, or an array of length N),
  or, when ``probs`` is None, p_i ~ Uniform[p_min, 1] is drawn once from the init key,
  as in FedAR's experiments (p_min = 0.1 "challenging", 0.5 "mild").

  ``mean_absence=None`` (default): every round is an independent draw, so an absence lasts
  1 / p_i rounds on average (geometric). ``mean_absence=m``: the same p_i, but each client
  is an on/off chain (``markov``) whose stationary on-probability is p_i and whose absences
  are geometric with mean m rounds: P(off -> on) = 1 / m, P(on -> off) = (1 - p_i) /
  (p_i m). It gives FedAR's "most clients are inactive for 5-20 rounds, with a few
  clients being inactive for more than 40 rounds" (m = 10: 53 % of absences last 5-20
  rounds, 1.5 % over 40) at the same long-run rates. ``probs`` is then P(on | last round),
  the probability FedAvg-IS divides by.
  Needs from ClientInfo: only N.

  Args:
    probs: None, a scalar, or f32[N]; values in [0, 1] (in (0, 1] with ``mean_absence``).
    p_min: lower end of the uniform draw, in [0, 1]; ignored when ``probs`` is given.
    mean_absence: None, or the mean absence m >= 1 in rounds; m >= (1 - p) / p for the
      smallest p (P(on -> off) <= 1), i.e. m >= 9 at p_min = 0.1.

  References:
    Jiang et al., FedAR (2024), Sec. 6.1 "System Settings" (p_i from p_min to 1; absences
    of 5-20 rounds, a few over 40).
  """
  check_range("p_min", p_min, 0.0, 1.0)
  p_min = float(p_min)
  given = None if probs is None else check_probability_array("probs", probs)

  def rate(key: PRNGKey, info: ClientInfo) -> Array:
    if given is not None:
      return broadcast_to_clients("probs", given, info.num_clients)
    return jax.random.uniform(key, (info.num_clients,), jnp.float32, minval=p_min, maxval=1.0)

  if mean_absence is None:
    return fixed_rate_model(rate)
  check_range("mean_absence", mean_absence, 1.0, None)
  m = float(mean_absence)
  lowest = p_min if given is None else float(np.min(given))
  if lowest <= 0.0 or m < (1.0 - lowest) / lowest - 1e-9:
    allowed = "a smallest probability > 0" if lowest <= 0.0 else f">= {(1 - lowest) / lowest:.4g}"
    raise ValueError(
      f"mean_absence={mean_absence!r} is too short for a smallest availability probability of "
      f"{lowest:g} (P(on -> off) would exceed 1); allowed: {allowed}"
    )

  def init(key: PRNGKey, info: ClientInfo) -> MarkovState:
    p = jnp.asarray(rate(key, info), jnp.float32)  # the same p_i as without mean_absence
    to_on = jnp.full_like(p, 1.0 / m)
    to_off = jnp.minimum((1.0 - p) / (p * m), 1.0)
    return MarkovState(
      on=bernoulli_draw(jax.random.fold_in(key, 1), p), p_on_to_off=to_off, p_off_to_on=to_on
    )

  return make_markov_from_init(init)
