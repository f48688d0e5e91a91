"""Exact equivalences between aggregators, and FedAvg's renormalization."""

from __future__ import annotations

import aggregation_testlib as lib
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import aggregation

NUM_CLIENTS = 6  # with M = N = 6, the same shapes as the contract tests (shared eager caches)


def _run(agg, rounds, num_examples, shared=True):
  """Applies ``agg`` to a list of (deltas, selection, avail, aux); returns the updates.

  ``shared``: use the cached jit of the contract tests (same N = M = 6 shapes, explicit aux),
  else a plain jit.
  """
  state = agg.init(lib.make_params(), lib.make_info(num_examples))
  chex.clear_trace_counter()  # one aggregator per call; configs of one name share a footprint
  apply = lib.jitted_apply(agg) if shared else jax.jit(agg.apply)
  updates = []
  for t, (deltas, selection, avail, aux) in enumerate(rounds):
    update, state = apply(state, deltas, selection, avail, jnp.asarray(t, jnp.int32), aux)
    updates.append(update)
  return updates, state


def _full_rounds(num_examples, num_rounds=3, seed=0):
  """Full availability, cohort = all N clients, weights 1/N."""
  n = len(num_examples)
  selection = lib.selection_of(jnp.arange(n), weights=jnp.full((n,), 1.0 / n))
  aux = lib.aux_of(n, n, num_examples=num_examples)
  avail = jnp.ones((n,), bool)
  keys = jax.random.split(jax.random.PRNGKey(seed), num_rounds)
  return [(lib.random_deltas(k, n), selection, avail, aux) for k in keys]


# Every registered config, full availability and equal sizes: all weightings coincide (1/N).
EQUAL_SIZE_CONFIGS = [(name, {}) for name in aggregation.names()] + [
  ("fedar", {"rho": 1.0, "cutoff": "nonconvex", "t0": 2.0}),
  ("fdms", {"complexity_reduction": True, "theta_scale": 0.01}),
]


@pytest.mark.parametrize(
  "name,hparams", EQUAL_SIZE_CONFIGS, ids=[n + str(h) for n, h in EQUAL_SIZE_CONFIGS]
)
def test_full_availability_equal_sizes_equals_fedavg(name, hparams):
  sizes = np.full(NUM_CLIENTS, 4)
  rounds = _full_rounds(sizes)
  got, _ = _run(lib.build(name, hparams), rounds, sizes)
  for (deltas, *_), g in zip(rounds, got, strict=True):
    # FedAvg on the cohort of all N clients with weights 1/N (fedavg is one of the configs).
    lib.assert_tree_close(
      g, lib.weighted_mean(deltas, np.full(NUM_CLIENTS, 1.0 / NUM_CLIENTS)), atol=1e-6
    )


@pytest.mark.parametrize("weighting", ["uniform", "num_examples"])
def test_mifa_equals_fedar_under_full_availability_any_sizes(weighting):
  """Weights: q_i = 1/N ("uniform") or n_i / sum n ("num_examples") in both methods; any
  rho, since every staleness is 0 and psi = 1."""
  sizes = np.array([1, 7, 2, 30, 5, 3])
  rounds = _full_rounds(sizes, num_rounds=4, seed=1)
  mifa, _ = _run(lib.build("mifa", dict(weighting=weighting)), rounds, sizes)
  q = np.ones(NUM_CLIENTS) if weighting == "uniform" else sizes.astype(np.float64)
  for (deltas, *_), m in zip(rounds, mifa, strict=True):
    lib.assert_tree_close(m, lib.weighted_mean(deltas, q / q.sum()), atol=1e-6)
  for rho in (0.1, 1.0):
    fedar, _ = _run(lib.build("fedar", dict(weighting=weighting, rho=rho)), rounds, sizes)
    for m, f in zip(mifa, fedar, strict=True):
      lib.assert_tree_close(m, f, atol=1e-6)


def _partial_rounds(num_rounds=6, seed=2):
  """Round 0: everyone answers; later rounds: random subsets (cohort = the available ones)."""
  n = NUM_CLIENTS
  rng = np.random.default_rng(seed)
  keys = jax.random.split(jax.random.PRNGKey(seed), num_rounds)
  rounds = []
  for t in range(num_rounds):
    avail = np.ones(n, bool) if t == 0 else rng.random(n) < 0.5
    selection = lib.selection_of(jnp.arange(n), valid=avail)
    rounds.append((lib.random_deltas(keys[t], n), selection, jnp.asarray(avail), lib.aux_of(n, n)))
  return rounds


