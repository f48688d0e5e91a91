"""TiFL's adaptive tier selection on small cases worked out by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import selection, testing
from fedjax_sel.core.types import ClientInfo
from fedjax_sel.selection import tifl


def _info(sizes) -> ClientInfo:
  sizes = np.asarray(sizes, np.int32)
  return ClientInfo(jnp.asarray(sizes), jnp.asarray(sizes[:, None], jnp.int32))


def _ctx(info: ClientInfo, losses, t=0):
  losses = jnp.asarray(losses, jnp.float32)
  ctx = testing.toy_selection_context(info, t)
  return ctx._replace(client_losses=lambda ids: losses[ids])


def test_change_probs_ranks_tiers_by_ascending_accuracy():
  """n = 4 tiers with credits, D = 4 * 5 / 2 = 10: the least accurate (tier 1, 0.5) gets
  4/10, then tier 3 (0.7) 3/10, tier 0 (0.8) 2/10, the most accurate (tier 2) 1/10."""
  probs = tifl.tier_probabilities(jnp.array([0.8, 0.5, 0.9, 0.7]), jnp.ones(4, bool))
  np.testing.assert_allclose(np.asarray(probs), [0.2, 0.4, 0.1, 0.3], atol=1e-7)


def test_change_probs_gives_zero_to_a_tier_without_credits():
  """Tier 1 has no credits: n = 3, D = 6; ascending 0.7 (tier 3), 0.8 (tier 0), 0.9
  (tier 2) get 3/6, 2/6, 1/6."""
  probs = tifl.tier_probabilities(
    jnp.array([0.8, 0.5, 0.9, 0.7]), jnp.array([True, False, True, True])
  )
  np.testing.assert_allclose(np.asarray(probs), [2 / 6, 0.0, 1 / 6, 3 / 6], atol=1e-7)


def test_change_probs_ties_go_to_the_lower_tier_first():
  probs = tifl.tier_probabilities(jnp.array([0.5, 0.5]), jnp.ones(2, bool))
  np.testing.assert_allclose(np.asarray(probs), [2 / 3, 1 / 3], atol=1e-7)


def test_tiers_by_data_size_are_equal_groups_of_sorted_sizes():
  """Sizes 5, 1, 3, 2, 4, 6 -> ranks 4, 0, 2, 1, 3, 5 -> tier floor(rank * 3 / 6)."""
  tiers = tifl.tier_assignment(jnp.array([5, 1, 3, 2, 4, 6], jnp.float32), 3)
  np.testing.assert_array_equal(np.asarray(tiers), [2, 0, 1, 0, 1, 2])
  state = selection.make("tifl", num_selected=2, num_tiers=3).init(
    jax.random.PRNGKey(0), _info([5, 1, 3, 2, 4, 6])
  )
  np.testing.assert_array_equal(np.asarray(state.tier), [2, 0, 1, 0, 1, 2])


def test_random_tiers_are_equal_groups():
  state = selection.make("tifl", num_selected=2, num_tiers=3, tier_by="random").init(
    jax.random.PRNGKey(3), _info([5, 1, 3, 2, 4, 6])
  )
  assert np.bincount(np.asarray(state.tier), minlength=3).tolist() == [2, 2, 2]


def test_update_uses_the_tiers_losses_and_draws_accordingly():
  """Tiers by size: clients 0, 1 (tier 0) have loss 2, clients 2, 3 (tier 1) loss 1, so
  tier 0 is the less accurate: at round 1 (interval 1) probs = [2/3, 1/3] and the cohort
  is tier 0's two clients about 2/3 of the time (4000 keys, 5 std = 0.037)."""
  strategy = selection.make("tifl", num_selected=2, num_tiers=2)
  info = _info([1, 2, 3, 4])
  state = strategy.init(jax.random.PRNGKey(0), info)
  ctx = _ctx(info, [2.0, 2.0, 1.0, 1.0], t=1)
  avail = jnp.ones(4, bool)

  def one(key):
    sel, new = strategy.select(state, key, avail, jnp.int32(1), ctx)
    return sel.cohort, new.probs, new.credits

  cohorts, probs, credits = jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(1), 4000))
  np.testing.assert_allclose(np.asarray(probs[0]), [2 / 3, 1 / 3], atol=1e-6)
  in_tier0 = np.all(np.asarray(cohorts) <= 1, axis=1)
  in_tier1 = np.all(np.asarray(cohorts) >= 2, axis=1)
  assert np.all(in_tier0 | in_tier1)  # the cohort is one tier's clients
  assert abs(in_tier0.mean() - 2 / 3) < 0.037
  # the drawn tier paid one credit (40 each before)
  np.testing.assert_array_equal(np.asarray(credits)[in_tier0][0], [39, 40])


