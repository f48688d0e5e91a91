"""FedGS selection: the jitted MIQP solver against brute force, limits, and the contract."""

from __future__ import annotations

import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_sel.selection as selection
from fedjax_sel.selection import fedgs
from tests.selection.conftest import make_ctx, make_info

N = 12


def _np_objective(mask, h, counts, m, alpha, scale="paper"):
  """Eq. 14/16 in float64: s^T (a H - diag(z)) s, z_k = 2 (v_k - mean v - M/N) + 1."""
  n = h.shape[0]
  s = mask.astype(np.float64)
  h = h.astype(np.float64).copy()
  np.fill_diagonal(h, 0.0)
  v = counts.astype(np.float64)
  z = 2 * (v - v.mean() - m / n) + 1
  k = s.sum()
  if scale == "paper":
    a = alpha / n
  else:
    a = alpha * (n - 1) / (k * (k - 1)) if k > 1 else 0.0
  return a * s @ h @ s - z @ s


def _brute_force(h, counts, avail, m, alpha, scale="paper"):
  """max of the objective over all min(M, |A|)-subsets of the available clients."""
  ids = np.flatnonzero(avail)
  k = min(m, len(ids))
  combos = np.asarray(list(itertools.combinations(ids, k)), np.int64).reshape(-1, k)
  masks = np.zeros((len(combos), h.shape[0]), bool)
  np.put_along_axis(masks, combos, True, axis=1)
  return max(_np_objective(mask, h, counts, m, alpha, scale) for mask in masks)


def _random_instances(seed, num):
  rng = np.random.default_rng(seed)
  hs, counts, avails, alphas = [], [], [], []
  for i in range(num):
    x = rng.random((N, 3))
    h = np.linalg.norm(x[:, None] - x[None], axis=-1)
    hs.append(h / h.max())
    # half the instances: equal counts (pure max-dispersion, the hard part)
    counts.append(np.zeros(N, np.int32) if i % 2 == 0 else rng.integers(0, 4, N).astype(np.int32))
    avails.append(rng.random(N) < rng.uniform(0.3, 1.0))
    alphas.append(rng.choice([0.5, 2.0, 10.0, 40.0]))
  return (
    np.stack(hs).astype(np.float32),
    np.stack(counts),
    np.stack(avails),
    np.asarray(alphas, np.float32),
  )


@pytest.mark.parametrize("scale", ["paper", "reference_code"])
def test_solver_finds_brute_force_optimum(scale):
  """50 random instances (N = 12, random availability): value equals the exact optimum."""
  m = 4
  hs, counts, avails, alphas = _random_instances(seed=len(scale), num=50)
  keys = jax.random.split(jax.random.PRNGKey(0), len(hs))
  # one compiled solve (shared with the other N = 12, M = 4 tests), called per instance
  results = [
    fedgs.solve(hs[i], counts[i], avails[i], m, alphas[i], keys[i], scale=scale)
    for i in range(len(hs))
  ]
  res = fedgs.SolveResult(*(np.stack([np.asarray(r[j]) for r in results]) for j in range(3)))
  for i in range(len(hs)):
    cohort, valid = np.asarray(res.cohort[i]), np.asarray(res.valid[i])
    k = min(m, int(avails[i].sum()))
    assert valid.sum() == k and np.all(valid[:k])
    picked = cohort[valid]
    assert len(set(picked.tolist())) == k and np.all(avails[i][picked])
    mask = np.zeros(N, bool)
    mask[picked] = True
    got = _np_objective(mask, hs[i], counts[i], m, alphas[i], scale)
    best = _brute_force(hs[i], counts[i], avails[i], m, alphas[i], scale)
    np.testing.assert_allclose(got, best, rtol=1e-5, atol=1e-5, err_msg=f"instance {i}")
    np.testing.assert_allclose(float(res.value[i]), got, rtol=1e-5, atol=1e-4)


def test_objective_matches_formula():
  hs, counts, avails, _ = _random_instances(seed=7, num=5)
  for h, c, av in zip(hs, counts, avails):
    for alpha in (0.0, 1.5):
      got = fedgs.objective(jnp.asarray(av), jnp.asarray(h), jnp.asarray(c), 4, alpha)
      np.testing.assert_allclose(
        float(got), _np_objective(av, h, c, 4, alpha), rtol=1e-5, atol=1e-5
      )


