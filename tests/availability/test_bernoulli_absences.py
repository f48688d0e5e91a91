"""bernoulli(mean_absence=m): FedAR's p_i with absences of mean m rounds (on/off chains)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import availability
from fedjax_sel.core.types import ClientInfo
from tests.availability.test_markov_dropout import absences

NUM_CLIENTS = 6
NUM_ROUNDS = 20000
INFO = ClientInfo(
  num_examples=jnp.full((NUM_CLIENTS,), 10, jnp.int32),
  label_counts=jnp.ones((NUM_CLIENTS, 2), jnp.int32),
)
PROBS = [0.1, 0.2, 0.4, 0.6, 0.8, 0.95]


@functools.cache
def rollout(mean_absence):
  model = availability.make("bernoulli", probs=PROBS, mean_absence=mean_absence)
  active, probs = availability.rollout(model, INFO, jax.random.key(54), NUM_ROUNDS)
  return np.asarray(active), np.asarray(probs)


def test_transitions_by_hand():
  # p = 0.1, m = 10: q = 0.1, P(on -> off) = 0.9 / (0.1 * 10) = 0.9; p = 0.8: 0.2 / 8 = 0.025.
  state = availability.make("bernoulli", probs=PROBS, mean_absence=10.0).init(
    jax.random.key(0), INFO
  )
  expected = [(1 - p) / (p * 10) for p in PROBS]
  np.testing.assert_allclose(state.p_on_to_off, expected, rtol=1e-5)
  np.testing.assert_allclose(state.p_off_to_on, np.full(NUM_CLIENTS, 0.1), rtol=1e-6)
  assert expected[0] == pytest.approx(0.9) and expected[4] == pytest.approx(0.025)


def test_long_run_rate_is_p_and_absences_last_m_rounds():
  active, _ = rollout(10.0)
  # each client's on-frequency is its p_i (20,000 rounds of a chain with lag-1 correlation
  # 1 - P(on->off) - 0.1: a std of at most ~0.02 at p = 0.5)
  np.testing.assert_allclose(active.mean(axis=0), PROBS, atol=0.03)
  runs = absences(active)
  assert runs.mean() == pytest.approx(10.0, rel=0.05)
  # geometric with mean 10: P(5 <= L <= 20) = 0.9^4 - 0.9^20 = 0.5345, P(L > 40) = 0.9^40
  assert np.mean((runs >= 5) & (runs <= 20)) == pytest.approx(0.9**4 - 0.9**20, abs=0.03)
  assert np.mean(runs > 40) == pytest.approx(0.9**40, abs=0.01)


def test_independent_rounds_are_far_shorter():
  active, probs = rollout(None)
  runs = absences(active)
  # independent draws: an absence of client i lasts 1 / p_i on average; pooled over the
  # runs, the clients with small p dominate but the mean stays far below 10
  assert runs.mean() < 4.0
  np.testing.assert_allclose(probs[0], PROBS, rtol=1e-6)  # probs is p_i itself


def test_same_p_i_as_independent_rounds():
  info = ClientInfo(
    num_examples=jnp.full((100,), 10, jnp.int32), label_counts=jnp.ones((100, 2), jnp.int32)
  )
  key = jax.random.key(3)
  plain = availability.make("bernoulli", p_min=0.1).init(key, info)
  chains = availability.make("bernoulli", p_min=0.1, mean_absence=10.0).init(key, info)
  p = np.asarray(chains.p_off_to_on / (chains.p_on_to_off + chains.p_off_to_on))
  np.testing.assert_allclose(p, np.asarray(plain.rate), rtol=1e-5)


def test_probs_is_the_conditional_on_probability():
  active, probs = rollout(10.0)
  # P(on at t | on at t-1) = 1 - P(on -> off), P(on at t | off at t-1) = 0.1
  was_on = active[:-1]
  expected = np.where(was_on, 1.0 - np.asarray([(1 - p) / (p * 10) for p in PROBS]), 0.1)
  np.testing.assert_allclose(probs[1:], expected, rtol=1e-5)


@pytest.mark.parametrize(
  "kwargs,match",
  [
    ({"p_min": 0.1, "mean_absence": 5.0}, r"mean_absence=5\.0 .*allowed: >= 9"),
    ({"p_min": 0.0, "mean_absence": 10.0}, r"mean_absence=10\.0 .*smallest probability > 0"),
    ({"probs": [0.5, 0.25], "mean_absence": 2.0}, r"mean_absence=2\.0 .*allowed: >= 3"),
    ({"p_min": 0.5, "mean_absence": 0.5}, r"mean_absence"),
  ],
)
def test_bad_mean_absence(kwargs, match):
  with pytest.raises(ValueError, match=match):
    availability.make("bernoulli", **kwargs)
