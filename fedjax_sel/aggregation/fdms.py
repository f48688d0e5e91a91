"""FL-FDMS: friend discovery and model substitution for dropped clients."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.aggregation import _common
from fedjax_sel.aggregation.registry import register
from fedjax_sel.core.registry import check_range
from fedjax_sel.core.types import (
  AggregationAux,
  Aggregator,
  Array,
  ClientInfo,
  Params,
  PyTree,
  Selection,
)


class FDMSState(NamedTuple):
  """FL-FDMS's server state: O(N^2) similarity statistics, no per-client parameter memory.

  Attributes:
    similarity: f32[N, N], R^{i,j}_t, the running mean of r over co-active rounds (Eq. 15);
      0 where the pair was never compared.
    co_rounds: i32[N, N], N^{i,j}_t, the number of rounds in which r^{i,j} was computed
      (all co-active rounds without complexity reduction).
    candidates: bool[N, N], candidates[k, i] says i is in client k's candidate friend set
      C^k_t (Sec. 5.3); all True (but the diagonal) without complexity reduction.
    friend: i32[N], the client whose update stood in for each client in the last round: its
      own id when active, its friend phi_t(k) when substituted, -1 when it fell back to the
      mean of the active updates (no known friend among the active clients).
    pairs_computed: f32[], cumulative number of similarity scores r^{i,j} computed.
    pairs_saved: f32[], cumulative number of co-active pairs whose score was skipped by the
      candidate-set reduction (0 without it). f32 so it cannot overflow; exact below 2^24.
    rounds: i32[], how many times ``apply`` ran.
  """

  similarity: Array
  co_rounds: Array
  candidates: Array
  friend: Array
  pairs_computed: Array
  pairs_saved: Array
  rounds: Array


def hoeffding_threshold(
  t: Array,
  num_clients: int,
  num_rounds: int,
  max_friends: int,
  confidence: float,
  beta: float,
  delta_f: float,
) -> Array:
  """Theta_t = sqrt((2 ln(2 K^2 T B_max) - 2 ln p) / (beta t)) + delta_f  (Theorem 2).

  Args:
    t: the paper's 1-based round number.
    num_clients: K.
    num_rounds: T, the planned number of rounds.
    max_friends: B_max, the largest friend set.
    confidence: p, the failure probability.
    beta: the co-activity rate of Assumption 6 (N^{i,j}_t >= beta t).
    delta_f: the largest similarity gap among friends.

  Returns:
    f32[] (or the shape of t).

  References:
    Wang & Xu, "Combating Client Dropout in Federated Learning via Friend Model
    Substitution", Theorem 2.
  """
  log_term = 2.0 * math.log(2.0 * num_clients**2 * num_rounds * max_friends) - 2.0 * math.log(
    confidence
  )
  t = jnp.maximum(jnp.asarray(t, jnp.float32), 1.0)
  return jnp.sqrt(log_term / (beta * t)) + delta_f


def _pairwise_scores(deltas: PyTree) -> Array:
  """f32[M, M], r = (cos + 1) / 2 between the slots' updates (Eq. 14); 0.5 for a zero update."""
  leaves = jax.tree_util.tree_leaves(deltas)
  gram = sum(
    jnp.dot(flat, flat.T, precision=jax.lax.Precision.HIGHEST)
    for flat in (leaf.reshape(leaf.shape[0], -1).astype(jnp.float32) for leaf in leaves)
  )
  norms = jnp.sqrt(jnp.maximum(jnp.diagonal(gram), 0.0))
  denom = norms[:, None] * norms[None, :]
  cosine = _common.safe_divide(gram, denom)
  return 0.5 * (jnp.clip(cosine, -1.0, 1.0) + 1.0)


def _first_occurrence(cohort: Array, received: Array) -> Array:
  """bool[M]: received slots whose client did not already appear in an earlier received slot."""
  num_slots = cohort.shape[0]
  same = (cohort[:, None] == cohort[None, :]) & received[None, :]
  earlier = jnp.tril(jnp.ones((num_slots, num_slots), bool), k=-1)
  return received & ~jnp.any(same & earlier, axis=1)


_FRIENDS = ("similarity", "oracle")


