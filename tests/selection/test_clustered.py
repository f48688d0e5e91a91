"""Clustered sampling (Fraboni et al. 2021): Algorithms 1 and 2, unbiasedness, variance."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

import fedjax_sel.selection as selection
from fedjax_sel.selection import clustered
from tests.selection.conftest import make_ctx, make_info

# The paper's unbalanced CIFAR-10 set-up (Section 6): 10/30/30/20/10 clients holding
# 100/250/500/750/1000 samples; m = 10 clients sampled per round.
PAPER_SIZES = np.repeat([100, 250, 500, 750, 1000], [10, 30, 30, 20, 10])

# Jitted entry points (eager op-by-op execution of the Ward loop is slow on CPU).
size_distributions = jax.jit(clustered.sample_size_distributions, static_argnums=1)
similarity_distributions = jax.jit(
  clustered.similarity_distributions, static_argnames=("num_selected", "measure")
)
cluster_distributions = jax.jit(clustered.cluster_distributions, static_argnums=2)
ward_flat_clusters = jax.jit(clustered.ward_flat_clusters)
representative_distances = jax.jit(clustered.representative_distances, static_argnums=1)


def _check_proposition_1(r, sizes, m):
  r = np.asarray(r, np.float64)
  p = sizes / sizes.sum()
  assert r.shape == (m, len(sizes))
  assert np.all(r >= 0)
  np.testing.assert_allclose(r.sum(axis=1), 1.0, atol=1e-6)  # Eq. 7
  np.testing.assert_allclose(r.sum(axis=0), m * p, atol=1e-6)  # Eq. 8 (unbiasedness)


def test_algorithm1_equal_sizes_one_client_per_distribution():
  sizes = np.full(100, 500)
  r = np.asarray(size_distributions(jnp.asarray(sizes), 10))
  _check_proposition_1(r, sizes, 10)
  # Balanced and m | n: every client lies in exactly one distribution with r = 1/10
  # (Section 6: "every client can be allocated to one distribution only").
  assert np.all((r > 0).sum(axis=0) == 1)
  np.testing.assert_allclose(r[r > 0], 0.1, atol=1e-7)


def test_algorithm1_paper_unbalanced_sizes():
  r = np.asarray(size_distributions(jnp.asarray(PAPER_SIZES), 10))
  _check_proposition_1(r, PAPER_SIZES, 10)
  # Theorem 3 remark: a client is in at most floor(m p_i) + 2 distributions.
  p = PAPER_SIZES / PAPER_SIZES.sum()
  assert np.all((r > 0).sum(axis=0) <= np.floor(10 * p) + 2)


def test_algorithm1_hand_case_heavy_client():
  # n = (3, 1), m = 2: masses 6 and 2 on bins of 4 -> W_1 = (1, 0), W_2 = (1/2, 1/2).
  r = np.asarray(size_distributions(jnp.asarray([1, 3]), 2))
  np.testing.assert_allclose(r, [[0.0, 1.0], [0.5, 0.5]])


def test_algorithm1_restricted_to_available_clients():
  avail = np.arange(len(PAPER_SIZES)) % 3 != 0
  masked = np.where(avail, PAPER_SIZES, 0)
  r = np.asarray(size_distributions(jnp.asarray(masked), 10))
  assert np.all(r[:, ~avail] == 0)
  _check_proposition_1(r[:, avail], PAPER_SIZES[avail], 10)


def _weight_variances(name, sizes, m, rounds):
  """Empirical Var[omega_i] over `rounds` independent selections (full availability)."""
  info = make_info(num_clients=len(sizes))
  info = info._replace(num_examples=jnp.asarray(sizes, jnp.int32))
  strategy = selection.make(name, num_selected=m)
  ctx = make_ctx(info)
  state = strategy.init(jax.random.PRNGKey(0), info)
  avail = jnp.ones((len(sizes),), bool)

  def omega(key):
    sel, _ = strategy.select(state, key, avail, 0, ctx)
    return jnp.zeros((len(sizes),)).at[sel.cohort].add(sel.weights)

  keys = jax.random.split(jax.random.PRNGKey(123), rounds)
  omegas = np.asarray(jax.jit(jax.vmap(omega))(keys), np.float64)
  return omegas.var(axis=0), omegas.mean(axis=0)


def test_clustered_size_lower_weight_variance_than_md():
  """Eq. 17: Var_MD[omega_i] >= Var_C[omega_i]; measured over 8000 rounds each."""
  m, rounds = 10, 8000
  p = PAPER_SIZES / PAPER_SIZES.sum()
  r = np.asarray(size_distributions(jnp.asarray(PAPER_SIZES), m), np.float64)
  var_md_theory = p * (1 - p) / m  # Eq. 14
  var_cl_theory = (r * (1 - r)).sum(0) / m**2  # Eq. 16
  assert np.all(var_cl_theory <= var_md_theory + 1e-12)
  var_md, mean_md = _weight_variances("md", PAPER_SIZES, m, rounds)
  var_cl, mean_cl = _weight_variances("clustered_size", PAPER_SIZES, m, rounds)
  # Both unbiased: E[omega_i] = p_i (tolerance ~5 standard errors of the mean).
  np.testing.assert_allclose(mean_md, p, atol=5 * np.sqrt(var_md_theory.max() / rounds))
  np.testing.assert_allclose(mean_cl, p, atol=5 * np.sqrt(var_md_theory.max() / rounds))
  # Summed variances match Eqs. 14 and 16 within 4 % (about 4 standard errors) and
  # clustered is lower, the paper's claim: theory gives sum Var_C / sum Var_MD = 0.886.
  np.testing.assert_allclose(var_md.sum(), var_md_theory.sum(), rtol=0.04)
  np.testing.assert_allclose(var_cl.sum(), var_cl_theory.sum(), rtol=0.04)
  assert var_cl.sum() < 0.95 * var_md.sum()


def _partition(labels):
  groups = {}
  for i, label in enumerate(np.asarray(labels)):
    groups.setdefault(int(label), []).append(i)
  return sorted(tuple(g) for g in groups.values())


@pytest.mark.parametrize("measure", ["L2", "L1", "arccos"])
def test_ward_cut_matches_scipy(measure):
  """Our jitted Ward + mass cut equals scipy's linkage('ward') + fcluster on merged mass."""
  rng = np.random.default_rng(0)
  grads = rng.normal(size=(30, 5)).astype(np.float32)
  sizes = rng.integers(1, 50, size=30)
  m = 5
  dist = np.asarray(representative_distances(jnp.asarray(grads), measure))
  labels = ward_flat_clusters(
    jnp.asarray(dist), jnp.ones(30, bool), jnp.asarray(m * sizes), jnp.asarray(sizes.sum())
  )
  tree = linkage(squareform(dist.astype(np.float64), checks=False), "ward")
  mass = list(m * sizes)
  for row in tree:  # the reference code's cut: relabel heights with merged mass
    mass.append(mass[int(row[0])] + mass[int(row[1])])
    row[2] = mass[-1]
  reference = fcluster(tree, sizes.sum(), criterion="distance")
  assert _partition(labels) == _partition(reference)


