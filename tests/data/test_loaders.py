"""``load``: synthetic, digits (offline), local splits, examples_per_client, validation."""

import sys

import numpy as np
import pytest

from fedjax_sel.data import loaders
from fedjax_sel.data.federated import label_counts
from fedjax_sel.data.loaders import DATASETS, DatasetNotFoundError, federate, load
from fedjax_sel.data.partitions import CLUSTERED_SAMPLING_GROUPS, group_sizes

digits = pytest.importorskip("fedjax_sel.data.digits")
pytest.importorskip("sklearn")


def test_digits_splits_fixed_and_scaled():
  x, y = digits.load_digits("train")
  tx, ty = digits.load_digits("test")
  assert x.shape == (1437, 8, 8, 1) and tx.shape == (360, 8, 8, 1)
  assert x.dtype == np.float32 and y.dtype == np.int32
  assert x.min() == 0.0 and x.max() == 1.0  # 0..16 scaled by 1/16
  assert sorted(np.unique(np.concatenate([y, ty])).tolist()) == list(range(10))
  # Train + test is exactly the 1,797 sklearn images (a partition of the rows).
  from sklearn.datasets import load_digits as sk_load

  rows = lambda a: sorted(r.tobytes() for r in (a.reshape(len(a), -1) * 16).astype(np.uint8))
  full = sk_load().images.astype(np.float32)
  assert rows(np.concatenate([x, tx])) == rows(full / 16.0)
  x2, _ = digits.load_digits("train")
  np.testing.assert_array_equal(x, x2)


def test_digits_one_class_per_client():
  fd = load("digits", 10, "shards", labels_per_client=1, seed=0)
  lc = label_counts(fd.train, fd.num_classes)
  assert ((lc > 0).sum(axis=1) == 1).all()  # one class each
  assert sorted(lc.argmax(axis=1).tolist()) == list(range(10))  # every digit owned once
  tlc = label_counts(fd.test, fd.num_classes)
  assert ((tlc > 0) <= (lc > 0)).all()  # local test labels = the client's own class
  assert fd.train.counts.sum() + fd.test.counts.sum() == 1437
  assert fd.test_x.shape == (360, 8, 8, 1)
  info = fd.client_info()
  np.testing.assert_array_equal(np.asarray(info.label_counts), lc)


def test_local_split_fractions():
  fd = load("digits", 5, "iid", seed=0, test_fraction=0.2)
  n = fd.train.counts + fd.test.counts
  np.testing.assert_array_equal(fd.test.counts, np.round(n * 0.2).astype(int))


def test_examples_per_client_exact_train_and_proportional_test():
  fd = load("digits", 10, "iid", seed=0, examples_per_client=50)
  assert fd.train.counts.tolist() == [50] * 10
  assert fd.test.counts.tolist() == [round(50 * 0.2 / 0.8)] * 10  # 12 (train:test = 4:1)


def test_examples_per_client_limits_small_clients():
  fd = load("digits", 10, "shards", labels_per_client=1, examples_per_client=1000)
  assert (fd.train.counts < 1000).all()  # ~144 per class: all kept, none padded


def test_seed_determinism():
  a = load("digits", 8, "dirichlet", seed=3, alpha=0.5)
  b = load("digits", 8, "dirichlet", seed=3, alpha=0.5)
  c = load("digits", 8, "dirichlet", seed=4, alpha=0.5)
  np.testing.assert_array_equal(a.train.x, b.train.x)
  np.testing.assert_array_equal(a.train.counts, b.train.counts)
  assert not np.array_equal(label_counts(a.train, 10), label_counts(c.train, 10))
  assert a.name == "digits/dirichlet(alpha=0.5)"


def test_clustered_groups_in_extras():
  fd = load("digits", 10, "clustered", num_groups=5, seed=0)
  groups = fd.extras["groups"]
  assert groups.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
  support = label_counts(fd.train, 10) > 0
  for g in range(5):
    a, b = np.flatnonzero(groups == g)
    np.testing.assert_array_equal(support[a], support[b])
    assert support[a].sum() == 2


def test_fraboni_unbalanced_setup_via_federate():
  # 10/30/30/20/10 clients with 100/250/500/750/1000 *training* samples and a fifth of
  # that for testing: partition sizes 1.2x the groups, test_fraction 1/6.
  labels = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 6000))
  x = np.zeros((len(labels), 1), np.float32)
  totals = (group_sizes() * 6) // 5
  fd = federate(
    x,
    labels,
    x[:5],
    labels[:5],
    10,
    100,
    "dirichlet",
    alpha=0.1,
    sizes=totals,
    test_fraction=1 / 6,
  )
  assert fd.train.counts.tolist() == group_sizes(CLUSTERED_SAMPLING_GROUPS).tolist()
  np.testing.assert_array_equal(fd.test.counts, fd.train.counts // 5)


def test_synthetic_natural_split():
  fd = load("synthetic", 6, seed=2, examples_per_client=40, alpha=1.0, beta=1.0)
  assert fd.train.counts.tolist() == [40] * 6 and fd.num_classes == 10
  assert fd.name == "synthetic(1,1)"
  assert load("synthetic", 6, "natural", seed=2).input_shape == (60,)


@pytest.mark.parametrize(
  "kwargs, needle",
  [
    (dict(dataset="imagenet", num_clients=10), "'imagenet'"),
    (dict(dataset="digits", num_clients=0), "num_clients=0"),
    (dict(dataset="digits", num_clients=2000), "num_clients=2000"),
    (dict(dataset="digits", num_clients=10, partition="zipf"), "'zipf'"),
    (dict(dataset="digits", num_clients=10, test_fraction=1.0), "test_fraction=1.0"),
    (dict(dataset="digits", num_clients=10, examples_per_client=0), "examples_per_client=0"),
    (dict(dataset="digits", num_clients=10, seed=-1), "seed=-1"),
    (dict(dataset="digits", num_clients=10, partition="dirichlet", alpha=0), "alpha=0"),
    (dict(dataset="digits", num_clients=10, partition="iid", beta=1), "beta"),
    (dict(dataset="synthetic", num_clients=10, partition="iid"), "partition='iid'"),
    (dict(dataset="synthetic", num_clients=10, labels_per_client=2), "labels_per_client"),
  ],
)
def test_bad_arguments_name_the_value(kwargs, needle):
  with pytest.raises(ValueError) as err:
    load(**kwargs)
  assert needle in str(err.value)


def test_unknown_dataset_lists_datasets():
  with pytest.raises(ValueError) as err:
    load("imagenet", 10)
  assert all(d in str(err.value) for d in DATASETS)


def test_missing_sklearn(monkeypatch):
  monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
  with pytest.raises(DatasetNotFoundError, match=r"pip install fedjax_sel\[digits\]"):
    digits.load_digits("train")


def test_num_local_test():
  assert loaders.num_local_test(1, 0.2) == 0
  assert loaders.num_local_test(2, 0.01) == 1
  assert loaders.num_local_test(10, 0.99) == 9
  assert loaders.num_local_test(10, 0.0) == 0
