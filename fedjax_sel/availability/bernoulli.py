"""Independent Bernoulli availability with fixed per-client probabilities (FedAR's set-up)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_sel.availability.base import (
  broadcast_to_clients,
  check_probability_array,
  fixed_rate_model,
)
from fedjax_sel.availability.registry import register
from fedjax_sel.core.registry import check_range
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey


@register("bernoulli")
def make_bernoulli(probs: object | None = None, p_min: float = 0.1) -> AvailabilityModel:
  """Client i is active each round independently with a fixed probability p_i.

  Either ``probs`` gives p (a scalar for a homogeneous rate, or an array of length N),
  or, when ``probs`` is None, p_i ~ Uniform[p_min, 1] is drawn once from the init key,
  as in FedAR's experiments (p_min = 0.1 "challenging", 0.5 "mild").
  Needs from ClientInfo: only N.

  Args:
    probs: None, a scalar, or f32[N]; values in [0, 1].
    p_min: lower end of the uniform draw, in [0, 1]; ignored when ``probs`` is given.

  References:
    Jiang et al., FedAR (2024), Sec. 5 "System Settings" (p_i from p_min to 1).
  """
  check_range("p_min", p_min, 0.0, 1.0)
  p_min = float(p_min)
  given = None if probs is None else check_probability_array("probs", probs)

  def rate(key: PRNGKey, info: ClientInfo) -> Array:
    if given is not None:
      return broadcast_to_clients("probs", given, info.num_clients)
    return jax.random.uniform(key, (info.num_clients,), jnp.float32, minval=p_min, maxval=1.0)

  return fixed_rate_model(rate)
