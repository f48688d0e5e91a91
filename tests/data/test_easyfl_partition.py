"""``partition="easyfl_quantity"``: the FedGS authors' Fashion-MNIST task, easyFL's dist_id=1.

Facts from the released code (read with the ``search`` tool; no code copied):
- WwZzz/FedGS ``utils/fashion.yml``: the task is
  ``fashion_classification_cnum100_dist1_skew0.79_seed0`` (100 clients, dist 1, skewness
  0.79, seed 0).
- WwZzz/easyFL ``benchmark/toolkits.py`` (the version with ``IDXTaskPipe`` and
  ``source_dict``, the API FedGS's ``benchmark/fashion_classification/core.py`` calls):
  dist 1 is "label_skew_quantity": ``num = max(int((1-self.skewness)*self.num_classes), 1)``
  labels per client (int(0.21 x 10) = int(2.0999...) = 2); each label is drawn with
  ``np.random.choice(np.where(times == mintime)[0])`` (a least-used label) and drawn again
  while the client already holds it; every class is shuffled and ``np.array_split`` over the
  clients holding it; ``local_holdout`` keeps ``int(len(local_data) * (1-0.2))`` for
  training; ``set_random_seed`` calls ``random.seed(3 + seed)`` and ``np.random.seed(97 +
  seed)``.
- The earlier easyFL ``benchmark/toolkits.py`` (``datasrc``, ``save_data``): ``current =
  [i % K]`` plus labels from ``random.randint(0, K - 1)``.
- FedGS Appendix C: "we partition this dataset into 100 clients and equally allocate the
  same number of examples to each one, where each client owns data from two labels".
"""

import random
import re

import numpy as np
import pytest

from fedjax_sel.data import easyfl, loaders
from fedjax_sel.data.partitions import make_partition

# Fashion-MNIST's training split: 6,000 images of each of the 10 classes (in a mixed order).
LABELS = np.random.default_rng(5).permutation(np.repeat(np.arange(10), 6000))


def labels_of(idx):
  return sorted(set(LABELS[idx].tolist()))


@pytest.fixture(scope="module")
def least_used():
  return easyfl.label_quantity(LABELS, 100, 2, seed=0)


def test_least_used_sizes_and_labels(least_used):
  train, valid = least_used
  assert len(train) == len(valid) == 100
  holders = np.zeros(10, int)
  for tr, va in zip(train, valid):
    both = np.concatenate([tr, va])
    labs = labels_of(both)
    assert len(labs) == 2  # int((1 - 0.79) * 10) = 2 labels
    holders[labs] += 1
    # 200 (client, label) slots over 10 labels, a least-used label each time: 20 holders
    # per label, so each holds 6000 / 20 = 300 images of each of its labels
    for c in labs:
      assert np.sum(LABELS[both] == c) == 300
    assert len(tr) == int(600 * (1 - 0.2)) == 480 and len(va) == 120
  np.testing.assert_array_equal(holders, 20)
  every = np.concatenate(train + valid)
  assert len(every) == 60000 and len(np.unique(every)) == 60000  # all used, once


def test_least_used_first_draws_follow_the_seeded_stream(least_used):
  # client 0's first label is np.random.seed(97); np.random.choice(all 10 labels unused)
  train, valid = least_used
  first = int(np.random.RandomState(97).choice(np.arange(10)))
  assert first in labels_of(np.concatenate([train[0], valid[0]]))


def test_index_mod_rule():
  train, valid = easyfl.label_quantity(LABELS, 100, 2, seed=0, rule="index_mod")
  sets = [labels_of(np.concatenate([t, v])) for t, v in zip(train, valid)]
  for i, labs in enumerate(sets):
    assert i % 10 in labs and len(labs) == 2  # label i mod 10 plus one drawn label
  # client 0's second label: random.seed(3); random.randint(0, 9), drawn again while 0
  r = random.Random(3)
  second = r.randint(0, 9)
  while second == 0:
    second = r.randint(0, 9)
  assert sets[0] == sorted({0, second})
  holders = np.bincount(np.concatenate(sets), minlength=10)
  assert holders.sum() == 200 and (holders >= 10).all()
  sizes = []
  for t, v, labs in zip(train, valid, sets):
    n = len(t) + len(v)
    sizes.append(n)
    assert len(t) == int(n * (1 - 0.2))
    for c in labs:  # array_split of 6000 into `holders[c]` parts
      assert np.sum(LABELS[np.concatenate([t, v])] == c) in (
        6000 // holders[c],
        -(-6000 // holders[c]),
      )
  assert sum(sizes) == 60000 and len(set(sizes)) > 1  # sizes vary


def test_seed_and_determinism():
  a = easyfl.label_quantity(LABELS, 100, 2, seed=0)
  b = easyfl.label_quantity(LABELS, 100, 2, seed=0)
  c = easyfl.label_quantity(LABELS, 100, 2, seed=1)
  for x, y in zip(a[0] + a[1], b[0] + b[1]):
    np.testing.assert_array_equal(x, y)
  assert any(labels_of(x) != labels_of(y) for x, y in zip(a[0], c[0]))


def test_all_labels_per_client_splits_every_class_over_all_clients():
  train, valid = easyfl.label_quantity(LABELS, 10, 10, seed=0, holdout=0.0)
  for t, v in zip(train, valid):
    assert len(v) == 0 and len(t) == 6000
    np.testing.assert_array_equal(np.bincount(LABELS[t], minlength=10), 600)


def test_through_make_partition_and_federate():
  part = make_partition(
    "easyfl_quantity", LABELS, 100, np.random.default_rng(0), seed=0, holdout=0.2
  )
  train, valid = easyfl.label_quantity(LABELS, 100, 2, seed=0)
  for x, y in zip(part.indices + part.local_test, train + valid):
    np.testing.assert_array_equal(x, y)
  x = np.zeros((len(LABELS), 2, 2, 1), np.float32)
  fed = loaders.federate(
    x, LABELS, x[:5], LABELS[:5], 10, 100, "easyfl_quantity", seed=0, test_fraction=0.25
  )
  # the loader's test_fraction is the generator's holdout: int(600 * 0.75) = 450
  np.testing.assert_array_equal(fed.train.counts, 450)
  np.testing.assert_array_equal(fed.test.counts, 150)
  assert fed.extras["partition"] == "easyfl_quantity"


@pytest.mark.parametrize(
  "kwargs, match",
  [
    (dict(rule="random"), "rule='random'; allowed: least_used, index_mod"),
    (dict(labels_per_client=11), "labels_per_client=11; allowed: integers in [1, 10]"),
    (dict(labels_per_client=0), "labels_per_client=0"),
    (dict(holdout=1.0), "holdout=1.0 is out of range; allowed: [0, 1)"),
    (dict(seed=-1), "seed=-1; allowed: integers >= 0"),
  ],
)
def test_bad_arguments(kwargs, match):
  with pytest.raises(ValueError, match=re.escape(match)):
    easyfl.label_quantity(LABELS[:1000], 10, **{"labels_per_client": 2, **kwargs})


def test_examples_per_client_and_unknown_hparams_are_refused():
  x = np.zeros((1000, 2, 2, 1), np.float32)
  with pytest.raises(ValueError, match="examples_per_client=5 is not available"):
    loaders.federate(
      x, LABELS[:1000], x[:2], LABELS[:2], 10, 10, "easyfl_quantity", examples_per_client=5
    )
  with pytest.raises(ValueError, match="unknown hyper-parameter"):
    make_partition("easyfl_quantity", LABELS, 10, np.random.default_rng(0), alpha=0.5)
