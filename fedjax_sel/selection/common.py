"""Shared building blocks of the selection strategies (masked top-k, weighted sampling).

Everything here is jittable, vmappable and has fixed output shapes: a cohort always has
``num_selected`` slots and a ``valid`` mask marks the filled ones.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sel.core.registry import check_range, is_integer
from fedjax_sel.core.types import Array, PRNGKey, PyTree, Selection, SelectionContext

# Keys of available clients whose sampling weight is exactly 0 sit at this level: below
# every client with a positive weight (log w >= -104 for the smallest f32), above the
# unavailable ones (-inf), so they are only used to fill slots nobody else can fill.
_ZERO_WEIGHT_LEVEL = -1e4


class EmptyState(NamedTuple):
  """State of a stateless strategy (an empty pytree)."""


def check_num_selected(num_selected) -> int:
  """Validates ``num_selected`` (M) at ``make`` time and returns it as a Python int."""
  if not is_integer(num_selected):
    raise ValueError(f"num_selected={num_selected!r} must be a positive integer")
  check_range("num_selected", num_selected, 1, None)
  return int(num_selected)


def num_valid(avail: Array, num_selected: int) -> Array:
  """i32[], min(M, |available|): how many distinct slots a without-replacement method fills."""
  return jnp.minimum(jnp.sum(avail.astype(jnp.int32)), num_selected)


def masked_top_k(scores: Array, mask: Array, k: int) -> tuple[Array, Array]:
  """The ``k`` highest-scoring entries among those where ``mask`` holds.

  Args:
    scores: f32[N], any real values (NaN is treated as the lowest finite score).
    mask: bool[N], which entries may be picked.
    k: static number of slots.

  Returns:
    (idx i32[k], valid bool[k]): ``idx[:valid.sum()]`` are distinct masked entries in
    decreasing score order, ``valid.sum() == min(k, mask.sum())``; invalid slots hold 0.
  """
  n = scores.shape[0]
  finfo = jnp.finfo(jnp.float32)
  clean = jnp.nan_to_num(
    scores.astype(jnp.float32), nan=finfo.min, posinf=finfo.max, neginf=finfo.min
  )
  keyed = jnp.where(mask, clean, -jnp.inf)
  if k > n:  # more slots than entries: pad so top_k has enough candidates
    keyed = jnp.concatenate([keyed, jnp.full((k - n,), -jnp.inf)])
  _, idx = jax.lax.top_k(keyed, k)
  valid = jnp.arange(k) < jnp.minimum(jnp.sum(mask.astype(jnp.int32)), k)
  idx = jnp.where(valid, idx, 0).astype(jnp.int32)
  return idx, valid


def ares_log_keys(key: PRNGKey, weights: Array, mask: Array) -> Array:
  """Efraimidis-Spirakis A-Res keys in log space, f32[N].

  A-Res gives item i the key ``u_i ** (1 / w_i)`` with ``u_i ~ U(0, 1)`` and keeps the k
  largest. We return ``log(w_i) - log(-log(u_i))``, a strictly increasing function of
  ``log(u_i) / w_i = log(u_i ** (1 / w_i))`` for the same ``u_i`` (it is its negated
  log-reciprocal), so the top-k is the same while tiny weights cannot underflow. This is
  also the Gumbel-top-k trick. Items outside ``mask`` get -inf; items in ``mask`` with
  weight 0 get a key below every positive-weight item (used only to fill slots).

  Args:
    key: PRNG key.
    weights: f32[N], non-negative sampling weights (need not sum to 1).
    mask: bool[N], which items may be sampled.

  References:
    Efraimidis & Spirakis, "Weighted random sampling with a reservoir", IPL 2006 (A-Res);
    FedEMD (Huang et al.), Algorithm 1 lines 9-17.
  """
  u = jax.random.uniform(
    key, weights.shape, jnp.float32, minval=jnp.finfo(jnp.float32).tiny, maxval=1.0
  )
  gumbel = -jnp.log(-jnp.log(u))
  positive = weights > 0
  log_w = jnp.log(jnp.where(positive, weights, 1.0))
  keys = jnp.where(positive, log_w, _ZERO_WEIGHT_LEVEL) + gumbel
  return jnp.where(mask, keys, -jnp.inf)


def weighted_sample_without_replacement(
  key: PRNGKey, weights: Array, mask: Array, k: int
) -> tuple[Array, Array]:
  """Samples min(k, mask.sum()) distinct items with A-Res (successive sampling).

  The first pick is item i with probability ``w_i / sum_{j in mask} w_j``; each later pick
  is drawn the same way from the items not yet picked.

  Args:
    key: PRNG key.
    weights: f32[N], non-negative weights.
    mask: bool[N], which items may be sampled.
    k: static number of slots.

  Returns:
    (idx i32[k], valid bool[k]) as in ``masked_top_k``.

  References:
    Efraimidis & Spirakis 2006; FedEMD Algorithm 1 (weighted random sampling).
  """
  return masked_top_k(ares_log_keys(key, weights, mask), mask, k)


def uniform_without_replacement(key: PRNGKey, mask: Array, k: int) -> tuple[Array, Array]:
  """min(k, mask.sum()) distinct items chosen uniformly at random among ``mask``."""
  scores = jax.random.uniform(key, mask.shape, jnp.float32)
  return masked_top_k(scores, mask, k)


def categorical_with_replacement(
  key: PRNGKey, weights: Array, mask: Array, k: int
) -> tuple[Array, Array]:
  """k i.i.d. draws from the distribution proportional to ``weights`` restricted to ``mask``.

  If every masked weight is 0 the draws are uniform over ``mask``. If ``mask`` is empty,
  all slots are invalid.

  Returns:
    (idx i32[k], valid bool[k]); valid is all True iff ``mask`` has an entry.
  """
  w = jnp.where(mask, jnp.maximum(weights, 0.0), 0.0)
  w = jnp.where(jnp.sum(w) > 0, w, mask.astype(jnp.float32))
  logits = jnp.where(w > 0, jnp.log(jnp.where(w > 0, w, 1.0)), -jnp.inf)
  any_avail = jnp.any(mask)
  logits = jnp.where(any_avail, logits, 0.0)  # keep categorical well-defined
  idx = jax.random.categorical(key, logits, shape=(k,)).astype(jnp.int32)
  valid = jnp.broadcast_to(any_avail, (k,))
  return jnp.where(valid, idx, 0), valid


def fedavg_weights(num_examples: Array, cohort: Array, valid: Array) -> Array:
  """f32[M], ``n_k / sum of n over the valid cohort`` (0 on invalid slots, all 0 if none).

  Args:
    num_examples: i32[N] or f32[N], examples per client.
    cohort: i32[M], client ids.
    valid: bool[M].

  References:
    McMahan et al. 2017, FedAvg aggregation.
  """
  n = jnp.where(valid, num_examples[cohort].astype(jnp.float32), 0.0)
  total = jnp.sum(n)
  return jnp.where(total > 0, n / jnp.where(total > 0, total, 1.0), 0.0)


def equal_weights(valid: Array) -> Array:
  """f32[M], ``1 / M`` on valid slots, 0 elsewhere (MD / clustered sampling)."""
  m = valid.shape[0]
  return valid.astype(jnp.float32) / m


def make_selection(cohort: Array, valid: Array, weights: Array) -> Selection:
  """Builds a Selection with invalid slots normalized (id 0, weight 0)."""
  valid = valid.astype(bool)
  return Selection(
    cohort=jnp.where(valid, cohort, 0).astype(jnp.int32),
    valid=valid,
    weights=jnp.where(valid, weights, 0.0).astype(jnp.float32),
  )


def fill_empty_slots(
  key: PRNGKey, cohort: Array, valid: Array, avail: Array
) -> tuple[Array, Array]:
  """Fills the invalid slots with available clients not in the cohort, uniformly at random.

  Used by strategies that pick from one group of clients (a TiFL tier, a FedFast cluster)
  when the group has fewer available clients than slots: afterwards ``valid.sum() ==
  min(M, avail.sum())`` and the cohort stays distinct. Valid slots keep their clients.

  Args:
    key: PRNG key.
    cohort: i32[M], distinct clients on the valid slots.
    valid: bool[M].
    avail: bool[N].

  Returns:
    (cohort i32[M], valid bool[M]).
  """
  m = cohort.shape[0]
  n = avail.shape[0]
  picked = jnp.zeros((n,), jnp.int32).at[cohort].add(valid.astype(jnp.int32)) > 0
  fill, fill_valid = uniform_without_replacement(key, avail & ~picked, m)
  pos = jnp.clip(jnp.cumsum(~valid) - 1, 0, m - 1)  # the p-th empty slot takes fill[p]
  new_valid = valid | (~valid & fill_valid[pos])
  new_cohort = jnp.where(valid, cohort, fill[pos])
  return jnp.where(new_valid, new_cohort, 0).astype(jnp.int32), new_valid


def local_model_values(ctx: SelectionContext, deltas: PyTree) -> Array:
  """f32[M], ``ctx.eval_value`` of every slot's locally trained model ``params + delta_m``.

  On demand: only a strategy's ``observe`` that calls it pays for it (M evaluations of the
  server's validation set, the global test set in our experiments, inside the jitted round:
  ``ctx.eval_values``, as wide as the cohort engine, or ``ctx.eval_value`` vmapped over the
  cohort where the context has no ``eval_values``). Invalid slots are evaluated too (their
  deltas are 0: the global model); mask them with the Selection's ``valid``.

  Args:
    ctx: the round's SelectionContext (``params`` are the global parameters the cohort
      trained from).
    deltas: pytree of [M, ...], each slot's local params minus ``ctx.params``.
  """
  local = jax.tree_util.tree_map(lambda g, d: g[None] + d, ctx.params, deltas)
  values = jax.vmap(ctx.eval_value) if ctx.eval_values is None else ctx.eval_values
  return jnp.asarray(values(local), jnp.float32)
