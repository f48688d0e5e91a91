"""EMD: FedEMD's L1 form, exact 1-D transport and Sinkhorn against linear programming."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from scipy.optimize import linprog

from fedjax_sel import similarity as sim

C = 10
UNIFORM = np.full(C, 0.1, np.float32)
ONE_HOT = np.eye(C, dtype=np.float32)


def _exact_ot(p, q, cost):
  n, m = cost.shape
  a_eq = np.zeros((n + m, n * m))
  for i in range(n):
    a_eq[i, i * m : (i + 1) * m] = 1
  for j in range(m):
    a_eq[n + j, j::m] = 1
  res = linprog(
    cost.reshape(-1), A_eq=a_eq, b_eq=np.concatenate([p, q]), bounds=(0, None), method="highs"
  )
  return res.fun


def test_fedemd_l1_hand_values():
  # uniform vs one-hot: 0.9 + 9 * 0.1 = 1.8; two different one-hots: 2
  np.testing.assert_allclose(float(sim.emd(UNIFORM, ONE_HOT[0])), 1.8, atol=1e-6)
  np.testing.assert_allclose(float(sim.emd(ONE_HOT[2], ONE_HOT[7])), 2.0, atol=1e-6)
  np.testing.assert_allclose(float(sim.emd(ONE_HOT[4], ONE_HOT[4])), 0.0, atol=1e-7)
  # counts are normalized first
  np.testing.assert_allclose(float(sim.emd(UNIFORM * 30, ONE_HOT[0] * 3)), 1.8, atol=1e-6)


def test_emd_matrix_equals_pairwise_and_chunked():
  rng = np.random.default_rng(0)
  p = rng.integers(0, 9, (13, C)).astype(np.float32) + 0.1
  q = rng.integers(0, 9, (6, C)).astype(np.float32) + 0.1
  expected = np.array([[float(sim.emd(a, b)) for b in q] for a in p])
  np.testing.assert_allclose(np.asarray(sim.emd_matrix(p, q)), expected, atol=1e-5)
  np.testing.assert_allclose(np.asarray(sim.emd_matrix(p, q, chunk=4)), expected, atol=1e-5)


def test_emd_1d_hand_values_and_linprog():
  # one-hot at 0 vs uniform on a line: mean distance 0.1 * (0 + 1 + ... + 9) = 4.5
  np.testing.assert_allclose(float(sim.emd_1d(ONE_HOT[0], UNIFORM)), 4.5, atol=1e-5)
  for i, j in [(0, 3), (2, 9), (5, 4)]:  # shifted one-hots: |i - j|
    np.testing.assert_allclose(float(sim.emd_1d(ONE_HOT[i], ONE_HOT[j])), abs(i - j), atol=1e-6)
  rng = np.random.default_rng(1)
  cost = np.asarray(sim.line_cost(C), np.float64)
  for _ in range(5):
    p, q = rng.dirichlet(np.ones(C)), rng.dirichlet(np.ones(C))
    np.testing.assert_allclose(float(sim.emd_1d(p, q)), _exact_ot(p, q, cost), atol=1e-5)


def test_zero_one_ground_cost_is_half_the_l1_form():
  cost = sim.zero_one_cost(C)
  for p, q, l1 in [(UNIFORM, ONE_HOT[0], 1.8), (ONE_HOT[1], ONE_HOT[8], 2.0)]:
    got = float(sim.emd_general(p, q, cost))
    tol = 1e-3 * np.log(C * C) + 2e-4  # the stated Sinkhorn tolerance (max cost = 1)
    assert l1 / 2 - 1e-5 <= got <= l1 / 2 + tol


def test_sinkhorn_matches_linprog_within_stated_tolerance():
  """12 random 10 x 10 problems (some classes with zero mass) against scipy's linprog."""
  rng = np.random.default_rng(2)
  n = m = C
  for _ in range(12):
    p = rng.dirichlet(np.full(n, 0.7)) * (rng.random(n) < 0.8)
    q = rng.dirichlet(np.full(m, 0.7)) * (rng.random(m) < 0.8)
    p[0] += 0.05
    q[1] += 0.05
    p, q = p / p.sum(), q / q.sum()
    cost = rng.random((n, m)) * rng.uniform(0.5, 5.0)
    exact = _exact_ot(p, q, cost)
    res = sim.sinkhorn(p.astype(np.float32), q.astype(np.float32), cost.astype(np.float32))
    # reg * max(cost) * (log n + log m) + 2 * tol * max(cost), defaults reg = 1e-3, tol = 1e-4
    bound = cost.max() * (1e-3 * np.log(n * m) + 2e-4)
    assert exact - 1e-4 * cost.max() <= float(res.cost) <= exact + bound
    plan = np.asarray(res.plan)
    assert np.all(plan >= 0)
    np.testing.assert_allclose(plan.sum(1), p, atol=1e-5)
    np.testing.assert_allclose(plan.sum(0), q, atol=1e-5)


def test_sinkhorn_line_cost_recovers_1d_emd():
  got = float(sim.emd_general(UNIFORM, ONE_HOT[0], sim.line_cost(C)))
  assert 4.5 - 1e-4 <= got <= 4.5 + 9 * (1e-3 * np.log(C * C) + 2e-4)
  np.testing.assert_allclose(
    float(sim.emd_general(ONE_HOT[2], ONE_HOT[6], sim.line_cost(C))), 4.0, atol=1e-4
  )
  assert jnp.isfinite(sim.emd_general(ONE_HOT[2], ONE_HOT[6], sim.line_cost(C)))
