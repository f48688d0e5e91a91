"""Fraboni et al.'s "target" sampling (Sec. 6): one client of each class per round."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_sel.selection as selection
from fedjax_sel.core.types import ClientInfo
from fedjax_sel.selection import clustered
from tests.selection.conftest import make_ctx

NUM_CLASSES = 4
PER_CLASS = 10


def _one_class_world(seed=0, sizes=None):
  """40 clients, one class each, 10 per class, classes in a shuffled id order."""
  n = NUM_CLASSES * PER_CLASS
  cls = np.random.default_rng(seed).permutation(np.repeat(np.arange(NUM_CLASSES), PER_CLASS))
  sizes = np.full(n, 50) if sizes is None else np.asarray(sizes)
  counts = np.zeros((n, NUM_CLASSES), np.int32)
  counts[np.arange(n), cls] = sizes
  return cls, ClientInfo(jnp.asarray(sizes, jnp.int32), jnp.asarray(counts))


def _select(strategy, info, key, avail=None):
  n = info.num_examples.shape[0]
  avail = jnp.ones((n,), bool) if avail is None else jnp.asarray(avail)
  state = strategy.init(jax.random.PRNGKey(0), info)
  ctx = make_ctx(info)._replace(num_examples=info.num_examples)
  sel, _ = strategy.select(state, key, avail, jnp.asarray(0, jnp.int32), ctx)
  return sel


@pytest.mark.parametrize("seed", [0, 1])
def test_every_round_holds_exactly_one_client_per_class(seed):
  cls, info = _one_class_world(seed)
  strategy = selection.make("target", num_selected=NUM_CLASSES)
  for r in range(30):
    sel = _select(strategy, info, jax.random.PRNGKey(100 * seed + r))
    assert bool(np.all(np.asarray(sel.valid)))
    assert sorted(cls[np.asarray(sel.cohort)].tolist()) == list(range(NUM_CLASSES))
    np.testing.assert_allclose(np.asarray(sel.weights), 1.0 / NUM_CLASSES)


def test_within_a_class_clients_are_drawn_by_size():
  """Equal class masses (each class's sizes sum to 500), unequal clients: slot k draws
  client i of class k with probability n_i / 500 (hand values from the sizes)."""
  cls = np.repeat(np.arange(NUM_CLASSES), PER_CLASS)
  one = np.array([5, 15, 25, 35, 45, 55, 65, 75, 85, 95])  # sums to 500
  sizes = np.tile(one, NUM_CLASSES)
  n = len(sizes)
  counts = np.zeros((n, NUM_CLASSES), np.int32)
  counts[np.arange(n), cls] = sizes
  order = clustered.make_target(NUM_CLASSES).init(
    jax.random.PRNGKey(0), ClientInfo(jnp.asarray(sizes), jnp.asarray(counts))
  )
  r = np.asarray(clustered.interval_distributions(jnp.asarray(sizes), order.order, NUM_CLASSES))
  want = np.zeros((NUM_CLASSES, n))
  want[cls, np.arange(n)] = sizes / 500
  np.testing.assert_allclose(r, want, atol=1e-6)


def test_stratum_is_the_majority_class():
  counts = jnp.asarray([[3, 5, 0], [7, 1, 1], [0, 0, 2], [4, 4, 0]], jnp.int32)
  state = clustered.make_target(2).init(
    jax.random.PRNGKey(0), ClientInfo(jnp.sum(counts, 1), counts)
  )
  # strata: 1, 0, 2, 0 (a tie goes to the lower class) -> by stratum, then id
  np.testing.assert_array_equal(np.asarray(state.order), [1, 3, 0, 2])


def test_with_unavailable_clients_unbiased_over_the_available():
  """Eq. 8 over the available clients: sum_k r[k, i] = M n_i / sum_{j available} n_j."""
  cls, info = _one_class_world(2, sizes=np.arange(40) + 10)
  avail = np.random.default_rng(3).random(40) < 0.6
  sizes = np.where(avail, np.asarray(info.num_examples), 0)
  state = clustered.make_target(NUM_CLASSES).init(jax.random.PRNGKey(0), info)
  r = np.asarray(clustered.interval_distributions(jnp.asarray(sizes), state.order, NUM_CLASSES))
  np.testing.assert_allclose(r.sum(1), 1.0, atol=1e-6)
  np.testing.assert_allclose(r.sum(0), NUM_CLASSES * sizes / sizes.sum(), atol=1e-6)
  sel = _select(
    selection.make("target", num_selected=NUM_CLASSES), info, jax.random.PRNGKey(5), avail
  )
  assert np.all(avail[np.asarray(sel.cohort)])


def test_algorithm1_with_ids_by_label_is_target_sampling():
  """The issue-38 diagnosis: with equal sizes and clients 10d..10d+9 holding class d,
  Algorithm 1's id-ordered distributions are the classes, so it draws the same cohorts
  as target sampling from the same key; with shuffled ids it does not."""
  n = NUM_CLASSES * PER_CLASS
  sorted_cls = np.repeat(np.arange(NUM_CLASSES), PER_CLASS)
  counts = np.zeros((n, NUM_CLASSES), np.int32)
  counts[np.arange(n), sorted_cls] = 50
  info = ClientInfo(jnp.full((n,), 50, jnp.int32), jnp.asarray(counts))
  target = selection.make("target", num_selected=NUM_CLASSES)
  alg1 = selection.make("clustered_size", num_selected=NUM_CLASSES)
  for r in range(10):
    key = jax.random.PRNGKey(r)
    a, b = _select(target, info, key), _select(alg1, info, key)
    np.testing.assert_array_equal(np.asarray(a.cohort), np.asarray(b.cohort))
  cls, shuffled = _one_class_world(0)
  classes = [
    len(set(cls[np.asarray(_select(alg1, shuffled, jax.random.PRNGKey(r)).cohort)]))
    for r in range(30)
  ]
  assert min(classes) < NUM_CLASSES
