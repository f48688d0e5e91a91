"""``fedjax_sel.testing``'s contract checks catch broken methods, each by the rule it breaks.

Every broken method below is a correct one with one thing changed; the check must fail
naming that rule (and the correct one passes, in the registry-wide contract tests and in
docs/extending.md's examples, tests/test_docs_extending.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from fedjax_sel import aggregation, availability, selection, testing
from fedjax_sel.core.types import Aggregator, AvailabilityModel, Selection, SelectionStrategy

M = 3


def _strategy(pick, weights=None, state_out=None):
  """Selects ``pick(key, avail)`` (i32[M] ids, all slots valid when anybody is available)."""

  def init(key, info):
    del key, info
    return jnp.zeros((), jnp.int32)

  def select(state, key, avail, t, ctx):
    del t, ctx
    cohort = pick(key, avail)
    valid = jnp.broadcast_to(avail.any(), (M,))
    w = jnp.where(valid, 1.0 / M, 0.0) if weights is None else weights(valid)
    new_state = state + 1 if state_out is None else state_out(state)
    return Selection(cohort.astype(jnp.int32), valid, w.astype(jnp.float32)), new_state

  return SelectionStrategy(init=init, select=select, num_selected=M)


def _any_clients(key, avail):
  """M distinct clients, available or not (the bug: avail is ignored)."""
  del avail
  return jax.random.permutation(key, 12)[:M]


def test_selection_check_passes_the_library_and_names_broken_rules():
  testing.check_selection_strategy(selection.make("uniform", num_selected=M))
  with pytest.raises(AssertionError, match="only available clients are selected"):
    testing.check_selection_strategy(_strategy(_any_clients))
  with pytest.raises(AssertionError, match="no client in two slots"):
    testing.check_selection_strategy(_strategy(lambda k, a: jnp.full((M,), jnp.argmax(a))))


def test_selection_check_weights_and_state_rules():
  right = selection.make("uniform", num_selected=M)

  def ones(valid):
    return jnp.where(valid, 1.0, 0.0)

  def select_ones(state, key, avail, t, ctx):
    sel, state = right.select(state, key, avail, t, ctx)
    return sel._replace(weights=ones(sel.valid).astype(jnp.float32)), state

  def select_float_cohort(state, key, avail, t, ctx):
    sel, state = right.select(state, key, avail, t, ctx)
    return sel._replace(cohort=sel.cohort.astype(jnp.float32)), state

  with pytest.raises(AssertionError, match=r"cohort is i32\[3\], got float32\[3\] \(round 0"):
    testing.check_selection_strategy(right._replace(select=select_float_cohort))

  unnormalized = right._replace(select=select_ones)
  with pytest.raises(AssertionError, match="weights sum to 1"):
    testing.check_selection_strategy(unnormalized)
  testing.check_selection_strategy(unnormalized, normalized_weights=False)  # allowed off

  def available_first(key, avail):
    return jnp.argsort(-(avail + jax.random.uniform(key, avail.shape)))[:M]

  changes_dtype = _strategy(available_first, state_out=lambda s: s.astype(jnp.float32))
  with pytest.raises(AssertionError, match="the state keeps its structure.*round 0"):
    testing.check_selection_strategy(changes_dtype)


def _availability(probs_fn, sample_fn=None):
  def init(key, info):
    del key
    return jnp.zeros((info.num_examples.shape[0],), jnp.float32)

  def probs(state, t):
    del t
    return probs_fn(state)

  def sample(state, key, t):
    p = probs(state, t)
    active = jax.random.bernoulli(key, p) if sample_fn is None else sample_fn(p)
    return active, state

  return AvailabilityModel(init=init, probs=probs, sample=sample)


def test_availability_check_names_broken_rules():
  testing.check_availability_model(availability.make("bernoulli", probs=0.3))
  testing.check_availability_model(_availability(lambda s: s + 0.4))
  with pytest.raises(AssertionError, match=r"probs are finite and in \[0, 1\]"):
    testing.check_availability_model(_availability(lambda s: s + 1.5, lambda p: p > 0))
  with pytest.raises(AssertionError, match="probability 0 is inactive"):
    testing.check_availability_model(_availability(lambda s: s, lambda p: p >= 0))
  with pytest.raises(AssertionError, match="probs is f32"):
    testing.check_availability_model(
      _availability(lambda s: s.astype(jnp.bfloat16) + 0.5, lambda p: p > 0.4)
    )


def _mean_aggregator(mask_invalid: bool, nan_to_num: bool):
  """The plain mean of the slots' updates; with ``mask_invalid`` only over received slots."""

  def init(params, info):
    del params, info
    return jnp.zeros((), jnp.int32)

  def apply(state, deltas, sel, avail, t, aux=None):
    del t
    aux = aggregation.resolve_aux(aux, avail, sel)
    if mask_invalid:
      received = aggregation.received_mask(deltas, sel, avail, aux)
    else:
      received = jnp.ones_like(sel.valid)
    if nan_to_num:
      deltas = jax.tree_util.tree_map(jnp.nan_to_num, deltas)
    weights = aggregation.safe_divide(received.astype(jnp.float32), received.sum())
    deltas = aggregation.zero_unreceived(deltas, received)
    return aggregation.weighted_sum(weights, deltas), state + 1

  return Aggregator(init=init, apply=apply)


def test_aggregator_check_names_broken_rules():
  testing.check_aggregator(aggregation.make("fedavg"))
  testing.check_aggregator(_mean_aggregator(mask_invalid=True, nan_to_num=False))
  with pytest.raises(AssertionError, match="the update is finite.*round 1, NaN"):
    testing.check_aggregator(_mean_aggregator(mask_invalid=False, nan_to_num=False))
  with pytest.raises(AssertionError, match="masked slots change nothing"):
    testing.check_aggregator(_mean_aggregator(mask_invalid=False, nan_to_num=True))


def test_aggregator_check_catches_a_state_dtype_change():
  """An apply whose state comes back in another dtype than init's."""
  right = aggregation.make("fedavg")

  def apply(state, deltas, sel, avail, t, aux=None):
    update, state = right.apply(state, deltas, sel, avail, t, aux)
    return update, state._replace(rounds=state.rounds.astype(jnp.float32))

  with pytest.raises(AssertionError, match="the state keeps its structure"):
    testing.check_aggregator(right._replace(apply=apply))
