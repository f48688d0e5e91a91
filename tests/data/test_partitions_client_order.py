"""shards(client_order=...): Fraboni et al.'s one-class ids (clients 10d..10d+9 hold digit d)."""

import numpy as np
import pytest

from fedjax_sel.data import partitions as P

NUM_CLASSES = 10


def _labels(per_class=5000):
  return np.repeat(np.arange(NUM_CLASSES), per_class)


def _classes(parts, labels):
  held = [np.unique(labels[p]) for p in parts]
  assert all(len(h) == 1 for h in held)
  return np.array([h[0] for h in held])


@pytest.mark.parametrize("seed", [0, 3])
def test_by_label_gives_client_10d_to_10d_plus_9_the_class_d(seed):
  """The authors' one-class MNIST data: 100 clients x 500 samples, client 10d + j holds
  digit d (their partition loops over the digits, then over 10 clients per digit)."""
  labels = _labels()
  parts = P.shards(labels, 100, 1, np.random.default_rng(seed), client_order="by_label")
  np.testing.assert_array_equal(_classes(parts, labels), np.arange(100) // 10)
  assert [len(p) for p in parts] == [500] * 100


@pytest.mark.parametrize("seed", [0, 3])
def test_by_label_renumbers_the_random_orders_clients(seed):
  """Same draw, same clients: by_label's client 10d + j is the j-th (by id) random-order
  client holding class d, with the same examples in the same order."""
  labels = _labels()
  rand = P.shards(labels, 100, 1, np.random.default_rng(seed))
  ordered = P.shards(labels, 100, 1, np.random.default_rng(seed), client_order="by_label")
  rand_class = _classes(rand, labels)
  # the random order is not sorted by class (else the option would change nothing)
  assert np.any(np.diff(rand_class) < 0)
  for d in range(NUM_CLASSES):
    holders = np.flatnonzero(rand_class == d)
    assert len(holders) == 10
    for j, k in enumerate(holders):
      np.testing.assert_array_equal(ordered[10 * d + j], rand[k])


def test_by_label_sorts_label_sets_with_two_labels_per_client():
  labels = _labels(per_class=600)
  rand = P.shards(labels, 30, 2, np.random.default_rng(1))
  ordered = P.shards(labels, 30, 2, np.random.default_rng(1), client_order="by_label")
  sets = [tuple(np.unique(labels[p])) for p in ordered]
  assert sets == sorted(sets)  # non-decreasing label sets
  assert sorted(sets) == sorted(tuple(np.unique(labels[p])) for p in rand)


def test_client_order_by_name_and_validation():
  labels = _labels(per_class=100)
  parts = P.partition_indices(
    "shards", labels, 20, np.random.default_rng(0), labels_per_client=1, client_order="by_label"
  )
  np.testing.assert_array_equal(_classes(parts, labels), np.arange(20) // 2)
  default = P.partition_indices("shards", labels, 20, np.random.default_rng(0), labels_per_client=1)
  explicit = P.shards(labels, 20, 1, np.random.default_rng(0), client_order="random")
  for a, b in zip(default, explicit):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match=r"client_order='sorted'; allowed: random, by_label"):
    P.shards(labels, 20, 1, np.random.default_rng(0), client_order="sorted")
  with pytest.raises(ValueError, match="client_order"):  # not a hyper-parameter of iid
    P.partition_indices("iid", labels, 20, np.random.default_rng(0), client_order="by_label")
