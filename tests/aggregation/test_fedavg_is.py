"""FedAvg-IS: importance weights 1/p_i make the update unbiased under random availability."""

from __future__ import annotations

import aggregation_testlib as lib
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import aggregation

PROBS = np.array([0.15, 0.3, 0.5, 0.7, 0.9, 1.0])
SIZES = np.array([10, 3, 8, 1, 6, 2])


def test_expected_update_equals_full_average_monte_carlo():
  n = PROBS.shape[0]
  num_draws = 4000
  deltas = lib.random_deltas(jax.random.PRNGKey(0), n)
  agg = aggregation.make("fedavg_is")  # weighting="num_examples"
  state = agg.init(lib.make_params(), lib.make_info(SIZES))
  aux = lib.aux_of(n, n, probs=PROBS, num_examples=SIZES)

  def one_draw(key):
    avail = jax.random.uniform(key, (n,)) < jnp.asarray(PROBS, jnp.float32)
    selection = lib.selection_of(jnp.arange(n), valid=avail)  # cohort = the available clients
    update, _ = agg.apply(state, deltas, selection, avail, 0, aux)
    return update

  updates = jax.jit(jax.vmap(one_draw))(jax.random.split(jax.random.PRNGKey(1), num_draws))
  q = SIZES / SIZES.sum()
  full = lib.weighted_mean(deltas, q)
  for k in deltas:
    d = np.asarray(deltas[k], np.float64)
    # Var of sum_i 1[avail_i] q_i / p_i d_i = sum_i q_i^2 d_i^2 (1 - p_i) / p_i.
    var = np.tensordot(q**2 * (1 - PROBS) / PROBS, d**2, axes=1)
    tol = 5 * np.sqrt(var / num_draws) + 1e-6
    mean = np.asarray(updates[k], np.float64).mean(0)
    assert np.all(np.abs(mean - full[k]) <= tol), (k, mean, full[k], tol)


def test_single_draw_weights_are_q_over_p():
  n = PROBS.shape[0]
  deltas = lib.random_deltas(jax.random.PRNGKey(2), n)
  avail = jnp.array([True, False, True, False, True, True])
  agg = aggregation.make("fedavg_is", weighting="uniform")
  state = agg.init(lib.make_params(), lib.make_info(SIZES))
  aux = lib.aux_of(n, n, probs=PROBS, num_examples=SIZES)
  update, _ = jax.jit(agg.apply)(
    state, deltas, lib.selection_of(jnp.arange(n), valid=avail), avail, 0, aux
  )
  lib.assert_tree_close(update, lib.weighted_mean(deltas, np.asarray(avail) / n / PROBS))