def test_alpha_zero_selects_least_sampled_available():
  """sigma^2 -> infinity in Eq. 9 (alpha = 0): the least-sampled available clients."""
  rng = np.random.default_rng(3)
  h = rng.random((N, N)).astype(np.float32)
  h = (h + h.T) / 2
  counts = rng.permutation(N).astype(np.int32) * 2  # distinct counts
  avail = rng.random(N) < 0.7
  for alpha in (0.0, 0.5):  # 0.5 / N * 2 (k - 1) < 2: the counts term still dominates
    res = fedgs.solve(
      jnp.asarray(h), jnp.asarray(counts), jnp.asarray(avail), 4, alpha, jax.random.PRNGKey(1)
    )
    ids = np.flatnonzero(avail)
    expected = set(ids[np.argsort(counts[ids])][:4].tolist())
    assert set(np.asarray(res.cohort)[np.asarray(res.valid)].tolist()) == expected


def test_paper_scale_keeps_counts_within_one_under_full_availability():
  """With a = alpha / N and alpha < N / (M - 1), one extra sample (cost 2) always outweighs
  the largest possible distance gain 2 a (M - 1), so counts stay within 1 of each other."""
  m = 4
  alpha = 0.9 * N / (m - 1)
  hs, _, _, _ = _random_instances(seed=11, num=1)
  counts = jnp.zeros((N,), jnp.int32)
  for t in range(15):
    res = fedgs.solve(
      jnp.asarray(hs[0]), counts, jnp.ones((N,), bool), m, alpha, jax.random.PRNGKey(t)
    )
    counts = counts.at[res.cohort].add(res.valid.astype(jnp.int32))
    assert int(counts.max() - counts.min()) <= 1
  assert int(counts.sum()) == 15 * m


def test_reference_code_scale_trades_counts_for_distance():
  """Two clusters {0..5} and {6..11}; cluster-B clients were sampled once more and only
  client 6 of B is available. Paper scale (a = alpha / N) picks the 4 least-sampled
  (all in A); the authors' scaling (a = alpha (N-1) / (k (k-1))) takes 6 for the spread."""
  cluster = (np.arange(N) >= 6).astype(np.int32)
  h = jnp.asarray((cluster[:, None] != cluster[None]).astype(np.float32))
  counts = jnp.asarray(cluster, jnp.int32)
  avail = jnp.asarray(np.arange(N) <= 6)
  paper = fedgs.solve(h, counts, avail, 4, 1.0, jax.random.PRNGKey(0))
  code = fedgs.solve(h, counts, avail, 4, 1.0, jax.random.PRNGKey(0), scale="reference_code")
  assert set(np.asarray(paper.cohort).tolist()) <= set(range(6))
  assert 6 in np.asarray(code.cohort).tolist()


def test_equal_counts_spread_over_clusters():
  """Counts tied: FedGS maximizes the 3DG distance, one client per cluster."""
  cluster = np.repeat(np.arange(4), 3)
  h = (cluster[:, None] != cluster[None]).astype(np.float32)
  res = fedgs.solve(
    jnp.asarray(h), jnp.zeros((N,), jnp.int32), jnp.ones((N,), bool), 4, 1.0, jax.random.PRNGKey(5)
  )
  assert sorted(cluster[np.asarray(res.cohort)].tolist()) == [0, 1, 2, 3]


def _run_rounds(strategy, info, avails, seen_rounds=None):
  """Runs select over rounds with one jitted, traced-once function."""

  def fn(state, key, avail, t, seen):
    ctx = make_ctx(info, 0)._replace(seen=seen)
    return strategy.select(state, key, avail, t, ctx)

  chex.clear_trace_counter()
  fn = jax.jit(chex.assert_max_traces(fn, n=1))
  state = strategy.init(jax.random.PRNGKey(0), info)
  out = []
  for t, avail in enumerate(avails):
    seen = jnp.ones((N,), bool) if seen_rounds is None else jnp.asarray(seen_rounds[t])
    sel, state = fn(state, jax.random.PRNGKey(t), jnp.asarray(avail), jnp.int32(t), seen)
    out.append((sel, state))
  return out


# "oracle" runs through the registry-wide contract (tests/selection/test_contract.py).
@pytest.mark.parametrize("similarity", ["cosine", "functional"])
def test_strategy_contract(similarity):
  info = make_info()
  strategy = selection.make("fedgs", num_selected=4, similarity=similarity, alpha=2.0)
  assert strategy.uses_updates == (similarity != "oracle") and not strategy.with_replacement
  rng = np.random.default_rng(0)
  avails = [
    rng.random(N) < 0.5,
    np.isin(np.arange(N), [2, 7]),
    np.zeros(N, bool),
    np.ones(N, bool),
    rng.random(N) < 0.8,
  ]
  seen = [np.arange(N) < 6, np.arange(N) < 6, np.ones(N, bool), np.ones(N, bool), np.ones(N, bool)]
  counts = np.zeros(N, np.int64)
  sizes = np.asarray(info.num_examples, np.float64)
  for (sel, state), avail, seen_t in zip(_run_rounds(strategy, info, avails, seen), avails, seen):
    cohort, valid, weights = (np.asarray(x) for x in sel)
    k = min(4, int(avail.sum()))
    picked = cohort[valid]
    assert valid.sum() == k and len(set(picked.tolist())) == k and np.all(avail[picked])
    assert np.all(weights[~valid] == 0)
    if k:
      np.testing.assert_allclose(weights[valid], sizes[picked] / sizes[picked].sum(), rtol=1e-5)
    counts[picked] += 1
    np.testing.assert_array_equal(np.asarray(state.counts), counts)
    # the cosine/functional 3DG is built in the first round with every client seen
    assert bool(state.graph_ready) == (similarity == "oracle" or bool(seen_t.all()))
    h = np.asarray(state.distances)
    assert np.all(np.isfinite(h)) and np.all((h >= 0) & (h <= 1))
    if not state.graph_ready:
      assert np.all(h == 0)


