"""Power-of-Choice keeps the highest-loss candidates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_sel.selection as selection
from tests.selection.conftest import fixed_losses, make_ctx, make_info


def test_default_d_picks_top_losses_among_available():
  info = make_info()
  ctx = make_ctx(info)
  strategy = selection.make("power_of_choice", num_selected=3)
  avail = np.ones(12, bool)
  avail[[1, 3]] = False  # loss[i] = ((7 i) mod 12) / 12 + 0.1; by loss the clients rank
  #                        5, 10, 3, 8, 1, ...; with 3 and 1 away the top 3 are 5, 10, 8.
  state = strategy.init(jax.random.PRNGKey(0), info)
  sel, _ = strategy.select(state, jax.random.PRNGKey(0), jnp.asarray(avail), 0, ctx)
  losses = np.asarray(fixed_losses())
  expected = np.argsort(-np.where(avail, losses, -np.inf))[:3]
  np.testing.assert_array_equal(np.asarray(sel.cohort), expected)  # in loss order
  np.testing.assert_array_equal(expected, [5, 10, 8])


def test_candidate_set_of_m_plus_one_drops_lowest_loss():
  """d = M + 1 = |available|: every available client is a candidate, the lowest-loss one
  (client 0, loss 0.1) is the only one left out, whatever the key."""
  info = make_info()
  ctx = make_ctx(info)
  strategy = selection.make("power_of_choice", num_selected=3, d=4)
  avail = jnp.asarray(np.isin(np.arange(12), [0, 2, 6, 11]))
  state = strategy.init(jax.random.PRNGKey(0), info)
  select = jax.jit(lambda k: strategy.select(state, k, avail, 0, ctx)[0].cohort)
  for seed in range(5):
    assert set(np.asarray(select(jax.random.PRNGKey(seed))).tolist()) == {2, 6, 11}


def test_rejects_d_below_num_selected():
  with pytest.raises(ValueError, match="d="):
    selection.make("power_of_choice", num_selected=4, d=3)
