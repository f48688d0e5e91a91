"""Finiteness checks of the round: which cohort slots sent finite updates, and whether a
whole pytree (the global update, the model) is finite. Jittable: masks, not exceptions."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def all_finite_per_slot(deltas) -> jax.Array:
  """bool[M]: whether every leaf of slot m of ``deltas`` ([M, ...] leaves) is finite."""
  leaves = jax.tree_util.tree_leaves(deltas)
  m = leaves[0].shape[0]
  ok = jnp.ones((m,), bool)
  for leaf in leaves:
    ok &= jnp.all(jnp.isfinite(leaf.reshape(m, -1)), axis=1)
  return ok


def mask_slots(deltas, keep):
  """``deltas`` with the slots where ``keep`` (bool[M]) is False set to zero."""
  return jax.tree_util.tree_map(
    lambda d: jnp.where(keep.reshape((-1,) + (1,) * (d.ndim - 1)), d, 0.0), deltas
  )


def tree_all_finite(tree) -> jax.Array:
  """bool[]: whether every leaf of ``tree`` is finite."""
  return jnp.all(jnp.array([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)]))
