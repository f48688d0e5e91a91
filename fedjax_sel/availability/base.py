"""Helpers shared by the availability models: fixed-rate state, Bernoulli draws, checks.

Seed convention (FedGS App. C: "an independent random seed ... promises that the active
states of clients will remain unchanged when running different methods"): availability
has its own key, never shared with training or selection. The round loop does

    init_key, round_key = jax.random.split(availability_key)
    state = model.init(init_key, info)
    # round t:
    avail_probs = model.probs(state, t)                  # for ctx / aggregation
    avail, state = model.sample(state, jax.random.fold_in(round_key, t), t)

``sample`` depends only on ``(state, key, t)``; the state evolves only through
``sample``, so every selection method sees the same ``avail`` sequence for the same
availability seed. ``rollout.rollout`` implements exactly this loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.core.registry import check_count, check_range, is_traced
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey


class RateState(NamedTuple):
  """State of a model whose per-client rate is fixed after ``init``.

  Attributes:
    rate: f32[N], each client's active probability (or, for the time-varying FedGS
      modes, its time-independent factor).
  """

  rate: Array


def bernoulli_draw(key: PRNGKey, probs: Array) -> Array:
  """Independent Bernoulli draws: client i active with probability probs[i].

  Args:
    key: a PRNG key.
    probs: f32[N], probabilities in [0, 1].

  Returns:
    bool[N]; ``uniform[0, 1) < probs``, so probability 1 is always and 0 never active.
  """
  return jax.random.uniform(key, probs.shape, jnp.float32) < probs


MAX_REDRAWS = 1000


def bernoulli_draw_nonempty(key: PRNGKey, probs: Array) -> Array:
  """``bernoulli_draw`` repeated until at least one client is active.

  The FedGS authors' framework draws every client's activity again while nobody is active,
  i.e. it samples the Bernoulli vector conditioned on being non-empty. Draw i uses
  ``fold_in(key, i)`` (draw 0 equals ``bernoulli_draw(fold_in(key, 0), probs)``). Stops after
  ``MAX_REDRAWS`` draws, or at once when every probability is 0 (an empty set is then
  certain), returning the last draw.
  """
  possible = jnp.any(probs > 0)

  def cond(carry):
    i, active = carry
    return possible & ~jnp.any(active) & (i < MAX_REDRAWS)

  def body(carry):
    i, _ = carry
    return i + 1, bernoulli_draw(jax.random.fold_in(key, i), probs)

  first = bernoulli_draw(jax.random.fold_in(key, 0), probs)
  return jax.lax.while_loop(cond, body, (jnp.int32(1), first))[1]


def round_index(t: Array | int) -> Array:
  """The round index as an i32[] array (accepts Python ints and traced scalars)."""
  return jnp.asarray(t, jnp.int32)


def fixed_rate_model(
  rate_fn: Callable[[PRNGKey, ClientInfo], Array],
) -> AvailabilityModel:
  """A model with time-independent rates, each client an independent Bernoulli per round.

  Args:
    rate_fn: ``(key, info) -> f32[N]``, each client's active probability.

  Returns:
    An ``AvailabilityModel`` whose state is ``RateState(rate)``.
  """

  def init(key: PRNGKey, info: ClientInfo) -> RateState:
    return RateState(rate=jnp.asarray(rate_fn(key, info), jnp.float32))

  def probs(state: RateState, t: Array) -> Array:
    del t
    return state.rate

  def sample(state: RateState, key: PRNGKey, t: Array) -> tuple[Array, RateState]:
    del t
    return bernoulli_draw(key, state.rate), state

  return AvailabilityModel(init=init, probs=probs, sample=sample)


def time_varying_model(
  rate_fn: Callable[[PRNGKey, ClientInfo], Array],
  probs_fn: Callable[[Array, Array], Array],
  redraw_empty: bool = False,
) -> AvailabilityModel:
  """A model whose rates depend on a fixed per-client factor and the round index.

  Args:
    rate_fn: ``(key, info) -> f32[N]`` (or any array with leading axis N), computed once.
    probs_fn: ``(rate, t) -> f32[N]``, this round's active probabilities.
    redraw_empty: draw again while no client is active (``bernoulli_draw_nonempty``).

  Returns:
    An ``AvailabilityModel`` whose state is ``RateState(rate)``.
  """

  def init(key: PRNGKey, info: ClientInfo) -> RateState:
    return RateState(rate=jnp.asarray(rate_fn(key, info)))

  def probs(state: RateState, t: Array) -> Array:
    return probs_fn(state.rate, round_index(t)).astype(jnp.float32)

  draw = bernoulli_draw_nonempty if redraw_empty else bernoulli_draw

  def sample(state: RateState, key: PRNGKey, t: Array) -> tuple[Array, RateState]:
    return draw(key, probs(state, t)), state

  return AvailabilityModel(init=init, probs=probs, sample=sample)


def check_beta(beta: float) -> float:
  """Validates FedGS's unavailability coefficient beta in [0, 1) and returns it as float."""
  check_range("beta", beta, 0.0, 1.0, high_inclusive=False)
  return beta if is_traced(beta) else float(beta)


def check_period(period: int) -> int:
  """Validates the period T_p (an integer >= 1) and returns it as int."""
  return check_count("period", period)


def check_probability_array(name: str, value: object) -> np.ndarray:
  """Converts ``value`` (scalar or 1-D array) to float32 and checks it lies in [0, 1]."""
  try:
    arr = np.asarray(value, dtype=np.float64)
  except (TypeError, ValueError):
    raise ValueError(f"{name}={value!r} is not a number or array of numbers") from None
  if arr.ndim > 1:
    raise ValueError(f"{name} must be a scalar or a 1-D array of length N; got shape {arr.shape}")
  if not np.all(np.isfinite(arr)) or np.any(arr < 0.0) or np.any(arr > 1.0):
    bad = arr[~((arr >= 0.0) & (arr <= 1.0))]
    raise ValueError(f"{name} has value(s) {bad.tolist()[:5]} out of range; allowed: [0, 1]")
  return arr.astype(np.float32)


def broadcast_to_clients(name: str, arr: np.ndarray, num_clients: int) -> Array:
  """Broadcasts a scalar or [N] array to f32[N]; ValueError naming ``name`` on a bad length."""
  if arr.ndim == 1 and arr.shape[0] != num_clients:
    raise ValueError(f"{name} has {arr.shape[0]} entries but ClientInfo has {num_clients} clients")
  return jnp.broadcast_to(jnp.asarray(arr, jnp.float32), (num_clients,))
