"""MIFA: after a client's absence the aggregate uses exactly its last received update."""

from __future__ import annotations

import aggregation_testlib as lib
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import aggregation


def test_absent_client_contributes_exactly_its_last_update():
  n = 3
  agg = aggregation.make("mifa")
  state = agg.init(lib.make_params(), lib.make_info(np.ones(n)))
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  rounds = [lib.random_deltas(k, n) for k in keys]
  avails = [jnp.array([True, True, True])] + [jnp.array([True, True, False])] * 2
  updates = []
  for t, deltas in enumerate(rounds):
    avail = avails[t]
    update, state = jax.jit(agg.apply)(
      state, deltas, lib.selection_of(jnp.arange(n), avail), avail, t
    )
    updates.append(update)
  last = {k: np.asarray(v[2]) for k, v in rounds[0].items()}  # client 2's round-0 update
  for k in last:
    np.testing.assert_array_equal(np.asarray(state.memory[k][2]), last[k])
    expected = (np.asarray(rounds[2][k][0]) + np.asarray(rounds[2][k][1]) + last[k]) / 3
    np.testing.assert_allclose(np.asarray(updates[2][k]), expected, rtol=1e-6, atol=1e-7)


def test_slot_order_and_cohort_subset_do_not_matter():
  """Memory is indexed by client id: a permuted cohort with an extra invalid slot gives the
  same update."""
  n = 4
  agg = aggregation.make("mifa")
  state = agg.init(lib.make_params(), lib.make_info(np.ones(n)))
  deltas = lib.deltas_from_b([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0]])
  avail = jnp.array([True, True, False, True])
  sel = lib.selection_of([3, 0, 1], [True, True, True])
  update, state = jax.jit(agg.apply)(state, deltas, sel, avail, 0)
  # Clients 3, 0, 1 answered; client 2 never did and counts as zero.
  np.testing.assert_allclose(update["b"], [5.0 / 4, 6.0 / 4])
  np.testing.assert_allclose(state.memory["b"], [[0.0, 2.0], [4.0, 4.0], [0.0, 0.0], [1.0, 0.0]])


def test_average_over_seen_and_step_scale_by_hand():
  """Round 0: clients 0 and 1 of 4 answer. MIFA ("all"): (D_0 + D_1) / 4; over the seen:
  (D_0 + D_1) / 2; step_scale multiplies either. Round 1: client 2 answers as well (sum of
  the memory [8, 7]: / 4 over all, / 3 over the seen)."""
  n = 4
  sel = lib.selection_of([0, 1, 2])
  d0 = lib.deltas_from_b([[2.0, 0.0], [0.0, 4.0], [8.0, 8.0]])
  d1 = lib.deltas_from_b([[0.0, 0.0], [0.0, 0.0], [6.0, 3.0]])
  avails = [jnp.array([True, True, False, True]), jnp.array([False, False, True, True])]
  want = {
    ("all", 1.0): [[0.5, 1.0], [2.0, 1.75]],
    ("seen", 1.0): [[1.0, 2.0], [8.0 / 3, 7.0 / 3]],
    ("seen", 1.05): [[1.05, 2.1], [1.05 * 8.0 / 3, 1.05 * 7.0 / 3]],
    ("all", 0.5): [[0.25, 0.5], [1.0, 0.875]],
  }
  for (over, scale), rows in want.items():
    agg = aggregation.make("mifa", average_over=over, step_scale=scale)
    state = agg.init(lib.make_params(), lib.make_info(np.ones(n)))
    for t, (d, avail) in enumerate(zip((d0, d1), avails)):
      update, state = agg.apply(state, d, sel, avail, t)
      np.testing.assert_allclose(update["b"], rows[t], rtol=1e-6, err_msg=f"{over} {scale} {t}")
      np.testing.assert_array_equal(update["w"], np.zeros((3, 2)))


def test_mifa_over_seen_equals_fedar_without_rectification_under_a_decaying_lr():
  """average_over="seen" is FedAR with rho = 0 and no cutoff (psi = 1, N_t = |E|), also
  when stale rows meet a changed lr."""
  n, m = 5, 3
  mifa = aggregation.make("mifa", average_over="seen")
  fedar = aggregation.make("fedar", rho=0.0, cutoff="none")
  states = [a.init(lib.make_params(), lib.make_info(np.ones(n))) for a in (mifa, fedar)]
  key = jax.random.PRNGKey(3)
  for t in range(6):
    k_d, k_c, k_a = jax.random.split(jax.random.fold_in(key, t), 3)
    deltas = lib.random_deltas(k_d, m)
    sel = lib.selection_of(jax.random.permutation(k_c, n)[:m])
    avail = jax.random.bernoulli(k_a, 0.5, (n,))
    aux = lib.aux_of(n, m, lr=0.2 * 0.7**t)
    outs = []
    for k, agg in enumerate((mifa, fedar)):
      update, states[k] = agg.apply(states[k], deltas, sel, avail, t, aux)
      outs.append(update)
    lib.assert_tree_close(outs[0], outs[1], atol=1e-6, rtol=1e-6)
