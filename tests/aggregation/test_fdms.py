"""FL-FDMS: friend discovery on a hand-computed 3-round toy, and the candidate-set race.

Clients 0..3; each update's 'b' leaf holds the 2-vector below ('w' is zero), so
r = (cos + 1) / 2 is computed from these vectors.

Round 0 (all active): c0=[1,0], c1=[.6,.8], c2=[0,1], c3=[-1,0]
  r01=.8  r02=.5  r03=0  r12=.9  r13=.2  r23=.5
Round 1 (2 dropped): c0=[1,0], c1=[0,1], c3=[1,0]
  r01=.5 -> R01=.65;  r03=1 -> R03=.5;  r13=.5 -> R13=.35
  friend(2) = argmax(R20=.5, R21=.9, R23=.5) = 1;  update = (c0 + c1 + c1 + c3)/4 = [.5, .5]
Round 2 (0 dropped): c1=[0,1], c2=[0,1], c3=[2,0]
  friend(0) = argmax(R01=.65, R02=.5, R03=.5) = 1 (the last round alone would say 3: r03=1)
  update = (c1 + c1 + c2 + c3)/4 = [.5, .75]
"""

from __future__ import annotations

import math

import aggregation_testlib as lib
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import aggregation
from fedjax_sel.aggregation.fdms import hoeffding_threshold

