"""``shards`` with client sizes (issue 70: a quantity skew on top of the label skew, so that
availability following data size, FedGS's LDF / MDF, differs from always-available)."""

import numpy as np
import pytest

from fedjax_sel import experiment
from fedjax_sel.data import partitions as P

LABELS = np.repeat(np.arange(10), 600)


def test_without_sizes_the_draw_is_the_equal_splits():
  a = P.shards(LABELS, 100, 2, np.random.default_rng(3))
  b = P.make_partition("shards", LABELS, 100, np.random.default_rng(3)).indices
  c = P.make_partition("shards", LABELS, 100, np.random.default_rng(3), sizes="equal").indices
  for x, y, z in zip(a, b, c, strict=True):
    np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(x, z)
  assert {len(x) for x in a} == {60}


def test_each_class_is_split_in_proportion_to_its_holders_sizes_by_hand():
  """Two classes of 10 examples, 4 clients of one class each, target sizes 1, 3, 1, 3: a
  class's two holders get 1 example each and the other 8 in proportion to their targets
  (largest remainder): {1, 3} -> 1 + 2 and 1 + 6 = 3 and 7; {1, 1} or {3, 3} -> 5 and 5."""
  labels = np.repeat(np.arange(2), 10)
  weights = np.array([1.0, 3.0, 1.0, 3.0])
  parts = P.shards(labels, 4, 1, np.random.default_rng(0), sizes=weights)
  for c in (0, 1):
    holders = [i for i, p in enumerate(parts) if labels[p[0]] == c]
    expected = {(1.0, 3.0): (3, 7), (3.0, 1.0): (7, 3)}.get(tuple(weights[holders]), (5, 5))
    assert tuple(len(parts[i]) for i in holders) == expected  # each holder its own share


def test_lognormal_sizes_keep_k_labels_disjoint_and_every_example():
  parts = P.make_partition(
    "shards", LABELS, 100, np.random.default_rng(0), labels_per_client=2, sizes="lognormal"
  ).indices
  sizes = np.array([len(p) for p in parts])
  assert all(len(np.unique(LABELS[p])) == 2 for p in parts)
  every = np.concatenate(parts)
  assert len(every) == len(np.unique(every)) == len(LABELS)
  assert sizes.min() >= 2 and np.std(sizes) / np.mean(sizes) > 0.5  # sizes differ


def test_bad_sizes_are_refused_with_what_is_allowed():
  with pytest.raises(ValueError, match="positive target sizes"):
    P.shards(LABELS, 10, 2, np.random.default_rng(0), sizes=np.zeros(10))
  c = experiment.default_config()
  c.partition_sizes = "huge"
  with pytest.raises(ValueError, match="partition_sizes"):
    experiment.validate_config(c)
  c.partition_sizes, c.dataset, c.partition = "lognormal", "fashion_mnist", "clustered"
  with pytest.raises(ValueError, match="allowed with iid, dirichlet or shards"):
    experiment.validate_config(c)
