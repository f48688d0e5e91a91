"""Registry-wide contract: every selection strategy passes the same checks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_sel.selection as selection
from fedjax_sel import testing
from tests.selection.conftest import NUM_CLIENTS, make_info

NUM_SELECTED = 4


@pytest.mark.parametrize("name", selection.names())
def test_contract(name):
  """``testing.check_selection_strategy``: six rounds (half, two, none, all, one, ~70 %
  available) through one trace, the Selection contract every round, a stable finite
  state, determinism per key, vmap over keys, and the eager path."""
  strategy = selection.make(name, num_selected=NUM_SELECTED)
  testing.check_selection_strategy(strategy, make_info())


def test_every_slot_holds_a_client_id():
  """Stricter than the contract (which lets an invalid slot hold any id): the library's
  strategies keep every slot's id in [0, N), so a gather by cohort never clamps."""
  info = make_info()
  for name in selection.names():
    strategy = selection.make(name, num_selected=NUM_SELECTED)
    fn = jax.jit(testing.selection_round_fn(strategy, info))
    state = strategy.init(jax.random.PRNGKey(0), info)
    for t, avail in enumerate(testing.availability_patterns(NUM_CLIENTS)):
      sel, state = fn(state, jax.random.PRNGKey(t), jnp.asarray(avail), jnp.int32(t))
      cohort = np.asarray(sel.cohort)
      assert np.all((cohort >= 0) & (cohort < NUM_CLIENTS)), (name, t, cohort)


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
    "tifl",
    "fedfast",
  }
  assert expected <= set(selection.names())
