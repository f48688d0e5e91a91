"""Shapley-value-based selection: TMC estimates, coalition params, observe bookkeeping."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

import fedjax_sel.selection as selection
from fedjax_sel.core.types import Selection
from fedjax_sel.selection import shapley
from tests.selection.conftest import eval_value, make_ctx, make_info


def _exact_shapley(value, m):
  """Eq. 10 by enumeration: sum over S of |S|!(m-|S|-1)!/m! (v(S + k) - v(S))."""
  sv = np.zeros(m)
  for k in range(m):
    others = [j for j in range(m) if j != k]
    for size in range(m):
      for subset in itertools.combinations(others, size):
        weight = math.factorial(size) * math.factorial(m - size - 1) / math.factorial(m)
        sv[k] += weight * (value(set(subset) | {k}) - value(set(subset)))
  return sv


def test_additive_game_is_exact_for_any_permutations():
  a = jnp.asarray([0.3, -0.1, 0.5, 0.2])
  valid = jnp.asarray([True, True, False, True])
  sv = shapley.shapley_values(jax.random.PRNGKey(0), lambda mask: jnp.sum(a * mask), valid, 3)
  np.testing.assert_allclose(np.asarray(sv), [0.3, -0.1, 0.0, 0.2], atol=1e-6)


def test_nonadditive_game_matches_enumeration_and_efficiency():
  """v(S) = (sum_S a)^2 with 3 players: efficiency holds exactly for every sample, and 2000
  permutations estimate Eq. 10 within 0.02 (a marginal lies in [0, 1] with spread < 0.3
  here, so the standard error is below 0.3 / sqrt(2000) = 0.007; tolerance about 3 SE)."""
  a = np.array([0.2, 0.3, 0.5])
  exact = _exact_shapley(lambda s: sum(a[list(s)]) ** 2, 3)
  value_fn = lambda mask: jnp.sum(jnp.asarray(a, jnp.float32) * mask) ** 2
  sv = jax.jit(lambda k: shapley.shapley_values(k, value_fn, jnp.ones(3, bool), 2000))(
    jax.random.PRNGKey(1)
  )
  np.testing.assert_allclose(float(jnp.sum(sv)), 1.0, atol=1e-5)  # v(all) - v(empty)
  np.testing.assert_allclose(np.asarray(sv), exact, atol=0.02)
  np.testing.assert_allclose(exact, a, atol=1e-12)  # (sum a)^2 game: SV_k = a_k (a_total=1)


def test_truncation_skips_the_tail():
  """Player 0 alone nearly reaches v(all) = 1.02; with truncation_tol=0.05 another player
  gets 0 whenever player 0 precedes it (half of the orders), so its estimate is half the
  untruncated one (600 permutations: standard error 0.02 on the fraction, tolerance 4 SE)."""
  value_fn = lambda mask: jnp.where(mask[0], 1.0, 0.0) + 0.01 * jnp.sum(mask[1:])
  valid = jnp.ones(3, bool)
  key = jax.random.PRNGKey(3)
  plain = shapley.shapley_values(key, value_fn, valid, 600)
  truncated = shapley.shapley_values(key, value_fn, valid, 600, truncation_tol=0.05)
  np.testing.assert_allclose(np.asarray(plain)[1:], 0.01, atol=1e-6)
  ratio = np.asarray(truncated)[1:] / 0.01
  assert np.all(np.abs(ratio - 1 / 2) < 0.08)


def test_coalition_params_is_weighted_average():
  params = {"w": jnp.zeros(2)}
  deltas = {"w": jnp.asarray([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0]])}
  weights = jnp.asarray([0.25, 0.25, 0.5])
  out = shapley.coalition_params(params, deltas, weights, jnp.asarray([True, True, False]))
  np.testing.assert_allclose(np.asarray(out["w"]), [0.5, 1.0])
  empty = shapley.coalition_params(params, deltas, weights, jnp.zeros(3, bool))
  np.testing.assert_allclose(np.asarray(empty["w"]), [0.0, 0.0])


def test_observe_records_estimates_and_relative_values():
  info = make_info()
  ctx = make_ctx(info, t=0)
  strategy = selection.make(
    "shapley", num_selected=3, num_permutations=4, truncation_tol=0.0, momentum=0.5
  )
  state = strategy.init(jax.random.PRNGKey(0), info)
  cohort = jnp.asarray([2, 7, 0])
  sel = Selection(
    cohort=cohort, valid=jnp.asarray([True, True, False]), weights=jnp.asarray([0.5, 0.5, 0.0])
  )
  # Client 7's update reaches the optimum w = 1, client 2's moves away from it.
  deltas = {"w": jnp.asarray([[-1.0] * 3, [1.0] * 3, [5.0] * 3])}
  state = jax.jit(lambda s: strategy.observe(s, sel, deltas, jnp.zeros(3), ctx))(state)
  count = np.asarray(state.count)
  assert count[2] == 1 and count[7] == 1 and count.sum() == 2  # invalid slot ignored
  v = lambda w: float(eval_value({"w": jnp.full(3, w)}))
  # Two players: SV_7 = (v({7}) - v({}) + v({2,7}) - v({2})) / 2 exactly.
  sv7 = 0.5 * ((v(1.0) - v(0.0)) + (v(0.0) - v(-1.0)))
  sv2 = 0.5 * ((v(-1.0) - v(0.0)) + (v(0.0) - v(1.0)))
  np.testing.assert_allclose(np.asarray(state.value)[[7, 2]], [sv7, sv2], rtol=1e-5)
  rel = np.asarray(shapley.relative_values(state.value, state.count))
  assert rel[7] == 1.0 and rel[2] == 0.0 and np.all(np.delete(rel, [2, 7]) == 1.0)


def test_second_measurement_is_an_ema_with_momentum():
  """A client measured twice keeps ``momentum * old + (1 - momentum) * new``. The value is
  the sum of the coalition's averaged parameters, so with updates +1 (client 7) and -1
  (client 2) on 3 coordinates each order of the two players gives the same marginals: 3 and
  -3, exact for any sampled permutations. The second round swaps the updates; momentum 0.25
  weighs old : new as 1 : 3, giving 0.25 * 3 + 0.75 * (-3) = -1.5 for client 7."""
  info = make_info()
  ctx = make_ctx(info, t=0)._replace(eval_value=lambda p: jnp.sum(p["w"]))
  strategy = selection.make(
    "shapley", num_selected=2, num_permutations=3, truncation_tol=0.0, momentum=0.25
  )
  state = strategy.init(jax.random.PRNGKey(0), info)
  sel = Selection(
    cohort=jnp.asarray([2, 7]), valid=jnp.asarray([True, True]), weights=jnp.asarray([0.5, 0.5])
  )
  observe = jax.jit(lambda s, d: strategy.observe(s, sel, d, jnp.zeros(2), ctx))
  state = observe(state, {"w": jnp.asarray([[-1.0] * 3, [1.0] * 3])})
  np.testing.assert_allclose(np.asarray(state.value)[[7, 2]], [3.0, -3.0], rtol=1e-6)
  state = observe(state, {"w": jnp.asarray([[1.0] * 3, [-1.0] * 3])})
  np.testing.assert_allclose(np.asarray(state.value)[[7, 2]], [-1.5, 1.5], rtol=1e-6)
  assert np.asarray(state.count)[[7, 2]].tolist() == [2, 2]


def test_relative_values_without_spread_are_one():
  """One measured value (or all equal): no spread, every client gets relative value 1."""
  for value, count in (([0.3, 0.0, 0.0], [1, 0, 0]), ([0.3, 0.3, -2.0], [1, 4, 0])):
    rel = shapley.relative_values(jnp.asarray(value), jnp.asarray(count))
    np.testing.assert_array_equal(np.asarray(rel), [1.0, 1.0, 1.0])
  rel = shapley.relative_values(jnp.asarray([0.5, 1.0, 0.0, 2.0]), jnp.asarray([1, 1, 1, 0]))
  np.testing.assert_allclose(np.asarray(rel), [0.5, 1.0, 0.0, 1.0])


def test_make_shapley_defaults_and_ranges():
  """The documented defaults (10 permutations, tol 0.01, exploration 0.1, momentum 0.5) and
  the range of each hyperparameter, at its boundary."""
  import inspect

  defaults = {k: p.default for k, p in inspect.signature(shapley.make_shapley).parameters.items()}
  assert defaults == {
    "num_selected": inspect.Parameter.empty,
    "num_permutations": 10,
    "truncation_tol": 0.01,
    "exploration": 0.1,
    "momentum": 0.5,
  }
  assert inspect.signature(shapley.shapley_values).parameters["truncation_tol"].default == 0.0
  assert selection.make("shapley", num_selected=2, num_permutations=1).num_selected == 2
  selection.make("shapley", num_selected=2, momentum=0.0, truncation_tol=1.0, exploration=1e-6)
  bad = [
    {"num_permutations": 0},
    {"num_permutations": True},
    {"num_permutations": 2.5},
    {"num_permutations": float("inf")},
    {"num_permutations": "abc"},
    {"exploration": 0.0},
    {"exploration": -0.5},
    {"momentum": 1.0},
    {"momentum": 1.5},
    {"momentum": -0.1},
    {"truncation_tol": 1.5},
    {"truncation_tol": -0.1},
  ]
  for hp in bad:
    try:
      selection.make("shapley", num_selected=2, **hp)
    except ValueError as e:
      assert next(iter(hp)) in str(e), (hp, e)
    else:
      raise AssertionError(f"{hp} was accepted")


def test_truncation_is_relative_to_the_full_value():
  """The truncation threshold is tol * |v(all)|: the game of test_truncation_skips_the_tail
  scaled by 10 (v(all) = 10.2, threshold 0.51 > |10.2 - 10|) truncates exactly as before."""
  value_fn = lambda mask: 10.0 * (jnp.where(mask[0], 1.0, 0.0) + 0.01 * jnp.sum(mask[1:]))
  key = jax.random.PRNGKey(3)
  truncated = shapley.shapley_values(key, value_fn, jnp.ones(3, bool), 600, truncation_tol=0.05)
  ratio = np.asarray(truncated)[1:] / 0.1
  assert np.all(np.abs(ratio - 1 / 2) < 0.08)


def test_exploration_keeps_the_lowest_value_client_in_play():
  """Sampling weights are relative value + exploration: with two available clients of
  relative values 0 and 1 and exploration 0.1, the low one is drawn with probability
  0.1 / 1.2 = 1/12 (2400 draws: 200, 5 sigma = 68)."""
  info = make_info()
  n = info.num_examples.shape[0]
  strategy = selection.make("shapley", num_selected=1, exploration=0.1)
  state = strategy.init(jax.random.PRNGKey(0), info)
  state = state._replace(
    value=state.value.at[0].set(-1.0).at[1].set(2.0), count=state.count.at[0].set(1).at[1].set(1)
  )
  avail = jnp.zeros(n, bool).at[0].set(True).at[1].set(True)
  ctx = make_ctx(info)
  first = jax.vmap(lambda k: strategy.select(state, k, avail, 0, ctx)[0].cohort[0])(
    jax.random.split(jax.random.PRNGKey(1), 2400)
  )
  low = int(np.sum(np.asarray(first) == 0))
  assert abs(low - 200) < 68, low
