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
    ({"features": "bar"}, "features"),
    ({"init": "kmeans||"}, "init"),
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


def test_bad_features_names_the_value_and_the_allowed_ones():
  with pytest.raises(ValueError) as err:
    selection.make("fedfast", num_selected=5, features="bar")
  assert str(err.value) == "features='bar'; allowed: updates, labels, label_counts"


# ---------------------------------------------------------------- the authors' reading


def _authors(num_selected: int, **kw):
  return selection.make(
    "fedfast", num_selected=num_selected, features="label_counts", init="random_points", **kw
  )


def _counts_info(counts) -> ClientInfo:
  counts = np.asarray(counts, np.int32)
  return ClientInfo(jnp.asarray(counts.sum(1)), jnp.asarray(counts))


def test_random_points_start_from_distinct_masked_points():
  """``init="random_points"`` with K = number of masked points: every masked point is a
  centroid, so every masked point is its own cluster (and the unmasked one is -1)."""
  mask = jnp.array([True, True, False, True, True, True])
  for seed in range(5):
    labels = np.asarray(
      fedfast.kmeans(jax.random.PRNGKey(seed), POINTS, mask, 5, 20, init="random_points")
    )
    assert labels[2] == -1 and sorted(labels[np.asarray(mask)].tolist()) == [0, 1, 2, 3, 4]


def test_label_counts_are_raw_and_labels_normalised():
  """Clients (10, 0), (1000, 0), (0, 10), K = M = 2. Raw counts: (1000, 0) is far from both
  others, {0, 2} and {1}; distributions: (1, 0) twice and (0, 1), {0, 1} and {2}."""
  info = _counts_info([[10, 0], [1000, 0], [0, 10]])
  ctx = testing.toy_selection_context(info)
  for features, want in (("label_counts", [{0, 2}, {1}]), ("labels", [{0, 1}, {2}])):
    strategy = selection.make("fedfast", num_selected=2, features=features)
    state = strategy.init(jax.random.PRNGKey(0), info)
    for seed in range(5):
      _, new = strategy.select(state, jax.random.PRNGKey(seed), jnp.ones(3, bool), 0, ctx)
      assert _partition(new.clusters) == want, (features, seed)


def test_authors_reading_picks_one_client_of_each_well_separated_group():
  """Two groups of count vectors far apart (classes 0-1 and 2-3), K = M = 2, random-point
  start: whatever two distinct points start it, Lloyd ends at the two groups, and the
  cohort is one client of each, each member of a group picked about equally often."""
  counts = np.zeros((7, 4), np.int32)
  counts[:4, :2] = [[30, 28], [29, 31], [33, 27], [28, 30]]
  counts[4:, 2:] = [[40, 38], [37, 41], [39, 39]]
  strategy = _authors(2)
  info = _counts_info(counts)
  state = strategy.init(jax.random.PRNGKey(0), info)
  np.testing.assert_array_equal(np.asarray(state.label_points), counts)  # not normalised
  ctx = testing.toy_selection_context(info)

  def one(key):
    sel, new = strategy.select(state, key, jnp.ones(7, bool), jnp.int32(0), ctx)
    return sel.cohort, new.clusters

  cohorts, clusters = jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(2), 2000))
  cohorts, clusters = np.asarray(cohorts), np.asarray(clusters)
  for c in clusters:
    assert _partition(c) == [{0, 1, 2, 3}, {4, 5, 6}]
  low = np.sort(cohorts, axis=1)
  assert np.all(low[:, 0] < 4) and np.all(low[:, 1] >= 4)
  np.testing.assert_allclose(np.bincount(low[:, 0], minlength=4) / 2000, [1 / 4] * 4, atol=0.05)
  np.testing.assert_allclose(np.bincount(low[:, 1] - 4, minlength=3) / 2000, [1 / 3] * 3, atol=0.05)


@pytest.mark.parametrize("seed", range(4))
def test_authors_reading_takes_one_client_from_every_cluster(seed):
  """Three groups of counts, K = M = 3: a random-point start may split a group and merge two
  others (a local optimum, as in the released code), but the cohort holds exactly one
  client of every cluster the round found."""
  counts = [[30, 1, 0], [31, 0, 1], [29, 2, 0], [0, 30, 2], [1, 31, 0], [0, 0, 40], [2, 1, 38]]
  strategy = _authors(3)
  info = _counts_info(counts)
  state = strategy.init(jax.random.PRNGKey(0), info)
  ctx = testing.toy_selection_context(info)
  for t in range(25):
    key = jax.random.PRNGKey(100 * seed + t)
    sel, new = strategy.select(state, key, jnp.ones(7, bool), jnp.int32(t), ctx)
    clusters = np.asarray(new.clusters)
    assert len(set(clusters.tolist())) == 3
    assert sorted(clusters[np.asarray(sel.cohort)].tolist()) == [0, 1, 2]