def test_round_zero_keeps_uniform_probs():
  strategy = selection.make("tifl", num_selected=2, num_tiers=2)
  info = _info([1, 2, 3, 4])
  state = strategy.init(jax.random.PRNGKey(0), info)
  _, new = strategy.select(
    state, jax.random.PRNGKey(1), jnp.ones(4, bool), jnp.int32(0), _ctx(info, [2, 2, 1, 1])
  )
  np.testing.assert_allclose(np.asarray(new.probs), [0.5, 0.5])


def test_credits_decrement_and_an_exhausted_tier_is_never_drawn():
  """2 tiers of 2 clients, 2 credits each, 4 rounds, everybody available: each round one
  tier pays one credit, and once a tier has none only the other is drawn, so each tier is
  drawn exactly twice, whatever the keys and the losses."""
  strategy = selection.make("tifl", num_selected=2, num_tiers=2, credits=2)
  info = _info([1, 2, 3, 4])
  fn = jax.jit(
    lambda s, k, t: strategy.select(s, k, jnp.ones(4, bool), t, _ctx(info, [3, 1, 2, 4], t))
  )
  for seed in range(5):
    state = strategy.init(jax.random.PRNGKey(seed), info)
    drawn, credits = [], [np.asarray(state.credits).sum()]
    for t in range(4):
      sel, state = fn(state, jax.random.PRNGKey(100 * seed + t), jnp.int32(t))
      cohort = sorted(np.asarray(sel.cohort).tolist())
      assert cohort in ([0, 1], [2, 3]), cohort
      drawn.append(cohort[0] // 2)
      credits.append(np.asarray(state.credits).sum())
    assert sorted(drawn) == [0, 0, 1, 1], (seed, drawn)
    assert credits == [4, 3, 2, 1, 0]


def test_only_available_clients_and_the_tier_first():
  """Tier 0 = clients 0-2 (the smallest), client 1 unavailable; tier 1 (3-5) nobody
  available: tier 0 is drawn and its two available clients fill the two slots."""
  strategy = selection.make("tifl", num_selected=2, num_tiers=2)
  info = _info([1, 2, 3, 4, 5, 6])
  avail = jnp.array([True, False, True, False, False, False])
  state = strategy.init(jax.random.PRNGKey(0), info)
  for seed in range(5):
    sel, new = strategy.select(
      state, jax.random.PRNGKey(seed), avail, jnp.int32(3), _ctx(info, np.ones(6))
    )
    assert sorted(np.asarray(sel.cohort).tolist()) == [0, 2]
    assert np.asarray(sel.valid).all()
    np.testing.assert_array_equal(np.asarray(new.credits), [39, 40])


def test_cohort_reading_measures_the_drawn_tier_only():
  """accuracy_from="cohort": the drawn tier's accuracy becomes minus its clients' mean loss;
  the other tier stays unmeasured (lowest), so it is the likelier one at the next update."""
  strategy = selection.make("tifl", num_selected=2, num_tiers=2, accuracy_from="cohort")
  info = _info([1, 2, 3, 4])
  state = strategy.init(jax.random.PRNGKey(0), info)
  sel, state = strategy.select(
    state, jax.random.PRNGKey(2), jnp.ones(4, bool), jnp.int32(0), _ctx(info, [1, 3, 5, 7])
  )
  tier = int(np.asarray(sel.cohort)[0]) // 2
  expected = -2.0 if tier == 0 else -6.0
  assert float(state.accuracy[tier]) == expected
  assert float(state.accuracy[1 - tier]) < -1e30
  _, state = strategy.select(
    state, jax.random.PRNGKey(3), jnp.ones(4, bool), jnp.int32(1), _ctx(info, [1, 3, 5, 7])
  )
  probs = np.asarray(state.probs)
  assert probs[1 - tier] == pytest.approx(2 / 3) and probs[tier] == pytest.approx(1 / 3)


@pytest.mark.parametrize(
  "hparams, name",
  [
    ({"num_tiers": 0}, "num_tiers"),
    ({"credits": -1}, "credits"),
    ({"interval": 2.5}, "interval"),
    ({"tier_by": "latency"}, "tier_by"),
    ({"accuracy_from": "server"}, "accuracy_from"),
  ],
)
def test_bad_hyperparameter_is_one_line_naming_it(hparams, name):
  with pytest.raises(ValueError) as err:
    selection.make("tifl", num_selected=5, **hparams)
  message = str(err.value)
  assert message.startswith(f"{name}=") and "allowed" in message and "\n" not in message


def test_defaults_construct():
  s = selection.make("tifl", num_selected=5)
  assert s.num_selected == 5 and not s.with_replacement
