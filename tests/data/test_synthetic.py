"""FedProx Synthetic(alpha, beta) follows the recipe's statistics."""

import numpy as np
import pytest

from fedjax_sel.data.synthetic import synthetic


def test_shapes_and_classes():
  d = synthetic(0.5, 0.5, num_clients=30, seed=0)
  assert d.num_clients == 30
  assert d.train.x.shape[1:] == (60,) and d.train.x.dtype == np.float32
  assert d.num_classes == 10
  assert set(np.unique(d.train.y)) <= set(range(10))
  # every client keeps ~10 % of its examples as its local test set; sizes >= 50 in total
  total = d.train.counts + d.test.counts
  assert total.min() >= 50
  np.testing.assert_allclose(d.test.counts / total, 0.1, atol=0.02)
  assert d.test_x.shape[0] == d.test.counts.sum()
  assert d.extras["true_params"].shape == (30, 610)
  # lognormal(4, 2) sizes are heavy-tailed: the largest client is much bigger than the median
  assert total.max() > 3 * np.median(total)


def test_inputs_follow_covariance():
  d = synthetic(0.0, 0.0, num_clients=1, examples_per_client=20000, seed=1)
  var = d.train.x.var(axis=0)
  expected = np.arange(1, 61, dtype=float) ** -1.2  # Sigma_jj = j^-1.2
  np.testing.assert_allclose(var, expected, rtol=0.1)


def test_heterogeneity_grows_with_alpha():
  def model_spread(alpha):
    d = synthetic(alpha, 0.0, num_clients=40, seed=2)
    w = d.extras["true_params"]
    return np.std(w.mean(axis=1))  # spread of the per-client model means u_k

  assert model_spread(1.0) > 3 * model_spread(0.0)
  assert model_spread(0.0) < 0.1  # alpha = 0: every u_k = 0, means differ by noise only


def test_labels_are_argmax_of_true_model():
  d = synthetic(0.5, 0.5, num_clients=5, seed=4)
  for k in range(5):
    x, y = d.train.client(k)
    wb = d.extras["true_params"][k]
    w, b = wb[:600].reshape(60, 10), wb[600:]
    np.testing.assert_array_equal(np.argmax(x @ w + b, axis=1), y)


def test_iid_variant_shares_one_model():
  d = synthetic(0.5, 0.5, num_clients=4, iid=True, seed=0)
  np.testing.assert_array_equal(d.extras["true_params"][0], d.extras["true_params"][3])


def test_examples_per_client_and_validation():
  d = synthetic(num_clients=7, examples_per_client=33, seed=0)
  assert d.train.counts.tolist() == [33] * 7
  with pytest.raises(ValueError, match="alpha=-1"):
    synthetic(alpha=-1)
  with pytest.raises(ValueError, match="num_clients=0"):
    synthetic(num_clients=0)