def test_oracle_distances_match_3dg_of_label_distributions():
  from fedjax_sel.similarity import build_3dg, label_distribution

  info = make_info()
  strategy = selection.make("fedgs", num_selected=3, sigma2=0.05, epsilon=0.2)
  state = strategy.init(jax.random.PRNGKey(0), info)
  expected = build_3dg(label_distribution(info.label_counts), 0.05, 0.2).distances
  np.testing.assert_allclose(np.asarray(state.distances), np.asarray(expected), atol=1e-6)


@pytest.mark.parametrize(
  "hparams,match",
  [
    ({"alpha": -1.0}, "alpha"),
    ({"similarity": "kl"}, "similarity"),
    ({"sigma2": 0.0}, "sigma2"),
    ({"epsilon": 1.5}, "epsilon"),
    ({"num_restarts": 0}, "num_restarts"),
    ({"scale": "other"}, "scale"),
    ({"min_seen_fraction": 0.0}, "min_seen_fraction"),
    ({"min_seen_fraction": 1.5}, "min_seen_fraction"),
    ({"num_iters": -1}, "num_iters"),
    ({"rebuild_every": -1}, "rebuild_every"),
    ({"epsilon": -0.1}, "epsilon"),
    ({"kernel": "gauss"}, "kernel"),
  ],
)
def test_make_validates_hparams(hparams, match):
  with pytest.raises(ValueError, match=match):
    selection.make("fedgs", num_selected=3, **hparams)


def test_make_accepts_the_boundaries_of_each_range():
  """alpha 0 (the paper's count-balancing end of its grid) and 0.5, epsilon 0 and 1,
  no local search, a graph built once every client is seen."""
  for hp in (
    {"alpha": 0.0},
    {"alpha": 0.5},
    {"epsilon": 0.0},
    {"epsilon": 1.0},
    {"num_iters": 0},
    {"min_seen_fraction": 1.0},
    {"rebuild_every": 0},
    {"sigma2": 1e-6},
    {"num_restarts": 1},
  ):
    assert selection.make("fedgs", num_selected=3, **hp).num_selected == 3, hp


@pytest.mark.parametrize(
  "features, described",
  [(0, "shape () and dtype int64"), (np.ones(0), "shape (0,) and dtype float64"),
   ([[1.0, 2.0], [3.0]], "shape () and dtype object"),
   (np.array([["a"]]), "shape (1, 1) and dtype <U1")],
)  # fmt: skip
def test_oracle_features_that_are_not_rows_per_client_are_rejected(features, described):
  with pytest.raises(ValueError) as e:
    selection.make("fedgs", num_selected=2, similarity="oracle", oracle_features=features)
  assert str(e.value).startswith(f"oracle_features with {described} is not allowed")


def test_oracle_features_may_be_nested_lists():
  """Configs (ml_collections, JSON) hold lists: the study passes ``.tolist()``."""
  features = np.arange(15.0).reshape(5, 3)
  info = make_info(5)
  from_list = selection.make("fedgs", num_selected=2, similarity="oracle",
                             oracle_features=features.tolist())  # fmt: skip
  from_array = selection.make("fedgs", num_selected=2, similarity="oracle",
                              oracle_features=features)  # fmt: skip
  a = from_list.init(jax.random.PRNGKey(0), info)
  b = from_array.init(jax.random.PRNGKey(0), info)
  chex.assert_trees_all_equal(a, b)


def test_oracle_features_with_another_number_of_clients_are_rejected_at_init():
  strategy = selection.make("fedgs", num_selected=2, similarity="oracle",
                            oracle_features=np.ones((4, 3)))  # fmt: skip
  with pytest.raises(ValueError, match="oracle_features has 4 rows; the federation has 5 clients"):
    strategy.init(jax.random.PRNGKey(0), make_info(5))
