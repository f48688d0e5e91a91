"""SLN's reference-code schedule and the redraw-until-non-empty rule of the FedGS code."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import availability
from fedjax_sel.availability.base import bernoulli_draw_nonempty
from fedjax_sel.availability.sln import sin_factor
from fedjax_sel.core.types import ClientInfo


def test_sin_factor_by_hand_at_first_rounds_and_period_boundaries():
  f = lambda t, s: float(sin_factor(jnp.asarray(t), 24, s))
  # paper: 0.4 sin(2 pi (1 + t % 24) / 24) + 0.5
  assert f(5, "paper") == pytest.approx(0.9)  # (1 + 5) / 24 = 1/4
  assert f(17, "paper") == pytest.approx(0.1)  # 18 / 24 = 3/4
  assert f(23, "paper") == pytest.approx(0.5, abs=1e-6)  # 24 / 24 = 1
  assert f(0, "paper") == pytest.approx(0.4 * math.sin(2 * math.pi / 24) + 0.5)
  # reference code: linspace(0, 2 pi, 24)[t % 24] = 2 pi (t % 24) / 23
  assert f(0, "reference_code") == pytest.approx(0.5)
  assert f(23, "reference_code") == pytest.approx(0.5, abs=1e-6)
  assert f(24, "reference_code") == pytest.approx(0.5)
  assert f(6, "reference_code") == pytest.approx(0.4 * math.sin(2 * math.pi * 6 / 23) + 0.5)
  assert f(1, "reference_code") == pytest.approx(0.4 * math.sin(2 * math.pi / 23) + 0.5)
  assert float(sin_factor(jnp.asarray(7), 1, "reference_code")) == pytest.approx(0.5)


def test_sln_probs_follow_the_chosen_schedule():
  info = ClientInfo(num_examples=jnp.full((5,), 10, jnp.int32), label_counts=jnp.ones((5, 2)))
  m = availability.make("sln", beta=0.5, schedule="reference_code")
  state = m.init(jax.random.PRNGKey(0), info)
  base = np.asarray(m.probs(state, jnp.asarray(0))) / 0.5  # the log-normal rates
  assert base.max() == pytest.approx(1.0)
  want = base * (0.4 * math.sin(2 * math.pi * 6 / 23) + 0.5)
  np.testing.assert_allclose(np.asarray(m.probs(state, jnp.asarray(30))), want, rtol=1e-6)


def test_nonempty_draw_is_the_conditional_distribution():
  probs = jnp.asarray([0.5, 0.5])
  draws = np.asarray(
    jax.jit(jax.vmap(lambda k: bernoulli_draw_nonempty(k, probs)))(
      jax.random.split(jax.random.PRNGKey(0), 6000)
    )
  )
  assert draws.any(axis=1).all()
  # Given at least one of two fair coins: {both, first only, second only} each 1/3.
  both = np.mean(draws.all(axis=1))
  first = np.mean(draws[:, 0] & ~draws[:, 1])
  assert both == pytest.approx(1 / 3, abs=0.03) and first == pytest.approx(1 / 3, abs=0.03)
  # Rare clients still yield a non-empty set; all-zero probabilities stop at once, empty.
  rare = jax.jit(jax.vmap(lambda k: bernoulli_draw_nonempty(k, jnp.full((4,), 0.01))))(
    jax.random.split(jax.random.PRNGKey(1), 50)
  )
  assert np.asarray(rare).any(axis=1).all()
  assert not np.asarray(bernoulli_draw_nonempty(jax.random.PRNGKey(2), jnp.zeros(3))).any()


def test_sln_redraw_empty_never_gives_an_empty_round_and_options_are_checked():
  info = ClientInfo(num_examples=jnp.full((3,), 10, jnp.int32), label_counts=jnp.ones((3, 2)))
  m = availability.make("sln", beta=0.9, redraw_empty=True)
  state = m.init(jax.random.PRNGKey(0), info)
  ts = jnp.arange(48)
  keys = jax.random.split(jax.random.PRNGKey(0), 48)
  active = jax.jit(jax.vmap(lambda k, t: m.sample(state, k, t)[0]))(keys, ts)
  assert np.asarray(active).any(axis=1).all()
  with pytest.raises(ValueError, match="schedule='code'.*paper, reference_code"):
    availability.make("sln", schedule="code")
  with pytest.raises(ValueError, match="redraw_empty='yes'"):
    availability.make("sln", redraw_empty="yes")
