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


# Named readings beside the registry defaults: each passes the same contract.
READINGS = [
  ("tifl", {"rule": "accuracy_weighted"}),  # the FedEMD authors' TiFL
  ("tifl", {"short_tier": "tier_only"}),  # TiFL's Algorithm 2: the cohort within one tier
  ("tifl", {"short_tier": "tier_only", "accuracy_from": "cohort", "tier_by": "random"}),
  ("fedfast", {"features": "label_counts", "init": "random_points"}),  # the FedEMD authors'
  ("fedfast", {"features": "labels", "init": "random_points"}),
  ("fedfast", {"features": "label_counts", "allocation": "proportional", "num_clusters": 2}),
]


def _reading_id(reading) -> str:
  name, hparams = reading
  return name + "-" + "-".join(f"{k}={v}" for k, v in hparams.items())


@pytest.mark.parametrize("reading", READINGS, ids=_reading_id)
def test_contract_of_named_readings(reading):
  name, hparams = reading
  strategy = selection.make(name, num_selected=NUM_SELECTED, **hparams)
  testing.check_selection_strategy(strategy, make_info())


def test_leaves_slots_empty_relaxes_only_the_number_of_valid_slots():
  """A strategy that keeps one slot empty while more clients are available breaks the
  contract unless it says ``leaves_slots_empty``; one that fills no slot while somebody is
  available breaks it either way."""
  uniform = selection.make("uniform", num_selected=NUM_SELECTED)

  def one_empty(state, key, avail, t, ctx):
    sel, state = uniform.select(state, key, avail, t, ctx)
    valid = sel.valid.at[-1].set(sel.valid[-1] & (jnp.sum(sel.valid) == 1))
    w = jnp.where(valid, sel.weights, 0.0)
    w = jnp.where(jnp.sum(w) > 0, w / jnp.maximum(jnp.sum(w), 1e-30), 0.0)
    return sel._replace(valid=valid, weights=w), state

  def none(state, key, avail, t, ctx):
    sel, state = uniform.select(state, key, avail, t, ctx)
    return sel._replace(valid=jnp.zeros_like(sel.valid), weights=jnp.zeros_like(sel.weights)), state

  strict = uniform._replace(select=one_empty)
  with pytest.raises(AssertionError, match="min\\(M, available\\)"):
    testing.check_selection_strategy(strict, make_info())
  testing.check_selection_strategy(strict._replace(leaves_slots_empty=True), make_info())
  with pytest.raises(AssertionError, match="leaves_slots_empty: between 1"):
    testing.check_selection_strategy(
      uniform._replace(select=none, leaves_slots_empty=True), make_info()
    )


def test_every_slot_holds_a_client_id():
  """Stricter than the contract (which lets an invalid slot hold any id): the library's
  strategies keep every slot's id in [0, N), so a gather by cohort never clamps."""
  info = make_info()
  strategies = [selection.make(name, num_selected=NUM_SELECTED) for name in selection.names()]
  strategies += [selection.make(n, num_selected=NUM_SELECTED, **hp) for n, hp in READINGS]
  for name, strategy in zip(selection.names() + [n for n, _ in READINGS], strategies):
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
