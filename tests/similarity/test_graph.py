"""3DG: adjacency (FedGS Sec. 3.2), Floyd-Warshall vs scipy, normalization, edge F1."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.sparse.csgraph import shortest_path

from fedjax_sel import similarity as sim


def _random_graph(seed, n, density):
  rng = np.random.default_rng(seed)
  w = rng.random((n, n)).astype(np.float32) + 0.01
  w[rng.random((n, n)) > density] = np.inf
  w = np.minimum(w, w.T)
  w[: n // 10, :] = np.inf  # a few isolated nodes -> disconnected pairs
  w[:, : n // 10] = np.inf
  np.fill_diagonal(w, 0)
  return w


@pytest.mark.parametrize("block_size", [1, 5, 16])
def test_floyd_warshall_equals_scipy(block_size):
  for seed, density in enumerate([0.15, 0.05, 0.5]):  # one shape: one compile per block size
    n = 37
    w = _random_graph(seed, n, density)
    ref = shortest_path(np.where(np.isinf(w), 0, w), method="D", directed=False)
    got = np.asarray(sim.floyd_warshall(jnp.asarray(w), block_size=block_size))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-5, atol=1e-6)


def test_adjacency_and_normalized_distances_hand_case():
  v = jnp.asarray(
    [[1.0, 0.5, 0.05, 0.0], [0.5, 1.0, 0.2, 0.0], [0.05, 0.2, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
  )
  g = sim.build_3dg(v, sigma2=0.1, epsilon=0.1)
  r = np.asarray(g.adjacency)
  e5, e2 = np.exp(-5.0), np.exp(-2.0)
  np.testing.assert_allclose(r[0, 1], e5, rtol=1e-5)
  np.testing.assert_allclose(r[1, 2], e2, rtol=1e-5)
  assert np.isinf(r[0, 2]) and np.isinf(r[3, :3]).all() and np.all(np.diag(r) == 0)
  h = np.asarray(g.distances)
  top = e5 + e2  # longest finite shortest path: 0 -> 1 -> 2
  expected = np.array(
    [[0, e5 / top, 1, 1], [e5 / top, 0, e2 / top, 1], [1, e2 / top, 0, 1], [1, 1, 1, 0]]
  )
  np.testing.assert_allclose(h, expected, rtol=1e-5, atol=1e-7)


def test_3dg_of_random_similarity_is_a_normalized_metric_and_traced_once():
  build = jax.jit(chex.assert_max_traces(lambda v: sim.build_3dg(v, 0.01, 0.1), n=1))
  for seed in range(3):
    x = jax.random.uniform(jax.random.PRNGKey(seed), (30, 4))
    g = build(sim.label_distribution(x))
    h = np.asarray(g.distances)
    assert np.all((h >= 0) & (h <= 1)) and np.allclose(h, h.T) and np.all(np.diag(h) == 0)
    np.testing.assert_allclose(h.max(), 1.0)
    # triangle inequality holds for connected triples (disconnected pairs are clamped to 1)
    d = np.asarray(sim.floyd_warshall(g.adjacency))
    fin = np.isfinite(d)
    viol = d[:, :, None] > d[:, None, :] + d.T[None, :, :] + 1e-6
    assert not np.any(viol & fin[:, :, None] & fin[:, None, :] & fin.T[None])


def test_graph_f1_hand_case():
  inf = np.inf
  oracle = jnp.asarray([[0, 1, inf], [1, 0, 1], [inf, 1, 0]], jnp.float32)  # edges 01, 12
  pred = jnp.asarray([[0, 1, 1], [1, 0, inf], [1, inf, 0]], jnp.float32)  # edges 01, 02
  p, r, f = sim.graph_f1(pred, oracle)
  np.testing.assert_allclose([float(p), float(r), float(f)], [0.5, 0.5, 0.5])
  # the authors' code also counts the 3 self-loops: (1 + 3) / (2 + 3)
  p, r, f = sim.graph_f1(pred, oracle, include_diagonal=True)
  np.testing.assert_allclose([float(p), float(r), float(f)], [0.8, 0.8, 0.8], rtol=1e-6)
  # boolean adjacency input; a superset prediction has recall 1, precision 2/3
  full = jnp.ones((3, 3), bool)
  p, r, f = sim.graph_f1(full, oracle)
  np.testing.assert_allclose([float(p), float(r), float(f)], [2 / 3, 1.0, 0.8], rtol=1e-6)
  # an empty prediction scores 0 (no division by zero)
  empty = jnp.full((3, 3), inf).at[jnp.arange(3), jnp.arange(3)].set(0.0)
  assert [float(x) for x in sim.graph_f1(empty, oracle)] == [0.0, 0.0, 0.0]


def test_3dg_matches_float64_on_dense_graph_of_similar_clients():
  """sigma^2 = 0.01: raw edge lengths exp(-V / 0.01) underflow float32 for V > 0.87 and
  the longest shortest path is ~1e-37, at the edge of float32's range; the rescaled
  computation matches float64 to 1e-6."""
  x = jax.random.uniform(jax.random.PRNGKey(0), (30, 4))
  v = sim.label_distribution(x)
  h = np.asarray(sim.build_3dg(v, 0.01, 0.1).distances)
  v64 = np.asarray(v, np.float64)
  d = np.where(v64 >= 0.1, np.exp(-v64 / 0.01), np.inf)
  np.fill_diagonal(d, 0)
  for k in range(30):  # float64 Floyd-Warshall
    d = np.minimum(d, d[:, k : k + 1] + d[k : k + 1, :])
  fin = np.isfinite(d)
  ref = np.where(fin, d / d[fin].max(), 1.0)
  np.fill_diagonal(ref, 0)
  assert d[fin].max() < 1e-35
  np.testing.assert_allclose(h, ref, atol=1e-6)
  assert (h > 0.01).sum() > 0
