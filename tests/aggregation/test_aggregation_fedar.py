"""FedAR: psi of Eq. 6 on hand-computed staleness values, the cutoff g(t), and Eq. 7."""

from __future__ import annotations

import aggregation_testlib as lib
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import aggregation
from fedjax_sel.aggregation.fedar import staleness_cutoff, staleness_weight


def test_psi_matches_eq6_on_hand_values_convex_cutoff():
  # g(8) = t0 + t / b = 2 + 8 / 4 = 4, so tau = 4 sits exactly at the cutoff.
  tau = jnp.array([0, 1, 2, 3, 4, 9])
  psi = staleness_weight(tau, 8, rho=0.5, cutoff="convex", t0=2.0, b=4.0)
  np.testing.assert_allclose(psi, [1.0, np.sqrt(2), np.sqrt(3), 2.0, 0.0, 0.0], rtol=1e-6)
  # rho = 1: (tau + 1) capped at psi_max = 2.
  psi = staleness_weight(tau, 8, rho=1.0, cutoff="convex", t0=2.0, b=4.0)
  np.testing.assert_allclose(psi, [1.0, 2.0, 2.0, 2.0, 0.0, 0.0])
  # rho = 0.1 (the paper's value): 2^0.1 = 1.071773..., 3^0.1 = 1.116123...
  psi = staleness_weight(jnp.array([1, 2]), 100, rho=0.1)
  np.testing.assert_allclose(psi, [1.0717735, 1.1161232], rtol=1e-6)


def test_cutoff_forms():
  np.testing.assert_allclose(staleness_cutoff(8, "convex", t0=2.0, b=4.0), 4.0)
  # Non-convex: scale * max(sqrt(t), sqrt(t0)).
  np.testing.assert_allclose(staleness_cutoff(9, "nonconvex", t0=4.0, scale=1.0), 3.0)
  np.testing.assert_allclose(staleness_cutoff(1, "nonconvex", t0=4.0, scale=0.5), 1.0)
  assert np.isinf(staleness_cutoff(5, "none"))
  psi = staleness_weight(jnp.array([2, 3]), 9, rho=0.5, cutoff="nonconvex", t0=4.0)
  np.testing.assert_allclose(psi, [np.sqrt(3), 0.0], rtol=1e-6)
  with pytest.raises(ValueError, match="cutoff"):
    staleness_cutoff(1, "concave")


def test_update_follows_eq7_and_drops_client_at_cutoff():
  """3 clients; client 2 answers only in round 0. Round index t is the paper's round t + 1,
  so g = 2 + (t + 1) / 4: t=1 -> 2.5, t=2 -> 2.75, t=3 -> 3.0, and tau(2, t) = t."""
  n = 3
  agg = aggregation.make("fedar", rho=0.5, cutoff="convex", t0=2.0, b=4.0)
  state = agg.init(lib.make_params(), lib.make_info(np.ones(n)))
  rows = {
    0: [[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]],
    1: [[2.0, 2.0], [4.0, 0.0], [0.0, 0.0]],
    2: [[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]],
    3: [[3.0, 0.0], [0.0, 3.0], [0.0, 0.0]],
  }
  client_2 = np.array([5.0, 5.0])
  for t in range(4):
    avail = jnp.array([True, True, t == 0])
    deltas = lib.deltas_from_b(rows[t])
    update, state = jax.jit(agg.apply)(
      state, deltas, lib.selection_of(jnp.arange(n), avail), avail, t
    )
    fresh = np.asarray(rows[t][0]) + np.asarray(rows[t][1])
    if t == 0:
      expected, contributing = (fresh + client_2) / 3, 3
    elif t < 3:  # psi = sqrt(t + 1): sqrt(2) at t=1, sqrt(3) at t=2.
      expected, contributing = (fresh + np.sqrt(t + 1) * client_2) / 3, 3
    else:  # tau = 3 >= g = 3: dropped, N_t = 2.
      expected, contributing = fresh / 2, 2
    np.testing.assert_allclose(update["b"], expected, rtol=1e-6)
    np.testing.assert_allclose(update["w"], 0.0)
    assert int(state.staleness[2]) == t
    assert float(state.num_contributing) == contributing
  # The memory still holds client 2's last update.
  np.testing.assert_allclose(state.memory["b"][2], client_2)


def test_never_seen_clients_do_not_count_in_n_t():
  n = 4
  agg = aggregation.make("fedar")
  state = agg.init(lib.make_params(), lib.make_info(np.ones(n)))
  avail = jnp.array([True, False, True, False])
  deltas = lib.deltas_from_b([[2.0, 0.0], [9.0, 9.0], [0.0, 4.0], [9.0, 9.0]])
  update, state = jax.jit(agg.apply)(
    state, deltas, lib.selection_of(jnp.arange(n), avail), avail, 0
  )
  np.testing.assert_allclose(update["b"], [1.0, 2.0])
  assert float(state.num_contributing) == 2.0
