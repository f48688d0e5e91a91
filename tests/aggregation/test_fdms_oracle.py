"""FL-FDMS with the oracle friend (friend="oracle"): the true cluster is the friend.

Six clients in three clusters {0, 1}, {2, 3}, {4, 5}, told apart by their label sets. The
updates ('b' leaf; 'w' is zero) are built so that discovered similarity picks a friend from
another cluster:

Round 0 (all active): c0=[1,0], c1=[-1,0], c2=[1,.1], c3=[0,1], c4=[0,-1], c5=[-1,-1]
  R01 = (cos + 1) / 2 = 0, R02 = (0.995 + 1) / 2 = 0.998, R04 = 0.5: client 0's most similar
  client is 2 (another cluster), its cluster-mate 1 the least similar.
Round 1 (0, 3, 5 dropped; 1, 2, 4 active with d1=[1,0], d2=[0,2], d4=[4,0]):
  similarity: friend(0) = 2; oracle: friend(0) = 1, friend(3) = 2, friend(5) = 4, so every
  active slot carries two clients: update = (2 d1 + 2 d2 + 2 d4) / 6 = [5/3, 2/3].
"""

from __future__ import annotations

import aggregation_testlib as lib
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import aggregation, availability
from fedjax_sel.core.types import ClientInfo

N = 6
LABELS = jnp.array(
  [[5, 5, 0, 0, 0, 0], [3, 7, 0, 0, 0, 0], [0, 0, 4, 4, 0, 0], [0, 0, 1, 9, 0, 0]]
  + [[0, 0, 0, 0, 2, 2], [0, 0, 0, 0, 6, 1]],
  jnp.int32,
)
INFO = ClientInfo(num_examples=LABELS.sum(1), label_counts=LABELS)
ROUND0 = [[1.0, 0.0], [-1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.0, -1.0], [-1.0, -1.0]]


def _round(agg, state, active, rows, t):
  avail = jnp.zeros((N,), bool).at[jnp.array(active)].set(True)
  cohort = active + [0] * (N - len(active))
  valid = [True] * len(active) + [False] * (N - len(active))
  rows = rows + [[7.0, 7.0]] * (N - len(active))
  sel = lib.selection_of(cohort, valid)
  return jax.jit(agg.apply)(state, lib.deltas_from_b(rows), sel, avail, t)


def _play(agg):
  state = agg.init(lib.make_params(), INFO)
  _, state = _round(agg, state, list(range(N)), ROUND0, 0)
  return _round(agg, state, [1, 2, 4], [[1.0, 0.0], [0.0, 2.0], [4.0, 0.0]], 1)


def test_oracle_substitutes_a_cluster_mate_where_similarity_does_not():
  _, similar = _play(aggregation.make("fdms"))
  assert int(similar.friend[0]) == 2  # discovered: the most similar client, wrong cluster
  for agg in (
    aggregation.make("fdms", friend="oracle"),  # clusters from the label sets
    aggregation.make("fdms", friend="oracle", cluster_ids=[0, 0, 1, 1, 2, 2]),
  ):
    update, state = _play(agg)
    np.testing.assert_array_equal(state.friend, [1, 1, 2, 2, 4, 4])
    np.testing.assert_allclose(update["b"], [5.0 / 3.0, 2.0 / 3.0], rtol=1e-6)
    np.testing.assert_allclose(update["w"], 0.0)
    # The similarity statistics are those of plain FL-FDMS.
    np.testing.assert_allclose(state.similarity, similar.similarity, rtol=1e-6)


def test_oracle_without_an_active_cluster_mate_falls_back_to_the_mean():
  """Round 0 with cluster {0, 1} away: both take the mean of the active updates, so the
  update is that mean; the others are active."""
  agg = aggregation.make("fdms", friend="oracle")
  state = agg.init(lib.make_params(), INFO)
  rows = [[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, 3.0]]
  update, state = _round(agg, state, [2, 3, 4, 5], rows, 0)
  np.testing.assert_array_equal(state.friend, [-1, -1, 2, 3, 4, 5])
  np.testing.assert_allclose(update["b"], [0.75, 1.0], rtol=1e-6)


def test_every_substitute_is_an_active_cluster_mate_over_persistent_dropout():
  """12 clients in 4 clusters of 3 (by label set), 40 rounds of markov_dropout at alpha =
  0.5 with random updates: each dropped client's friend is an active client of its own
  cluster, and it is -1 exactly when its whole cluster is away."""
  n, size = 12, 3
  cluster = np.arange(n) // size
  labels = jnp.asarray(np.eye(4, dtype=np.int32)[cluster] * 10)
  info = ClientInfo(num_examples=labels.sum(1), label_counts=labels)
  model = availability.make("markov_dropout", dropout_rate=0.5, mean_absence=3.0)
  active, _ = availability.rollout(model, info, jax.random.key(5), 40)
  agg = aggregation.make("fdms", friend="oracle")
  state = agg.init(lib.make_params(), info)
  apply = jax.jit(agg.apply)
  checked = 0
  for t in range(40):
    avail = active[t]
    deltas = lib.random_deltas(jax.random.key(100 + t), n)
    sel = lib.selection_of(jnp.arange(n), avail)
    _, state = apply(state, deltas, sel, avail, t)
    friend, on = np.asarray(state.friend), np.asarray(avail)
    for k in np.flatnonzero(~on):
      mates_on = on & (cluster == cluster[k])
      if mates_on.any():
        assert on[friend[k]] and cluster[friend[k]] == cluster[k], (t, k, friend[k])
        checked += 1
      else:
        assert friend[k] == -1
    np.testing.assert_array_equal(friend[on], np.flatnonzero(on))
  assert checked > 50  # the check ran on many substitutions


@pytest.mark.parametrize(
  "hparams,match",
  [
    ({"friend": "nearest"}, "friend='nearest'"),
    ({"friend": "oracle", "complexity_reduction": True}, "complexity_reduction=True"),
    ({"cluster_ids": [0, 1]}, "cluster_ids"),
    ({"friend": "oracle", "cluster_ids": [0, -1]}, "cluster_ids"),
    ({"friend": "oracle", "cluster_ids": [[0, 1]]}, "cluster_ids"),
  ],
)
def test_oracle_hyperparameters_are_validated(hparams, match):
  with pytest.raises(ValueError, match=match):
    aggregation.make("fdms", **hparams)


def test_cluster_ids_must_match_the_population():
  agg = aggregation.make("fdms", friend="oracle", cluster_ids=[0, 0, 1])
  with pytest.raises(ValueError, match="cluster_ids has 3 entries but ClientInfo has 6"):
    agg.init(lib.make_params(), INFO)
