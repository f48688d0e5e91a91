"""Shared helpers: masked top-k, A-Res weighted sampling, FedAvg weights."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_sel.selection import common


def test_masked_top_k_hand_case():
  scores = jnp.asarray([0.5, 3.0, 2.0, jnp.nan, 9.0, 1.0])
  mask = jnp.asarray([True, True, True, True, False, True])
  idx, valid = common.masked_top_k(scores, mask, 3)
  np.testing.assert_array_equal(np.asarray(idx), [1, 2, 5])  # 9.0 is masked out
  assert np.asarray(valid).all()
  idx, valid = common.masked_top_k(scores, jnp.asarray([0, 0, 1, 0, 0, 0], bool), 3)
  np.testing.assert_array_equal(np.asarray(idx), [2, 0, 0])
  np.testing.assert_array_equal(np.asarray(valid), [True, False, False])
  idx, valid = common.masked_top_k(jnp.arange(2.0), jnp.ones(2, bool), 4)  # k > N
  np.testing.assert_array_equal(np.asarray(idx), [1, 0, 0, 0])
  np.testing.assert_array_equal(np.asarray(valid), [True, True, False, False])


def test_ares_keys_rank_like_log_u_over_w():
  """log(w) - log(-log u) orders items exactly like the A-Res key log(u) / w."""
  key = jax.random.PRNGKey(0)
  w = jnp.asarray(np.random.default_rng(0).random(50) + 0.01, jnp.float32)
  mask = jnp.ones((50,), bool)
  u = jax.random.uniform(key, (50,), jnp.float32, minval=jnp.finfo(jnp.float32).tiny, maxval=1.0)
  ares = np.asarray(jnp.log(u) / w)
  ours = np.asarray(common.ares_log_keys(key, w, mask))
  np.testing.assert_array_equal(np.argsort(ours), np.argsort(ares))


def test_weighted_sampling_first_pick_matches_weights():
  """First A-Res pick ~ w_i / sum_avail w: chi-square over 20000 draws at level 1e-3."""
  w = jnp.asarray([1.0, 2.0, 3.0, 4.0, 0.5, 8.0, 0.0, 1.5])
  avail = jnp.asarray([1, 1, 1, 1, 1, 0, 1, 1], bool)  # the weight-8 client is away
  draws = 20000
  keys = jax.random.split(jax.random.PRNGKey(1), draws)
  first = jax.jit(
    jax.vmap(lambda k: common.weighted_sample_without_replacement(k, w, avail, 3)[0][0])
  )(keys)
  counts = np.bincount(np.asarray(first), minlength=8)
  assert counts[5] == 0 and counts[6] == 0  # unavailable / zero weight never first
  probs = np.where(np.asarray(avail), np.asarray(w), 0.0)
  probs = probs / probs.sum()
  support = probs > 0
  chi2 = (((counts - draws * probs) ** 2)[support] / (draws * probs[support])).sum()
  assert chi2 < stats.chi2.ppf(0.999, df=support.sum() - 1)


def test_weighted_sampling_fills_with_zero_weight_clients_last():
  w = jnp.asarray([0.0, 5.0, 0.0, 1.0])
  idx, valid = common.weighted_sample_without_replacement(
    jax.random.PRNGKey(2), w, jnp.asarray([1, 1, 0, 1], bool), 4
  )
  idx, valid = np.asarray(idx), np.asarray(valid)
  np.testing.assert_array_equal(valid, [True, True, True, False])
  assert set(idx[:2]) == {1, 3} and idx[2] == 0  # positive weights before zero weight


def test_fedavg_and_equal_weights_hand_case():
  n = jnp.asarray([10, 30, 60, 100])
  w = common.fedavg_weights(n, jnp.asarray([2, 1, 0]), jnp.asarray([True, True, False]))
  np.testing.assert_allclose(np.asarray(w), [60 / 90, 30 / 90, 0.0], rtol=1e-6)
  np.testing.assert_array_equal(
    np.asarray(common.fedavg_weights(n, jnp.zeros(2, jnp.int32), jnp.zeros(2, bool))), 0.0
  )
  np.testing.assert_allclose(
    np.asarray(common.equal_weights(jnp.asarray([True, False, True, True]))),
    [0.25, 0.0, 0.25, 0.25],
  )


# Mutation-testing survivors of selection/common.py (issue 22).


def test_check_num_selected_accepts_one_and_rejects_non_integers():
  assert common.check_num_selected(1) == 1
  assert common.check_num_selected(np.int64(3)) == 3
  for bad in (0, True, 2.5, "3", None, float("inf"), float("nan"), "abc", [2]):
    with pytest.raises(
      ValueError, match="num_selected=.* (must be a positive integer|out of range)"
    ):
      common.check_num_selected(bad)


def test_categorical_with_probability_weights_and_clamped_negatives():
  draws = 4000
  # Weights that are probabilities (sum 1), an unavailable client with a large weight.
  idx, valid = common.categorical_with_replacement(
    jax.random.PRNGKey(0), jnp.asarray([0.8, 0.2, 5.0]), jnp.asarray([True, True, False]), draws
  )
  assert bool(np.all(np.asarray(valid)))
  freq0 = float(np.mean(np.asarray(idx) == 0))
  assert abs(freq0 - 0.8) < 0.03 and not np.any(np.asarray(idx) == 2)  # 5 sigma = 0.03
  # A negative weight counts as 0: only client 1 can be drawn.
  idx, _ = common.categorical_with_replacement(
    jax.random.PRNGKey(1), jnp.asarray([-1.0, 0.5]), jnp.asarray([True, True]), 200
  )
  assert np.all(np.asarray(idx) == 1)


def test_fedavg_weights_one_client_with_one_example():
  w = common.fedavg_weights(jnp.asarray([1, 5]), jnp.asarray([0, 1]), jnp.asarray([True, False]))
  np.testing.assert_array_equal(np.asarray(w), [1.0, 0.0])


def test_ares_keys_of_masked_out_items_are_minus_infinity():
  keys = common.ares_log_keys(
    jax.random.PRNGKey(0), jnp.asarray([1.0, 0.0, 2.0, 3.0]), jnp.asarray([True, True, False, True])
  )
  keys = np.asarray(keys)
  assert keys[2] == -np.inf and np.all(np.isfinite(keys[[0, 1, 3]]))
  assert keys[1] < min(keys[0], keys[3])  # a zero weight ranks below every positive weight


def test_categorical_with_an_empty_mask_has_invalid_slots_holding_zero():
  idx, valid = common.categorical_with_replacement(
    jax.random.PRNGKey(0), jnp.ones(3), jnp.zeros(3, bool), 4
  )
  assert not np.any(np.asarray(valid)) and np.asarray(idx).tolist() == [0, 0, 0, 0]


def test_fedavg_weights_with_fractional_sizes():
  """Sizes need not be integers (e.g. importance-scaled): 0.25 and 0.5 give 1/3 and 2/3."""
  w = common.fedavg_weights(jnp.asarray([0.25, 0.5]), jnp.asarray([0, 1]), jnp.ones(2, bool))
  np.testing.assert_allclose(np.asarray(w), [1 / 3, 2 / 3], rtol=1e-6)


def test_zero_weight_items_fill_slots_uniformly_at_random():
  """Items with weight 0 sit below every positive weight but keep their random Gumbel
  noise, so among themselves the fill order is uniform: 4000 single picks from four
  zero-weight items give each about 1000 (5 sigma = 137)."""
  keys = jax.random.split(jax.random.PRNGKey(3), 4000)

  def first_pick(k):
    idx, _ = common.weighted_sample_without_replacement(k, jnp.zeros(4), jnp.ones(4, bool), 1)
    return idx[0]

  first = jax.vmap(first_pick)(keys)
  counts = np.bincount(np.asarray(first), minlength=4)
  assert np.all(np.abs(counts - 1000) < 137), counts


def test_categorical_with_all_zero_weights_is_uniform_over_the_mask():
  idx, valid = common.categorical_with_replacement(
    jax.random.PRNGKey(4), jnp.zeros(3), jnp.asarray([False, True, True]), 4000
  )
  counts = np.bincount(np.asarray(idx), minlength=3)
  assert np.asarray(valid).all() and counts[0] == 0
  assert abs(counts[1] - 2000) < 160, counts  # 5 sigma


def test_make_selection_normalizes_invalid_slots():
  sel = common.make_selection(
    jnp.asarray([4, 7, 9]), jnp.asarray([1, 0, 1]), jnp.asarray([0.25, 0.5, 0.75])
  )
  assert np.asarray(sel.cohort).tolist() == [4, 0, 9]
  assert np.asarray(sel.valid).tolist() == [True, False, True]
  np.testing.assert_allclose(np.asarray(sel.weights), [0.25, 0.0, 0.75])
  assert sel.cohort.dtype == jnp.int32 and sel.weights.dtype == jnp.float32
