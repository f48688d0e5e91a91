"""Clustered sampling (Fraboni et al., ICML 2021): Algorithm 1 (sizes) and 2 (similarity),
and the paper's oracle reference "target" sampling (one client of each class per round).

Clustered sampling draws the M cohort slots from M independent distributions
``W_1..W_M`` over clients, ``r[k, i] = P(slot k holds client i)``, built so that every
distribution sums to 1 (Eq. 7) and ``sum_k r[k, i] = M p_i`` (Eq. 8, unbiasedness), with
``p_i = n_i / sum_j n_j``. Each slot has aggregation weight ``1/M``, as in MD sampling; a
client may appear in two slots (``with_replacement=True``) but with lower variance of its
aggregation weight than under MD sampling (Eq. 14 vs Eq. 16).

Both algorithms are implemented as one "interval" construction: lay every client's mass
``M n_i`` (integers) on a line of M bins of capacity ``n_total = sum_j n_j`` each and read
``r[k, i]`` as the overlap of client i's segment with bin k, divided by ``n_total``. This
is exactly Algorithm 1 (clients in decreasing ``n_i``), and Algorithm 2 once the clients
are ordered by cluster. The integer arithmetic makes Eq. 8 hold exactly before the final
division (the caller must keep ``M * sum n_i < 2**31``).

Availability (our extension; the paper assumes everyone answers): the distributions are
recomputed each round over the available clients only, i.e. with ``n_i`` replaced by
``n_i * avail_i``. The scheme is then unbiased with respect to the available population
(``sum_k r[k, i] = M n_i / sum_{j available} n_j``), the same renormalization MD sampling
uses. All M slots are valid whenever one client is available.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

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

MEASURES = ("arccos", "L2", "L1")


def _bin_overlap(seg_start: Array, seg_end: Array, bin_start: Array, bin_end: Array) -> Array:
  """i32[K, N] length of [seg_start_i, seg_end_i) ∩ [bin_start_k, bin_end_k)."""
  lo = jnp.maximum(seg_start[None, :], bin_start[:, None])
  hi = jnp.minimum(seg_end[None, :], bin_end[:, None])
  return jnp.maximum(hi - lo, 0)


def sample_size_distributions(num_examples: Array, num_selected: int) -> Array:
  """Algorithm 1: the M sample-size-based distributions, f32[M, N].

  Clients are ordered by decreasing ``n_i`` (ties by id); client i's mass ``M n_i`` is laid
  after the previous clients' on a line cut into M bins of ``n_total`` samples; ``r[k, i]``
  is the share of bin k covered by client i. A client with ``M n_i >= n_total`` fills whole
  bins (it is sampled with probability 1 there), as in the paper's line 11.

  Clients with ``n_i = 0`` (e.g. unavailable ones, masked by the caller) get probability 0.
  If every ``n_i`` is 0 the result is all zeros.

  Args:
    num_examples: i32[N], ``n_i`` (pass ``n_i * avail_i`` to restrict to available clients).
    num_selected: M (static).

  Returns:
    f32[M, N] with rows summing to 1 and ``sum_k r[k, i] = M n_i / sum_j n_j``.

  References:
    Fraboni et al. 2021, Algorithm 1 and Theorem 3.
  """
  n = jnp.asarray(num_examples).astype(jnp.int32)
  return interval_distributions(n, jnp.argsort(-n, stable=True), num_selected)


def interval_distributions(num_examples: Array, order: Array, num_selected: int) -> Array:
  """The interval construction with the clients laid on the line in ``order``, f32[M, N].

  Args:
    num_examples: i32[N], ``n_i`` (0 for clients that must not be sampled).
    order: i32[N], a permutation of the client ids (the first one's mass is laid first).
    num_selected: M (static).

  Returns:
    f32[M, N] with rows summing to 1 and ``sum_k r[k, i] = M n_i / sum_j n_j``.
  """
  n = jnp.asarray(num_examples).astype(jnp.int32)
  total = jnp.sum(n)
  mass = num_selected * n[order]
  seg_end = jnp.cumsum(mass)
  seg_start = seg_end - mass
  bins = jnp.arange(num_selected, dtype=jnp.int32) * total
  overlap = _bin_overlap(seg_start, seg_end, bins, bins + total)
  r_sorted = overlap.astype(jnp.float32) / jnp.maximum(total, 1).astype(jnp.float32)
  return jnp.zeros_like(r_sorted).at[:, order].set(r_sorted)


def representative_distances(gradients: Array, measure: str = "arccos") -> Array:
  """f32[N, N] dissimilarity of clients' representative gradients.

  Args:
    gradients: f32[N, d], each client's latest update (global minus local model, or its
      sketch); rows of zeros for clients never sampled.
    measure: ``"arccos"`` (angle, in [0, pi]), ``"L2"`` (Euclidean) or ``"L1"``.
      For arccos, two zero rows are at distance 0 and a zero row is at pi/2 from any
      non-zero row (the reference code returns 0 there, which would make never-seen
      clients close to everyone; the paper asks to group them together, which both do).

  References:
    Fraboni et al. 2021, Algorithm 2 line 2 and Appendix D (Arccos, L2, L1).
  """
  if measure not in MEASURES:
    raise ValueError(f"measure={measure!r}; allowed: {list(MEASURES)}")
  g = gradients.astype(jnp.float32)
  if measure == "arccos":
    norms = jnp.linalg.norm(g, axis=1)
    nonzero = norms > 0
    unit = g / jnp.where(nonzero, norms, 1.0)[:, None]
    cos = jnp.clip(unit @ unit.T, -1.0, 1.0)
    angle = jnp.arccos(cos)
    both = nonzero[:, None] & nonzero[None, :]
    neither = ~nonzero[:, None] & ~nonzero[None, :]
    dist = jnp.where(both, angle, jnp.where(neither, 0.0, jnp.pi / 2))
  elif measure == "L2":
    sq = jnp.sum(g * g, axis=1)
    dist = jnp.sqrt(jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * g @ g.T, 0.0))
  else:  # row by row: [N, d] at a time, not [N, N, d] (d = P for exact updates)
    dist = jax.lax.map(lambda row: jnp.sum(jnp.abs(row[None, :] - g), axis=-1), g)
  return jnp.where(jnp.eye(g.shape[0], dtype=bool), 0.0, dist)


def ward_flat_clusters(dist: Array, mergeable: Array, mass: Array, capacity: Array) -> Array:
  """Ward agglomerative clustering cut into maximal subtrees of mass <= capacity.

  Runs the N-1 merges of Ward's method (Lance-Williams update on squared distances, as in
  ``scipy.cluster.hierarchy.linkage(..., "ward")``) as a ``fori_loop`` with O(N^2) work per
  merge. A merge is recorded in the flat clustering only while the merged cluster's mass
  stays <= ``capacity``; since mass grows along the tree this yields the maximal subtrees of
  mass <= capacity (singletons heavier than ``capacity`` stay alone). This is the cut of
  Algorithm 2 line 3 (the reference code re-labels each merge height with the merged weight
  and calls ``fcluster(..., criterion="distance")`` at ``1/M``).

  Args:
    dist: f32[N, N], symmetric dissimilarities with zero diagonal.
    mergeable: bool[N], clients that take part (others stay singletons).
    mass: i32[N], ``M n_i`` for each client (0 for non-participants).
    capacity: i32[], the largest mass a flat cluster may have (``n_total``).

  Returns:
    i32[N], each client's cluster label (the smallest id in its cluster).

  References:
    Ward 1963; Fraboni et al. 2021, Algorithm 2 lines 2-3.
  """
  n = dist.shape[0]
  ids = jnp.arange(n)
  upper = ids[:, None] < ids[None, :]

  def merge(_, carry):
    d2, active, size, cmass, tree, flat = carry
    alive = active & mergeable
    pair_ok = alive[:, None] & alive[None, :] & upper
    masked = jnp.where(pair_ok, d2, jnp.inf)
    flat_idx = jnp.argmin(masked)
    a, b = flat_idx // n, flat_idx % n
    ok = pair_ok[a, b]
    sa, sb, s = size[a], size[b], size
    new_row = ((sa + s) * d2[a] + (sb + s) * d2[b] - s * d2[a, b]) / (sa + sb + s)
    new_row = jnp.maximum(new_row, 0.0).at[a].set(0.0)
    d2 = jnp.where(ok, d2.at[a, :].set(new_row).at[:, a].set(new_row), d2)
    active = jnp.where(ok, active.at[b].set(False), active)
    size = jnp.where(ok, size.at[a].add(sb), size)
    merged = cmass[a] + cmass[b]
    in_b = tree == b
    flat = jnp.where(ok & (merged <= capacity) & in_b, a, flat)
    tree = jnp.where(ok & in_b, a, tree)
    cmass = jnp.where(ok, cmass.at[a].set(merged), cmass)
    return d2, active, size, cmass, tree, flat

  d = dist.astype(jnp.float32)
  init = (
    d * d,
    jnp.ones((n,), bool),
    jnp.ones((n,), jnp.float32),
    mass.astype(jnp.int32),
    ids,
    ids,
  )
  *_, flat = jax.lax.fori_loop(0, n - 1, merge, init)
  return flat


def cluster_distributions(labels: Array, num_examples: Array, num_selected: int) -> Array:
  """Algorithm 2 lines 3-20: allocate clusters to the M distributions, f32[M, N].

  With ``mass_i = M n_i`` and bin capacity ``n_total``: a client with ``mass_i >= n_total``
  first fills ``floor(mass_i / n_total)`` whole distributions (the paper's remark for
  ``p_i >= 1/M``); the remainders, grouped by cluster, are ranked by decreasing cluster mass
  ``q_k``; the top ``M - (#whole)`` clusters each start their own distribution (line 5) and
  the remaining clusters' clients fill the free capacity of those distributions in order of
  rank, then client id (lines 6-19; the reference code shuffles within a cluster, we keep
  id order so the allocation is deterministic).

  Args:
    labels: i32[N], flat cluster label of each client (from ``ward_flat_clusters``); every
      cluster's total mass must be <= ``n_total`` except singletons.
    num_examples: i32[N], ``n_i`` (0 for clients that must not be sampled).
    num_selected: M (static).

  Returns:
    f32[M, N], rows summing to 1, ``sum_k r[k, i] = M n_i / n_total``.

  References:
    Fraboni et al. 2021, Algorithm 2 and Theorem 4.
  """
  n_clients = labels.shape[0]
  m = num_selected
  ids = jnp.arange(n_clients)
  n = jnp.asarray(num_examples).astype(jnp.int32)
  cap = jnp.maximum(jnp.sum(n), 1)
  mass = m * n
  whole = mass // cap
  rem = mass - whole * cap
  num_whole = jnp.sum(whole)
  k = jnp.arange(m, dtype=jnp.int32)
  bins = k * cap
  # 1) whole distributions for heavy clients: bins [0, num_whole).
  w_end = jnp.cumsum(whole * cap)
  r_whole = _bin_overlap(w_end - whole * cap, w_end, bins, bins + cap)
  # 2) clusters ranked by remaining mass; the first m - num_whole are kept as they are.
  cluster_mass = jax.ops.segment_sum(rem, labels, num_segments=n_clients)
  order = jnp.argsort(-cluster_mass, stable=True)
  rank = jnp.zeros((n_clients,), jnp.int32).at[order].set(ids.astype(jnp.int32))
  num_kept = m - num_whole
  kept_cluster = rank < num_kept
  client_kept = kept_cluster[labels]
  client_bin = num_whole + rank[labels]
  r_kept = jnp.where(client_kept[None, :] & (k[:, None] == client_bin[None, :]), rem[None, :], 0)
  # 3) the other clusters fill the free capacity of the kept distributions.
  slot = k - num_whole
  has_cluster = (slot >= 0) & (slot < n_clients)
  kept_mass = jnp.where(has_cluster, cluster_mass[order[jnp.clip(slot, 0, n_clients - 1)]], 0)
  free = jnp.where(slot >= 0, cap - kept_mass, 0)
  f_end = jnp.cumsum(free)
  fill_mass = jnp.where(client_kept, 0, rem)
  fill_order = jnp.lexsort((ids, rank[labels]))
  fm = fill_mass[fill_order]
  fm_end = jnp.cumsum(fm)
  r_fill_sorted = _bin_overlap(fm_end - fm, fm_end, f_end - free, f_end)
  r_fill = jnp.zeros_like(r_fill_sorted).at[:, fill_order].set(r_fill_sorted)
  r = (r_whole + r_kept + r_fill).astype(jnp.float32)
  return r / cap.astype(jnp.float32)


def similarity_distributions(
  gradients: Array,
  num_examples: Array,
  num_selected: int,
  measure: str = "arccos",
  avail: Array | None = None,
) -> Array:
  """Algorithm 2 end to end: distances, Ward clustering, cut and allocation, f32[M, N].

  Args:
    gradients: f32[N, d], representative gradients (zeros for unseen clients).
    num_examples: i32[N], ``n_i``.
    num_selected: M (static).
    measure: similarity measure, one of ``MEASURES``.
    avail: optional bool[N]; only these clients are clustered and may be sampled.

  References:
    Fraboni et al. 2021, Algorithm 2.
  """
  n = jnp.asarray(num_examples).astype(jnp.int32)
  if avail is None:
    avail = jnp.ones(n.shape, bool)
  n = jnp.where(avail, n, 0)
  dist = representative_distances(gradients, measure)
  labels = ward_flat_clusters(dist, avail, num_selected * n, jnp.sum(n))
  return cluster_distributions(labels, n, num_selected)


def sample_from_distributions(key: PRNGKey, r: Array) -> tuple[Array, Array]:
  """One independent draw from each row of r f32[M, N]; slots valid iff r has mass."""
  has_mass = jnp.sum(r, axis=1) > 0
  logits = jnp.where(r > 0, jnp.log(jnp.where(r > 0, r, 1.0)), -jnp.inf)
  logits = jnp.where(has_mass[:, None], logits, 0.0)
  idx = jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)
  valid = has_mass
  return jnp.where(valid, idx, 0), valid


@register("clustered_size")
def make_clustered_size(num_selected: int) -> SelectionStrategy:
  """Clustered sampling based on sample size (Algorithm 1), weights 1/M.

  The distributions are recomputed every round over the available clients (``n_i`` of
  unavailable clients set to 0); with full availability they are the static ones of
  Algorithm 1. Samples with replacement across the M distributions.

  Args:
    num_selected: M, the number of cohort slots (= number of distributions m).

  References:
    Fraboni et al. 2021, Section 4, Algorithm 1.
  """
  num_selected = common.check_num_selected(num_selected)

  def init(key: PRNGKey, info: ClientInfo) -> common.EmptyState:
    del key, info
    return common.EmptyState()

  def select(
    state: common.EmptyState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, common.EmptyState]:
    del t
    sizes = jnp.where(avail, ctx.num_examples, 0)
    r = sample_size_distributions(sizes, num_selected)
    cohort, valid = sample_from_distributions(key, r)
    return common.make_selection(cohort, valid, common.equal_weights(valid)), state

  return SelectionStrategy(
    init=init, select=select, num_selected=num_selected, with_replacement=True
  )


@register("clustered_similarity")
def make_clustered_similarity(num_selected: int, measure: str = "arccos") -> SelectionStrategy:
  """Clustered sampling based on model similarity (Algorithm 2), weights 1/M.

  Every round the available clients are clustered (Ward) on the dissimilarity ``measure``
  of their latest representative gradients (``ctx.update_sketch``; zero rows for clients
  never sampled, which therefore group together), the tree is cut into clusters of mass
  ``<= n_total`` and the clusters are allocated to the M distributions.

  Args:
    num_selected: M, the number of cohort slots.
    measure: ``"arccos"`` (paper's default), ``"L2"`` or ``"L1"``.

  References:
    Fraboni et al. 2021, Section 5, Algorithm 2.
  """
  num_selected = common.check_num_selected(num_selected)
  if measure not in MEASURES:
    raise ValueError(f"measure={measure!r}; allowed: {list(MEASURES)}")

  def init(key: PRNGKey, info: ClientInfo) -> common.EmptyState:
    del key, info
    return common.EmptyState()

  def select(
    state: common.EmptyState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, common.EmptyState]:
    del t
    r = similarity_distributions(
      ctx.update_sketch, ctx.num_examples, num_selected, measure, avail=avail
    )
    cohort, valid = sample_from_distributions(key, r)
    return common.make_selection(cohort, valid, common.equal_weights(valid)), state

  return SelectionStrategy(
    init=init,
    select=select,
    num_selected=num_selected,
    uses_updates=True,
    with_replacement=True,
  )


class TargetState(NamedTuple):
  """``order``: i32[N], the client ids sorted by stratum (majority class), then id."""

  order: Array


@register("target")
def make_target(num_selected: int) -> SelectionStrategy:
  """Fraboni et al.'s "target" sampling: one client of each class per round (an oracle).

  The ideal of the paper's one-class MNIST set-up (Sec. 6: "sample a client from each
  cluster", the 10 clusters being the 10 clients of each digit); a server cannot run it,
  since it needs the clients' labels. Each client's stratum is its majority class in
  ``ClientInfo.label_counts`` (ties to the lower class); the interval construction of
  Algorithm 1 lays the available clients' masses ``M n_i`` by stratum, then id, so when
  the M classes hold equal data mass each of the M distributions covers exactly one class
  and draws its clients in proportion to ``n_i``. Otherwise (unequal masses, unavailable
  clients, M different from the number of classes) a distribution may straddle adjacent
  classes; the scheme stays unbiased (Eq. 7-8). Weights 1/M, with replacement.

  Args:
    num_selected: M, the number of cohort slots.

  References:
    Fraboni et al. 2021, Section 6 and Figure 1 ("target" sampling).
  """
  num_selected = common.check_num_selected(num_selected)

  def init(key: PRNGKey, info: ClientInfo) -> TargetState:
    del key
    counts = jnp.asarray(info.label_counts)
    strata = jnp.argmax(counts, axis=1).astype(jnp.int32)
    ids = jnp.arange(counts.shape[0], dtype=jnp.int32)
    return TargetState(jnp.lexsort((ids, strata)).astype(jnp.int32))

  def select(
    state: TargetState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, TargetState]:
    del t
    sizes = jnp.where(avail, ctx.num_examples, 0)
    r = interval_distributions(sizes, state.order, num_selected)
    cohort, valid = sample_from_distributions(key, r)
    return common.make_selection(cohort, valid, common.equal_weights(valid)), state

  return SelectionStrategy(
    init=init, select=select, num_selected=num_selected, with_replacement=True
  )
