"""Sin LogNormal (SLN): log-normal rates modulated by a sine wave over rounds, FedGS Table 1."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from fedjax_sel.availability.base import check_beta, check_period, time_varying_model
from fedjax_sel.availability.ln import lognormal_rates
from fedjax_sel.availability.registry import register
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey

SCHEDULES = ("paper", "reference_code")


def sin_factor(t: Array, period: int, schedule: str = "paper") -> Array:
  """The sine factor of round t, a value in [0.1, 0.9].

  ``"paper"``: 0.4 sin(2 pi (1 + t % T_p) / T_p) + 0.5 (the formula the FedGS authors'
  code documents). ``"reference_code"``: what that code computes, the (t % T_p)-th of T_p
  points of ``linspace(0, 2 pi, T_p)``, i.e. 0.4 sin(2 pi (t % T_p) / (T_p - 1)) + 0.5
  (0.5 when T_p = 1): the wave starts at 0.5 rising and its period holds both end points.
  """
  t = jnp.asarray(t)
  if schedule == "reference_code":
    phase = (t % period).astype(jnp.float32) / max(period - 1, 1)
  else:
    phase = (1 + t % period).astype(jnp.float32) / period
  return 0.4 * jnp.sin(2.0 * math.pi * phase) + 0.5


@register("sln")
def make_sln(
  beta: float = 0.5, period: int = 24, schedule: str = "paper", redraw_empty: bool = False
) -> AvailabilityModel:
  """p_k(t) = c_k / max_i c_i * (0.4 sin(2 pi (1 + t % T_p) / T_p) + 0.5).

  c_k ~ lognormal(0, ln 1/(1 - beta)) drawn once from the init key, as in ``ln``.
  Needs from ClientInfo: only N. Defaults: beta=0.5 (FedGS Table 2, SLN0.5), period=24
  (FLGo's T).

  Args:
    beta: unavailability coefficient in [0, 1).
    period: T_p, rounds per sine period (integer >= 1).
    schedule: "paper" (default) or "reference_code" (see ``sin_factor``).
    redraw_empty: draw the active set again while it is empty, as the FedGS authors'
      framework does for every mode (only SLN can come out empty among FedGS's data-free
      modes: the others give the top client rate 1). Default False: an empty round trains
      nobody, as in the paper's model.

  References:
    Wang et al., FedGS (AAAI 2023), Table 1 (Sin Log Normal, after Ribero et al. 2022).
  """
  beta = check_beta(beta)
  period = check_period(period)
  if not isinstance(schedule, str) or schedule not in SCHEDULES:
    raise ValueError(f"schedule={schedule!r}; allowed: {', '.join(SCHEDULES)}")
  if not isinstance(redraw_empty, (bool, np.bool_)):
    raise ValueError(f"redraw_empty={redraw_empty!r}; allowed: True, False")

  def rate(key: PRNGKey, info: ClientInfo) -> Array:
    return lognormal_rates(key, info.num_clients, beta)

  def probs_fn(base: Array, t: Array) -> Array:
    return base * sin_factor(t, period, schedule)

  return time_varying_model(rate, probs_fn, redraw_empty=bool(redraw_empty))
