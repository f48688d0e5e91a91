"""Sin LogNormal (SLN): log-normal rates modulated by a sine wave over rounds, FedGS Table 1."""

from __future__ import annotations

import math

import jax.numpy as jnp

from fedjax_sel.availability.base import check_beta, check_period, time_varying_model
from fedjax_sel.availability.ln import lognormal_rates
from fedjax_sel.availability.registry import register
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey


def sin_factor(t: Array, period: int) -> Array:
  """0.4 sin(2 pi (1 + t % T_p) / T_p) + 0.5, a value in [0.1, 0.9]."""
  phase = (1 + t % period).astype(jnp.float32) / period
  return 0.4 * jnp.sin(2.0 * math.pi * phase) + 0.5


@register("sln")
def make_sln(beta: float = 0.5, period: int = 24) -> AvailabilityModel:
  """p_k(t) = c_k / max_i c_i * (0.4 sin(2 pi (1 + t % T_p) / T_p) + 0.5).

  c_k ~ lognormal(0, ln 1/(1 - beta)) drawn once from the init key, as in ``ln``.
  Needs from ClientInfo: only N. Defaults: beta=0.5 (FedGS Table 2, SLN0.5), period=24
  (FLGo's T).

  Args:
    beta: unavailability coefficient in [0, 1).
    period: T_p, rounds per sine period (integer >= 1).

  References:
    Wang et al., FedGS (AAAI 2023), Table 1 (Sin Log Normal, after Ribero et al. 2022).
  """
  beta = check_beta(beta)
  period = check_period(period)

  def rate(key: PRNGKey, info: ClientInfo) -> Array:
    return lognormal_rates(key, info.num_clients, beta)

  def probs_fn(base: Array, t: Array) -> Array:
    return base * sin_factor(t, period)

  return time_varying_model(rate, probs_fn)
