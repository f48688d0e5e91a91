"""Always available: every client answers every round (the "Full" oracle baselines)."""

from __future__ import annotations

import jax.numpy as jnp

from fedjax_sel.availability.base import fixed_rate_model
from fedjax_sel.availability.registry import register
from fedjax_sel.core.types import AvailabilityModel, ClientInfo, PRNGKey


@register("always")
def make_always() -> AvailabilityModel:
  """Every client is active every round (probability 1, ``sample`` is all True).

  Needs from ClientInfo: only N. Used for the "Full participation" oracle baselines
  (FL-FDMS Sec. 6 "Full"; FedAR's "FedAvg with all clients continuously available").

  References:
    Wang et al., FL-FDMS (2022), Sec. 6 (Full Participation).
  """

  def rate(key: PRNGKey, info: ClientInfo):
    del key
    return jnp.ones((info.num_clients,), jnp.float32)

  return fixed_rate_model(rate)
