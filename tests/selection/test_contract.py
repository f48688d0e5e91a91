"""Registry-wide contract: every selection strategy passes the same checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_sel.selection as selection
from fedjax_sel.core.types import SelectionStrategy
from tests.selection.conftest import NUM_CLIENTS, fake_deltas, make_ctx, make_info

NUM_SELECTED = 4

# Availability patterns over the rounds: half, fewer than M, none, all, one client.
_rng = np.random.default_rng(1)
AVAIL_ROUNDS = [
  _rng.random(NUM_CLIENTS) < 0.5,
  np.isin(np.arange(NUM_CLIENTS), [3, 9]),
  np.zeros(NUM_CLIENTS, bool),
  np.ones(NUM_CLIENTS, bool),
  np.arange(NUM_CLIENTS) == 5,
  _rng.random(NUM_CLIENTS) < 0.7,
]


def _round_fn(strategy: SelectionStrategy, info):
  """select (+ observe) for one round as a pure function of (state, key, avail, t)."""

  def fn(state, key, avail, t):
    ctx = make_ctx(info, t)
    sel, state = strategy.select(state, key, avail, t, ctx)
    if strategy.observe is not None:
      losses = ctx.client_losses(sel.cohort)
      state = strategy.observe(state, sel, fake_deltas(sel.cohort), losses, ctx)
    return sel, state

  return fn


def _check_selection(strategy, sel, avail):
  m = strategy.num_selected
  cohort, valid, weights = (np.asarray(x) for x in sel)
  assert cohort.shape == (m,) and cohort.dtype == np.int32
  assert valid.shape == (m,) and valid.dtype == np.bool_
  assert weights.shape == (m,) and weights.dtype == np.float32
  assert np.all(np.isfinite(weights)) and np.all(weights >= 0)
  assert np.all(weights[~valid] == 0)
  assert np.all((cohort >= 0) & (cohort < NUM_CLIENTS))
  num_avail = int(avail.sum())
  picked = cohort[valid]
  assert np.all(avail[picked]), "selected an unavailable client"
  if strategy.with_replacement:
    assert valid.sum() == (m if num_avail > 0 else 0)
  else:
    assert valid.sum() == min(m, num_avail)
    assert len(set(picked.tolist())) == len(picked), "duplicate client"
  expected_total = 1.0 if num_avail > 0 else 0.0
  np.testing.assert_allclose(weights.sum(), expected_total, atol=1e-5)


class Compiled(NamedTuple):
  strategy: SelectionStrategy
  fn: Callable  # the pure round function
  jitted: Callable  # jax.jit(chex.assert_max_traces(fn, n=1)), shared by the tests below
  state: object  # init state


@pytest.fixture(scope="module", params=selection.names())
def compiled(request) -> Compiled:
  strategy = selection.make(request.param, num_selected=NUM_SELECTED)
  info = make_info()
  fn = _round_fn(strategy, info)
  chex.clear_trace_counter()
  jitted = jax.jit(chex.assert_max_traces(fn, n=1))
  return Compiled(strategy, fn, jitted, strategy.init(jax.random.PRNGKey(0), info))


def test_rounds_traced_once_and_contract(compiled):
  """Several rounds (incl. none / fewer than M / one available) through one compilation."""
  strategy, _, jitted, state = compiled
  structure = jax.tree_util.tree_structure(state)
  shapes = [(x.shape, x.dtype) for x in jax.tree_util.tree_leaves(state)]
  for t, avail in enumerate(AVAIL_ROUNDS):
    key = jax.random.fold_in(jax.random.PRNGKey(42), t)
    sel, state = jitted(state, key, jnp.asarray(avail), jnp.asarray(t, jnp.int32))
    _check_selection(strategy, sel, avail)
    if not avail.any():
      assert not np.any(np.asarray(sel.valid))
      np.testing.assert_array_equal(np.asarray(sel.weights), np.zeros(NUM_SELECTED))
    assert jax.tree_util.tree_structure(state) == structure
    assert [(x.shape, x.dtype) for x in jax.tree_util.tree_leaves(state)] == shapes
    chex.assert_tree_all_finite(state)


def test_deterministic_per_key_and_vmaps_over_keys(compiled):
  strategy, fn, jitted, state = compiled
  avail = jnp.asarray(AVAIL_ROUNDS[5])
  t = jnp.asarray(2, jnp.int32)
  keys = jax.random.split(jax.random.PRNGKey(7), 3)
  batched, _ = jax.jit(jax.vmap(fn, in_axes=(None, 0, None, None)))(state, keys, avail, t)
  for i in range(keys.shape[0]):
    one, _ = jitted(state, keys[i], avail, t)
    again, _ = jitted(state, keys[i], avail, t)
    for a, b, c in zip(one, again, batched):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
      np.testing.assert_allclose(np.asarray(a), np.asarray(c)[i], rtol=1e-5, atol=1e-6)
    _check_selection(strategy, one, np.asarray(avail))


def test_disable_jit_matches_jit(compiled):
  _, fn, jitted, state = compiled
  avail = jnp.asarray(AVAIL_ROUNDS[0])
  key = jax.random.PRNGKey(11)
  t = jnp.asarray(1, jnp.int32)
  with_jit, _ = jitted(state, key, avail, t)
  with jax.disable_jit():
    eager, _ = fn(state, key, avail, t)
  np.testing.assert_array_equal(np.asarray(with_jit.cohort), np.asarray(eager.cohort))
  np.testing.assert_array_equal(np.asarray(with_jit.valid), np.asarray(eager.valid))
  np.testing.assert_allclose(np.asarray(with_jit.weights), np.asarray(eager.weights), atol=1e-6)


def test_make_rejects_bad_num_selected():
  for name in selection.names():
    for bad in (0, -1, 2.5, "3"):
      with pytest.raises(ValueError, match="num_selected"):
        selection.make(name, num_selected=bad)


def test_unknown_name_lists_known_names():
  with pytest.raises(ValueError) as err:
    selection.make("no_such_strategy", num_selected=2)
  for name in selection.names():
    assert name in str(err.value)


def test_expected_strategies_registered():
  expected = {
    "full",
    "uniform",
    "md",
    "power_of_choice",
    "clustered_size",
    "clustered_similarity",
    "fedemd",
    "shapley",
  }
  assert expected <= set(selection.names())
