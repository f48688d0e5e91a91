"""Synthetic ``recipe="fedgs"``: the FedGS paper's exact instance (issue 14).

The expected values are worked out here from the generator's published facts (easyFL
``synthetic_regression``, dist 10: numpy's legacy RNG seeded with 97 + seed; draw order
W_global, b_global, u, W_k..., b_k..., B, v_k..., sizes, then X_k per client; X_k ~
MVN(v_k, diag((j+1)^-1.2)) drawn by numpy as standard normals times the square root of the
covariance; 75 / 15 / 10 split), independently of ``fedjax_sel.data.synthetic``: the
multivariate normal is rebuilt from standard normals, not with ``multivariate_normal``.
"""

import numpy as np
import pytest

from fedjax_sel import data
from fedjax_sel.data.synthetic import synthetic

N = 30
D, C = 60, 10


def _reference(seed=0, skew=0.5, clients=(0, 1, 17)):
  rs = np.random.RandomState(97 + seed)
  rs.normal(0, 1, (D, C))
  rs.normal(0, 1, C)
  u = rs.normal(0, skew, N)
  w = [rs.normal(u[k], 1, (D, C)) for k in range(N)]
  b = [rs.normal(u[k], 1, C) for k in range(N)]
  big_b = rs.normal(0, skew, N)
  v = [rs.normal(big_b[k], 1, D) for k in range(N)]
  sizes = (rs.lognormal(4, 2, N)).astype(int) + 50
  std = np.arange(1, D + 1, dtype=np.float64) ** -0.6  # sqrt of (j + 1)^-1.2
  xs = {}
  for k in range(max(clients) + 1):
    z = rs.standard_normal((sizes[k], D))
    if k in clients:
      xs[k] = v[k] + z * std
  return sizes, w, b, xs


@pytest.fixture(scope="module")
def inst():
  return synthetic(0.5, 0.5, N, seed=0, recipe="fedgs")


def test_sizes_and_splits_follow_the_generator(inst):
  sizes, *_ = _reference()
  train_n = (0.75 * sizes).astype(int)
  valid_n = (0.90 * sizes).astype(int) - train_n
  np.testing.assert_array_equal(inst.train.counts, train_n)
  np.testing.assert_array_equal(inst.test.counts, valid_n)
  # The server's test set is the last 10 % of every client, pooled in client order.
  assert len(inst.test_y) == int(np.sum(sizes - (0.90 * sizes).astype(int)))
  # Hand-checked facts of this instance (seed 0): 8,735 examples, 6,541 for training.
  assert int(sizes.sum()) == 8735 and int(train_n.sum()) == 6541 and len(inst.test_y) == 888
  assert inst.num_classes == 10 and inst.input_shape == (60,)


def test_examples_labels_and_true_models_follow_the_generator(inst):
  sizes, w, b, xs = _reference()
  for k, x in xs.items():
    y = np.argmax(x @ w[k] + b[k], axis=1)
    a = int(0.75 * sizes[k])
    e = int(0.90 * sizes[k])
    tx, ty = inst.train.client(k)
    np.testing.assert_allclose(tx, x[:a], rtol=0, atol=1e-5)
    np.testing.assert_array_equal(ty, y[:a])
    vx, vy = inst.test.client(k)
    np.testing.assert_allclose(vx, x[a:e], rtol=0, atol=1e-5)
    np.testing.assert_array_equal(vy, y[a:e])
    np.testing.assert_allclose(
      inst.extras["true_params"][k], np.concatenate([w[k].ravel(), b[k]]), atol=1e-6
    )
  # Client 0's last 10 % opens the global test set; client 1's follows it.
  n0 = sizes[0] - int(0.9 * sizes[0])
  np.testing.assert_allclose(inst.test_x[:n0], xs[0][int(0.9 * sizes[0]) :], atol=1e-5)
  start1 = n0
  n1 = sizes[1] - int(0.9 * sizes[1])
  y1 = np.argmax(xs[1] @ w[1] + b[1], axis=1)
  np.testing.assert_array_equal(inst.test_y[start1 : start1 + n1], y1[int(0.9 * sizes[1]) :])


def test_seed_moves_the_generator_seed():
  other = synthetic(0.5, 0.5, N, seed=1, recipe="fedgs")
  sizes, *_ = _reference(seed=1)
  np.testing.assert_array_equal(other.train.counts, (0.75 * sizes).astype(int))


def test_load_and_validation():
  d = data.load("synthetic", N, seed=0, alpha=0.5, beta=0.5, recipe="fedgs")
  assert d.name == "synthetic(0.5,0.5)_fedgs" and int(d.train.counts.sum()) == 6541
  with pytest.raises(ValueError, match="recipe 'fedavg'"):
    synthetic(0.5, 0.5, N, recipe="fedavg")
  with pytest.raises(ValueError, match="alpha == beta"):
    synthetic(0.5, 1.0, N, recipe="fedgs")
  with pytest.raises(ValueError, match="examples_per_client=20"):
    synthetic(0.5, 0.5, N, examples_per_client=20, recipe="fedgs")
  with pytest.raises(ValueError, match="test_fraction=0.2"):
    data.load("synthetic", N, alpha=0.5, beta=0.5, recipe="fedgs", test_fraction=0.2)
  # The default recipe is unchanged.
  assert synthetic(0.5, 0.5, N).name == "synthetic(0.5,0.5)"
