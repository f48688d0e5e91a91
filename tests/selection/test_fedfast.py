"""FedFast's K-means clusters and ClusterSampling on small cases worked out by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import selection, testing
from fedjax_sel.core.types import ClientInfo
from fedjax_sel.selection import fedfast

# three groups far apart: {0, 1, 2} near the origin, {3, 4} near (10, 10), {5} at (20, 0)
POINTS = jnp.array([[0, 0], [0, 1], [1, 0], [10, 10], [10, 11], [20, 0]], jnp.float32)
GROUPS = [{0, 1, 2}, {3, 4}, {5}]


def _partition(labels) -> list[set]:
  labels = np.asarray(labels)
  return sorted(
    ({int(i) for i in np.flatnonzero(labels == c)} for c in set(labels.tolist()) if c >= 0),
    key=min,
  )


@pytest.mark.parametrize("seed", range(6))
def test_kmeans_finds_the_three_groups(seed):
  labels = fedfast.kmeans(jax.random.PRNGKey(seed), POINTS, jnp.ones(6, bool), 3, 20)
  assert _partition(labels) == GROUPS


def test_kmeans_clusters_only_the_masked_points():
  """Client 5 (the far one) unavailable: the five others split into the two groups; 5 is -1."""
  mask = jnp.array([True, True, True, True, True, False])
  labels = fedfast.kmeans(jax.random.PRNGKey(0), POINTS, mask, 2, 20)
  assert int(labels[5]) == -1
  assert _partition(labels) == [{0, 1, 2}, {3, 4}]


@pytest.mark.parametrize("seed", range(8))
def test_cluster_sampling_picks_one_client_per_cluster(seed):
  clusters = jnp.array([0, 0, 0, 1, 1, 2], jnp.int32)
  cohort, valid = fedfast.cluster_sampling(
    jax.random.PRNGKey(seed), clusters, jnp.ones(6, bool), 3, 3, "equal"
  )
  assert np.asarray(valid).all()
  picked = np.asarray(cohort).tolist()
  assert sorted(int(clusters[i]) for i in picked) == [0, 1, 2], picked
  assert 5 in picked  # the singleton cluster's only member, every time


def test_cluster_sampling_draws_each_member_uniformly():
  """Cluster 0 = {0, 1, 2}: each is its pick about 1/3 of the time (3000 keys)."""
  clusters = jnp.array([0, 0, 0, 1, 1, 2], jnp.int32)
  keys = jax.random.split(jax.random.PRNGKey(0), 3000)
  cohorts, _ = jax.vmap(
    lambda k: fedfast.cluster_sampling(k, clusters, jnp.ones(6, bool), 3, 3, "equal")
  )(keys)
  cohorts = np.asarray(cohorts)
  first = cohorts[np.isin(cohorts, [0, 1, 2])]
  freq = np.bincount(first, minlength=3) / len(first)
  np.testing.assert_allclose(freq, [1 / 3] * 3, atol=0.04)


def test_empty_cluster_slots_are_filled_from_the_others():
  """Cluster 2's only member (5) is unavailable: its slot goes to another available client."""
  clusters = jnp.array([0, 0, 0, 1, 1, 2], jnp.int32)
  avail = jnp.array([True, True, True, True, True, False])
  for seed in range(5):
    cohort, valid = fedfast.cluster_sampling(
      jax.random.PRNGKey(seed), clusters, avail, 3, 3, "equal"
    )
    picked = np.asarray(cohort).tolist()
    assert np.asarray(valid).all() and len(set(picked)) == 3 and 5 not in picked


def test_slots_per_cluster_equal_and_proportional():
  """Sizes 6, 3, 1 and M = 5. Equal: 5 // 3 = 1 each, one more for the first 5 mod 3 = 2.
  Proportional: shares 3, 1.5, 0.5 -> floors 3, 1, 0, one slot left for the largest
  remainder, a tie of 0.5 and 0.5 that goes to the lower id (cluster 1)."""
  sizes = jnp.array([6, 3, 1], jnp.int32)
  assert fedfast.slots_per_cluster(sizes, 5, "equal").tolist() == [2, 2, 1]
  assert fedfast.slots_per_cluster(sizes, 5, "proportional").tolist() == [3, 2, 0]


def _maverick_info() -> ClientInfo:
  """Clients 0-3 hold classes 0-1, clients 4-7 classes 2-3, client 8 (a Maverick) class 4."""
  counts = np.zeros((9, 5), np.int32)
  counts[:4, :2] = 10
  counts[4:8, 2:4] = 10
  counts[8, 4] = 50
  return ClientInfo(jnp.asarray(counts.sum(1)), jnp.asarray(counts))


@pytest.mark.parametrize("seed", range(5))
def test_select_on_labels_picks_one_client_of_each_group_and_the_maverick(seed):
  strategy = selection.make("fedfast", num_selected=3, features="labels")
  info = _maverick_info()
  state = strategy.init(jax.random.PRNGKey(0), info)
  ctx = testing.toy_selection_context(info)
  sel, state = strategy.select(
    state, jax.random.PRNGKey(seed), jnp.ones(9, bool), jnp.int32(0), ctx
  )
  picked = sorted(np.asarray(sel.cohort).tolist())
  assert picked[-1] == 8 and picked[0] < 4 and 4 <= picked[1] < 8, picked
  assert _partition(state.clusters) == [{0, 1, 2, 3}, {4, 5, 6, 7}, {8}]
  # FedAvg weights n_k / sum n: 20, 20 and 50 examples
  w = dict(zip(np.asarray(sel.cohort).tolist(), np.asarray(sel.weights).tolist()))
  assert w[8] == pytest.approx(50 / 90)


def test_select_on_updates_uses_the_update_sketch():
  """features="updates" reads ctx.update_sketch: two groups of sketches -> one pick each."""
  strategy = selection.make("fedfast", num_selected=2)
  assert strategy.uses_updates
  info = _maverick_info()
  sketch = jnp.zeros((9, 3)).at[5:, 0].set(7.0)
  ctx = testing.toy_selection_context(info)._replace(update_sketch=sketch)
  state = strategy.init(jax.random.PRNGKey(0), info)
  for seed in range(5):
    sel, _ = strategy.select(state, jax.random.PRNGKey(seed), jnp.ones(9, bool), jnp.int32(4), ctx)
    picked = sorted(np.asarray(sel.cohort).tolist())
    assert picked[0] < 5 <= picked[1], picked


@pytest.mark.parametrize(
  "hparams, name",
  [
    ({"num_clusters": 6}, "num_clusters"),
    ({"num_clusters": 0}, "num_clusters"),
    ({"features": "embeddings"}, "features"),
    ({"allocation": "random"}, "allocation"),
    ({"kmeans_iters": 0}, "kmeans_iters"),
  ],
)
def test_bad_hyperparameter_is_one_line_naming_it(hparams, name):
  with pytest.raises(ValueError) as err:
    selection.make("fedfast", num_selected=5, **hparams)
  message = str(err.value)
  assert message.startswith(f"{name}=") and "allowed" in message and "\n" not in message


def test_defaults_construct():
  s = selection.make("fedfast", num_selected=5)
  assert s.num_selected == 5 and not s.with_replacement