def _fedemd_counts(num_clients: int = 50, per_class: int = 6000, seed: int = 0) -> np.ndarray:
  """i32[N, 10], FedEMD's exclusive-Maverick partition (experiments/fedemd.py): client 0
  owns all ``per_class`` examples of class 0; the other classes' examples are shuffled and
  split into N - 1 equal parts (about 122 of each class per client)."""
  rng = np.random.default_rng(seed)
  rest = rng.permutation(np.repeat(np.arange(1, 10), per_class))
  counts = np.zeros((num_clients, 10), np.int32)
  counts[0, 0] = per_class
  for i, part in enumerate(np.array_split(rest, num_clients - 1)):
    counts[i + 1] = np.bincount(part, minlength=10)
  return counts


def test_authors_reading_picks_the_maverick_in_every_one_of_200_rounds():
  """FedEMD's set-up (50 clients, 5 a round, one exclusive Maverick with 6000 examples of
  its class against about 122 of each other class for the rest): the Maverick's counts are
  about 6000 away from everyone's, the others about 45 apart, so K-means leaves it alone in
  its cluster in every round and it is in every cohort; the 49 others share the 4 other
  slots about uniformly (4/49 each)."""
  counts = _fedemd_counts()
  strategy = _authors(5)
  info = _counts_info(counts)
  state = strategy.init(jax.random.PRNGKey(0), info)
  ctx = testing.toy_selection_context(info)

  def one(t):
    sel, new = strategy.select(state, jax.random.PRNGKey(t), jnp.ones(50, bool), t, ctx)
    return sel.cohort, sel.valid, new.clusters

  cohorts, valid, clusters = jax.jit(jax.vmap(one))(jnp.arange(200))
  cohorts, clusters = np.asarray(cohorts), np.asarray(clusters)
  assert np.asarray(valid).all()
  assert all(0 in c for c in cohorts.tolist())
  assert all(np.sum(c == c[0]) == 1 for c in clusters)  # a cluster of its own
  others = np.bincount(cohorts.ravel(), minlength=50)[1:] / 200
  assert abs(others.mean() - 4 / 49) < 1e-6 and others.max() < 0.25


# ---------------------------------------------------------------- intermittent availability


@pytest.mark.parametrize(
  "features, init",
  [
    ("updates", "kmeans++"),
    ("updates", "random_points"),
    ("label_counts", "random_points"),
    ("label_counts", "kmeans++"),
  ],
)
def test_unavailable_clients_leave_the_centroids_alone(features, init):
  """Points on a line, K = M = 2: available 0, 2, 10, unavailable 100 (as update sketches or
  as class-0 counts). Among the available: from any start Lloyd ends at {0, 2} and {10}
  (e.g. start 0, 2: 10 joins 2, centroid 6; then 2 is nearer 0 (2 < 4): centroids 1, 10).
  Had client 3 moved a centroid (start 0, 2: 10 and 100 join 2, centroid 37.3; then 0, 2,
  10 all join 0), the available would be one cluster and 10 would not be in every cohort.
  So: client 3 never picked, clusters {0, 2} and {10}, and 10 in every cohort."""
  value = np.array([0.0, 2.0, 10.0, 100.0])
  counts = np.stack([value, np.full(4, 5.0)], 1).astype(np.int32)
  info = _counts_info(counts)
  ctx = testing.toy_selection_context(info)
  if features == "updates":
    ctx = ctx._replace(update_sketch=jnp.asarray(np.stack([value, np.zeros(4)], 1), jnp.float32))
  strategy = selection.make("fedfast", num_selected=2, features=features, init=init)
  state = strategy.init(jax.random.PRNGKey(0), info)
  avail = jnp.array([True, True, True, False])
  for seed in range(12):
    sel, new = strategy.select(state, jax.random.PRNGKey(seed), avail, jnp.int32(seed), ctx)
    assert _partition(new.clusters) == [{0, 1}, {2}], (seed, np.asarray(new.clusters))
    picked = sorted(np.asarray(sel.cohort).tolist())
    assert picked[1] == 2 and picked[0] in (0, 1), picked
