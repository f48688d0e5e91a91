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
