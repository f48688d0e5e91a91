"""LessDataFirst (LDF): clients with less data are more often active, FedGS Table 1."""

from __future__ import annotations

import jax.numpy as jnp

from fedjax_sel.availability.base import check_beta, fixed_rate_model
from fedjax_sel.availability.registry import register
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey


def ldf_rates(num_examples: Array, beta: float) -> Array:
  """p_k = n_k^-beta / max_i n_i^-beta = (min_i n_i / n_k)^beta.

  Args:
    num_examples: i32[N], data sizes n_k; a client with no data counts as n_k = 1.
    beta: the unavailability coefficient in [0, 1).

  Returns:
    f32[N] active rates in (0, 1], equal to 1 for the smallest client.
  """
  log_n = jnp.log(jnp.maximum(num_examples.astype(jnp.float32), 1.0))
  return jnp.exp(-beta * (log_n - jnp.min(log_n)))


@register("ldf")
def make_ldf(beta: float = 0.7) -> AvailabilityModel:
  """Each client active independently each round with rate n_k^-beta / max_i n_i^-beta.

  Needs from ClientInfo: ``num_examples`` (data sizes). The default beta=0.7 is FedGS's
  Table 2 setting (LDF0.7).

  Args:
    beta: unavailability coefficient in [0, 1); 0 gives full availability.

  References:
    Wang et al., FedGS (AAAI 2023), Table 1 (LessDataFirst) and App. C.
  """
  beta = check_beta(beta)

  def rate(key: PRNGKey, info: ClientInfo) -> Array:
    del key
    return ldf_rates(info.num_examples, beta)

  return fixed_rate_model(rate)
