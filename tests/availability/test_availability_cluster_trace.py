"""Clustered dropout (FL-FDMS) and trace-driven availability."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import availability
from fedjax_sel.core.types import ClientInfo


def info(num_clients):
  return ClientInfo(
    num_examples=jnp.ones((num_clients,), jnp.int32),
    label_counts=jnp.ones((num_clients, 2), jnp.int32),
  )


def test_contiguous_groups():
  # floor(i * 3 / 10): sizes 4, 3, 3.
  ids = availability.cluster_dropout.contiguous_cluster_ids(10, 3)
  np.testing.assert_array_equal(ids, [0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
  # FL-FDMS: 20 clients in 5 clusters of 4.
  np.testing.assert_array_equal(
    np.bincount(availability.cluster_dropout.contiguous_cluster_ids(20, 5)), [4] * 5
  )


def test_group_mode_drops_whole_groups():
  model = availability.make("cluster_dropout", dropout_rate=0.4, num_clusters=5)
  active, probs = availability.rollout(model, info(20), jax.random.key(0), 500)
  active = np.asarray(active).reshape(500, 5, 4)  # [round, group, member]
  # Members of a group are always active together.
  assert np.all(active.all(axis=2) == active.any(axis=2))
  np.testing.assert_allclose(probs, 0.6)
  # Each group drops in a fraction ~0.4 of rounds: 2500 group-rounds, std
  # sqrt(0.24 / 2500) = 0.0098, tolerance 5 std.
  assert abs(1.0 - active[:, :, 0].mean() - 0.4) < 0.049
  # Some rounds lose a whole group while others keep it (the dropout is not all-or-none).
  per_round = active[:, :, 0].sum(1)
  assert per_round.min() < 5 and per_round.max() == 5


def test_group_mode_with_given_cluster_ids():
  ids = [2, 0, 1, 0, 2, 1, 1]
  model = availability.make("cluster_dropout", dropout_rate=0.5, cluster_ids=ids)
  active, _ = availability.rollout(model, info(7), jax.random.key(1), 200)
  active = np.asarray(active)
  for group in range(3):
    members = active[:, np.asarray(ids) == group]
    assert np.all(members.all(1) == members.any(1))
  with pytest.raises(ValueError, match="7 clients"):
    availability.make("cluster_dropout", cluster_ids=[0, 1, 0]).init(jax.random.key(0), info(7))
  with pytest.raises(ValueError, match="cluster_ids"):
    availability.make("cluster_dropout", cluster_ids=[0, -1, 0])


def test_fl_fdms_mode_drops_exact_ratio_and_keeps_a_friend_per_group():
  # N = 10 in groups of 4, 3, 3; alpha = 0.5 drops floor(5.0) = 5 each round.
  model = availability.make("cluster_dropout", dropout_rate=0.5, num_clusters=3, mode="fl_fdms")
  active, probs = availability.rollout(model, info(10), jax.random.key(2), 300)
  active = np.asarray(active)
  np.testing.assert_array_equal(active.sum(1), np.full(300, 5))
  for group in (slice(0, 4), slice(4, 7), slice(7, 10)):
    assert active[:, group].any(1).all()  # FL-FDMS Assumption 5: friend presence
  # Marginals by hand: 1/s + (1 - 1/s)(1 - 5/7) = 0.4642857 (s = 4), 0.5238095 (s = 3);
  # they sum to N - 5 = 5.
  expected = [0.25 + 0.75 * 2 / 7] * 4 + [1 / 3 + 2 / 3 * 2 / 7] * 6
  np.testing.assert_allclose(probs[0], expected, rtol=1e-6)
  np.testing.assert_allclose(sum(expected), 5.0)


def test_fl_fdms_mode_rejects_ratio_that_cannot_keep_a_friend():
  model = availability.make("cluster_dropout", dropout_rate=0.8, num_clusters=3, mode="fl_fdms")
  with pytest.raises(ValueError, match="dropout_rate=0.8 drops 8 of 10"):
    model.init(jax.random.key(0), info(10))


def test_cluster_dropout_validation():
  with pytest.raises(ValueError, match="dropout_rate=1.5"):
    availability.make("cluster_dropout", dropout_rate=1.5)
  with pytest.raises(ValueError, match="mode='x'"):
    availability.make("cluster_dropout", mode="x")
  with pytest.raises(ValueError, match="num_clusters=6 exceeds the number of clients 4"):
    availability.make("cluster_dropout", num_clusters=6).init(jax.random.key(0), info(4))


TRACE = np.array([[1, 0, 0, 1], [0, 1, 0, 1], [1, 1, 1, 0]], dtype=bool)


def test_trace_cycles_over_rounds():
  model = availability.make("trace", trace=TRACE)
  state = model.init(jax.random.key(0), info(4))
  for t in range(8):
    active, state = model.sample(state, jax.random.key(t), jnp.int32(t))
    np.testing.assert_array_equal(active, TRACE[t % 3])
    np.testing.assert_array_equal(model.probs(state, t), TRACE[t % 3].astype(np.float32))
  active, _ = availability.rollout(model, info(4), jax.random.key(9), 7)
  np.testing.assert_array_equal(active, TRACE[np.arange(7) % 3])


def test_trace_shape_must_match_num_clients():
  model = availability.make("trace", trace=TRACE)
  with pytest.raises(ValueError, match=r"shape \(3, 4\).*5 clients"):
    model.init(jax.random.key(0), info(5))
  with pytest.raises(ValueError, match=r"shape \(4,\)"):
    availability.make("trace", trace=np.ones(4, bool))


def test_trace_files_npy_and_csv(tmp_path):
  npy = tmp_path / "trace.npy"
  np.save(npy, TRACE)
  csv = tmp_path / "trace.csv"
  np.savetxt(csv, TRACE.astype(int), fmt="%d", delimiter=",")
  for path in (str(npy), csv):
    model = availability.make("trace", trace=path)
    np.testing.assert_array_equal(model.init(jax.random.key(0), info(4)).trace, TRACE)


def test_trace_file_errors_name_the_path(tmp_path):
  missing = str(tmp_path / "missing.npy")
  with pytest.raises(ValueError, match="missing.npy"):
    availability.make("trace", trace=missing)
  garbage = tmp_path / "garbage.npy"
  garbage.write_bytes(b"not a numpy file")
  with pytest.raises(ValueError, match="garbage.npy"):
    availability.make("trace", trace=str(garbage))
  halves = tmp_path / "halves.npy"
  np.save(halves, np.full((3, 4), 0.5))
  with pytest.raises(ValueError, match=r"halves\.npy.*float64.*0\.5"):
    availability.make("trace", trace=str(halves))
  words = tmp_path / "words.csv"
  words.write_text("on,off\noff,on\n")
  with pytest.raises(ValueError, match="words.csv"):
    availability.make("trace", trace=str(words))
  strings = tmp_path / "strings.npy"
  np.save(strings, np.array([["a", "b"]]))
  with pytest.raises(ValueError, match=r"strings\.npy.*dtype <U1"):
    availability.make("trace", trace=str(strings))
  with pytest.raises(ValueError, match="trace.txt"):
    availability.make("trace", trace=str(tmp_path / "trace.txt"))


def test_cluster_dropout_rate_bounds_per_mode():
  # group mode allows alpha = 1 (every group drops); fl_fdms mode needs alpha < 1.
  model = availability.make("cluster_dropout", dropout_rate=1.0, num_clusters=2)
  state = model.init(jax.random.key(0), info(4))
  np.testing.assert_allclose(model.probs(state, 0), np.zeros(4))
  assert not np.asarray(model.sample(state, jax.random.key(1), 0)[0]).any()
  with pytest.raises(ValueError, match="dropout_rate=1.0"):
    availability.make("cluster_dropout", dropout_rate=1.0, mode="fl_fdms")
  for mode in ("group", "fl_fdms"):
    with pytest.raises(ValueError, match="dropout_rate=-0.5"):
      availability.make("cluster_dropout", dropout_rate=-0.5, mode=mode)
    with pytest.raises(ValueError, match="dropout_rate=1.5"):
      availability.make("cluster_dropout", dropout_rate=1.5, mode=mode)


def test_cluster_dropout_num_clusters_checks():
  for bad in (0, -1, 2.5, True):
    with pytest.raises(ValueError, match=rf"num_clusters={bad!r} is out of range"):
      availability.make("cluster_dropout", num_clusters=bad)
  # One group, and one group per client, are both allowed.
  one = availability.make("cluster_dropout", num_clusters=1)
  np.testing.assert_array_equal(one.init(jax.random.key(0), info(4)).cluster_ids, [0] * 4)
  each = availability.make("cluster_dropout", num_clusters=4)
  np.testing.assert_array_equal(each.init(jax.random.key(0), info(4)).cluster_ids, [0, 1, 2, 3])
  # Default: FL-FDMS's 5 contiguous clusters.
  ids = availability.make("cluster_dropout").init(jax.random.key(0), info(20)).cluster_ids
  np.testing.assert_array_equal(ids, np.repeat(np.arange(5), 4))


def test_cluster_dropout_cluster_ids_checks():
  with pytest.raises(
    ValueError, match=r"num_clusters=2 but cluster_ids has id 2; allowed ids: 0\.\.1$"
  ):
    availability.make("cluster_dropout", num_clusters=2, cluster_ids=[0, 1, 2])
  for bad in ([[0, 1], [1, 0]], [0.0, 1.0], [0, -1]):
    with pytest.raises(ValueError, match="cluster_ids must be a 1-D array of non-negative"):
      availability.make("cluster_dropout", cluster_ids=bad)
  model = availability.make("cluster_dropout", cluster_ids=[0, 1, 1])
  with pytest.raises(ValueError, match="cluster_ids has 3 entries but ClientInfo has 4 clients"):
    model.init(jax.random.key(0), info(4))


def test_cluster_dropout_num_clusters_defaults_to_max_id_plus_one():
  # The default equals giving num_clusters = max(id) + 1: same draws, key for key.
  ids = [0, 0, 1, 2, 2, 2]
  default = availability.make("cluster_dropout", dropout_rate=0.5, cluster_ids=ids)
  explicit = availability.make("cluster_dropout", dropout_rate=0.5, cluster_ids=ids, num_clusters=3)
  s1 = default.init(jax.random.key(0), info(6))
  s2 = explicit.init(jax.random.key(0), info(6))
  for k in range(20):
    a1, _ = default.sample(s1, jax.random.key(k), k)
    a2, _ = explicit.sample(s2, jax.random.key(k), k)
    np.testing.assert_array_equal(a1, a2)


def test_fl_fdms_largest_ratio_that_keeps_a_friend():
  # 20 clients in 5 groups: at most 15 may drop. alpha = 0.75 drops exactly 15 (allowed);
  # alpha = 0.8 drops 16; the message's bound is (20 - 5 + 1) / 20 = 0.8.
  model = availability.make("cluster_dropout", dropout_rate=0.75, mode="fl_fdms")
  state = model.init(jax.random.key(0), info(20))
  active, _ = model.sample(state, jax.random.key(3), 0)
  assert int(np.sum(active)) == 5
  np.testing.assert_array_equal(
    np.bincount(np.asarray(state.cluster_ids)[np.asarray(active)]), [1] * 5
  )
  too_many = availability.make("cluster_dropout", dropout_rate=0.8, mode="fl_fdms")
  with pytest.raises(
    ValueError, match=r"drops 16 of 20 clients, but 5 groups .* dropout_rate < 0\.8$"
  ):
    too_many.init(jax.random.key(0), info(20))


def test_fl_fdms_active_probs_by_hand():
  from fedjax_sel.availability.cluster_dropout import fl_fdms_active_probs

  # Every client its own group: nobody can drop, all active.
  np.testing.assert_allclose(fl_fdms_active_probs(np.arange(3), 0), [1, 1, 1])
  # ids [0, 0, 1]: G = 2, one unprotected client, which drops (num_drop = 1): the pair's
  # members are active w.p. 1/2, the singleton always.
  np.testing.assert_allclose(fl_fdms_active_probs(np.array([0, 0, 1]), 1), [0.5, 0.5, 1.0])
  # ids [0, 0, 0, 1, 1]: N - G = 3 unprotected, 1 drops: stay = 2/3;
  # size 3: 1/3 + 2/3 * 2/3 = 7/9; size 2: 1/2 + 1/2 * 2/3 = 5/6.
  np.testing.assert_allclose(
    fl_fdms_active_probs(np.array([0, 0, 0, 1, 1]), 1), [7 / 9] * 3 + [5 / 6] * 2, rtol=1e-6
  )


def test_trace_shape_checks():
  for bad in (
    np.ones(4, bool),
    np.ones((0, 3), bool),
    np.ones((3, 0), bool),
    np.ones((2, 2, 2), bool),
  ):
    with pytest.raises(
      ValueError, match=rf"shape \({', '.join(map(str, bad.shape))},?\) is not allowed"
    ):
      availability.make("trace", trace=bad)
  # One round, or one client, is a valid trace.
  for good in (np.array([[1, 0, 1]], bool), np.array([[1], [0], [1]], bool)):
    model = availability.make("trace", trace=good)
    state = model.init(jax.random.key(0), info(good.shape[1]))
    np.testing.assert_array_equal(
      model.sample(state, jax.random.key(0), 1)[0], good[1 % good.shape[0]]
    )


def test_trace_csv_with_one_row(tmp_path):
  csv = tmp_path / "one.csv"
  csv.write_text("1,0,1\n")
  model = availability.make("trace", trace=str(csv))
  np.testing.assert_array_equal(model.init(jax.random.key(0), info(3)).trace, [[True, False, True]])


def test_trace_bad_values_message_lists_the_first_five():
  bad = np.array([[2, 3, 4, 5, 6, 7, 1, 0]])
  with pytest.raises(ValueError, match=r"with value\(s\) \[2, 3, 4, 5, 6\] that are not 0 or 1"):
    availability.make("trace", trace=bad)
