"""Random-projection sketches of client updates (memory N x d instead of N x P)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree


def flatten_stacked(tree) -> jax.Array:
  """pytree of [M, ...] arrays -> f32[M, P] (leaves flattened in tree order)."""
  leaves = jax.tree_util.tree_leaves(tree)
  m = leaves[0].shape[0]
  return jnp.concatenate([leaf.reshape(m, -1) for leaf in leaves], axis=1)


def num_params(params) -> int:
  return int(ravel_pytree(params)[0].size)


def make_projection(key: jax.Array, num_params: int, dim: int) -> jax.Array:
  """A fixed Gaussian projection f32[P, d] scaled by 1/sqrt(d) (Johnson-Lindenstrauss).

  When ``dim >= num_params`` the identity is returned, so the sketch is exact.
  """
  if dim >= num_params:
    return jnp.eye(num_params, dtype=jnp.float32)
  return jax.random.normal(key, (num_params, dim), jnp.float32) / jnp.sqrt(dim)


def sketch(flat_updates: jax.Array, projection: jax.Array) -> jax.Array:
  """f32[M, P] @ f32[P, d] -> f32[M, d]."""
  return flat_updates @ projection
