"""Running an availability model over many rounds, exactly as the round loop does."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey, PyTree


def split_availability_key(availability_key: PRNGKey) -> tuple[PRNGKey, PRNGKey]:
  """(init_key, round_key): ``init`` uses init_key, round t uses fold_in(round_key, t)."""
  init_key, round_key = jax.random.split(availability_key)
  return init_key, round_key


def rollout_from_state(
  model: AvailabilityModel,
  state: PyTree,
  round_key: PRNGKey,
  num_rounds: int,
  first_round: int = 0,
) -> tuple[Array, Array, PyTree]:
  """Scans ``num_rounds`` rounds starting at ``first_round``.

  Round t calls ``probs(state, t)`` and then
  ``sample(state, fold_in(round_key, t), t)``.

  Args:
    model: the availability model.
    state: its state before round ``first_round``.
    round_key: the key the rounds fold t into.
    num_rounds: T, number of rounds (static).
    first_round: index of the first round.

  Returns:
    (active: bool[T, N], probs: f32[T, N], final state).
  """

  def step(state, t):
    probs = model.probs(state, t)
    active, state = model.sample(state, jax.random.fold_in(round_key, t), t)
    return state, (active, probs)

  rounds = first_round + jnp.arange(num_rounds, dtype=jnp.int32)
  state, (active, probs) = jax.lax.scan(step, state, rounds)
  return active, probs, state


def rollout(
  model: AvailabilityModel, info: ClientInfo, availability_key: PRNGKey, num_rounds: int
) -> tuple[Array, Array]:
  """Initializes with the availability key and runs ``num_rounds`` rounds.

  Args:
    model: the availability model.
    info: the clients (N static).
    availability_key: the experiment's availability key (independent of training).
    num_rounds: T (static).

  Returns:
    (active: bool[T, N], probs: f32[T, N]), round t's draw and active probability.
  """
  init_key, round_key = split_availability_key(availability_key)
  state = model.init(init_key, info)
  active, probs, _ = rollout_from_state(model, state, round_key, num_rounds)
  return active, probs