def test_stale_equals_fedar_without_rectification_and_mifa_after_everyone_answered():
  """FedAR with rho = 0 and no cutoff is the plain average of every seen client's latest
  update: Stale always, and MIFA once every client has answered (round 0 here)."""
  sizes = np.ones(NUM_CLIENTS)
  rounds = _partial_rounds()
  fedar, _ = _run(lib.build("fedar", dict(rho=0.0, cutoff="none")), rounds, sizes)
  stale, _ = _run(lib.build("stale"), rounds, sizes)
  mifa, _ = _run(lib.build("mifa"), rounds, sizes)
  for f, s, m in zip(fedar, stale, mifa, strict=True):
    lib.assert_tree_close(f, s, atol=1e-6)
    lib.assert_tree_close(f, m, atol=1e-6)


def test_stale_leaves_never_seen_clients_out_but_mifa_counts_them_as_zero():
  n = NUM_CLIENTS
  deltas = lib.random_deltas(jax.random.PRNGKey(5), n)
  avail = jnp.array([True, True, False, False, False, False])
  rounds = [(deltas, lib.selection_of(jnp.arange(n), valid=avail), avail, lib.aux_of(n, n))]
  stale, _ = _run(lib.build("stale"), rounds, np.ones(n))
  mifa, _ = _run(lib.build("mifa"), rounds, np.ones(n))
  lib.assert_tree_close(stale[0], lib.weighted_mean(deltas, [1 / 2, 1 / 2, 0, 0, 0, 0]))
  lib.assert_tree_close(mifa[0], lib.weighted_mean(deltas, [1 / 6, 1 / 6, 0, 0, 0, 0]))


def test_fedavg_renormalizes_over_finite_valid_slots():
  n = 4
  deltas = lib.random_deltas(jax.random.PRNGKey(6), n)
  deltas = jax.tree_util.tree_map(lambda x: x.at[2].set(jnp.nan), deltas)
  weights = jnp.array([0.1, 0.2, 0.3, 0.4])
  selection = lib.selection_of(jnp.arange(n), weights=weights)
  aux = lib.aux_of(n, n, finite=[True, True, False, True])
  agg = lib.build("fedavg")
  update, _ = jax.jit(agg.apply)(
    agg.init(lib.make_params(), lib.make_info(np.ones(n))),
    deltas,
    selection,
    jnp.ones((n,), bool),
    0,
    aux,
  )
  # Received weights 0.1, 0.2, 0.4 rescaled to the valid total 1.0.
  clean = jax.tree_util.tree_map(lambda x: jnp.nan_to_num(x), deltas)
  lib.assert_tree_close(update, lib.weighted_mean(clean, np.array([0.1, 0.2, 0.0, 0.4]) / 0.7))


def test_fedvarp_hand_computed_two_rounds():
  """Round 0: y = 0, everyone answers -> mean. Round 1: only client 0 answers with d ->
  mean(y) + (d - y_0) where y = round-0 updates."""
  n = 3
  first = lib.random_deltas(jax.random.PRNGKey(7), n)
  second = lib.random_deltas(jax.random.PRNGKey(8), n)
  avail1 = jnp.array([True, False, False])
  rounds = [
    (first, lib.selection_of(jnp.arange(n)), jnp.ones((n,), bool), None),
    (second, lib.selection_of(jnp.arange(n), valid=avail1), avail1, None),
  ]
  (u0, u1), state = _run(lib.build("fedvarp"), rounds, np.ones(n), shared=False)
  mean_first = lib.weighted_mean(first, np.full(n, 1 / 3))
  lib.assert_tree_close(u0, mean_first)
  expected = {k: mean_first[k] + np.asarray(second[k][0]) - np.asarray(first[k][0]) for k in first}
  lib.assert_tree_close(u1, expected, atol=1e-6)
  lib.assert_tree_close(state.memory["b"][0], second["b"][0])
  lib.assert_tree_close(state.memory["b"][1:], first["b"][1:])
