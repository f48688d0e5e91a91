"""Registry-wide contract: every aggregator is jittable, traced once across rounds,
shape-exact, finite, vmappable, deterministic, works under ``jax.disable_jit()``, accepts
``aux=None``, and ignores invalid and non-finite slots."""

from __future__ import annotations

import aggregation_testlib as lib
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import aggregation

NUM_CLIENTS = 6
NUM_REAL = 4  # cohort slots holding selected clients ...
NUM_SLOTS = 6  # ... followed by two empty slots (invalid, zero weight), where tests put garbage
NUM_ROUNDS = 4
SIZES = np.array([3, 1, 4, 1, 5, 9])

# Every registered name with default hyper-parameters ...
DEFAULTS = [(name, {}) for name in aggregation.names()]
# ... plus the non-default code paths.
CONFIGS = DEFAULTS + [
  ("fdms", {"complexity_reduction": True, "theta_scale": 0.05}),
  ("fedar", {"cutoff": "nonconvex", "rho": 0.5}),
  ("fedar", {"weighting": "num_examples", "cutoff": "none"}),
  ("fedavg_is", {"self_normalize": True, "weighting": "uniform"}),
  ("mifa", {"average_over": "seen", "step_scale": 1.05}),
]


def _ids(configs):
  return [name + "".join(f"-{k}={v}" for k, v in hp.items()) for name, hp in configs]


@jax.jit
def _round_inputs(key, t):
  """Random availability; the cohort's first NUM_REAL slots hold available clients first
  (then unavailable ones, marked invalid), the last two slots are empty."""
  k_avail, k_perm, k_delta = jax.random.split(jax.random.fold_in(key, t), 3)
  avail = jax.random.bernoulli(k_avail, 0.6, (NUM_CLIENTS,))
  order = jnp.argsort(jnp.where(avail, 0.0, 1.0) + jax.random.uniform(k_perm, (NUM_CLIENTS,)))
  cohort = jnp.zeros((NUM_SLOTS,), jnp.int32).at[:NUM_REAL].set(order[:NUM_REAL])
  valid = jnp.zeros((NUM_SLOTS,), bool).at[:NUM_REAL].set(avail[order[:NUM_REAL]])
  sizes = jnp.where(valid, jnp.asarray(SIZES, jnp.float32)[cohort], 0.0)
  selection = lib.selection_of(cohort, valid, sizes / jnp.maximum(sizes.sum(), 1.0))
  aux = lib.aux_of(NUM_CLIENTS, NUM_SLOTS, probs=jnp.full((NUM_CLIENTS,), 0.6), num_examples=SIZES)
  deltas = lib.random_deltas(k_delta, NUM_SLOTS)
  deltas = jax.tree_util.tree_map(lambda x: x.at[NUM_REAL:].set(0.0), deltas)
  return deltas, selection, avail, aux


def _with_garbage(deltas, selection, avail, aux, garbage_value, garbage_id, extra_weight):
  """Fills the two empty slots: slot 4 invalid, with a duplicate or out-of-range id and a
  nonzero weight; slot 5 valid, its client available, but its update non-finite
  (``aux.finite`` False) and carrying ``extra_weight``."""
  d = jax.tree_util.tree_map(lambda x: x.at[NUM_REAL:].set(garbage_value), deltas)
  cohort = selection.cohort.at[NUM_REAL].set(garbage_id).at[NUM_REAL + 1].set(jnp.argmax(avail))
  sel = lib.selection_of(
    cohort,
    selection.valid.at[NUM_REAL + 1].set(True),
    selection.weights.at[NUM_REAL].set(0.7).at[NUM_REAL + 1].set(extra_weight),
  )
  return d, sel, aux._replace(finite=aux.finite.at[NUM_REAL + 1].set(False))


_build = lib.build
_jitted_apply = lib.jitted_apply  # jit(chex.assert_max_traces(apply, n=1)), cached per config


def test_configs_cover_every_registered_name():
  assert {name for name, _ in CONFIGS} == set(aggregation.names())
  assert aggregation.names() == sorted(
    ["dropout", "fdms", "fedar", "fedavg", "fedavg_is", "fedvarp", "full", "mifa", "stale"]
  )


@pytest.mark.parametrize("name,hparams", CONFIGS, ids=_ids(CONFIGS))
def test_jit_traced_once_shapes_finite_deterministic(name, hparams):
  agg = _build(name, hparams)
  params = lib.make_params()
  state = agg.init(params, lib.make_info(SIZES))
  step = _jitted_apply(agg)
  key = jax.random.PRNGKey(0)
  for t in range(NUM_ROUNDS):
    deltas, selection, avail, aux = _round_inputs(key, t)
    if t % 2:  # NaN garbage in the empty slots must not leak into the update
      deltas, selection, aux = _with_garbage(
        deltas, selection, avail, aux, jnp.nan, selection.cohort[0], 0.1
      )
    tt = jnp.asarray(t, jnp.int32)
    update, new_state = step(state, deltas, selection, avail, tt, aux)
    chex.assert_trees_all_equal_shapes_and_dtypes(update, params)
    chex.assert_tree_all_finite(update)
    chex.assert_trees_all_equal_shapes_and_dtypes(new_state, state)
    chex.assert_trees_all_equal(step(state, deltas, selection, avail, tt, aux), (update, new_state))
    state = new_state


