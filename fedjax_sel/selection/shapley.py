"""Shapley-value-based selection (SVB), the baseline of the FedEMD paper.

After local training, the server estimates each cohort member's Shapley value (Eq. 10)
with truncated Monte-Carlo permutation sampling (TMC-Shapley). The value of a coalition S
of cohort slots is the server's validation accuracy of ``params + sum_{k in S} w_k delta_k
/ sum_{k in S} w_k`` (FedAvg over S, ``v(empty) = accuracy of params``), via
``ctx.eval_value``. Each client keeps an estimate (exponential moving average of its
measurements). Selection is "a variant of weighted random selection whose weights are
decided by the relative Shapley Value" (FedEMD Sec. 5, Baseline): the estimates are
min-max normalized to [0, 1] over the clients measured so far (the paper's "normalized
Shapley Value ranging between [0, 1]"), never-measured clients get 1 (optimistic, so every
client gets measured), an exploration floor is added, and M available clients are drawn
without replacement by A-Res with these weights. Aggregation is FedAvg.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sel.core.registry import check_range, is_integer
from fedjax_sel.core.types import (
  Array,
  ClientInfo,
  PRNGKey,
  PyTree,
  Selection,
  SelectionContext,
  SelectionStrategy,
)
from fedjax_sel.selection import common
from fedjax_sel.selection.registry import register


class ShapleyState(NamedTuple):
  """SVB server state.

  Attributes:
    value: f32[N], each client's Shapley-value estimate (EMA over the rounds it was measured).
    count: i32[N], number of rounds in which the client's Shapley value was measured.
    key: PRNG key used (folded with the round) for the Monte-Carlo permutations.
  """

  value: Array
  count: Array
  key: PRNGKey


def shapley_values(
  key: PRNGKey,
  value_fn: Callable[[Array], Array],
  valid: Array,
  num_permutations: int,
  truncation_tol: float = 0.0,
) -> Array:
  """Truncated Monte-Carlo estimate of the Shapley value of each of M players.

  For each of ``num_permutations`` random orders of the slots, walk the order adding one
  valid player at a time and credit it with ``v(prefix + player) - v(prefix)``. Once the
  prefix value is within ``truncation_tol * |v(all)|`` of the full coalition's value the
  rest of the walk is skipped (marginals 0), as in TMC-Shapley. Invalid slots are not
  players (value 0, never evaluated).

  Args:
    key: PRNG key for the permutations.
    value_fn: ``fn(mask: bool[M]) -> f32[]``, the value of a coalition.
    valid: bool[M], which slots are players.
    num_permutations: static number of sampled permutations.
    truncation_tol: relative truncation tolerance (0 disables truncation).

  Returns:
    f32[M], the estimates; with ``truncation_tol=0`` they sum to ``v(valid) - v(empty)``
    exactly (efficiency) for every sample of permutations.

  References:
    Shapley 1953; Ghorbani & Zou, "Data Shapley", ICML 2019 (TMC-Shapley); FedEMD Eq. 10.
  """
  m = valid.shape[0]
  empty = jnp.zeros((m,), bool)
  v_empty = jnp.asarray(value_fn(empty), jnp.float32)
  v_full = jnp.asarray(value_fn(valid), jnp.float32)
  threshold = truncation_tol * jnp.abs(v_full)
  perms = jax.vmap(lambda k: jax.random.permutation(k, m))(jax.random.split(key, num_permutations))

  def walk(total, perm):
    def step(carry, slot):
      mask, v_prev = carry
      is_player = valid[slot]
      truncated = jnp.abs(v_full - v_prev) < threshold
      new_mask = mask.at[slot].set(is_player)
      v_new = jax.lax.cond(
        is_player & ~truncated,
        lambda: jnp.asarray(value_fn(new_mask), jnp.float32),
        lambda: v_prev,
      )
      return (new_mask, v_new), v_new - v_prev

    _, marginals = jax.lax.scan(step, (empty, v_empty), perm)
    return total + jnp.zeros((m,), jnp.float32).at[perm].set(marginals), None

  total, _ = jax.lax.scan(walk, jnp.zeros((m,), jnp.float32), perms)
  return jnp.where(valid, total / num_permutations, 0.0)


def coalition_params(params: PyTree, deltas: PyTree, weights: Array, mask: Array) -> PyTree:
  """``params + sum_k w_k delta_k / sum_k w_k`` over slots in ``mask`` (params if empty).

  Args:
    params: the global parameters.
    deltas: pytree of [M, ...] local updates (local minus global).
    weights: f32[M], aggregation weights of the slots (e.g. FedAvg's).
    mask: bool[M], the coalition.
  """
  w = jnp.where(mask, weights, 0.0)
  total = jnp.sum(w)
  w = jnp.where(total > 0, w / jnp.where(total > 0, total, 1.0), 0.0)
  return jax.tree_util.tree_map(
    lambda p, d: p + jnp.tensordot(w, d, axes=1).astype(p.dtype), params, deltas
  )


def relative_values(value: Array, count: Array) -> Array:
  """f32[N], min-max normalized estimates over measured clients; unmeasured -> 1."""
  seen = count > 0
  lo = jnp.min(jnp.where(seen, value, jnp.inf))
  hi = jnp.max(jnp.where(seen, value, -jnp.inf))
  spread = hi - lo
  rel = jnp.where(spread > 0, (value - lo) / jnp.where(spread > 0, spread, 1.0), 1.0)
  return jnp.where(seen, rel, 1.0)


@register("shapley")
def make_shapley(
  num_selected: int,
  num_permutations: int = 10,
  truncation_tol: float = 0.01,
  exploration: float = 0.1,
  momentum: float = 0.5,
) -> SelectionStrategy:
  """Shapley-value-based selection (SVB baseline of FedEMD).

  Args:
    num_selected: M, the number of cohort slots.
    num_permutations: Monte-Carlo permutations per round (``num_permutations * M + 2``
      calls of ``ctx.eval_value`` per round at most).
    truncation_tol: TMC truncation, relative to the full cohort's value (0 disables).
    exploration: added to every client's relative Shapley value (in [0, 1]) before
      sampling, so that low-value clients keep a chance to be re-measured.
    momentum: EMA factor for a client's estimate (0 keeps only the latest measurement).

  References:
    Huang et al. (FedEMD paper), Definition 3.4 and Section 5 "Baseline";
    Ghorbani & Zou 2019 (TMC-Shapley).
  """
  num_selected = common.check_num_selected(num_selected)
  if not is_integer(num_permutations):
    raise ValueError(f"num_permutations={num_permutations!r} must be a positive integer")
  check_range("num_permutations", num_permutations, 1, None)
  num_permutations = int(num_permutations)
  check_range("truncation_tol", truncation_tol, 0.0, 1.0)
  check_range("exploration", exploration, 0.0, None, low_inclusive=False)
  check_range("momentum", momentum, 0.0, 1.0, high_inclusive=False)

  def init(key: PRNGKey, info: ClientInfo) -> ShapleyState:
    n = info.num_examples.shape[0]
    return ShapleyState(
      value=jnp.zeros((n,), jnp.float32), count=jnp.zeros((n,), jnp.int32), key=key
    )

  def select(
    state: ShapleyState, key: PRNGKey, avail: Array, t: Array, ctx: SelectionContext
  ) -> tuple[Selection, ShapleyState]:
    del t
    weights = relative_values(state.value, state.count) + exploration
    cohort, valid = common.weighted_sample_without_replacement(key, weights, avail, num_selected)
    agg = common.fedavg_weights(ctx.num_examples, cohort, valid)
    return common.make_selection(cohort, valid, agg), state

  def observe(
    state: ShapleyState,
    selection: Selection,
    deltas: PyTree,
    losses: Array,
    ctx: SelectionContext,
  ) -> ShapleyState:
    del losses

    def value_fn(mask):
      return ctx.eval_value(coalition_params(ctx.params, deltas, selection.weights, mask))

    key = jax.random.fold_in(state.key, ctx.round)
    sv = shapley_values(key, value_fn, selection.valid, num_permutations, truncation_tol)
    n = state.value.shape[0]
    idx = jnp.where(selection.valid, selection.cohort, n)  # invalid slots are dropped
    old = state.value[selection.cohort]
    first = state.count[selection.cohort] == 0
    new = jnp.where(first, sv, momentum * old + (1.0 - momentum) * sv)
    return state._replace(
      value=state.value.at[idx].set(new, mode="drop"),
      count=state.count.at[idx].add(1, mode="drop"),
    )

  return SelectionStrategy(init=init, select=select, num_selected=num_selected, observe=observe)
