"""FedFast (Muhammad et al.): K-means clusters of clients and picks from every cluster.

Restricted to its client selection ("ActvSAMP"), as the FedEMD paper implements it (FedEMD
Sec. 5.1, footnote 2: "we do not implement [...] the aggregation in FedFast"). Each round
(FedEMD Sec. 5.4: "FedFast performs K-means clustering for client selection each round"):

1. The available clients are clustered into K clusters by K-means (``init``: k-means++
   seeding or K distinct random points, then ``kmeans_iters`` Lloyd iterations) on their
   feature vectors. Only available clients are clustered: an unavailable client's point
   neither seeds nor moves a centroid.
2. ClusterSampling: the M slots are shared among the clusters and each cluster's slots are
   filled by drawing its available members uniformly without replacement. Slots a cluster
   cannot fill (an empty cluster, or fewer members than slots) are filled uniformly from the
   available clients not yet picked.

Aggregation weights are FedAvg's ``n_k / sum n``.

Readings (BUILD_NOTES.md, Selection, FedFast):

* What is clustered (``features``): FedFast clusters users by their user embeddings, the
  part of a recommender's model that local training makes client-specific. A classifier
  has no user embedding; what local training makes client-specific is the whole local
  update, so ``"updates"`` (default) clusters the clients' latest local updates
  (``ctx.update_sketch``, a random projection; a client never selected has a zero row, so
  the unseen clients form one group). ``"labels"`` clusters the clients' label
  distributions (``ClientInfo.label_counts`` normalised per client), the data profile the
  update reflects, available from round 0. ``"label_counts"`` clusters the raw per-class
  label counts (not normalised), as the FedEMD authors' code does (below).
* How slots are shared (``allocation``): ``"equal"`` (default) gives every cluster
  ``M // K`` slots and one more to the first ``M mod K`` clusters; with K = M (default) that
  is one client per cluster, so a Maverick alone in its cluster is picked every round, as
  FedEMD Sec. 5.4 reports of FedFast. ``"proportional"`` gives cluster c
  ``M |c| / |available|`` slots rounded by largest remainder (ties to the lower cluster id).
* How K-means starts (``init``): ``"kmeans++"`` (default; Arthur & Vassilvitskii) or
  ``"random_points"``: K distinct available clients drawn uniformly, their points the first
  centroids (the ``kmeans_pytorch`` package's start, which the authors' code uses).

The FedEMD authors' FedFast (``features="label_counts"``, ``init="random_points"``, K = M,
``allocation="equal"``), as their released code runs it (GitHub GillHuang-Xtler/Poison_FL:
``server.py`` ``train_subset_of_clients_fedfast``, ``client.py``
``Client.get_client_distribution``, ``federated_learning/worker_selection/random.py``
``select_round_workers_actvSAMP``; the same function in
GillHuang-Xtler/Maverick_client_selection):

* The points are each client's number of training examples of each class (raw counts, not
  normalised, nothing learnt from updates).
* ``kmeans_pytorch.kmeans`` with Euclidean distance and as many clusters as cohort slots
  (``NUM_WORKERS_PER_ROUND``), every round afresh: its start is K distinct data points drawn
  uniformly (``numpy.random.choice`` without replacement), then Lloyd iterations until the
  squared centroid shift is below 1e-4 (no cap). Here a fixed ``kmeans_iters`` (20): an
  assignment that has converged is a fixed point, so iterating past convergence changes
  nothing.
* One client uniformly from each cluster (``random.sample(cluster, 1)``).
* Counts far from everyone else's (a Maverick owning a whole class: thousands of one class
  against about a hundred of each other class for the rest) form a cluster of their own,
  so that client is in every cohort.
* Differences: the released code clusters all clients (it has no availability); here only
  the available ones. A cluster left empty (possible when fewer distinct available points
  than K) gives its slot to a uniform pick among the other available clients. The
  released driver aggregates FedFast's cohort weighted by data size
  (``fed_average_nn_parameters``); the Selection's weights here are FedAvg's too.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sel.core.registry import check_choice, check_count
from fedjax_sel.core.types import (
  Array,
  ClientInfo,
  PRNGKey,
  Selection,
  SelectionContext,
  SelectionStrategy,
)
from fedjax_sel.selection import common
from fedjax_sel.selection.registry import register

FEATURES = ("updates", "labels", "label_counts")
ALLOCATIONS = ("equal", "proportional")
INITS = ("kmeans++", "random_points")


class FedFastState(NamedTuple):
  """FedFast server state.

  Attributes:
    label_points: f32[N, C], each client's label distribution (``features="labels"``; also
      kept by ``"updates"``) or its raw label counts (``"label_counts"``).
    clusters: i32[N], the cluster of each client in the last round (-1 if unavailable).
  """

  label_points: Array
  clusters: Array


def _sq_dists(points: Array, centroids: Array) -> Array:
  """f32[N, K] squared Euclidean distances."""
  diff = points[:, None, :] - centroids[None, :, :]
  return jnp.sum(diff * diff, axis=-1)


def kmeans(
  key: PRNGKey,
  points: Array,
  mask: Array,
  num_clusters: int,
  iters: int,
  init: str = "kmeans++",
) -> Array:
  """K-means of the masked points: i32[N] cluster of every point (-1 outside ``mask``).

  The start (``init``): ``"kmeans++"`` seeding (the first centroid uniform among the masked
  points, each next one drawn with probability proportional to the squared distance to the
  nearest chosen centroid; uniform when all those distances are 0), or ``"random_points"``
  (K distinct masked points drawn uniformly; with fewer than K masked points the spare
  centroids repeat the first, and their clusters stay empty). Then ``iters`` Lloyd
  iterations (assign each point to its nearest centroid, ties to the lower cluster id; move
  each centroid to the mean of its masked points; an empty cluster keeps its centroid).
  Points outside ``mask`` never seed, nor move, a centroid.

  Args:
    key: PRNG key of the start.
    points: f32[N, d].
    mask: bool[N], the points to cluster.
    num_clusters: K (static).
    iters: Lloyd iterations (static).
    init: ``"kmeans++"`` or ``"random_points"`` (static).

  References:
    Lloyd 1982; Arthur & Vassilvitskii 2007 (k-means++); FedFast (Muhammad et al., KDD 2020)
    clusters with K-means.
  """
  points = jnp.nan_to_num(jnp.asarray(points, jnp.float32))
  n, d = points.shape
  if init == "random_points":
    idx, ok = common.uniform_without_replacement(key, mask, num_clusters)
    idx = jnp.where(ok, idx, idx[0])
    centroids = points[idx]
  else:
    keys = jax.random.split(key, num_clusters)

    def seed(k, centroids):
      # squared distance to the nearest centroid chosen so far (rows >= k are placeholders)
      chosen_before = jnp.arange(num_clusters) < k
      near = jnp.where(chosen_before[None, :], _sq_dists(points, centroids), jnp.inf)
      dist = jnp.min(near, 1)
      dist = jnp.where(jnp.isfinite(dist), dist, 0.0)
      idx, _ = common.categorical_with_replacement(keys[k], dist, mask, 1)
      return centroids.at[k].set(points[idx[0]])

    centroids = jax.lax.fori_loop(0, num_clusters, seed, jnp.zeros((num_clusters, d), jnp.float32))

  def lloyd(_, centroids):
    assign = jnp.argmin(_sq_dists(points, centroids), axis=1)
    onehot = jax.nn.one_hot(assign, num_clusters) * mask[:, None]
    count = jnp.sum(onehot, axis=0)
    total = onehot.T @ points
    return jnp.where(count[:, None] > 0, total / jnp.maximum(count, 1.0)[:, None], centroids)

  centroids = jax.lax.fori_loop(0, iters, lloyd, centroids)
  assign = jnp.argmin(_sq_dists(points, centroids), axis=1).astype(jnp.int32)
  return jnp.where(mask, assign, -1)


def slots_per_cluster(sizes: Array, num_selected: int, allocation: str) -> Array:
  """i32[K], how many of the M slots each cluster gets (they sum to M).

  ``"equal"``: ``M // K`` each, one more for the first ``M mod K`` clusters.
  ``"proportional"``: ``floor(M s_c / S)`` plus one for the ``M - sum`` clusters with the
  largest remainders (ties to the lower id); equal when no cluster has members.
  """
  k = sizes.shape[0]
  ids = jnp.arange(k)
  equal = num_selected // k + (ids < num_selected % k).astype(jnp.int32)
  if allocation == "equal":
    return equal.astype(jnp.int32)
  sizes = sizes.astype(jnp.float32)
  total = jnp.sum(sizes)
  share = num_selected * sizes / jnp.maximum(total, 1.0)
  base = jnp.floor(share).astype(jnp.int32)
  rem = share - base
  left = num_selected - jnp.sum(base)
  before = (rem[None, :] > rem[:, None]) | (
    (rem[None, :] == rem[:, None]) & (ids[None] < ids[:, None])
  )
  extra = (jnp.sum(before, axis=1) < left).astype(jnp.int32)
  return jnp.where(total > 0, base + extra, equal).astype(jnp.int32)


def cluster_sampling(
  key: PRNGKey, clusters: Array, avail: Array, num_clusters: int, num_selected: int, allocation: str
) -> tuple[Array, Array]:
  """FedFast's ClusterSampling: (cohort i32[M], valid bool[M]), distinct available clients.

  Cluster c's slots (``slots_per_cluster``) go to its available members in a uniformly
  random order; the slots left empty are filled uniformly from the available clients not
  yet picked.
  """
  n = clusters.shape[0]
  k_order, k_fill = jax.random.split(key)
  member = avail & (clusters >= 0)
  sizes = jax.ops.segment_sum(
    member.astype(jnp.int32), jnp.where(member, clusters, 0), num_clusters
  )
  quota = slots_per_cluster(sizes, num_selected, allocation)  # i32[K], sums to M
  # slot s belongs to cluster slot_cluster[s], as its slot_pos[s]-th slot
  bounds = jnp.cumsum(quota)
  slots = jnp.arange(num_selected)
  slot_cluster = jnp.searchsorted(bounds, slots, side="right").astype(jnp.int32)
  slot_pos = slots - (bounds - quota)[jnp.minimum(slot_cluster, num_clusters - 1)]
  # within-cluster rank of every member in a random order
  u = jax.random.uniform(k_order, (n,))
  group = jnp.where(member, clusters, num_clusters)  # non-members sort last
  order = jnp.lexsort((u, group))
  sorted_group = group[order]
  start = jnp.searchsorted(sorted_group, sorted_group, side="left")
  rank = jnp.zeros((n,), jnp.int32).at[order].set((jnp.arange(n) - start).astype(jnp.int32))
  hit = (
    member[None, :]
    & (clusters[None, :] == slot_cluster[:, None])
    & (rank[None, :] == slot_pos[:, None])
  )
  cohort = jnp.argmax(hit, axis=1).astype(jnp.int32)
  valid = jnp.any(hit, axis=1)
  return common.fill_empty_slots(k_fill, cohort, valid, avail)


@register("fedfast")
def make_fedfast(
  num_selected: int,
  num_clusters: int | None = None,
  features: str = "updates",
  allocation: str = "equal",
  kmeans_iters: int = 20,
  init: str = "kmeans++",
) -> SelectionStrategy:
  """FedFast's active sampling: K-means clusters and ClusterSampling (selection only).

  Args:
    num_selected: M, the number of cohort slots.
    num_clusters: K in [1, M]; None (default) means K = M, one pick per cluster.
    features: ``"updates"`` (default, the latest local updates), ``"labels"`` (label
      distributions) or ``"label_counts"`` (raw label counts, the FedEMD authors' code);
      see the module docstring.
    allocation: ``"equal"`` (default) or ``"proportional"`` slots per cluster.
    kmeans_iters: Lloyd iterations per round (default 20; K-means converges in a few on
      these few dozen points).
    init: K-means' start, ``"kmeans++"`` (default) or ``"random_points"`` (K distinct
      available clients' points, the FedEMD authors' code).

  References:
    Muhammad et al., "FedFast: Going beyond average for faster training of federated
    recommender systems", KDD 2020, Sec. 4 (ActvSAMP); Huang et al. (FedEMD), Sec. 5.1, 5.4,
    and its authors' code (GitHub GillHuang-Xtler/Poison_FL,
    ``select_round_workers_actvSAMP``).
  """
  num_selected = common.check_num_selected(num_selected)
  if num_clusters is None:
    num_clusters = num_selected
  if not check_count("num_clusters", num_clusters) <= num_selected:
    raise ValueError(
      f"num_clusters={num_clusters!r} is out of range; allowed: integers in [1, {num_selected}]"
      " (num_selected), or None"
    )
  num_clusters = int(num_clusters)
  kmeans_iters = check_count("kmeans_iters", kmeans_iters)
  check_choice("features", features, FEATURES)
  check_choice("allocation", allocation, ALLOCATIONS)
  kmeans_init = check_choice("init", init, INITS)

  def init(key: PRNGKey, info: ClientInfo) -> FedFastState:
    del key
    counts = jnp.asarray(info.label_counts, jnp.float32)
    if features != "label_counts":
      counts = counts / jnp.maximum(jnp.sum(counts, axis=1, keepdims=True), 1.0)
    return FedFastState(label_points=counts, clusters=jnp.full((counts.shape[0],), -1, jnp.int32))

  def select(
    state: FedFastState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, FedFastState]:
    del t
    k_means, k_sample = jax.random.split(key)
    points = ctx.update_sketch if features == "updates" else state.label_points
    clusters = kmeans(k_means, points, avail, num_clusters, kmeans_iters, kmeans_init)
    cohort, valid = cluster_sampling(
      k_sample, clusters, avail, num_clusters, num_selected, allocation
    )
    weights = common.fedavg_weights(ctx.num_examples, cohort, valid)
    return common.make_selection(cohort, valid, weights), state._replace(clusters=clusters)

  return SelectionStrategy(
    init=init, select=select, num_selected=num_selected, uses_updates=features == "updates"
  )
