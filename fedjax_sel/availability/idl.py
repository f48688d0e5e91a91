"""IDeaL (IDL): full client availability, FedGS Table 1 row 1."""

from __future__ import annotations

import jax.numpy as jnp

from fedjax_sel.availability.base import fixed_rate_model
from fedjax_sel.availability.registry import register
from fedjax_sel.core.types import AvailabilityModel, ClientInfo, PRNGKey


@register("idl")
def make_idl() -> AvailabilityModel:
  """Every client is active every round (active rate 1).

  Needs from ClientInfo: only N. The same behaviour as ``always``; kept under FedGS's
  name so experiment tables can say ``idl``.

  References:
    Wang et al., FedGS (AAAI 2023), Table 1 (IDeaL).
  """

  def rate(key: PRNGKey, info: ClientInfo):
    del key
    return jnp.ones((info.num_clients,), jnp.float32)

  return fixed_rate_model(rate)