ROUNDS = [
  ([0, 1, 2, 3], [[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [-1.0, 0.0]]),
  ([0, 1, 3], [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]),
  ([1, 2, 3], [[0.0, 1.0], [0.0, 1.0], [2.0, 0.0]]),
]


def _play(agg, num_rounds=3):
  n = 4
  state = agg.init(lib.make_params(), lib.make_info(np.ones(n)))
  out = []
  for t, (active, rows) in enumerate(ROUNDS[:num_rounds]):
    avail = jnp.zeros((n,), bool).at[jnp.array(active)].set(True)
    # M = 4 slots: the active clients, then one invalid slot holding garbage.
    cohort = active + [0] * (4 - len(active))
    valid = [True] * len(active) + [False] * (4 - len(active))
    rows = rows + [[7.0, 7.0]] * (4 - len(active))
    sel = lib.selection_of(cohort, valid)
    update, state = jax.jit(agg.apply)(state, lib.deltas_from_b(rows), sel, avail, t)
    out.append((update, state))
  return out


def test_friend_is_hand_computed_running_mean_argmax():
  (u0, s0), (u1, s1), (u2, s2) = _play(aggregation.make("fdms"))
  np.testing.assert_allclose(u0["b"], [0.15, 0.45], rtol=1e-6)  # plain mean of round 0
  expected_r0 = np.array(
    [[0, 0.8, 0.5, 0.0], [0.8, 0, 0.9, 0.2], [0.5, 0.9, 0, 0.5], [0.0, 0.2, 0.5, 0]]
  )
  np.testing.assert_allclose(s0.similarity, expected_r0, atol=1e-6)
  np.testing.assert_array_equal(s1.friend, [0, 1, 1, 3])
  np.testing.assert_allclose(u1["b"], [0.5, 0.5], rtol=1e-6)
  np.testing.assert_allclose(s1.similarity[0, 1], 0.65, rtol=1e-6)
  np.testing.assert_allclose(s1.similarity[0, 3], 0.5, atol=1e-6)
  np.testing.assert_allclose(s1.similarity[1, 3], 0.35, rtol=1e-6)
  np.testing.assert_array_equal(s2.friend, [1, 1, 2, 3])
  np.testing.assert_allclose(u2["b"], [0.5, 0.75], rtol=1e-6)
  np.testing.assert_allclose(u2["w"], 0.0)
  np.testing.assert_array_equal(s2.co_rounds[1], [2, 0, 2, 3])
  np.testing.assert_allclose(s2.similarity[1, 2], 0.95, rtol=1e-6)
  np.testing.assert_allclose(s2.similarity[1, 3], 0.4, rtol=1e-6)
  assert float(s2.pairs_computed) == 6 + 3 + 3
  assert float(s2.pairs_saved) == 0


def _race(theta_eff):
  """Two rounds of the toy with candidate-set reduction, K = 4, T = 10, B = 1, p = .5,
  beta = 1, delta_f = 0, and theta_scale such that the effective Theta_1 is theta_eff."""
  theta_1 = math.sqrt(2 * math.log(2 * 16 * 10 * 1) - 2 * math.log(0.5))
  agg = aggregation.make(
    "fdms",
    complexity_reduction=True,
    num_rounds=10,
    max_friends=1,
    confidence=0.5,
    beta=1.0,
    theta_scale=theta_eff / theta_1,
  )
  return _play(agg, num_rounds=2)


def test_candidate_set_reduction_with_theorem2_threshold():
  """Theta_1 = sqrt(2 ln(2 K^2 T B) - 2 ln p) with K=4, T=10, B=1, p=.5, beta=1, delta_f=0;
  theta_scale makes the effective Theta_1 = .25, Theta_2 = .25 / sqrt(2) = .1768.

  After round 0 (gap >= .25 removed): C0={1}, C1={0,2}, C2={1}, C3={2}.
  Round 1 (0, 1, 3 active): pair (0,1) computed, (0,3) and (1,3) skipped (saved 2).
  friend(2) = 1 (its only candidate). Then C1 loses 0 (gap .9 - .65 = .25 >= .1768).
  """
  theta_1 = math.sqrt(2 * math.log(2 * 16 * 10 * 1) - 2 * math.log(0.5))
  np.testing.assert_allclose(hoeffding_threshold(1, 4, 10, 1, 0.5, 1.0, 0.0), theta_1, rtol=1e-6)
  (u0, s0), (u1, s1) = _race(0.25)
  allowed_0 = np.array(
    [[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 1, 0]], dtype=bool
  )  # candidates[k, i]: i may be k's friend
  np.testing.assert_array_equal(s0.candidates, allowed_0)
  assert float(s0.pairs_computed) == 6 and float(s0.pairs_saved) == 0
  assert float(s1.pairs_computed) == 7 and float(s1.pairs_saved) == 2
  np.testing.assert_allclose(s1.similarity[0, 1], 0.65, rtol=1e-6)
  np.testing.assert_allclose(s1.similarity[0, 3], 0.0, atol=1e-7)  # skipped: unchanged
  np.testing.assert_array_equal(s1.co_rounds[0], [0, 2, 1, 1])
  np.testing.assert_array_equal(s1.friend, [0, 1, 1, 3])
  np.testing.assert_allclose(u1["b"], [0.5, 0.5], rtol=1e-6)
  allowed_1 = allowed_0.copy()
  allowed_1[1, 0] = False
  np.testing.assert_array_equal(s1.candidates, allowed_1)


def test_no_known_friend_falls_back_to_mean_of_active():
  """Round 0 with client 3 dropped: it was never compared with anyone, so it takes the mean
  of the active updates (the Dropout substitute) and the update equals their mean."""
  agg = aggregation.make("fdms")
  n = 4
  state = agg.init(lib.make_params(), lib.make_info(np.ones(n)))
  avail = jnp.array([True, True, True, False])
  deltas = lib.deltas_from_b([[3.0, 0.0], [0.0, 3.0], [3.0, 3.0], [9.0, 9.0]])
  update, state = jax.jit(agg.apply)(
    state, deltas, lib.selection_of(jnp.arange(n), avail), avail, 0
  )
  np.testing.assert_allclose(update["b"], [2.0, 2.0], rtol=1e-6)
  np.testing.assert_array_equal(state.friend, [0, 1, 2, -1])


def test_threshold_uses_the_one_based_round():
  """Effective Theta_1 = .3, Theta_2 = .3 / sqrt(2) = .212. After round 0 client 1 keeps 0
  (gap .9 - .8 = .1) and 2, drops 3. In round 1 (the paper's t = 2) the gap to client 0 is
  .9 - .65 = .25: at least Theta_2, so 0 leaves C1; Theta at t = 1 (.3) would keep it."""
  (_, s0), (_, s1) = _race(0.3)
  np.testing.assert_array_equal(np.asarray(s0.candidates)[1], [True, False, True, False])
  np.testing.assert_allclose(s1.similarity[1, 0], 0.65, rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(s1.candidates)[1], [False, False, True, False])
  assert int(s1.rounds) == 2
  # Effective Theta_1 = .4: Theta_2 = .283 > .25 keeps client 0 in C1 (Theta_3 = .231,
  # one round too late, would drop it).
  (_, s0), (_, s1) = _race(0.4)
  np.testing.assert_allclose(s1.similarity[1, 0], 0.65, rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(s1.candidates)[1], [True, False, True, False])


def test_pairwise_scores_of_small_updates():
  """r = (cos + 1) / 2 does not depend on the updates' norms, also below 1."""
  from fedjax_sel.aggregation.fdms import _pairwise_scores

  r = np.asarray(_pairwise_scores({"b": jnp.asarray([[0.1, 0.0], [0.2, 0.0], [0.0, 0.05]])}))
  np.testing.assert_allclose(r, [[1.0, 1.0, 0.5], [1.0, 1.0, 0.5], [0.5, 0.5, 1.0]], atol=1e-6)


def test_hoeffding_threshold_by_hand():
  """Theorem 2 with K = 10, T = 100, B_max = 9, p = .05, beta = .5, delta_f = .1, t = 4."""
  want = math.sqrt((2 * math.log(2 * 100 * 100 * 9) - 2 * math.log(0.05)) / (0.5 * 4)) + 0.1
  got = float(hoeffding_threshold(4, 10, 100, 9, 0.05, 0.5, 0.1))
  assert got == pytest.approx(want, rel=1e-6)
  # t below 1 is read as 1
  assert float(hoeffding_threshold(0, 10, 100, 9, 0.05, 0.5, 0.1)) == pytest.approx(
    float(hoeffding_threshold(1, 10, 100, 9, 0.05, 0.5, 0.1)), rel=1e-6
  )


def test_min_similarity_floor_by_hand():
  """The toy above with a floor on the substitute's R.

  0.7: round 1's friend(2) = 1 has R21 = .9 and stays; round 2's friend(0) = 1 has only
  R01 = .65, so client 0 takes the mean of the active c1, c2, c3 = [2/3, 2/3] and the
  update is that mean. 0.95: round 1's client 2 also falls back, to the mean of c0, c1, c3
  = [2/3, 1/3]. A floor of 0 is the paper's rule (R >= 0), in every round.
  """
  (_, _), (u1, s1), (u2, s2) = _play(aggregation.make("fdms", min_similarity=0.7))
  np.testing.assert_array_equal(s1.friend, [0, 1, 1, 3])
  np.testing.assert_allclose(u1["b"], [0.5, 0.5], rtol=1e-6)
  np.testing.assert_array_equal(s2.friend, [-1, 1, 2, 3])
  np.testing.assert_allclose(u2["b"], [2 / 3, 2 / 3], rtol=1e-6)
  (_, _), (u1, s1), _ = _play(aggregation.make("fdms", min_similarity=0.95))
  np.testing.assert_array_equal(s1.friend, [0, 1, -1, 3])
  np.testing.assert_allclose(u1["b"], [2 / 3, 1 / 3], rtol=1e-6)
  # The floor is inclusive: round 2's friend R01 (= .65 in float32) as the floor keeps the
  # friend; the next float above it does not.
  r01 = float(_play(aggregation.make("fdms"))[1][1].similarity[0, 1])
  for floor, friend0 in ((r01, 1), (float(np.nextafter(np.float32(r01), 1)), -1)):
    (_, _), (_, _), (_, s2) = _play(aggregation.make("fdms", min_similarity=floor))
    assert int(s2.friend[0]) == friend0, (floor, s2.friend)
  for (u, s), (u_ref, s_ref) in zip(
    _play(aggregation.make("fdms", min_similarity=0.0)), _play(aggregation.make("fdms"))
  ):
    np.testing.assert_array_equal(u["b"], u_ref["b"])
    np.testing.assert_array_equal(s.friend, s_ref.friend)


def test_fdms_defaults_and_ranges():
  import inspect

  from fedjax_sel.aggregation.fdms import make_fdms

  defaults = {k: p.default for k, p in inspect.signature(make_fdms).parameters.items()}
  assert defaults == {
    "complexity_reduction": False,
    "num_rounds": 1000,
    "confidence": 0.05,
    "beta": 0.5,
    "max_friends": None,
    "delta_f": 0.0,
    "theta_scale": 1.0,
    "weighting": "uniform",
    "friend": "similarity",
    "cluster_ids": None,
    "min_similarity": None,
  }
  for bad in (
    {"theta_scale": 0.0},
    {"beta": 0.0},
    {"confidence": 1.0},
    {"confidence": 0.0},
    {"num_rounds": 0},
    {"max_friends": 0},
    {"delta_f": 1.5},
    {"confidence": -0.5},
    {"beta": 1.5},
    {"complexity_reduction": 1},
    {"min_similarity": -0.1},
    {"min_similarity": 1.5},
    {"min_similarity": 0.5, "friend": "oracle"},
  ):
    with pytest.raises(ValueError, match=next(iter(bad))):
      aggregation.make("fdms", **bad)
  aggregation.make("fdms", beta=1.0, delta_f=1.0, max_friends=1, num_rounds=1)


def test_pairwise_scores_stay_in_unit_range_for_opposite_updates():
  """Opposite updates have r = 0, equal ones r = 1, never outside [0, 1] under float32
  rounding (40 random rows, each repeated and negated)."""
  from fedjax_sel.aggregation.fdms import _pairwise_scores

  g = np.random.default_rng(0).normal(size=(40, 5)).astype(np.float32)
  r = np.asarray(_pairwise_scores({"b": jnp.asarray(np.concatenate([g, g, -g]))}))
  i = np.arange(40)
  assert np.all(r >= 0.0) and np.all(r <= 1.0)
  assert np.all(r[i, i + 80] < 1e-6) and np.all(r[i, i + 40] > 1 - 1e-6)


def test_first_occurrence_of_a_client_in_the_cohort():
  from fedjax_sel.aggregation.fdms import _first_occurrence

  got = _first_occurrence(
    jnp.asarray([3, 3, 1, 3, 1]), jnp.asarray([True, True, True, True, False])
  )
  assert np.asarray(got).tolist() == [True, False, True, False, False]
  got = _first_occurrence(jnp.asarray([3, 3, 1]), jnp.asarray([False, True, True]))
  assert np.asarray(got).tolist() == [False, True, True]  # the received copy counts


def test_pairwise_scores_clip_float32_cosines_above_one():
  """For parallel rows of different norms (g, 3 g, 12.3 g) the float32 cosine can exceed 1
  by 2 ulp, enough for (cos + 1) / 2 to round to 1 + 2^-23 without the clip (this seed has
  such pairs: the test fails when the clip's upper end is raised); r must stay <= 1."""
  from fedjax_sel.aggregation.fdms import _pairwise_scores

  g = np.random.default_rng(0).normal(size=(300, 5)).astype(np.float32)
  rows = np.concatenate([g, g * np.float32(3.0), g * np.float32(12.3)])
  r = np.asarray(_pairwise_scores({"b": jnp.asarray(rows)}))
  assert r.max() <= 1.0 and r.min() >= 0.0


def _hand_state(agg, similarity, co_rounds, candidates):
  state = agg.init(lib.make_params(), lib.make_info(np.ones(len(similarity))))
  return state._replace(
    similarity=jnp.asarray(similarity, jnp.float32),
    co_rounds=jnp.asarray(co_rounds, jnp.int32),
    candidates=jnp.asarray(candidates, bool),
  )


def _one_round(agg, state, active, rows, t=0):
  n = len(state.friend)
  avail = jnp.zeros((n,), bool).at[jnp.asarray(active)].set(True)
  sel = lib.selection_of(list(active), [True] * len(active))
  return jax.jit(agg.apply)(state, lib.deltas_from_b(rows), sel, avail, t)


def test_friend_only_among_candidates_with_complexity_reduction():
  """Client 0 (dropped) knows 1 (R = .9) and 2 (R = .6), but 1 has left C^0: the friend is
  2. Client 0's best known candidate is then 2 itself, so nothing more leaves C^0, though
  the non-candidate 1 is more similar (only candidates count towards the best)."""
  agg = aggregation.make("fdms", complexity_reduction=True, theta_scale=1e-3)
  sim = [[0, 0.9, 0.6], [0.9, 0, 0.5], [0.6, 0.5, 0]]
  cand = [[False, False, True], [True, False, True], [True, True, False]]
  state = _hand_state(agg, sim, np.ones((3, 3)), cand)
  update, new = _one_round(agg, state, [1, 2], [[1.0, 0.0], [0.0, 1.0]])
  np.testing.assert_array_equal(new.friend, [2, 1, 2])
  np.testing.assert_allclose(update["b"], [1 / 3, 2 / 3], rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(new.candidates)[0], [False, False, True])


def test_pair_is_compared_when_either_keeps_the_other():
  """With complexity reduction, r^{0,1} is computed when 1 is in C^0 or 0 is in C^1."""
  agg = aggregation.make("fdms", complexity_reduction=True, theta_scale=1e-3)
  zeros = np.zeros((3, 3))
  cand = [[False, True, True], [False, False, True], [True, True, False]]  # 0 left C^1
  state = _hand_state(agg, zeros, zeros, cand)
  _, new = _one_round(agg, state, [0, 1], [[1.0, 0.0], [0.0, 1.0]])
  assert int(new.co_rounds[0, 1]) == 1 and int(new.co_rounds[1, 0]) == 1
  assert float(new.pairs_computed) == 1 and float(new.pairs_saved) == 0


def test_never_compared_clients_stay_candidates():
  """After round 0 (0 and 1 active, 2 dropped), 2 was compared with nobody: it stays in
  C^0 and C^1 however small Theta is, and with no known friend it takes the mean."""
  agg = aggregation.make("fdms", complexity_reduction=True, theta_scale=1e-6)
  state = agg.init(lib.make_params(), lib.make_info(np.ones(3)))
  update, new = _one_round(agg, state, [0, 1], [[2.0, 0.0], [0.0, 2.0]])
  np.testing.assert_array_equal(new.candidates, ~np.eye(3, dtype=bool))
  np.testing.assert_array_equal(new.friend, [0, 1, -1])
  np.testing.assert_allclose(update["b"], [1.0, 1.0], rtol=1e-6)


def test_default_max_friends_is_k_minus_one():
  """B_max defaults to K - 1 (K = 3: 2). theta_scale makes the effective Theta_1 = .4 at
  B_max = 2; client 0's gap sits 0.5 % above it (2 leaves C^0), client 1's 0.5 % below
  (2 stays in C^1). B_max = 3 gives a 1.5 % larger Theta, B_max = 1 a 2.6 % smaller one."""
  theta = {b: float(hoeffding_threshold(1, 3, 1000, b, 0.05, 0.5, 0.0)) for b in (1, 2, 3)}
  assert theta[3] > 1.01 * theta[2] and theta[1] < 0.99 * theta[2]
  sim = [[0, 0.9, 0.9 - 0.4 * 1.005], [0.9, 0, 0.9 - 0.4 * 0.995], [0.5, 0.5, 0]]
  for max_friends in (None, 2):
    agg = aggregation.make(
      "fdms", complexity_reduction=True, theta_scale=0.4 / theta[2], max_friends=max_friends
    )
    state = _hand_state(agg, sim, np.ones((3, 3)), ~np.eye(3, dtype=bool))
    _, new = _one_round(agg, state, [0], [[1.0, 0.0]])
    np.testing.assert_array_equal(np.asarray(new.candidates)[:2], [[0, 1, 0], [1, 0, 1]])
  # One client (K - 1 = 0): B_max is 1, and the round runs.
  agg = aggregation.make("fdms", complexity_reduction=True)
  state = agg.init(lib.make_params(), lib.make_info(np.ones(1)))
  update, _ = _one_round(agg, state, [0], [[1.0, 2.0]])
  np.testing.assert_allclose(update["b"], [1.0, 2.0])


def test_a_gap_equal_to_theta_removes_the_candidate():
  """Sec. 5.3 removes i from C^k when R^{k,best} - R^{k,i} >= Theta_t: at equality too.
  R^{0,1} = Theta (float32, as the aggregator computes it) and R^{0,2} = 0 give a gap of
  exactly Theta."""
  scale = 0.1
  theta = np.float32(scale) * np.float32(hoeffding_threshold(1, 3, 1000, 2, 0.05, 0.5, 0.0))
  agg = aggregation.make("fdms", complexity_reduction=True, theta_scale=scale)
  sim = [[0, theta, 0], [theta, 0, 0.5], [0, 0.5, 0]]
  state = _hand_state(agg, sim, np.ones((3, 3)), ~np.eye(3, dtype=bool))
  _, new = _one_round(agg, state, [0], [[1.0, 0.0]])
  np.testing.assert_array_equal(np.asarray(new.candidates)[0], [False, True, False])


def test_delta_f_lower_bound():
  with pytest.raises(ValueError, match="delta_f=-0.5"):
    aggregation.make("fdms", delta_f=-0.5)
  aggregation.make("fdms", delta_f=0.0)