def same_cluster(info: ClientInfo, cluster_ids: np.ndarray | None) -> Array:
  """bool[N, N], the oracle friendship: i and j are in one cluster, i != j.

  Clusters are the given ``cluster_ids``, or else the clients with the same set of labels
  (``label_counts > 0``): in the ``clustered`` partition a cluster's clients share one label
  set and clusters share no label.
  """
  if cluster_ids is not None:
    ids = jnp.asarray(cluster_ids, jnp.int32)
    same = ids[:, None] == ids[None, :]
  else:
    support = jnp.asarray(info.label_counts) > 0
    same = jnp.all(support[:, None, :] == support[None, :, :], axis=-1)
  return same & ~jnp.eye(info.num_clients, dtype=bool)


@register("fdms")
def make_fdms(
  complexity_reduction: bool = False,
  num_rounds: int = 1000,
  confidence: float = 0.05,
  beta: float = 0.5,
  max_friends: int | None = None,
  delta_f: float = 0.0,
  theta_scale: float = 1.0,
  weighting: str = "uniform",
  friend: str = "similarity",
  cluster_ids: object | None = None,
  min_similarity: float | None = None,
) -> Aggregator:
  """FL-FDMS: a dropped client's update is replaced by its most similar active client's.

  Every client is meant to take part each round: clients in received cohort slots are the
  active set S_t and every other client k (dropped, or simply not in the cohort) is
  substituted. Each round:

  1. For every pair of active clients, r = (cos(delta_i, delta_j) + 1) / 2 (Eq. 14) and the
     running mean R^{i,j} over the rounds the pair was compared is updated (Eq. 15).
  2. Each inactive client k takes the update of ``phi_t(k) = argmax_{i in S_t} R^{k,i}``
     among active clients it was compared with at least once (and, with complexity
     reduction, that are still in C^k). If there is none, k is substituted by the mean of
     the active updates (the paper's plain "Dropout" substitute, Eq. 5).
  3. ``update = sum_{k <= K} q_k Delta~_k / sum_k q_k`` with Delta~_k the own or substitute
     update and q_k = 1 ("uniform", the paper's 1/K) or n_k ("num_examples").
  4. With ``complexity_reduction``: a score r^{i,j} is computed only when j is in C^i or i
     in C^j; then for each k, with ``phi = argmax_{i in C^k} R^{k,i}``, every i with
     ``R^{k,phi} - R^{k,i} >= theta_scale * Theta_t`` is removed from C^k (Sec. 5.3,
     Theta_t from Theorem 2; the paper's "Case 2" is theta_scale = 0.5). Only pairs compared
     at least once are eliminated (an unseen pair has no estimate; the paper's R_0 is
     undefined). ``pairs_saved`` counts the co-active pairs not computed.

  ``min_similarity`` is not the paper's (its friend rule has no floor): with a value m, a
  dropped client whose best active friend has R^{k,phi} < m is not substituted by that
  client but falls back to the mean of the active updates, as with no known friend (and
  its ``friend`` entry is -1). It keeps a client whose friends are all absent from taking a
  non-friend's update; None (default) and 0 are the paper's rule (R is never below 0).

  ``friend="oracle"`` is a control, not the paper's method: the friendship is revealed (the
  paper's "non-realizable" baseline of Sec. 5), and k's substitute is an active client of
  its own cluster (``same_cluster``: the given ``cluster_ids``, or the clients with k's label
  set), the most similar one by R among them (the lowest slot when none was compared). With
  no active cluster-mate k falls back to the mean of the active updates as above. The
  similarity statistics are still updated, so the state is the same as with discovery.

  The substitution is applied as extra weight on the friend's cohort slot, so no [N, ...]
  parameter memory is needed; the state is O(N^2) (three [N, N] arrays). The scores are
  one dense [M, M] Gram matrix (a matmul is cheaper than gathering the surviving pairs), so
  ``pairs_saved`` reports the computations the paper's reduction would skip rather than
  time saved here. The paper's t is
  1-based: round index t uses Theta_{t+1}. Under full availability nobody is substituted and
  this is FedAvg with 1/K (or n_k) weights.

  Args:
    complexity_reduction: enable the Hoeffding-race candidate sets (Sec. 5.3).
    num_rounds: T in Theta_t, >= 1.
    confidence: p in Theta_t, in (0, 1).
    beta: Assumption 6's co-activity rate in Theta_t, in (0, 1].
    max_friends: B_max in Theta_t, >= 1; None means K - 1.
    delta_f: the friend similarity gap delta_f in Theta_t, in [0, 1].
    theta_scale: multiplies Theta_t (> 0); the paper also runs 0.5.
    weighting: "uniform" (the paper) or "num_examples".
    friend: "similarity" (the paper: discovered friends) or "oracle" (the true clusters).
    cluster_ids: with ``friend="oracle"``, optional i32[N] cluster of every client
      (non-negative integers); None takes the clusters from the clients' label sets.
    min_similarity: None (the paper) or a floor in [0, 1] on the substitute's R (above);
      only with ``friend="similarity"``.

  References:
    Wang & Xu, "Combating Client Dropout in Federated Learning via Friend Model
    Substitution", Sec. 5.1 (Eq. 14-15), Sec. 5.3 and Theorem 2.
  """
  if not isinstance(complexity_reduction, bool):
    raise ValueError(
      f"complexity_reduction={complexity_reduction!r} is not allowed; allowed: [True, False]"
    )
  check_range("num_rounds", num_rounds, 1, None)
  check_range("confidence", confidence, 0.0, 1.0, low_inclusive=False, high_inclusive=False)
  check_range("beta", beta, 0.0, 1.0, low_inclusive=False)
  if max_friends is not None:
    check_range("max_friends", max_friends, 1, None)
  check_range("delta_f", delta_f, 0.0, 1.0)
  check_range("theta_scale", theta_scale, 0.0, None, low_inclusive=False)
  _common.check_weighting(weighting)
  if friend not in _FRIENDS:
    raise ValueError(f"friend={friend!r} is not allowed; allowed: {list(_FRIENDS)}")
  if friend == "oracle" and complexity_reduction:
    raise ValueError(
      "complexity_reduction=True is not allowed with friend='oracle' (nothing to discover); "
      "allowed: complexity_reduction=False"
    )
  if min_similarity is not None:
    check_range("min_similarity", min_similarity, 0.0, 1.0)
    if friend != "similarity":
      raise ValueError(
        f"min_similarity is only allowed with friend='similarity'; got friend={friend!r} "
        "(the oracle's friends are known)"
      )
  oracle_ids = None
  if cluster_ids is not None:
    if friend != "oracle":
      raise ValueError(f"cluster_ids is only allowed with friend='oracle'; got friend={friend!r}")
    oracle_ids = np.asarray(cluster_ids)
    if oracle_ids.ndim != 1 or oracle_ids.dtype.kind not in "iu" or np.any(oracle_ids < 0):
      raise ValueError(
        f"cluster_ids must be a 1-D array of non-negative integers; got {cluster_ids!r}"
      )

  def init(params: Params, info: ClientInfo) -> FDMSState:
    del params
    num_clients = info.num_clients
    if oracle_ids is not None and oracle_ids.shape[0] != num_clients:
      raise ValueError(
        f"cluster_ids has {oracle_ids.shape[0]} entries but ClientInfo has {num_clients} clients"
      )
    # With the oracle, the candidate sets hold the true cluster-mates (and never shrink).
    candidates = (
      same_cluster(info, oracle_ids) if friend == "oracle" else ~jnp.eye(num_clients, dtype=bool)
    )
    return FDMSState(
      similarity=jnp.zeros((num_clients, num_clients), jnp.float32),
      co_rounds=jnp.zeros((num_clients, num_clients), jnp.int32),
      candidates=candidates,
      friend=jnp.arange(num_clients, dtype=jnp.int32),
      pairs_computed=jnp.zeros((), jnp.float32),
      pairs_saved=jnp.zeros((), jnp.float32),
      rounds=jnp.zeros((), jnp.int32),
    )

  def apply(
    state: FDMSState,
    deltas: PyTree,
    selection: Selection,
    avail: Array,
    t: Array,
    aux: AggregationAux | None = None,
  ) -> tuple[Params, FDMSState]:
    """One aggregation.

    Args:
      state: FDMSState.
      deltas: pytree of [M, ...], local params minus global params per cohort slot.
      selection: Selection(cohort i32[M], valid bool[M], weights f32[M]).
      avail: bool[N], who could answer this round (a slot whose client is unavailable
        counts as dropped).
      t: i32[], the 0-based round index.
      aux: AggregationAux or None.

    Returns:
      (update shaped like params, new state).
    """
    num_clients = avail.shape[0]
    num_slots = selection.cohort.shape[0]
    aux = _common.resolve_aux(aux, avail, selection)
    received = _common.received_mask(deltas, selection, avail, aux)
    cohort = jnp.clip(selection.cohort, 0, num_clients - 1)
    active_slot = _first_occurrence(cohort, received)
    deltas = _common.zero_unreceived(deltas, active_slot)
    active = _common.scatter_mask(num_clients, cohort, active_slot)

    # 1. Pairwise scores between co-active clients and their running means (Eq. 14-15).
    pair = active_slot[:, None] & active_slot[None, :] & ~jnp.eye(num_slots, dtype=bool)
    num_pairs = pair.sum() / 2
    if complexity_reduction:
      in_set = state.candidates[cohort[:, None], cohort[None, :]]
      pair = pair & (in_set | in_set.T)
    scores = _pairwise_scores(deltas)
    rows = jnp.where(pair, cohort[:, None], num_clients)
    cols = jnp.where(pair, cohort[None, :], num_clients)
    hit = jnp.zeros((num_clients, num_clients), bool).at[rows, cols].set(True, mode="drop")
    new_scores = (
      jnp.zeros((num_clients, num_clients), jnp.float32).at[rows, cols].set(scores, mode="drop")
    )
    old_count = state.co_rounds.astype(jnp.float32)
    similarity = jnp.where(
      hit, (old_count * state.similarity + new_scores) / (old_count + 1.0), state.similarity
    )
    co_rounds = state.co_rounds + hit.astype(jnp.int32)
    num_computed = pair.sum() / 2

    # 2. Friend of every client among the active slots.
    if friend == "oracle":
      eligible = active_slot[None, :] & state.candidates[:, cohort]  # [N, M]
    else:
      eligible = active_slot[None, :] & (co_rounds[:, cohort] > 0)  # [N, M]
    if complexity_reduction:
      eligible = eligible & state.candidates[:, cohort]
    slot_scores = jnp.where(eligible, similarity[:, cohort], -jnp.inf)
    friend_slot = jnp.argmax(slot_scores, axis=1)  # [N]
    has_friend = jnp.any(eligible, axis=1)
    if min_similarity is not None:
      has_friend = has_friend & (jnp.max(slot_scores, axis=1) >= min_similarity)
    substituted = ~active & has_friend
    fallback = ~active & ~has_friend

    # 3. Per-slot weights: own weight + weight of the clients it stands in for.
    client_q = _common.client_weights(aux, weighting)
    own = jnp.where(active_slot, client_q[cohort], 0.0)
    friend_weight = jnp.where(substituted, client_q, 0.0)
    borrowed = jax.nn.one_hot(friend_slot, num_slots, dtype=jnp.float32).T @ friend_weight
    fallback_weight = jnp.where(fallback, client_q, 0.0).sum()
    spread = _common.safe_divide(own, own.sum()) * fallback_weight
    slot_weights = _common.safe_divide(own + borrowed + spread, client_q.sum())
    update = _common.weighted_sum(slot_weights, deltas)

    # 4. Candidate-set reduction (Sec. 5.3).
    candidates = state.candidates
    if complexity_reduction:
      known = candidates & (co_rounds > 0)
      best = jnp.max(jnp.where(known, similarity, -jnp.inf), axis=1, keepdims=True)
      theta = theta_scale * hoeffding_threshold(
        jnp.asarray(t) + 1,
        num_clients,
        num_rounds,
        max_friends if max_friends is not None else max(num_clients - 1, 1),
        confidence,
        beta,
        delta_f,
      )
      candidates = candidates & ~(known & (best - similarity >= theta))

    friend_ids = jnp.where(
      active,
      jnp.arange(num_clients, dtype=jnp.int32),
      jnp.where(substituted, cohort[friend_slot], -1),
    ).astype(jnp.int32)
    new_state = FDMSState(
      similarity=similarity,
      co_rounds=co_rounds,
      candidates=candidates,
      friend=friend_ids,
      pairs_computed=state.pairs_computed + num_computed.astype(jnp.float32),
      pairs_saved=state.pairs_saved + (num_pairs - num_computed).astype(jnp.float32),
      rounds=state.rounds + 1,
    )
    return update, new_state

  return Aggregator(init=init, apply=apply)
