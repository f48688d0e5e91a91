"""Convolution and max pooling whose gradients XLA:CPU runs on its fast paths.

* :func:`canonical_conv`: ``lax.conv_general_dilated`` (NHWC x HWIO, stride 1) with a
  custom VJP that writes both gradients as convolutions in the same NHWC x HWIO layout.
  XLA:CPU sends a convolution to its fast kernels (YNNPACK / Eigen) only in that canonical
  layout; autodiff's own gradient convolutions (kernel reversed and transposed, batch and
  feature swapped) are rewritten into it at the top level of a program but not inside a
  while loop (jax-ml/jax#12868), where they fall back to a naive loop nest, ~30x slower
  (measured: the MNIST CNN's second convolution at batch 32, 631 ms vs 21 ms per step).
  Here the reversal and transposes are explicit, cheap ops on the kernel and the
  [N, H, W, C] activations, so every convolution of a local step is canonical wherever it
  runs. The gradients are the same sums as autodiff's (tested equal).
* :func:`max_pool_2x2`: 2x2 / stride-2 max pooling (``flax.linen.max_pool``, VALID) as a
  reshape and a max, with a custom VJP that gives the gradient to the first maximum of each
  window in row-major order, as ``max_pool``'s select-and-scatter does (ties included;
  tested). XLA:CPU runs ``max_pool``'s gradient as an argmax reduce-window with four index
  arrays and a scatter: 15 of the 50 ms of a batch-32 MNIST CNN step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

_NHWC = ("NHWC", "HWIO", "NHWC")


def _conv(x, w, pads):
  return jax.lax.conv_general_dilated(x, w, (1, 1), pads, dimension_numbers=_NHWC)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _canonical(x, w, pads):
  return _conv(x, w, pads)


def _canonical_fwd(x, w, pads):
  return _conv(x, w, pads), (x, w)


def _canonical_bwd(pads, res, g):
  x, w = res
  kh, kw = w.shape[:2]
  (pt, pb), (pl, pr) = pads
  # input gradient: g correlated with the kernel reversed in space, in/out swapped (HWIO)
  w_t = jnp.transpose(w[::-1, ::-1], (0, 1, 3, 2))
  dx = _conv(g, w_t, ((kh - 1 - pt, kh - 1 - pb), (kw - 1 - pl, kw - 1 - pr)))
  # kernel gradient: batch and feature swapped, x as [C_in, H, W, N] and g as the kernel
  # [Ho, Wo, N, C_out]: the output [C_in, kh, kw, C_out] is the gradient transposed
  dw = _conv(jnp.transpose(x, (3, 1, 2, 0)), jnp.transpose(g, (1, 2, 0, 3)), pads)
  return dx, jnp.transpose(dw, (1, 2, 0, 3))


_canonical.defvjp(_canonical_fwd, _canonical_bwd)


def nhwc_conv(fast: Callable) -> Callable:
  """A ``lax.conv_general_dilated`` replacement that calls
  ``fast(lhs, rhs, window_strides, padding, precision, preferred_element_type)`` for NHWC x
  HWIO convolutions without dilation or groups; ``fast`` returns None for what it does not
  handle, and that, like every other convolution, goes to ``lax.conv_general_dilated``."""

  @functools.wraps(fast)
  def conv(
    lhs,
    rhs,
    window_strides,
    padding,
    lhs_dilation=None,
    rhs_dilation=None,
    dimension_numbers=None,
    feature_group_count=1,
    batch_group_count=1,
    precision=None,
    preferred_element_type=None,
  ):
    dn = jax.lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    plain = (
      lhs.ndim == 4
      and (dn.lhs_spec, dn.rhs_spec, dn.out_spec) == ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
      and feature_group_count == 1
      and batch_group_count == 1
      and all(d == 1 for d in (lhs_dilation or (1, 1)))
      and all(d == 1 for d in (rhs_dilation or (1, 1)))
    )
    out = None
    if plain:
      out = fast(lhs, rhs, tuple(window_strides), padding, precision, preferred_element_type)
    if out is None:
      out = jax.lax.conv_general_dilated(
        lhs,
        rhs,
        window_strides,
        padding,
        lhs_dilation,
        rhs_dilation,
        dimension_numbers,
        feature_group_count,
        batch_group_count,
        precision,
        preferred_element_type,
      )
    return out

  return conv


@nhwc_conv
def canonical_conv(lhs, rhs, window_strides, padding, precision, preferred_element_type):
  """``lax.conv_general_dilated`` whose gradients are canonical convolutions (see above).

  Stride-1 NHWC x HWIO convolutions without dilation or groups (the papers' CNNs) take the
  custom VJP; anything else falls back to ``lax.conv_general_dilated`` unchanged.
  """
  if window_strides != (1, 1) or precision is not None or preferred_element_type is not None:
    return None
  if isinstance(padding, str):
    padding = jax.lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], (1, 1), padding)
  pads = tuple((int(lo), int(hi)) for lo, hi in padding)
  return _canonical(lhs, rhs, pads)


def _windows(x):
  """[N, H, W, C] (H, W even) -> the four [N, H/2, W/2, C] corners of each 2x2 window,
  in row-major order."""
  n, h, w, c = x.shape
  r = x.reshape(n, h // 2, 2, w // 2, 2, c)
  return r[:, :, 0, :, 0], r[:, :, 0, :, 1], r[:, :, 1, :, 0], r[:, :, 1, :, 1]


@jax.custom_vjp
def _pool(x):
  a, b, c, d = _windows(x)
  return jnp.maximum(jnp.maximum(a, b), jnp.maximum(c, d))


def _pool_fwd(x):
  y = _pool(x)
  return y, (x, y)


def _pool_bwd(res, g):
  x, y = res
  a, b, c, d = _windows(x)
  zero = jnp.zeros_like(g)
  # the first window element equal to the maximum takes the whole gradient
  ta = a == y
  tb = (b == y) & ~ta
  tc = (c == y) & ~(ta | tb)
  td = ~(ta | tb | tc)
  parts = [jnp.where(t, g, zero) for t in (ta, tb, tc, td)]
  n, h2, w2, ch = g.shape
  top = jnp.stack(parts[:2], axis=3)  # [N, H/2, W/2, 2, C]
  bottom = jnp.stack(parts[2:], axis=3)
  dx = jnp.stack([top, bottom], axis=2)  # [N, H/2, 2, W/2, 2, C]
  return (dx.reshape(n, 2 * h2, 2 * w2, ch),)


_pool.defvjp(_pool_fwd, _pool_bwd)


def max_pool_2x2(x):
  """``flax.linen.max_pool(x, (2, 2), strides=(2, 2))`` (VALID) for NHWC ``x``: a trailing
  odd row or column is dropped, as VALID pooling drops it."""
  h, w = x.shape[1], x.shape[2]
  if h % 2 or w % 2:
    x = x[:, : h - h % 2, : w - w % 2]
  return _pool(x)
