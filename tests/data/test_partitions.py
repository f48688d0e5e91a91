"""Partitions give each client the labels and sizes they promise; indices are disjoint."""

import numpy as np
import pytest

from fedjax_sel.data import partitions as P

NUM_CLASSES = 10


def _labels(per_class=600, seed=0):
  labels = np.repeat(np.arange(NUM_CLASSES), per_class)
  return np.random.default_rng(seed).permutation(labels)


def _class_shares(labels, idx):
  return np.bincount(labels[idx], minlength=NUM_CLASSES) / len(idx)


def _tv_to_global(labels, parts):
  glob = np.bincount(labels, minlength=NUM_CLASSES) / len(labels)
  return np.array([0.5 * np.abs(_class_shares(labels, i) - glob).sum() for i in parts])


# Every partition with small, valid hyper-parameters (a 6,000-example, 10-class pool).
CASES = {
  "iid": (20, {}),
  "dirichlet": (20, {"alpha": 0.3}),
  "shards": (20, {"labels_per_client": 2}),
  "lognormal": (20, {"sigma": 1.5}),
  "size_groups": (5, {"groups": ((2, 100), (3, 400))}),
  "clustered": (20, {"num_groups": 5}),
  "easyfl_quantity": (20, {"labels_per_client": 2}),  # task seed drawn from the rng
}


def test_cases_cover_every_partition():
  assert set(CASES) == set(P.PARTITIONS)


@pytest.mark.parametrize("name", P.PARTITIONS)
def test_disjoint_in_range_and_deterministic(name):
  labels = _labels()
  num_clients, hp = CASES[name]
  parts = P.partition_indices(name, labels, num_clients, np.random.default_rng(7), **hp)
  assert len(parts) == num_clients
  flat = np.concatenate(parts)
  assert all(p.dtype == np.int64 for p in parts)
  assert len(np.unique(flat)) == len(flat)  # disjoint
  assert flat.min() >= 0 and flat.max() < len(labels)
  assert all(len(p) >= 1 for p in parts)
  again = P.partition_indices(name, labels, num_clients, np.random.default_rng(7), **hp)
  assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
  other = P.partition_indices(name, labels, num_clients, np.random.default_rng(8), **hp)
  assert not all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True))


def test_iid_class_proportions_close_to_global():
  labels = _labels()
  parts = P.iid(labels, 10, np.random.default_rng(0))
  assert [len(p) for p in parts] == [600] * 10
  assert sorted(np.concatenate(parts).tolist()) == list(range(6000))  # all examples used
  # Each client's share of each class is 0.1 +- a few binomial std (sqrt(.09/600)=0.012).
  shares = np.stack([_class_shares(labels, p) for p in parts])
  assert np.abs(shares - 0.1).max() < 0.05


def test_iid_respects_sizes():
  labels = _labels()
  sizes = np.array([5, 50, 500, 1])
  parts = P.iid(labels, 4, np.random.default_rng(0), sizes=sizes)
  assert [len(p) for p in parts] == sizes.tolist()


def test_dirichlet_sizes_exact_with_size_groups():
  labels = _labels(per_class=5000)  # 50,000 examples >= 48,500 of the size groups
  sizes = P.group_sizes()
  parts = P.dirichlet(labels, 100, 0.01, np.random.default_rng(0), sizes=sizes)
  assert [len(p) for p in parts] == sizes.tolist()


def test_dirichlet_alpha_controls_label_skew():
  labels = _labels(per_class=2000)
  small = P.dirichlet(labels, 50, 0.001, np.random.default_rng(0), sizes=np.full(50, 200))
  large = P.dirichlet(labels, 50, 1000.0, np.random.default_rng(0), sizes=np.full(50, 200))
  top_small = np.mean([_class_shares(labels, p).max() for p in small])
  top_large = np.mean([_class_shares(labels, p).max() for p in large])
  # alpha -> 0: (almost) one class per client; alpha -> inf: the global 10% per class.
  assert top_small > 0.95
  assert top_large < 0.2
  assert _tv_to_global(labels, large).mean() < 0.1
  assert _tv_to_global(labels, small).mean() > 0.8


def test_dirichlet_default_uses_all_examples_equal_sizes():
  labels = _labels()
  parts = P.dirichlet(labels, 7, 0.5, np.random.default_rng(0))
  sizes = [len(p) for p in parts]
  assert sum(sizes) == 6000 and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("k", [1, 2, 3, 10])
def test_shards_exactly_k_labels(k):
  labels = _labels()
  parts = P.shards(labels, 30, k, np.random.default_rng(k))
  assert [len(np.unique(labels[p])) for p in parts] == [k] * 30
  assert len(np.concatenate(parts)) == 6000
  # Balanced label slots: each class is held by floor or ceil of 30k/10 clients.
  holders = np.zeros(NUM_CLASSES, int)
  for p in parts:
    holders[np.unique(labels[p])] += 1
  assert holders.sum() == 30 * k
  assert holders.max() - holders.min() <= 1


def test_shards_one_class_per_client_fraboni_mnist_setup():
  # Fraboni et al. Sec. 6: 100 clients, one digit each, each digit owned by 10 clients.
  labels = _labels(per_class=5000)
  parts = P.shards(labels, 100, 1, np.random.default_rng(0))
  owner_class = np.array([labels[p[0]] for p in parts])
  assert np.bincount(owner_class, minlength=10).tolist() == [10] * 10
  assert [len(p) for p in parts] == [500] * 100


