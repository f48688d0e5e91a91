"""YCycle (YC): periodic availability driven by the labels a client holds, FedGS Table 1."""

from __future__ import annotations

import jax.numpy as jnp

from fedjax_sel.availability.base import check_beta, check_period, time_varying_model
from fedjax_sel.availability.registry import register
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey

SCHEDULES = ("paper", "reference_code")
PAPER_PERIOD = 24  # Table 1 gives no T_p; FLGo's T for YC and SLN
REFERENCE_ROUNDS_PER_LABEL = 10  # the FedGS code's T = 10 x (number of labels)


def phase_label(t: Array, period: int, num_classes: int, schedule: str = "paper") -> Array:
  """The label whose bin holds round t's phase r = (1 + t % T_p) / T_p (C when none).

  ``"paper"`` (Table 1): bins [y / C, (y + 1) / C), so y = floor(r C) and r = 1 (the last
  round of a period) lies in no bin. ``"reference_code"`` (the FedGS authors' systemic
  simulator): bins (y / C, (y + 1) / C], so y = ceil(r C) - 1, every round has a label.
  Both in integer arithmetic, so the bin edges are exact.
  """
  s = 1 + t % period
  if schedule == "reference_code":
    return (s * num_classes - 1) // period
  return (s * num_classes) // period  # C when r = 1: no label


def yc_probs(held: Array, t: Array, beta: float, period: int, schedule: str = "paper") -> Array:
  """p_k(t) = beta * I(U_{y in Y_k} (1 + t % T_p) / T_p in bin(y)) + 1 - beta.

  Args:
    held: bool[N, C], whether client k holds label y (num_Y = C).
    t: i32[], the round index.
    beta: the unavailability coefficient in [0, 1).
    period: T_p, the period in rounds.
    schedule: which bins (see ``phase_label``).

  Returns:
    f32[N], 1 for clients holding this phase's label, 1 - beta for the others.
  """
  num_classes = held.shape[1]
  label = phase_label(t, period, num_classes, schedule)
  boosted = jnp.any(held & (jnp.arange(num_classes) == label)[None, :], axis=1)
  return beta * boosted.astype(jnp.float32) + (1.0 - beta)


@register("yc")
def make_yc(
  beta: float = 0.9, period: int | None = None, schedule: str = "paper"
) -> AvailabilityModel:
  """Clients are boosted to rate 1 while the cycle's phase falls on one of their labels.

  Needs from ClientInfo: ``label_counts`` (which labels each client holds; num_Y = C).
  ``schedule="paper"`` (default) follows Table 1: label bins [y/C, (y+1)/C), period 24
  (FLGo's T; the paper gives none), so the last round of a period boosts nobody.
  ``schedule="reference_code"`` is the FedGS authors' systemic simulator (``YCycle``):
  period T = 10 C (100 rounds on 10 classes) and bins (y/C, (y+1)/C], i.e. label y is
  boosted in rounds t % T in [10 y, 10 y + 9]. See BUILD_NOTES.md (availability).

  Args:
    beta: unavailability coefficient in [0, 1); 0 gives full availability. Default 0.9
      (FedGS Table 2, YC0.9).
    period: T_p, rounds per cycle (integer >= 1); None = the schedule's own (24 for
      ``paper``, 10 x the number of classes for ``reference_code``).
    schedule: ``"paper"`` or ``"reference_code"`` (see ``phase_label``).

  References:
    Wang et al., FedGS (AAAI 2023), Table 1 (YCycle); WwZzz/FedGS,
    utils/systemic_simulator.py (``YCycle``).
  """
  beta = check_beta(beta)
  if period is not None:
    period = check_period(period)
  if not isinstance(schedule, str) or schedule not in SCHEDULES:
    raise ValueError(f"schedule={schedule!r}; allowed: {', '.join(SCHEDULES)}")

  def periods(num_classes: int) -> int:
    if period is not None:
      return period
    return PAPER_PERIOD if schedule == "paper" else REFERENCE_ROUNDS_PER_LABEL * num_classes

  def held_labels(key: PRNGKey, info: ClientInfo) -> Array:
    del key
    return info.label_counts > 0

  def probs_fn(held: Array, t: Array) -> Array:
    return yc_probs(held, t, beta, periods(held.shape[1]), schedule)

  return time_varying_model(held_labels, probs_fn)
