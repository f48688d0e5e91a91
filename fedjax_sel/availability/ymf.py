"""YMaxFirst (YMF): clients holding only large label values are more often active."""

from __future__ import annotations

import jax.numpy as jnp

from fedjax_sel.availability.base import check_beta, fixed_rate_model
from fedjax_sel.availability.registry import register
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey


def ymf_rates(label_counts: Array, beta: float) -> Array:
  """p_k = beta * min_i{y_ki} / max_{c,j}{y_cj} + (1 - beta).

  Label values are class indices 0..C-1; client k holds label y when
  ``label_counts[k, y] > 0``. The denominator is the largest label held by any client
  (C - 1 when every class occurs), floored at 1; a client with no data gets min label 0.

  Args:
    label_counts: i32[N, C], examples of each class held by each client.
    beta: the unavailability coefficient in [0, 1).

  Returns:
    f32[N] active rates in [1 - beta, 1].
  """
  held = label_counts > 0
  num_classes = label_counts.shape[1]
  min_label = jnp.argmax(held, axis=1).astype(jnp.float32)  # first held label; 0 if none
  any_held = jnp.any(held, axis=0)
  max_label = (num_classes - 1 - jnp.argmax(any_held[::-1])).astype(jnp.float32)
  max_label = jnp.where(jnp.any(any_held), max_label, 0.0)
  return beta * min_label / jnp.maximum(max_label, 1.0) + (1.0 - beta)


@register("ymf")
def make_ymf(beta: float = 0.9) -> AvailabilityModel:
  """Each client active independently each round with rate beta*min(y_k)/max(y) + 1 - beta.

  Needs from ClientInfo: ``label_counts`` (which labels each client holds). The default
  beta=0.9 is FedGS's Table 2 setting (YMF0.9).

  Args:
    beta: unavailability coefficient in [0, 1); 0 gives full availability.

  References:
    Wang et al., FedGS (AAAI 2023), Table 1 (YMaxFirst, after Gu et al. 2021, MIFA).
  """
  beta = check_beta(beta)

  def rate(key: PRNGKey, info: ClientInfo) -> Array:
    del key
    return ymf_rates(info.label_counts, beta)

  return fixed_rate_model(rate)
