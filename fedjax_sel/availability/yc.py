"""YCycle (YC): periodic availability driven by the labels a client holds, FedGS Table 1."""

from __future__ import annotations

import jax.numpy as jnp

from fedjax_sel.availability.base import check_beta, check_period, time_varying_model
from fedjax_sel.availability.registry import register
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey


def yc_probs(held: Array, t: Array, beta: float, period: int) -> Array:
  """p_k(t) = beta * I(U_{y in Y_k} (1 + t % T_p) / T_p in [y / C, (y + 1) / C)) + 1 - beta.

  The phase r = (1 + t % T_p) / T_p lies in exactly one bin [y / C, (y + 1) / C), namely
  y = floor(r C), or in none when r = 1 (t % T_p = T_p - 1); the bin is found in integer
  arithmetic, ``((1 + t % T_p) * C) // T_p``, so bin edges are exact.

  Args:
    held: bool[N, C], whether client k holds label y (num_Y = C).
    t: i32[], the round index.
    beta: the unavailability coefficient in [0, 1).
    period: T_p, the period in rounds.

  Returns:
    f32[N], 1 for clients holding this phase's label, 1 - beta for the others.
  """
  num_classes = held.shape[1]
  phase_label = ((1 + t % period) * num_classes) // period  # C when r = 1: no label
  boosted = jnp.any(held & (jnp.arange(num_classes) == phase_label)[None, :], axis=1)
  return beta * boosted.astype(jnp.float32) + (1.0 - beta)


@register("yc")
def make_yc(beta: float = 0.9, period: int = 24) -> AvailabilityModel:
  """Clients are boosted to rate 1 while the cycle's phase falls on one of their labels.

  Needs from ClientInfo: ``label_counts`` (which labels each client holds; num_Y = C).
  Follows Table 1 exactly (label bins [y/C, (y+1)/C)); FLGo's code instead boosts a
  client while the phase lies in [min_label/max_label, max_label/max_label] -- see
  BUILD_NOTES.md (availability). Defaults: beta=0.9 (FedGS Table 2, YC0.9), period=24 (FLGo's T).

  Args:
    beta: unavailability coefficient in [0, 1); 0 gives full availability.
    period: T_p, rounds per cycle (integer >= 1).

  References:
    Wang et al., FedGS (AAAI 2023), Table 1 (YCycle).
  """
  beta = check_beta(beta)
  period = check_period(period)

  def held_labels(key: PRNGKey, info: ClientInfo) -> Array:
    del key
    return info.label_counts > 0

  def probs_fn(held: Array, t: Array) -> Array:
    return yc_probs(held, t, beta, period)

  return time_varying_model(held_labels, probs_fn)
