"""FedGS: Federated Graph-based Sampling (Wang et al., AAAI 2023).

Each round FedGS picks, among the available clients A_t, exactly min(M, |A_t|) clients
s in {0, 1}^N solving (Eq. 16-17)

    max_s  s^T (alpha / N * H - diag(z)) s    s.t.  1^T s = min(M, |A_t|),  s <= a_t,

where H is the normalized shortest-path distance matrix of the 3DG (clients far apart
on the graph have dissimilar data) and z_k = 2 (v_k - mean(v) - M / N) + 1 with v the
sampling counts so far (Eq. 14): the first term spreads the cohort over the graph, the
second balances how often clients are sampled (it is the round's increase of
Var(v^t), Eq. 7). Because |s| is fixed, z enters only through 2 v_k (the rest is a
constant); alpha = 0 therefore selects the least-sampled available clients, the
paper's sigma^2 -> infinity limit of Eq. 8-9.

The authors solve this mixed-integer quadratic program with Gurobi under a wall-clock
limit. Here it is solved inside jit, with no external dependency: a greedy
construction, then best-improvement 1-swap local search (every round of the search
evaluates the objective change of all selected x unselected-available swaps as one
[M, N] matrix and applies the best improving one) for at most ``num_iters`` swaps,
from ``num_restarts`` starts (one pure greedy, the others greedy from a random first
client or a random subset); the best local optimum wins.

The aggregation weights are n_k / sum_{i in S_t} n_i (Eq. 18, Algorithm 1 line 14).

References:
  Wang et al., "FedGS: Federated Graph-based Sampling with Arbitrary Client
  Availability", AAAI 2023, Eq. 6-9 and 13-18, Algorithm 1, Sec. 3.2, Appendix C.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.core.registry import check_range
from fedjax_sel.core.types import ClientInfo, Selection, SelectionContext, SelectionStrategy
from fedjax_sel.selection.common import check_num_selected
from fedjax_sel.selection.registry import register
from fedjax_sel.similarity.graph import build_3dg, check_kernel
from fedjax_sel.similarity.measures import (
  cosine,
  functional,
  label_distribution,
  minmax_normalize,
  model_parameter_similarity,
)

Array = jax.Array

SIMILARITIES = ("oracle", "cosine", "functional")
SCALES = ("paper", "reference_code")


class FedGSState(NamedTuple):
  """FedGS server state.

  Attributes:
    counts: i32[N], v: how many times each client has been selected.
    distances: f32[N, N], H: normalized 3DG shortest-path distances (all zero until
      the graph is built, which makes the objective pure count balancing).
    graph_ready: bool[], whether ``distances`` holds a built 3DG.
    rounds_since_build: i32[], rounds since the graph was last built.
  """

  counts: Array
  distances: Array
  graph_ready: Array
  rounds_since_build: Array


class SolveResult(NamedTuple):
  """Solution of the FedGS sampling problem.

  Attributes:
    cohort: i32[M], selected client ids (0 in invalid slots).
    valid: bool[M], the first min(M, |A_t|) slots are valid.
    value: f32[], objective (Eq. 16) of the solution.
  """

  cohort: Array
  valid: Array
  value: Array


def pair_weight(alpha: Array, num_clients: int, num_chosen: Array, scale: str = "paper") -> Array:
  """The coefficient a of s^T H s in the objective s^T (a H - diag(z)) s.

  ``"paper"``: a = alpha / N (Eq. 16). ``"reference_code"``: the authors' released
  code weights the mean pairwise distance, alpha * 2 / (k (k - 1)) * sum_{i<j}, against
  z^T s / (N - 1); multiplied by N - 1 that is a = alpha (N - 1) / (k (k - 1)) with
  k = min(M, |A_t|), i.e. a much stronger diversity term for the same alpha.

  Args:
    alpha: the trade-off alpha >= 0.
    num_clients: N.
    num_chosen: k = min(M, |A_t|) (may be traced).
    scale: "paper" or "reference_code".

  Returns:
    f32[].
  """
  alpha = jnp.asarray(alpha, jnp.float32)
  if scale == "paper":
    return alpha / num_clients
  k = jnp.asarray(num_chosen, jnp.float32)
  return jnp.where(k > 1, alpha * (num_clients - 1) / jnp.maximum(k * (k - 1), 1.0), 0.0)


def _zero_diag(h: Array) -> Array:
  return jnp.where(jnp.eye(h.shape[0], dtype=bool), 0.0, h.astype(jnp.float32))


@partial(jax.jit, static_argnames=("num_selected", "scale"))
def objective(
  selected_mask: Array,
  distances: Array,
  counts: Array,
  num_selected: int,
  alpha: float,
  scale: str = "paper",
) -> Array:
  """The FedGS sampling objective s^T (a H - diag(z)) s (Eq. 16).

  Args:
    selected_mask: bool[N], s.
    distances: f32[N, N], H (its diagonal is ignored).
    counts: i32[N], sampling counts v^{t-1}.
    num_selected: M, the cohort size limit (static; enters z through M / N).
    alpha: trade-off alpha.
    scale: how alpha is scaled (``pair_weight``).

  Returns:
    f32[], the value (z_k = 2 (v_k - mean(v) - M / N) + 1, Eq. 14).

  References:
    FedGS (Wang et al., AAAI 2023), Eq. 14 and 16.
  """
  n = distances.shape[0]
  s = selected_mask.astype(jnp.float32)
  v = counts.astype(jnp.float32)
  z = 2.0 * (v - jnp.mean(v) - num_selected / n) + 1.0
  a = pair_weight(alpha, n, jnp.sum(s), scale)
  return a * (s @ _zero_diag(distances) @ s) - z @ s


def _pick(score: Array, candidates: Array, priority: Array) -> Array:
  """argmax of ``score`` over ``candidates``, ties broken by the largest ``priority``."""
  masked = jnp.where(candidates, score, -jnp.inf)
  best = jnp.max(masked)
  tie_tol = 1e-6 * (1.0 + jnp.abs(best))
  ties = candidates & (masked >= best - tie_tol)
  return jnp.argmax(jnp.where(ties, priority, -1.0)).astype(jnp.int32)


def _greedy(h0, lin, a, avail, k, num_selected, priority, first):
  """Greedy construction; ``first`` >= 0 forces the first pick."""
  n = h0.shape[0]

  def step(m, carry):
    cohort, valid, chosen, h = carry
    gain = 2.0 * a * h - lin
    j = _pick(gain, avail & ~chosen, priority)
    j = jnp.where((m == 0) & (first >= 0), first, j)
    take = m < k
    cohort = cohort.at[m].set(jnp.where(take, j, 0))
    valid = valid.at[m].set(take)
    chosen = chosen.at[j].set(chosen[j] | take)
    h = h + jnp.where(take, h0[j], 0.0)
    return cohort, valid, chosen, h

  init = (
    jnp.zeros((num_selected,), jnp.int32),
    jnp.zeros((num_selected,), bool),
    jnp.zeros((n,), bool),
    jnp.zeros((n,), jnp.float32),
  )
  cohort, valid, _, _ = jax.lax.fori_loop(0, num_selected, step, init)
  return cohort, valid


def _random_subset(avail, k, num_selected, priority):
  """k available clients with the largest random priority in the first k slots."""
  n = avail.shape[0]
  keyed = jnp.where(avail, priority, -1.0)
  if num_selected > n:
    keyed = jnp.concatenate([keyed, jnp.full((num_selected - n,), -2.0)])
  _, order = jax.lax.top_k(keyed, num_selected)
  valid = jnp.arange(num_selected) < k
  return jnp.where(valid, order.astype(jnp.int32), 0), valid


def _local_search(h0, lin, a, avail, cohort, valid, num_iters):
  """Best-improvement 1-swap local search (at most ``num_iters`` swaps)."""
  n = h0.shape[0]
  tol = 1e-6 * (1.0 + 2.0 * jnp.abs(a) * jnp.sum(valid))

  def deltas(cohort, valid):
    rows = h0[cohort]  # [M, N]: H[c_m, j]
    h = jnp.sum(jnp.where(valid[:, None], rows, 0.0), axis=0)  # h_j = sum_{i in S} H_ij
    chosen = jnp.zeros((n,), bool).at[cohort].max(valid)
    # swap out c_m, swap in j: 2a (h_j - h_{c_m} - H_{c_m j}) + 2 v_{c_m} - 2 v_j
    diversity = 2.0 * a * (h[None, :] - h[cohort][:, None] - rows)
    counts_part = lin[cohort][:, None] - lin[None, :]
    delta = diversity + counts_part
    ok = valid[:, None] & (avail & ~chosen)[None, :]
    return jnp.where(ok, delta, -jnp.inf)

  def cond(carry):
    _, _, it, improved = carry
    return improved & (it < num_iters)

  def body(carry):
    cohort, valid, it, _ = carry
    d = deltas(cohort, valid)
    flat = jnp.argmax(d)
    m, j = flat // n, flat % n
    improved = d.reshape(-1)[flat] > tol
    cohort = cohort.at[m].set(jnp.where(improved, j.astype(jnp.int32), cohort[m]))
    return cohort, valid, it + 1, improved

  cohort, valid, _, _ = jax.lax.while_loop(cond, body, (cohort, valid, jnp.int32(0), True))
  return cohort


def _value(h0, lin, a, cohort, valid):
  """Objective up to a constant: a * sum_{i,j in S} H_ij - sum_{i in S} 2 v_i."""
  w = valid.astype(jnp.float32)
  pair = w @ h0[cohort][:, cohort] @ w
  return a * pair - jnp.sum(w * lin[cohort])


def _start(h0, lin, a, avail, k, num_selected, num_iters, r, rkey):
  """Restart ``r`` of ``solve``: its start (0: pure greedy; odd: greedy from the available
  client of largest random priority; even >= 2: the k available clients of largest random
  priority), then local search; returns (cohort, valid, value up to a constant)."""
  priority = jax.random.uniform(rkey, avail.shape)
  first = jnp.where(r % 2 == 1, jnp.argmax(jnp.where(avail, priority, -1.0)), -1)
  g_cohort, g_valid = _greedy(h0, lin, a, avail, k, num_selected, priority, first)
  r_cohort, r_valid = _random_subset(avail, k, num_selected, priority)
  use_random = (r >= 2) & (r % 2 == 0)
  cohort = jnp.where(use_random, r_cohort, g_cohort)
  valid = jnp.where(use_random, r_valid, g_valid)
  cohort = _local_search(h0, lin, a, avail, cohort, valid, num_iters)
  return cohort, valid, _value(h0, lin, a, cohort, valid)


@partial(jax.jit, static_argnames=("num_selected", "num_iters", "num_restarts", "scale"))
def solve(
  distances: Array,
  counts: Array,
  avail: Array,
  num_selected: int,
  alpha: float,
  key: Array,
  num_iters: int = 100,
  num_restarts: int = 4,
  scale: str = "paper",
) -> SolveResult:
  """Approximately solves the FedGS sampling problem (Eq. 16-17) inside jit.

  Restart 0 is the pure greedy construction (add the client with the largest marginal
  gain 2 a h_j - 2 v_j, ties broken at random); odd restarts are greedy from a random
  available first client, even restarts >= 2 a random subset of the available clients.
  Each start is improved by best-improvement 1-swap local search for at most
  ``num_iters`` swaps (restarts run one after another with ``lax.map``); the best local
  optimum is returned.

  Args:
    distances: f32[N, N], H.
    counts: i32[N], sampling counts v^{t-1}.
    avail: bool[N], available clients A_t.
    num_selected: M (static).
    alpha: trade-off alpha >= 0.
    key: PRNG key (tie-breaking and restarts).
    num_iters: swap budget per restart (static).
    num_restarts: number of starts (static, >= 1).
    scale: how alpha is scaled (``pair_weight``).

  Returns:
    SolveResult(cohort i32[M], valid bool[M], value f32[]), the value as in
    ``objective``.

  References:
    FedGS (Wang et al., AAAI 2023), Eq. 16-17 and Algorithm 1 line 6.
  """
  n = distances.shape[0]
  avail = avail.astype(bool)
  h0 = _zero_diag(distances)
  lin = 2.0 * counts.astype(jnp.float32)
  k = jnp.minimum(num_selected, jnp.sum(avail)).astype(jnp.int32)
  a = pair_weight(alpha, n, k, scale)

  keys = jax.random.split(key, num_restarts)

  # lax.map (a scan), not vmap: a batched while_loop recompiles in eager (disable_jit) mode.
  cohorts, valids, values = jax.lax.map(
    lambda args: _start(h0, lin, a, avail, k, num_selected, num_iters, *args),
    (jnp.arange(num_restarts), keys),
  )
  best = jnp.argmax(values)
  cohort, valid = cohorts[best], valids[best]
  mask = jnp.zeros((n,), bool).at[cohort].max(valid)
  return SolveResult(cohort, valid, objective(mask, distances, counts, num_selected, alpha, scale))


def _similarity_from(features: Array, kind: str, normalize: bool) -> Array:
  sim = cosine(features) if kind == "cosine" else functional(features)
  return minmax_normalize(sim) if normalize else sim


def _check_oracle_features(features: Any) -> np.ndarray | None:
  """``oracle_features`` as an array: None, or an array-like (nested lists too: configs
  hold lists) of numbers, [N, ...] with N >= 1 (one row per client)."""
  if features is None:
    return None
  try:
    array = np.asarray(features)
  except ValueError:  # ragged nested lists
    array = np.asarray(None)
  if array.ndim < 1 or array.shape[0] < 1 or array.dtype.kind not in "biuf":
    raise ValueError(
      f"oracle_features with shape {array.shape} and dtype {array.dtype} is not allowed; "
      "allowed: None, or numbers [num_clients, ...] (one row per client)"
    )
  return array


@register("fedgs")
def make_fedgs(
  num_selected: int,
  alpha: float = 1.0,
  similarity: str = "oracle",
  sigma2: float = 0.01,
  epsilon: float = 0.1,
  num_iters: int = 100,
  num_restarts: int = 4,
  scale: str = "paper",
  normalize: bool = True,
  min_seen_fraction: float = 1.0,
  rebuild_every: int = 0,
  oracle_features: Any | None = None,
  kernel: str = "paper",
) -> SelectionStrategy:
  """FedGS selection (Wang et al., AAAI 2023).

  The 3DG is built once, as in Algorithm 1 (lines 2-3):

  * ``similarity="oracle"``: at ``init`` from ``info.label_counts``
    (``label_distribution``), or from ``oracle_features`` f32[N, F] (e.g. Synthetic's
    true local models, ``model_parameter_similarity``) when given (Appendix C).
  * ``"cosine"`` / ``"functional"``: from ``ctx.update_sketch`` (Eq. 11) /
    ``ctx.embeddings`` (Eq. 12) in the first round where at least
    ``min_seen_fraction`` of the clients have returned an update. The paper assumes
    every client is available before training to build it; here, until then, H = 0 and
    FedGS balances counts only, which selects never-sampled clients first and so
    gathers the updates the graph needs. ``rebuild_every > 0`` rebuilds it every that
    many rounds afterwards ("dynamically built and polished round by round").

  Args:
    num_selected: M, cohort slots.
    alpha: weight of the graph-distance term (paper grid: 0, 0.5, 1, 2, 5).
    similarity: "oracle", "cosine" or "functional".
    sigma2: sigma^2 of the 3DG edge kernel (paper: 0.01).
    epsilon: similarity threshold for an edge (paper: 0.1).
    num_iters: 1-swap local-search budget per restart.
    num_restarts: solver restarts.
    scale: "paper" (a = alpha / N, Eq. 16) or "reference_code" (authors' code).
    normalize: min-max normalize similarities to [0, 1] before the 3DG (Appendix C;
      the authors' code does it for every similarity).
    min_seen_fraction: fraction of clients that must have been seen before a
      cosine/functional 3DG is built.
    rebuild_every: rebuild a cosine/functional 3DG every this many rounds (0 = never).
    oracle_features: optional f32[N, F] oracle features for ``similarity="oracle"``.
    kernel: 3DG edge kernel, "paper" (exp(-V / sigma2), V >= epsilon) or
      "reference_code" (exp(-V^2 / sigma2), V > epsilon; the authors' oracle FedGS uses
      sigma2 = 0.1, epsilon = 0.01 with it). The authors' released protocol is
      ``scale="reference_code", kernel="reference_code", sigma2=0.1, epsilon=0.01``.

  Returns:
    SelectionStrategy (without replacement; uses_updates for cosine/functional).

  References:
    FedGS (Wang et al., AAAI 2023), Eq. 10-18, Algorithm 1, Appendix C.
  """
  num_selected = check_num_selected(num_selected)
  check_range("alpha", alpha, 0.0)
  check_range("sigma2", sigma2, 0.0, low_inclusive=False)
  check_range("epsilon", epsilon, 0.0, 1.0)
  check_range("num_iters", num_iters, 0)
  check_range("num_restarts", num_restarts, 1)
  check_range("min_seen_fraction", min_seen_fraction, 0.0, 1.0, low_inclusive=False)
  check_range("rebuild_every", rebuild_every, 0)
  if similarity not in SIMILARITIES:
    raise ValueError(f"similarity={similarity!r} is not one of {SIMILARITIES}")
  if scale not in SCALES:
    raise ValueError(f"scale={scale!r} is not one of {SCALES}")
  kernel = check_kernel(kernel)
  oracle_features = _check_oracle_features(oracle_features)
  num_selected, num_iters, num_restarts = int(num_selected), int(num_iters), int(num_restarts)
  rebuild_every = int(rebuild_every)
  uses_updates = similarity != "oracle"

  def init(key: Array, info: ClientInfo) -> FedGSState:
    del key
    n = info.num_clients
    if similarity == "oracle":
      if oracle_features is not None:
        if len(oracle_features) != n:
          raise ValueError(
            f"oracle_features has {len(oracle_features)} rows; the federation has {n} clients"
          )
        sim = model_parameter_similarity(jnp.asarray(oracle_features), normalize=normalize)
      else:
        sim = label_distribution(info.label_counts, normalize=normalize)
      distances = build_3dg(sim, sigma2, epsilon, kernel=kernel).distances
      ready = jnp.array(True)
    else:
      distances = jnp.zeros((n, n), jnp.float32)
      ready = jnp.array(False)
    return FedGSState(jnp.zeros((n,), jnp.int32), distances, ready, jnp.int32(0))

  def maybe_build(state: FedGSState, ctx: SelectionContext) -> FedGSState:
    if not uses_updates:
      return state
    features = ctx.update_sketch if similarity == "cosine" else ctx.embeddings
    enough = jnp.mean(ctx.seen.astype(jnp.float32)) >= min_seen_fraction
    # rounds_since_build counts the rounds after the last build that did not rebuild, so
    # this round is the rebuild_every-th since it when rounds_since_build + 1 reaches it
    due = (rebuild_every > 0) & (state.rounds_since_build + 1 >= rebuild_every)
    build = enough & (~state.graph_ready | due)

    def rebuilt(_):
      sim = _similarity_from(features, similarity, normalize)
      return build_3dg(sim, sigma2, epsilon, kernel=kernel).distances

    distances = jax.lax.cond(build, rebuilt, lambda _: state.distances, None)
    ready = state.graph_ready | build
    since = jnp.where(build, 0, state.rounds_since_build + ready.astype(jnp.int32))
    return FedGSState(state.counts, distances, ready, since)

  def select(
    state: FedGSState, key: Array, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, FedGSState]:
    del t
    state = maybe_build(state, ctx)
    result = solve(
      state.distances,
      state.counts,
      avail,
      num_selected,
      alpha,
      key,
      num_iters=num_iters,
      num_restarts=num_restarts,
      scale=scale,
    )
    sizes = ctx.num_examples.astype(jnp.float32)[result.cohort] * result.valid
    weights = sizes / jnp.maximum(jnp.sum(sizes), 1e-12)
    counts = state.counts.at[result.cohort].add(result.valid.astype(jnp.int32))
    selection = Selection(result.cohort, result.valid, weights.astype(jnp.float32))
    return selection, state._replace(counts=counts)

  return SelectionStrategy(
    init=init,
    select=select,
    num_selected=num_selected,
    uses_updates=uses_updates,
    with_replacement=False,
  )