def test_size_groups_exact_clustered_sampling_sizes():
  labels = _labels(per_class=5000)
  parts = P.partition_indices("size_groups", labels, 100, np.random.default_rng(0))
  expected = [100] * 10 + [250] * 30 + [500] * 30 + [750] * 20 + [1000] * 10
  assert [len(p) for p in parts] == expected
  assert sum(expected) == 48_500


def test_group_sizes_default():
  sizes = P.group_sizes()
  assert len(sizes) == 100
  assert np.unique(sizes, return_counts=True)[1].tolist() == [10, 30, 30, 20, 10]


def test_lognormal_sizes_sum_min_and_spread():
  rng = np.random.default_rng(0)
  balanced = P.lognormal_sizes(1000, 10, 0.0, rng)
  assert balanced.tolist() == [100] * 10
  sizes = P.lognormal_sizes(10_000, 200, 2.0, rng, min_size=5)
  assert sizes.sum() == 10_000 and sizes.min() >= 5
  mild = P.lognormal_sizes(10_000, 200, 0.5, rng, min_size=5)
  cv = lambda s: s.std() / s.mean()
  # Coefficient of variation of LogNormal(0, s^2) weights: sqrt(exp(s^2) - 1) = 0.53 for s=0.5.
  assert 0.4 < cv(mild) < 0.7
  assert cv(sizes) > 2 * cv(mild)


def test_dirichlet_with_lognormal_sizes_by_name():
  labels = _labels()
  rng = np.random.default_rng(0)
  parts = P.partition_indices("dirichlet", labels, 30, rng, alpha=0.1, sizes="lognormal", sigma=1.0)
  sizes = np.array([len(p) for p in parts])
  assert sizes.sum() == 6000 and sizes.std() > 50


def test_clustered_groups_share_label_sets():
  labels = _labels()
  parts, groups = P.clustered(labels, 20, 5, np.random.default_rng(0))
  assert groups.tolist() == np.repeat(np.arange(5), 4).tolist()
  label_sets = [tuple(np.unique(labels[p])) for p in parts]
  for g in range(5):
    members = np.flatnonzero(groups == g)
    assert len({label_sets[m] for m in members}) == 1  # same labels within a group
    # same proportions within a group (up to rounding of equal splits)
    shares = np.stack([_class_shares(labels, parts[m]) for m in members])
    assert np.abs(shares - shares[0]).max() < 0.01
  group_sets = [set(label_sets[np.flatnonzero(groups == g)[0]]) for g in range(5)]
  assert all(len(s) == 2 for s in group_sets)  # 10 classes over 5 groups
  assert set().union(*group_sets) == set(range(10))  # disjoint cover


def test_make_partition_returns_groups_only_for_clustered():
  labels = _labels()
  assert P.make_partition("clustered", labels, 10, np.random.default_rng(0)).groups.shape == (10,)
  assert P.make_partition("iid", labels, 10, np.random.default_rng(0)).groups is None


def test_round_preserving_sum():
  x = np.array([0.4, 1.6, 2.5, 3.5])
  out = P.round_preserving_sum(x, 8)
  assert out.sum() == 8 and np.abs(out - x).max() < 1


@pytest.mark.parametrize(
  "name, num_clients, hparams, needle",
  [
    ("zipf", 10, {}, "'zipf'"),
    ("dirichlet", 10, {"alpha": 0.0}, "alpha=0.0"),
    ("dirichlet", 10, {"alpha": -1}, "alpha=-1"),
    ("shards", 10, {"labels_per_client": 11}, "labels_per_client=11"),
    ("shards", 10, {"labels_per_client": 0}, "labels_per_client=0"),
    ("iid", 0, {}, "num_clients=0"),
    ("iid", 6001, {}, "num_clients=6001"),
    ("iid", 2, {"sizes": [4000, 4000]}, "8000"),
    ("iid", 2, {"sizes": "zipf"}, "'zipf'"),
    ("iid", 10, {"alpha": 0.1}, "alpha"),
    ("size_groups", 10, {}, "num_clients=10"),
    ("clustered", 20, {"num_groups": 11}, "num_groups=11"),
    ("lognormal", 10, {"sigma": -1.0}, "sigma=-1.0"),
  ],
)
def test_bad_input_names_the_value(name, num_clients, hparams, needle):
  with pytest.raises(ValueError) as err:
    P.partition_indices(name, _labels(), num_clients, np.random.default_rng(0), **hparams)
  assert needle in str(err.value)


def test_bad_labels_and_groups():
  with pytest.raises(ValueError, match="integers"):
    P.iid(_labels().astype(float), 10, np.random.default_rng(0))
  with pytest.raises(ValueError, match=r"\(0, 5\)"):
    P.group_sizes(((0, 5),))


def test_unknown_partition_lists_known_names():
  with pytest.raises(ValueError) as err:
    P.partition_indices("zipf", _labels(), 10, np.random.default_rng(0))
  assert all(name in str(err.value) for name in P.PARTITIONS)


def test_range_errors_name_allowed_range():
  with pytest.raises(ValueError, match=r"labels_per_client=11.*\[1, 10\]"):
    P.shards(_labels(), 10, 11, np.random.default_rng(0))
  with pytest.raises(ValueError, match=r"alpha=0 .*\(0.0, inf"):
    P.dirichlet(_labels(), 10, 0, np.random.default_rng(0))


def test_shards_too_many_clients_for_a_class():
  labels = np.array([0] * 3 + [1] * 100)
  with pytest.raises(ValueError, match="class 0 has 3 examples"):
    P.shards(labels, 8, 1, np.random.default_rng(0))
