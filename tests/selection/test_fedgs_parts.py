"""FedGS solver parts on hand cases: tie-breaking, the forced first pick, the restart
schedule, the reference-code pair weight, the similarity of each kind, the defaults."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np

import fedjax_sel.selection as selection
from fedjax_sel.selection import fedgs
from fedjax_sel.similarity.measures import cosine, functional
from tests.selection.conftest import make_ctx, make_info


def test_pick_is_argmax_with_ties_broken_by_priority():
  all_ = jnp.ones(3, bool)
  assert int(fedgs._pick(jnp.asarray([1.0, 5.0, 3.0]), all_, jnp.asarray([0.9, 0.1, 0.5]))) == 1
  # 0 and 1 tie at the best score: the larger priority (client 1) wins, client 2 is lower.
  assert int(fedgs._pick(jnp.asarray([2.0, 2.0, 1.0]), all_, jnp.asarray([0.1, 0.7, 0.9]))) == 1
  # Scores within the tolerance 1e-6 (1 + |best|) of the best tie, also around 0; 1.5e-6
  # below the best is outside it.
  assert int(fedgs._pick(jnp.asarray([0.0, 1.5e-6]), all_[:2], jnp.asarray([0.9, 0.1]))) == 1
  assert int(fedgs._pick(jnp.asarray([0.0, 1e-9, -1.0]), all_, jnp.asarray([0.9, 0.1, 1.0]))) == 0
  # Non-candidates never win, whatever their score or priority.
  cand = jnp.asarray([True, False, True])
  assert int(fedgs._pick(jnp.asarray([1.0, 9.0, 3.0]), cand, jnp.asarray([0.5, 1.0, 0.1]))) == 2


def _alpha_zero_case():
  """alpha = 0: the objective is -2 sum v over the cohort, so greedy takes the least-sampled
  available clients in increasing count order."""
  n = 6
  h0 = jnp.zeros((n, n), jnp.float32)
  counts = jnp.asarray([5, 0, 3, 1, 4, 2], jnp.float32)
  avail = jnp.asarray([True, True, True, True, True, False])
  return h0, 2.0 * counts, jnp.float32(0.0), avail


def test_greedy_forced_first_pick_includes_client_zero():
  h0, lin, a, avail = _alpha_zero_case()
  priority = jnp.linspace(0.1, 0.6, 6)
  cohort, valid = fedgs._greedy(h0, lin, a, avail, jnp.int32(3), 4, priority, jnp.int32(-1))
  assert np.asarray(cohort).tolist() == [1, 3, 2, 0] and np.asarray(valid).tolist() == [
    True
  ] * 3 + [False]
  cohort, _ = fedgs._greedy(h0, lin, a, avail, jnp.int32(3), 4, priority, jnp.int32(0))
  assert np.asarray(cohort)[:3].tolist() == [0, 1, 3]  # client 0 forced, then least sampled
  cohort, _ = fedgs._greedy(h0, lin, a, avail, jnp.int32(3), 4, priority, jnp.int32(4))
  assert np.asarray(cohort)[:3].tolist() == [4, 1, 3]


def test_restart_schedule_without_local_search():
  """num_iters = 0 leaves each start as built: restart 0 is pure greedy, odd restarts are
  greedy from the available client of largest priority, even restarts >= 2 are the k
  available clients of largest priority (priority = uniform(key of the restart, N))."""
  h0, lin, a, avail = _alpha_zero_case()
  k = jnp.int32(2)
  rkey = jax.random.PRNGKey(6)  # priorities rank 4, 0, ... (client 5 is unavailable)
  priority = np.asarray(jax.random.uniform(rkey, (6,)))
  top = int(np.argmax(np.where(np.asarray(avail), priority, -1.0)))
  by_priority = [int(i) for i in np.argsort(-np.where(np.asarray(avail), priority, -1.0))[:2]]
  least = [1, 3]  # counts 0 and 1
  want = {
    0: least,
    1: [top] + [c for c in least if c != top][:1],
    2: by_priority,
    3: [top] + [c for c in least if c != top][:1],
    4: by_priority,
  }
  assert want == {0: [1, 3], 1: [4, 1], 2: [4, 0], 3: [4, 1], 4: [4, 0]}  # all differ
  for r, cohort_want in want.items():
    cohort, valid, value = fedgs._start(h0, lin, a, avail, k, 3, 0, jnp.int32(r), rkey)
    assert np.asarray(cohort)[:2].tolist() == cohort_want, r
    assert np.asarray(valid).tolist() == [True, True, False]
    np.testing.assert_allclose(float(value), -float(np.sum(np.asarray(lin)[cohort_want])))


def test_pair_weight_values():
  assert float(fedgs.pair_weight(2.0, 10, 3, "paper")) == np.float32(0.2)
  np.testing.assert_allclose(float(fedgs.pair_weight(2.0, 10, 3, "reference_code")), 3.0)  # 2*9/6
  np.testing.assert_allclose(float(fedgs.pair_weight(2.0, 10, 2, "reference_code")), 9.0)  # 2*9/2
  for k in (0, 1):  # no pair in a cohort of 0 or 1: no diversity term
    assert float(fedgs.pair_weight(2.0, 10, k, "reference_code")) == 0.0


def test_similarity_normalized_to_unit_range():
  x = jnp.asarray(np.random.default_rng(0).normal(size=(5, 4)), jnp.float32)
  np.testing.assert_allclose(fedgs._similarity_from(x, "cosine", False), cosine(x), rtol=1e-6)
  np.testing.assert_allclose(
    fedgs._similarity_from(x, "functional", False), functional(x), rtol=1e-6
  )
  sim = np.asarray(fedgs._similarity_from(x, "cosine", True))
  raw = np.asarray(cosine(x))
  off = ~np.eye(5, dtype=bool)  # min-max over the off-diagonal pairs, diagonal 1
  want = np.where(off, (raw - raw[off].min()) / (raw[off].max() - raw[off].min()), 1.0)
  np.testing.assert_allclose(sim, want, atol=1e-6)


def test_defaults():
  solve = inspect.signature(fedgs.solve).parameters
  assert (solve["num_iters"].default, solve["num_restarts"].default, solve["scale"].default) == (
    100,
    4,
    "paper",
  )
  make = {k: p.default for k, p in inspect.signature(fedgs.make_fedgs).parameters.items()}
  assert make == {
    "num_selected": inspect.Parameter.empty,
    "alpha": 1.0,
    "similarity": "oracle",
    "sigma2": 0.01,
    "epsilon": 0.1,
    "num_iters": 100,
    "num_restarts": 4,
    "scale": "paper",
    "normalize": True,
    "min_seen_fraction": 1.0,
    "rebuild_every": 0,
    "oracle_features": None,
    "kernel": "paper",
  }


def test_greedy_gain_counts_each_pair_twice():
  """The greedy gain of adding j is 2 a h_j - 2 v_j (s^T H s counts a pair twice). First
  pick forced to 0; H[0, 1] = 1, H[0, 2] = 0, a = 1, so client 1 gains 2 - 2 v_1 and
  client 2 gains 0: with 2 v_1 = 1.5 client 1 wins, with 2 v_1 = 2.5 client 2 does (a
  factor 1 or 3 instead of 2 flips one of the two)."""
  h0 = jnp.asarray([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
  for lin1, want in ((1.5, 1), (2.5, 2)):
    lin = jnp.asarray([0.0, lin1, 0.0])
    cohort, _ = fedgs._greedy(
      h0, lin, jnp.float32(1.0), jnp.ones(3, bool), jnp.int32(2), 2, jnp.zeros(3), jnp.int32(0)
    )
    assert np.asarray(cohort).tolist() == [0, want], lin1


def test_local_search_budget_counts_swaps():
  """alpha = 0, counts (9, 8, 0, 1): from the cohort {0, 1} each improving swap replaces the
  most-sampled member by the least-sampled outsider; num_iters caps the swaps at 1 or 2."""
  h0 = jnp.zeros((4, 4))
  lin = 2.0 * jnp.asarray([9.0, 8.0, 0.0, 1.0])
  start = jnp.asarray([0, 1], jnp.int32)
  valid = jnp.ones(2, bool)
  run = lambda iters: sorted(
    np.asarray(
      fedgs._local_search(h0, lin, jnp.float32(0.0), jnp.ones(4, bool), start, valid, iters)
    ).tolist()
  )
  assert run(0) == [0, 1]
  assert run(1) == [1, 2]  # 0 (count 9) out, 2 (count 0) in
  assert run(2) == [2, 3]
  assert run(5) == [2, 3]  # no improving swap left


def test_oracle_graph_is_ready_at_init():
  info = make_info()
  state = selection.make("fedgs", num_selected=3).init(jax.random.PRNGKey(0), info)
  assert bool(state.graph_ready) and int(state.rounds_since_build) == 0
  state = selection.make("fedgs", num_selected=3, similarity="cosine").init(
    jax.random.PRNGKey(0), info
  )
  assert not bool(state.graph_ready)


def test_local_search_ignores_improvements_below_its_tolerance():
  """A swap must improve the objective by more than 1e-6 (1 + 2 |a| |S|). H = 0, so only
  the counts move the objective: with a = 0 the tolerance is 1e-6 (a gain of 1.5e-6 is
  taken, 2e-7 is not); with a = 1 and one member it is 3e-6 (3.5e-6 taken, 2.5e-6 not)."""
  h0 = jnp.zeros((2, 2))
  start = jnp.asarray([0], jnp.int32)
  cases = ((0.0, 2e-7, 0), (0.0, 1.5e-6, 1), (0.0, 2e-5, 1), (1.0, 2.5e-6, 0), (1.0, 3.5e-6, 1))
  for a, gain, want in cases:
    out = fedgs._local_search(
      h0, jnp.asarray([gain, 0.0]), jnp.float32(a), jnp.ones(2, bool), start, jnp.ones(1, bool), 10
    )
    assert int(out[0]) == want, (a, gain)


def test_aggregation_weights_with_fractional_sizes():
  """Eq. 18 weights n_k / sum over the cohort, also for sizes below one example."""
  info = make_info()
  n = info.num_examples.shape[0]
  ctx = make_ctx(info)._replace(num_examples=jnp.full(n, 0.25, jnp.float32))
  strategy = selection.make("fedgs", num_selected=3)
  key = jax.random.PRNGKey(0)
  sel, _ = strategy.select(strategy.init(key, info), key, jnp.ones(n, bool), 0, ctx)
  np.testing.assert_allclose(np.asarray(sel.weights), [1 / 3] * 3, rtol=1e-6)


def test_random_subset_takes_the_largest_priorities_among_available():
  """k = 2 of 3 available clients (1 is away), 6 slots for N = 4 (padding beyond N):
  the two largest available priorities first, then invalid slots holding id 0."""
  avail = jnp.asarray([True, False, True, True])
  priority = jnp.asarray([0.2, 0.9, 0.5, 0.7])
  cohort, valid = fedgs._random_subset(avail, jnp.int32(2), 6, priority)
  assert np.asarray(cohort).tolist() == [3, 2, 0, 0, 0, 0]
  assert np.asarray(valid).tolist() == [True, True, False, False, False, False]
  cohort, valid = fedgs._random_subset(avail, jnp.int32(3), 4, priority)
  assert np.asarray(cohort).tolist() == [3, 2, 0, 0]
  assert np.asarray(valid).tolist() == [True, True, True, False]


def test_tolerances_scale_with_the_objective():
  """The tie tolerance grows with |best| (1e-6 (1 + |best|)): scores 1000 and 1000 - 5e-4
  tie. The swap tolerance grows with |a| |S|: a = 1 and two members give 5e-6, so a gain
  of 3.5e-6 is not taken."""
  pick = fedgs._pick(jnp.asarray([1000.0, 999.9995]), jnp.ones(2, bool), jnp.asarray([0.1, 0.9]))
  assert int(pick) == 1
  out = fedgs._local_search(
    jnp.zeros((3, 3)),
    jnp.asarray([3.5e-6, 0.0, 0.0]),
    jnp.float32(1.0),
    jnp.ones(3, bool),
    jnp.asarray([0, 1], jnp.int32),
    jnp.ones(2, bool),
    10,
  )
  assert sorted(np.asarray(out).tolist()) == [0, 1]
