"""SLN's reference-code schedule and the redraw-until-non-empty rule of the FedGS code."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import availability
from fedjax_sel.availability.base import MAX_REDRAWS, bernoulli_draw, bernoulli_draw_nonempty
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


def _draws(key, probs, n):
  """Draws 0..n-1 of bernoulli_draw_nonempty: bernoulli_draw(fold_in(key, i), probs)."""
  return jax.vmap(lambda i: bernoulli_draw(jax.random.fold_in(key, i), probs))(jnp.arange(n))


def test_nonempty_draw_returns_the_first_non_empty_draw():
  # 8 clients at p = 0.04: the first non-empty draw is typically a few draws in; the
  # result is exactly that draw (not a later or skipped one).
  probs = jnp.full((8,), 0.04)
  deep = 0
  for seed in range(12):
    key = jax.random.PRNGKey(seed)
    draws = np.asarray(_draws(key, probs, 200))
    j = int(np.flatnonzero(draws.any(axis=1))[0])
    deep = max(deep, j)
    np.testing.assert_array_equal(bernoulli_draw_nonempty(key, probs), draws[j])
  assert deep >= 3


def _key_with_first_hit_at(index, n):
  """A key whose draw ``index`` has the smallest of the uniforms of draws 0..n-1 (1 client),
  and a probability p that only that draw's uniform is below."""
  keys = jax.random.split(jax.random.PRNGKey(0), 4000)
  u = np.asarray(jax.jit(jax.vmap(lambda k: _draws_uniform(k, n)))(keys))
  hit = np.flatnonzero(np.argmin(u, axis=1) == index)
  assert hit.size, "no key found"
  row = u[hit[0]]
  others = np.delete(row, index)
  return keys[hit[0]], float((row[index] + others.min()) / 2)


def _draws_uniform(key, n):
  return jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i), (1,))[0])(jnp.arange(n))


def test_nonempty_draw_makes_exactly_max_redraws_draws():
  m = MAX_REDRAWS
  assert m == 1000
  # Draw m-1 (the last one made) is the first non-empty: returned.
  key, p = _key_with_first_hit_at(m - 1, m + 1)
  probs = jnp.array([p], jnp.float32)
  assert np.asarray(bernoulli_draw_nonempty(key, probs)).all()
  # Draw m (one more than the loop makes) is the first non-empty: the loop stops before it
  # and returns the empty draw m-1.
  key, p = _key_with_first_hit_at(m, m + 1)
  probs = jnp.array([p], jnp.float32)
  assert np.asarray(bernoulli_draw(jax.random.fold_in(key, m), probs)).all()
  assert not np.asarray(bernoulli_draw_nonempty(key, probs)).any()


def test_bernoulli_draw_probability_zero_is_never_active():
  # A float32 uniform is exactly 0 with probability 2^-23: among 2^24 draws of one key
  # some are 0, and "uniform < p" keeps p = 0 inactive there too.
  key = jax.random.PRNGKey(0)
  u = jax.random.uniform(key, (1 << 24,), jnp.float32)
  assert int(jnp.sum(u == 0)) >= 1
  assert not bool(jnp.any(bernoulli_draw(key, jnp.zeros((1 << 24,)))))
