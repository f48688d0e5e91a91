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