@pytest.mark.parametrize("name,hparams", CONFIGS, ids=_ids(CONFIGS))
def test_invalid_and_nonfinite_slots_change_nothing(name, hparams):
  """Garbage in an invalid slot and in a valid but non-finite slot: the results equal the
  run with those slots empty (FedAvg-style weights rescaled to the same valid total),
  whatever the garbage."""
  agg = _build(name, hparams)
  state_ref = state_a = state_b = agg.init(lib.make_params(), lib.make_info(SIZES))
  apply = _jitted_apply(agg)
  extra_weight = 0.25
  for t in range(3):
    deltas, selection, avail, aux = _round_inputs(jax.random.PRNGKey(2), t)
    tt = jnp.asarray(t, jnp.int32)
    total = selection.weights.sum()
    ref_selection = selection._replace(
      weights=selection.weights * (total + extra_weight) / jnp.maximum(total, 1e-12)
    )
    update_ref, state_ref = apply(state_ref, deltas, ref_selection, avail, tt, aux)
    inputs = (deltas, selection, avail, aux)
    d_a, sel_a, aux_a = _with_garbage(*inputs, jnp.nan, selection.cohort[0], extra_weight)
    update_a, state_a = apply(state_a, d_a, sel_a, avail, tt, aux_a)
    d_b, sel_b, aux_b = _with_garbage(*inputs, 1e30, NUM_CLIENTS + 5, extra_weight)
    update_b, state_b = apply(state_b, d_b, sel_b, avail, tt, aux_b)
    chex.assert_trees_all_equal(update_a, update_b)
    chex.assert_trees_all_equal(state_a, state_b)
    lib.assert_tree_close(update_a, update_ref, atol=1e-6)
    lib.assert_tree_close(state_a, state_ref, atol=1e-6)


@pytest.mark.parametrize("name,hparams", DEFAULTS, ids=_ids(DEFAULTS))
def test_vmappable_over_independent_runs(name, hparams):
  agg = _build(name, hparams)
  state0 = agg.init(lib.make_params(), lib.make_info(SIZES))
  keys = jax.random.split(jax.random.PRNGKey(3), 3)
  t = jnp.asarray(1, jnp.int32)
  batch = [_round_inputs(k, 1) for k in keys]
  deltas, selection, avail, aux = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *batch)
  states = jax.tree_util.tree_map(lambda x: jnp.stack([x] * 3), state0)
  vmapped = jax.jit(jax.vmap(agg.apply, in_axes=(0, 0, 0, 0, None, 0)))
  updates, new_states = vmapped(states, deltas, selection, avail, t, aux)
  apply = _jitted_apply(agg)
  for i, (d, s, a, x) in enumerate(batch):
    update_i, state_i = apply(state0, d, s, a, t, x)
    lib.assert_tree_close(jax.tree_util.tree_map(lambda v, i=i: v[i], updates), update_i)
    lib.assert_tree_close(jax.tree_util.tree_map(lambda v, i=i: v[i], new_states), state_i)


@pytest.mark.parametrize("name,hparams", DEFAULTS, ids=_ids(DEFAULTS))
def test_disable_jit_and_aux_none_match_jit(name, hparams):
  agg = _build(name, hparams)
  state = agg.init(lib.make_params(), lib.make_info(SIZES))
  deltas, selection, avail, aux = _round_inputs(jax.random.PRNGKey(4), 0)
  t = jnp.asarray(0, jnp.int32)
  jitted = _jitted_apply(agg)(state, deltas, selection, avail, t, aux)
  empty = lib.aux_of(NUM_CLIENTS, NUM_SLOTS)
  jitted_empty = _jitted_apply(agg)(state, deltas, selection, avail, t, empty)
  with jax.disable_jit():
    eager = agg.apply(state, deltas, selection, avail, t, aux)
    eager_none = agg.apply(state, deltas, selection, avail, t)
  lib.assert_tree_close(eager, jitted, atol=1e-6)
  lib.assert_tree_close(eager_none, jitted_empty, atol=1e-6)


def test_unknown_name_lists_known_names():
  with pytest.raises(ValueError, match="known aggregator names: dropout, fdms"):
    aggregation.make("no_such_aggregator")


@pytest.mark.parametrize(
  "name,hparams",
  [
    ("fedar", {"rho": 1.5}),
    ("fedar", {"b": 2.0}),
    ("fedar", {"t0": 0.0}),
    ("fedar", {"cutoff": "concave"}),
    ("fedar", {"psi_max": 0.5}),
    ("mifa", {"weighting": "by_size"}),
    ("mifa", {"average_over": "available"}),
    ("mifa", {"step_scale": 0.0}),
    ("fedavg_is", {"min_prob": 0.0}),
    ("fdms", {"confidence": 1.0}),
    ("fdms", {"beta": 0.0}),
    ("fdms", {"theta_scale": -1.0}),
    ("fdms", {"complexity_reduction": "yes"}),
    ("fedavg", {"unknown_hparam": 1}),
  ],
)
def test_bad_hparams_raise_value_error_naming_them(name, hparams):
  bad_name = next(iter(hparams))
  with pytest.raises(ValueError, match=bad_name):
    aggregation.make(name, **hparams)


@pytest.mark.parametrize("name,hparams", DEFAULTS, ids=_ids(DEFAULTS))
def test_state_counts_the_applies(name, hparams):
  """Every aggregator's ``state.rounds`` is 0 at init and counts the calls of ``apply``."""
  agg = _build(name, hparams)
  state = agg.init(lib.make_params(), lib.make_info(SIZES))
  assert int(state.rounds) == 0
  apply = _jitted_apply(agg)
  for t in range(3):
    deltas, selection, avail, aux = _round_inputs(jax.random.PRNGKey(5), t)
    _, state = apply(state, deltas, selection, avail, jnp.asarray(t, jnp.int32), aux)
  assert int(state.rounds) == 3