def test_distances_hand_values():
  g = jnp.asarray([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [0.0, 0.0], [-3.0, 0.0]])
  arccos = np.asarray(clustered.representative_distances(g, "arccos"))
  np.testing.assert_allclose(arccos[0, 1], np.pi / 2, atol=1e-6)
  np.testing.assert_allclose(arccos[0, 4], np.pi, atol=1e-3)
  assert arccos[2, 3] == 0.0 and arccos[0, 2] == pytest.approx(np.pi / 2)
  np.testing.assert_allclose(
    np.asarray(clustered.representative_distances(g, "L2"))[0, 1], np.sqrt(5.0), rtol=1e-6
  )
  np.testing.assert_allclose(
    np.asarray(clustered.representative_distances(g, "L1"))[0, 1], 3.0, rtol=1e-6
  )
  with pytest.raises(ValueError, match="measure"):
    clustered.representative_distances(g, "cosine")


def test_algorithm2_groups_identical_clients_into_one_distribution():
  """4 groups of 5 clients with the same update direction, equal sizes, m = 4: each
  distribution is exactly one group with r = 1/5 (the paper's MNIST one-digit case)."""
  rng = np.random.default_rng(3)
  directions = np.eye(4, 8)
  grads = directions[np.repeat(np.arange(4), 5)] + 0.01 * rng.normal(size=(20, 8))
  sizes = np.full(20, 100)
  r = np.asarray(
    similarity_distributions(jnp.asarray(grads, jnp.float32), jnp.asarray(sizes), num_selected=4)
  )
  _check_proposition_1(r, sizes, 4)
  for k in range(4):
    members = np.flatnonzero(r[k] > 0)
    assert len(members) == 5 and len(set(members // 5)) == 1
    np.testing.assert_allclose(r[k, members], 0.2, atol=1e-7)


def test_algorithm2_unbiased_paper_sizes_with_availability(measure="arccos"):
  rng = np.random.default_rng(4)
  grads = rng.normal(size=(len(PAPER_SIZES), 6)).astype(np.float32)
  grads[:15] = 0.0  # never-seen clients
  avail = rng.random(len(PAPER_SIZES)) < 0.8
  r = np.asarray(
    similarity_distributions(
      jnp.asarray(grads),
      jnp.asarray(PAPER_SIZES),
      num_selected=10,
      measure=measure,
      avail=jnp.asarray(avail),
    )
  )
  assert np.all(r[:, ~avail] == 0)
  _check_proposition_1(r[:, avail], PAPER_SIZES[avail], 10)


def test_allocation_with_heavy_client_and_random_clusters():
  """p_i > 1/m: the heavy client fills whole distributions (paper, end of Section 5)."""
  sizes = np.array([400, 30, 20, 50, 10, 40, 25, 25])  # p_0 = 0.67 > 1/m
  m = 4
  labels = np.array([0, 1, 1, 3, 3, 5, 6, 6])
  r = np.asarray(cluster_distributions(jnp.asarray(labels), jnp.asarray(sizes), m))
  _check_proposition_1(r, sizes, m)
  # m n_0 / n = 2.67: client 0 fills floor(2.67) = 2 whole distributions.
  assert np.sum(np.isclose(r[:, 0], 1.0)) == 2


def test_make_rejects_unknown_measure():
  with pytest.raises(ValueError, match="measure"):
    selection.make("clustered_similarity", num_selected=3, measure="cosine")


def test_distances_hand_values_opposite_rows():
  """A pair with a non-zero inner product (the L2 form |a|^2 + |b|^2 - 2 a.b uses it):
  (1, 0) and (-3, 0) are 4 apart in L2 and L1, (1, 0) and (2, 1) are sqrt(2) and 2."""
  g = jnp.asarray([[1.0, 0.0], [-3.0, 0.0], [2.0, 1.0]])
  l2 = np.asarray(clustered.representative_distances(g, "L2"))
  np.testing.assert_allclose(
    l2, [[0, 4, np.sqrt(2)], [4, 0, np.sqrt(26)], [np.sqrt(2), np.sqrt(26), 0]], rtol=1e-6
  )
  l1 = np.asarray(clustered.representative_distances(g, "L1"))
  np.testing.assert_allclose(l1, [[0, 4, 2], [4, 0, 6], [2, 6, 0]], rtol=1e-6)


def test_ward_records_the_root_merge_when_it_fits():
  """With M = 1 the capacity is the whole mass, so the last (root) merge of Ward's N - 1
  merges still fits and every client ends in one cluster labelled by the smallest id."""
  rng = np.random.default_rng(5)
  dist = np.asarray(
    representative_distances(jnp.asarray(rng.normal(size=(6, 3)), jnp.float32), "L2")
  )
  sizes = jnp.asarray([3, 1, 4, 1, 5, 9])
  labels = ward_flat_clusters(jnp.asarray(dist), jnp.ones(6, bool), sizes, jnp.sum(sizes))
  np.testing.assert_array_equal(np.asarray(labels), np.zeros(6))


def test_allocation_ranks_clusters_by_decreasing_mass():
  """Algorithm 2 line 5 by hand: n = (40, 10, 30, 20), four singleton clusters, M = 2, so
  masses 2 n = (80, 20, 60, 40) on bins of 100. The two heaviest clusters (clients 0 and 2)
  start the two distributions; the rest fill the free capacity in order of rank: client 3
  (mass 40) gives 20 to bin 0 and 20 to bin 1, then client 1 (mass 20) goes to bin 1."""
  r = np.asarray(cluster_distributions(jnp.arange(4), jnp.asarray([40, 10, 30, 20]), 2))
  np.testing.assert_allclose(r, [[0.8, 0.0, 0.0, 0.2], [0.0, 0.2, 0.6, 0.2]], atol=1e-7)


def test_sample_from_distributions_invalid_rows_hold_id_zero():
  r = jnp.asarray([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
  idx, valid = clustered.sample_from_distributions(jax.random.PRNGKey(0), r)
  assert np.asarray(valid).tolist() == [True, False]
  assert np.asarray(idx).tolist() == [2, 0]


def test_no_examples_gives_empty_distributions():
  """No available client holds data: every r is 0 (not NaN) and no slot is valid."""
  r = cluster_distributions(jnp.arange(4), jnp.zeros(4, jnp.int32), 2)
  np.testing.assert_array_equal(np.asarray(r), np.zeros((2, 4)))
  r = similarity_distributions(
    jnp.ones((4, 3)), jnp.asarray([5, 5, 5, 5]), num_selected=2, avail=jnp.zeros(4, bool)
  )
  np.testing.assert_array_equal(np.asarray(r), np.zeros((2, 4)))
  _, valid = clustered.sample_from_distributions(jax.random.PRNGKey(0), r)
  assert not np.any(np.asarray(valid))


def test_clustered_size_uses_only_the_available_clients_sizes():
  """Algorithm 1 over the available clients only. Two available clients of 30 and 10
  examples, M = 4: masses 120 and 40 on bins of 40, so slots 0-2 always draw the first and
  slot 3 the second; the unavailable clients' sizes (7 each) count for nothing."""
  info = make_info()
  n = info.num_examples.shape[0]
  sizes = jnp.full(n, 7, jnp.int32).at[2].set(30).at[5].set(10)
  ctx = make_ctx(info)._replace(num_examples=sizes)
  avail = jnp.zeros(n, bool).at[2].set(True).at[5].set(True)
  strategy = selection.make("clustered_size", num_selected=4)
  select = jax.jit(lambda k: strategy.select(strategy.init(k, info), k, avail, 0, ctx)[0])
  for seed in range(5):
    sel = select(jax.random.PRNGKey(seed))
    assert np.asarray(sel.cohort).tolist() == [2, 2, 2, 5]
    assert np.asarray(sel.valid).all()


def test_distances_of_equal_and_opposite_rows_survive_rounding():
  """Equal rows are at distance ~0 and opposite rows at angle ~pi, with no NaN: float32
  rounding puts some cosines just outside [-1, 1] and some |a|^2 + |b|^2 - 2 a.b just
  below 0 (40 random rows, each repeated and negated, hit both)."""
  g = np.random.default_rng(0).normal(size=(40, 5)).astype(np.float32)
  rows = jnp.asarray(np.concatenate([g, g, -g]))
  i = np.arange(40)
  arccos = np.asarray(representative_distances(rows, "arccos"))
  assert np.all(np.isfinite(arccos))
  assert np.all(arccos[i, i + 40] < 1e-3) and np.all(arccos[i, i + 80] > np.pi - 1e-3)
  l2 = np.asarray(representative_distances(rows, "L2"))
  assert np.all(np.isfinite(l2)) and np.all(l2[i, i + 40] < 1e-2)


def test_clustered_similarity_asks_for_updates():
  assert selection.make("clustered_similarity", num_selected=2).uses_updates
  assert not selection.make("clustered_size", num_selected=2).uses_updates


def test_distributions_with_one_example_in_total():
  """n_total = 1 (one client with one example): it fills every bin, r = 1 in each row;
  with no example at all every r is 0 (Algorithm 1 and 2)."""
  np.testing.assert_allclose(
    np.asarray(size_distributions(jnp.asarray([0, 1, 0]), 2)), [[0, 1, 0], [0, 1, 0]]
  )
  np.testing.assert_array_equal(np.asarray(size_distributions(jnp.zeros(3, jnp.int32), 2)), 0.0)
  r = cluster_distributions(jnp.arange(3), jnp.asarray([0, 1, 0]), 2)
  np.testing.assert_allclose(np.asarray(r), [[0, 1, 0], [0, 1, 0]])
