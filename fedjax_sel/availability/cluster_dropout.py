"""Clustered client dropout: groups of clients drop out of rounds (after FL-FDMS Sec. 6)."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.availability.registry import register
from fedjax_sel.core.registry import check_count, check_range
from fedjax_sel.core.types import Array, AvailabilityModel, ClientInfo, PRNGKey

_MODES = ("group", "fl_fdms")
_DEFAULT_NUM_CLUSTERS = 5  # FL-FDMS Sec. 6: 20 clients in 5 clusters


class ClusterState(NamedTuple):
  """State of the clustered dropout model.

  Attributes:
    cluster_ids: i32[N], the group of each client.
    rate: f32[N], each client's (time-independent) probability of being active.
  """

  cluster_ids: Array
  rate: Array


def contiguous_cluster_ids(num_clients: int, num_clusters: int) -> np.ndarray:
  """Client i belongs to group floor(i * num_clusters / N): contiguous, sizes differ by <= 1."""
  return (np.arange(num_clients) * num_clusters) // num_clients


def num_dropped(dropout_rate: float, num_clients: int) -> int:
  """floor(dropout_rate * N), the number of clients dropped per round in "fl_fdms" mode."""
  return int(math.floor(dropout_rate * num_clients + 1e-9))


def fl_fdms_active_probs(cluster_ids: np.ndarray, num_drop: int) -> np.ndarray:
  """Marginal P(active) in "fl_fdms" mode.

  One uniformly chosen client per non-empty group is protected; ``num_drop`` of the other
  N - G clients drop uniformly at random. So a client in a group of size s is active with
  probability 1/s + (1 - 1/s) (1 - num_drop / (N - G)).

  Args:
    cluster_ids: i32[N] group ids.
    num_drop: clients dropped per round, at most N - G.

  Returns:
    f32[N] probabilities.
  """
  sizes = np.bincount(cluster_ids)[cluster_ids].astype(np.float64)
  num_groups = int(np.count_nonzero(np.bincount(cluster_ids)))
  unprotected = len(cluster_ids) - num_groups
  stay = 1.0 if unprotected == 0 else 1.0 - num_drop / unprotected
  return (1.0 / sizes + (1.0 - 1.0 / sizes) * stay).astype(np.float32)


@register("cluster_dropout")
def make_cluster_dropout(
  dropout_rate: float = 0.5,
  num_clusters: int | None = None,
  cluster_ids: object | None = None,
  mode: str = "group",
) -> AvailabilityModel:
  """Clients are split into groups; dropout is organised by group.

  ``mode="group"``: each round every group independently drops out as a whole with
  probability ``dropout_rate`` (correlated dropout; every client is active w.p.
  1 - dropout_rate, and the members of a group are always active together).

  ``mode="fl_fdms"``: FL-FDMS's clustered set-up read literally -- each round exactly
  floor(dropout_rate * N) clients drop (the dropout ratio alpha, (K - S_t)/K <= alpha),
  chosen uniformly at random subject to every group keeping at least one active client
  (Assumption 5, "friend presence": clusters are the friend groups). Needs
  floor(dropout_rate * N) <= N - (number of groups).

  Groups are ``num_clusters`` contiguous blocks of client ids (default 5, FL-FDMS's 20
  clients in 5 clusters), or the given ``cluster_ids``. Needs from ClientInfo: only N.

  Args:
    dropout_rate: alpha in [0, 1] (group mode) or [0, 1) (fl_fdms mode).
    num_clusters: number of contiguous groups (>= 1); with ``cluster_ids``, at least
      max(cluster_ids) + 1 (default: exactly that).
    cluster_ids: optional i32[N] group id of every client (non-negative integers).
    mode: "group" or "fl_fdms".

  References:
    Wang et al., FL-FDMS (2022), Sec. 3 (dropout ratio alpha), Assumption 5, Sec. 6
    (clustered setting, alpha in {0.3, 0.5, 0.7}).
  """
  if mode not in _MODES:
    raise ValueError(f"mode={mode!r} is not allowed; allowed: {list(_MODES)}")
  if mode == "group":
    check_range("dropout_rate", dropout_rate, 0.0, 1.0)
  else:
    check_range("dropout_rate", dropout_rate, 0.0, 1.0, high_inclusive=False)
  dropout_rate = float(dropout_rate)
  given_ids = None
  if cluster_ids is not None:
    given_ids = np.asarray(cluster_ids)
    if given_ids.ndim != 1 or given_ids.dtype.kind not in "iub" or np.any(given_ids < 0):
      raise ValueError(
        f"cluster_ids must be a 1-D array of non-negative integers; got {cluster_ids!r}"
      )
    given_ids = given_ids.astype(np.int64)
  if num_clusters is None:
    num_clusters = _DEFAULT_NUM_CLUSTERS if given_ids is None else int(given_ids.max()) + 1
  num_clusters = check_count("num_clusters", num_clusters)
  if given_ids is not None and given_ids.max() >= num_clusters:
    raise ValueError(
      f"num_clusters={num_clusters} but cluster_ids has id {int(given_ids.max())}; "
      f"allowed ids: 0..{num_clusters - 1}"
    )

  def ids_for(num_clients: int) -> np.ndarray:
    if given_ids is not None:
      if given_ids.shape[0] != num_clients:
        raise ValueError(
          f"cluster_ids has {given_ids.shape[0]} entries but ClientInfo has {num_clients} clients"
        )
      return given_ids
    if num_clusters > num_clients:
      raise ValueError(f"num_clusters={num_clusters} exceeds the number of clients {num_clients}")
    return contiguous_cluster_ids(num_clients, num_clusters)

  def init(key: PRNGKey, info: ClientInfo) -> ClusterState:
    del key
    n = info.num_clients
    ids = ids_for(n)
    if mode == "group":
      rate = np.full((n,), 1.0 - dropout_rate, np.float32)
    else:
      k = num_dropped(dropout_rate, n)
      num_groups = int(np.count_nonzero(np.bincount(ids)))
      if k > n - num_groups:
        raise ValueError(
          f"dropout_rate={dropout_rate} drops {k} of {n} clients, but {num_groups} groups "
          f"must each keep one active client; allowed: dropout_rate < "
          f"{(n - num_groups + 1) / n:.4g}"
        )
      rate = fl_fdms_active_probs(ids, k)
    return ClusterState(cluster_ids=jnp.asarray(ids, jnp.int32), rate=jnp.asarray(rate))

  def probs(state: ClusterState, t: Array) -> Array:
    del t
    return state.rate

  def sample_group(state: ClusterState, key: PRNGKey) -> Array:
    dropped = jax.random.uniform(key, (num_clusters,), jnp.float32) < dropout_rate
    return ~dropped[state.cluster_ids]

  def sample_fl_fdms(state: ClusterState, key: PRNGKey) -> Array:
    n = state.cluster_ids.shape[0]
    k = num_dropped(dropout_rate, n)
    protect_key, drop_key = jax.random.split(key)
    # Protect the client with the largest uniform score in each group (uniform choice).
    score = jax.random.uniform(protect_key, (n,), jnp.float32)
    group_max = jax.ops.segment_max(score, state.cluster_ids, num_segments=num_clusters)
    protected = score >= group_max[state.cluster_ids]
    # Drop the k unprotected clients with the smallest independent scores.
    drop_score = jnp.where(protected, jnp.inf, jax.random.uniform(drop_key, (n,)))
    rank = jnp.argsort(jnp.argsort(drop_score))
    return rank >= k

  def sample(state: ClusterState, key: PRNGKey, t: Array) -> tuple[Array, ClusterState]:
    del t
    active = sample_group(state, key) if mode == "group" else sample_fl_fdms(state, key)
    return active, state

  return AvailabilityModel(init=init, probs=probs, sample=sample)
