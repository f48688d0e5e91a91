"""LogNormal (LN): each client's fixed rate is a normalized log-normal draw, FedGS Table 1."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from fedjax_sel.availability.base import check_beta, fixed_rate_model
from fedjax_sel.availability.registry import register
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey


def lognormal_rates(key: PRNGKey, num_clients: int, beta: float) -> Array:
  """c_k ~ lognormal(0, sigma = ln(1 / (1 - beta))), p_k = c_k / max_i c_i.

  ``sigma`` is the standard deviation of log c_k (numpy's ``lognormal`` convention, as in
  FLGo). Computed as exp(sigma (z_k - max_i z_i)) with z ~ N(0, 1), which equals
  c_k / max_i c_i.

  Args:
    key: PRNG key for the draw (the availability init key).
    num_clients: N.
    beta: the unavailability coefficient in [0, 1); beta = 0 gives all rates 1.

  Returns:
    f32[N] rates in (0, 1], the largest equal to 1.
  """
  sigma = math.log(1.0 / (1.0 - beta))
  z = jax.random.normal(key, (num_clients,), jnp.float32)
  return jnp.exp(sigma * (z - jnp.max(z)))


@register("ln")
def make_ln(beta: float = 0.5) -> AvailabilityModel:
  """Each client active independently each round with a fixed log-normal rate.

  Needs from ClientInfo: only N; the rates come from the init key. Default beta=0.5 is
  FedGS's Table 2 setting (LN0.5).

  Args:
    beta: unavailability coefficient in [0, 1); larger beta spreads the rates lower.

  References:
    Wang et al., FedGS (AAAI 2023), Table 1 (Log Normal, after Ribero et al. 2022).
  """
  beta = check_beta(beta)

  def rate(key: PRNGKey, info: ClientInfo) -> Array:
    return lognormal_rates(key, info.num_clients, beta)

  return fixed_rate_model(rate)
