"""Client-similarity matrices: oracle (label distributions / true models), cosine, functional.

Every function returns an ``[N, N]`` (or ``[A, B]``) float32 matrix and is jitted. The
FedGS 3DG (``fedjax_sel.similarity.graph``) is built from any of them.

References:
  Wang et al., "FedGS: Federated Graph-based Sampling with Arbitrary Client
  Availability", AAAI 2023: Eq. 10 (similarity matrix V), Eq. 11 (cosine of updates,
  clipped at 0), Eq. 12 (functional similarity on Gaussian-noise inputs), Appendix C
  ("Oracle 3DG for datasets": inner product of label-distribution vectors or of the
  true local models, min-max normalized to [0, 1]).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array

_TINY = 1e-12


def _unit_rows(x: Array) -> Array:
  """Rows scaled to unit L2 norm (all-zero rows stay zero)."""
  x = x.astype(jnp.float32)
  norm = jnp.linalg.norm(x, axis=-1, keepdims=True)
  return x / jnp.maximum(norm, _TINY)


@jax.jit
def minmax_normalize(similarity: Array) -> Array:
  """Min-max normalizes the off-diagonal entries of a square matrix to [0, 1].

  V'_ij = (V_ij - min V) / (max V - min V), with min/max over i != j; the diagonal is
  set to 1. A constant matrix maps to all ones (every pair equally similar).

  Args:
    similarity: f32[N, N].

  Returns:
    f32[N, N] with off-diagonal entries in [0, 1] and ones on the diagonal.

  References:
    FedGS (Wang et al., AAAI 2023), Appendix C, "Oracle 3DG For Datasets".
  """
  n = similarity.shape[0]
  off = ~jnp.eye(n, dtype=bool)
  sim = similarity.astype(jnp.float32)
  lo = jnp.min(jnp.where(off, sim, jnp.inf))
  hi = jnp.max(jnp.where(off, sim, -jnp.inf))
  span = hi - lo
  scaled = jnp.where(span > 0, (sim - lo) / jnp.where(span > 0, span, 1.0), 1.0)
  return jnp.where(off, jnp.clip(scaled, 0.0, 1.0), 1.0)


@jax.jit
def cosine_cross(x: Array, y: Array) -> Array:
  """Cosine similarity of every row of ``x`` with every row of ``y`` (not clipped).

  Args:
    x: f32[A, d].
    y: f32[B, d].

  Returns:
    f32[A, B] in [-1, 1]; a pair involving an all-zero row has similarity 0.
  """
  return _unit_rows(x) @ _unit_rows(y).T


@partial(jax.jit, static_argnames=("clip",))
def cosine(updates: Array, clip: bool = True) -> Array:
  """Cosine similarity of clients' latest model updates, clipped at 0 (FedGS Eq. 11).

  V_ij = max(<d_i, d_j> / (|d_i| |d_j|), 0). Works on full updates or on their
  random-projection sketches (``fedjax_sel.similarity.sketch``).

  Args:
    updates: f32[N, d], one (flattened or sketched) update per client.
    clip: clip negative similarities to 0 as Eq. 11 does.

  Returns:
    f32[N, N]; the diagonal is 1 for non-zero rows.

  References:
    FedGS (Wang et al., AAAI 2023), Eq. 11.
  """
  sim = cosine_cross(updates, updates)
  return jnp.maximum(sim, 0.0) if clip else sim


@partial(jax.jit, static_argnames=("chunk", "clip"))
def cosine_chunked(updates: Array, chunk: int = 256, clip: bool = True) -> Array:
  """``cosine(updates)`` computed ``chunk`` rows at a time (``lax.map`` over row blocks).

  Peak temporary memory is one ``[chunk, N]`` block (plus the ``[N, d]`` unit rows and
  the ``[N, N]`` output), never ``[N, N, d]``; use it when N is large.

  Args:
    updates: f32[N, d].
    chunk: rows per block (static).
    clip: clip at 0 as FedGS Eq. 11.

  Returns:
    f32[N, N], equal to ``cosine(updates, clip)``.

  References:
    FedGS (Wang et al., AAAI 2023), Eq. 11.
  """
  n = updates.shape[0]
  unit = _unit_rows(updates)
  num_blocks = -(-n // chunk)
  padded = jnp.zeros((num_blocks * chunk, unit.shape[1]), unit.dtype).at[:n].set(unit)
  blocks = padded.reshape(num_blocks, chunk, unit.shape[1])
  out = jax.lax.map(lambda block: block @ unit.T, blocks).reshape(num_blocks * chunk, n)[:n]
  return jnp.maximum(out, 0.0) if clip else out


@partial(jax.jit, static_argnames=("normalize",))
def label_distribution(label_counts: Array, normalize: bool = True) -> Array:
  """Oracle similarity from label distributions (FedGS Appendix C).

  V_ij = <p_i, p_j> / (|p_i| |p_j|) with p_k = label_counts[k] / n_k, i.e. the
  normalized inner product of label-distribution vectors, then min-max normalized over
  i != j to [0, 1] (Appendix C). The appendix says "inner dot"; the authors' released
  code uses this normalized (cosine) inner product, which we follow: it makes the
  similarity independent of how peaked a distribution is.

  Args:
    label_counts: i32[N, C] (or f32) examples of each class per client.
    normalize: min-max normalize as in Appendix C.

  Returns:
    f32[N, N].

  References:
    FedGS (Wang et al., AAAI 2023), Eq. 10 and Appendix C.
  """
  counts = label_counts.astype(jnp.float32)
  dist = counts / jnp.maximum(jnp.sum(counts, axis=1, keepdims=True), _TINY)
  sim = cosine_cross(dist, dist)
  return minmax_normalize(sim) if normalize else sim


@partial(jax.jit, static_argnames=("normalize",))
def model_parameter_similarity(true_params: Any, normalize: bool = True) -> Array:
  """Oracle similarity from clients' true local models (FedGS Appendix C, Synthetic).

  For Synthetic(alpha, beta) the clients differ in their optimal model (W_k, b_k), so
  the oracle features are the flattened true parameters and V is their normalized
  inner product, min-max normalized over i != j to [0, 1].

  Args:
    true_params: f32[N, F] or a pytree of [N, ...] arrays (flattened per client).
    normalize: min-max normalize as in Appendix C.

  Returns:
    f32[N, N].

  References:
    FedGS (Wang et al., AAAI 2023), Appendix C.
  """
  leaves = jax.tree_util.tree_leaves(true_params)
  n = leaves[0].shape[0]
  feats = jnp.concatenate([leaf.reshape(n, -1).astype(jnp.float32) for leaf in leaves], 1)
  sim = cosine_cross(feats, feats)
  return minmax_normalize(sim) if normalize else sim


@partial(jax.jit, static_argnames=("clip",))
def functional(outputs: Array, clip: bool = True) -> Array:
  """Functional similarity (FedGS Eq. 12): clipped cosine of functional embeddings.

  e_i is client i's local model output on a shared batch of Gaussian-noise inputs,
  averaged over the batch (``functional_embedding``); V_ij = max(cos(e_i, e_j), 0).

  Args:
    outputs: f32[N, E], one embedding per client.
    clip: clip at 0 as Eq. 12.

  Returns:
    f32[N, N].

  References:
    FedGS (Wang et al., AAAI 2023), Eq. 12.
  """
  return cosine(outputs, clip=clip)


def functional_embedding(
  apply_fn: Callable[[Any, Array], Array],
  params: Any,
  noise_batch: Array,
  softmax: bool = False,
) -> Array:
  """One client's functional embedding: its model's mean output on a noise batch.

  Eq. 12 takes "the average of the l-th layer's network embedding on this batch" with l
  the output layer, so by default the raw outputs (logits) are averaged, as in the
  authors' code. ``softmax=True`` averages class probabilities instead. vmap over
  stacked params for a cohort.

  Args:
    apply_fn: ``apply_fn(params, x) -> f32[B, E]``.
    params: one client's model parameters.
    noise_batch: f32[B, ...] shared Gaussian-noise inputs (``noise_inputs``).
    softmax: average softmax probabilities instead of logits.

  Returns:
    f32[E].

  References:
    FedGS (Wang et al., AAAI 2023), Eq. 12.
  """
  out = apply_fn(params, noise_batch).astype(jnp.float32)
  out = out.reshape(out.shape[0], -1)
  if softmax:
    out = jax.nn.softmax(out, axis=-1)
  return jnp.mean(out, axis=0)


def noise_inputs(
  key: jax.Array,
  num: int,
  input_shape: tuple[int, ...],
  mean: Array | float = 0.0,
  std: Array | float = 1.0,
) -> Array:
  """A shared batch of Gaussian-noise inputs N(mean, std^2) for functional similarity.

  FedGS draws the noise from N(mu, Sigma) with the mean and covariance of a small
  server-side validation set; the authors' code uses the scalar mean and standard
  deviation of one validation batch, which ``mean``/``std`` (scalars or arrays
  broadcastable to ``input_shape``) reproduce.

  Args:
    key: PRNG key.
    num: batch size B (static).
    input_shape: shape of one input (static).
    mean: scalar or array broadcastable to ``input_shape``.
    std: scalar or array broadcastable to ``input_shape``.

  Returns:
    f32[B, *input_shape].

  References:
    FedGS (Wang et al., AAAI 2023), Eq. 12.
  """
  z = jax.random.normal(key, (num, *input_shape), jnp.float32)
  return z * jnp.asarray(std, jnp.float32) + jnp.asarray(mean, jnp.float32)
