"""Random-projection sketches of client updates (memory N x d instead of N x P).

``d >= P`` keeps the exact flattened updates: ``make_projection`` then returns the identity
as an empty f32[0, P] marker (a P x P matrix would take 6.3 GB at Fraboni et al.'s MLP-50,
P = 39,760) and ``sketch`` passes the updates through unchanged.
"""

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

  When ``dim >= num_params`` the sketch is exact: the identity, returned as the marker
  f32[0, P] (``is_exact``), which ``sketch`` applies without a P x P matrix.
  """
  if dim >= num_params:
    return jnp.zeros((0, num_params), jnp.float32)
  return jax.random.normal(key, (num_params, dim), jnp.float32) / jnp.sqrt(dim)


def is_exact(projection: jax.Array) -> bool:
  """True for the identity marker f32[0, P] of ``make_projection`` (static: by shape)."""
  return projection.shape[0] == 0 and projection.shape[1] > 0


def sketch(flat_updates: jax.Array, projection: jax.Array) -> jax.Array:
  """f32[M, P] @ f32[P, d] -> f32[M, d]; the updates themselves for the identity marker."""
  if is_exact(projection):
    if projection.shape[1] != flat_updates.shape[1]:
      raise ValueError(
        f"exact sketch of {flat_updates.shape[1]} parameters with a marker for "
        f"{projection.shape[1]}; allowed: the same parameter count"
      )
    return flat_updates.astype(jnp.float32)
  return flat_updates @ projection


def jl_cosine_error_bound(dim: int, num_vectors: int, failure_prob: float = 0.01) -> float:
  """Worst-case cosine error of a Gaussian ``dim``-dim sketch of ``num_vectors`` vectors.

  With probability >= 1 - ``failure_prob`` every pairwise cosine computed from the
  sketches is within the returned bound of the exact cosine. Derivation: by
  Dasgupta & Gupta (2003, Lemma 2.2) a vector's squared norm leaves [1 - e, 1 + e]
  times its true value with probability <= 2 exp(-dim (e^2/2 - e^3/3) / 2); a union
  bound over the n vectors u_i and the n (n - 1) vectors u_i +- u_j gives failure
  probability <= 2 n^2 exp(-dim (e^2/2 - e^3/3) / 2). On that event polarization gives
  |<Pu, Pv> - <u, v>| <= e for unit u, v, hence |cos_sketch - cos| <= 2 e / (1 - e).
  The bound is conservative (the typical error is about 1/sqrt(dim)); it is a planning
  helper, not jitted.

  Args:
    dim: sketch dimension d.
    num_vectors: number of vectors n compared pairwise.
    failure_prob: allowed probability that some pair exceeds the bound.

  Returns:
    The bound (a Python float; may exceed 1 when ``dim`` is small).

  References:
    Johnson & Lindenstrauss (1984); Dasgupta & Gupta, Random Struct. Algorithms 2003.
  """
  import math

  target = math.log(2 * num_vectors**2 / failure_prob) * 2 / dim
  lo, hi = 0.0, 1.0
  if hi**2 / 2 - hi**3 / 3 < target:
    return math.inf
  for _ in range(100):
    mid = (lo + hi) / 2
    if mid**2 / 2 - mid**3 / 3 >= target:
      hi = mid
    else:
      lo = mid
  return 2 * hi / (1 - hi) if hi < 1 else math.inf
