"""Convolution as patches @ kernel (im2col): the CNNs' CPU default before issue 16.

On CPU, XLA runs autodiff's gradient convolutions inside a while loop (the engine's
local-step loop) on a slow path (jax-ml/jax#12868); matmuls do not have it. Measured with
``benchmarks/round_speed.py`` (BUILD_NOTES.md, "Speed"): the MNIST CNN's local training of
10 clients took 4.4 s with ``lax.conv`` and 0.71 s as im2col on the 2-core CPU. The
``canonical`` convolutions of ``fedjax_sel.models.conv_ops`` (the default since) avoid the
slow path without the patches' memory traffic (BUILD_NOTES, issue 16).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_sel.models.conv_ops import nhwc_conv
from fedjax_sel.models.precision import HALF, mixed_matmul


def image_patches(x, kernel, window_strides, padding):
  """The im2col patch matrix of NHWC ``x``: ``[N, ho, wo, kh*kw*C]``, the kh*kw shifted
  (strided) slices concatenated on the channel axis in order (i, j, c). ``padding``: a
  ``lax`` padding string or ((top, bottom), (left, right))."""
  kh, kw = kernel
  sh, sw = window_strides
  if isinstance(padding, str):
    padding = jax.lax.padtype_to_pads(x.shape[1:3], (kh, kw), (sh, sw), padding)
  (pt, pb), (pl, pr) = padding
  x = jnp.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
  h, w = x.shape[1], x.shape[2]
  ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
  cols = [
    x[:, i : i + (ho - 1) * sh + 1 : sh, j : j + (wo - 1) * sw + 1 : sw, :]
    for i in range(kh)
    for j in range(kw)
  ]
  return jnp.concatenate(cols, axis=-1)


@nhwc_conv
def im2col_conv(lhs, rhs, window_strides, padding, precision, preferred_element_type):
  """``lax.conv_general_dilated`` for NHWC x HWIO as patches @ kernel (im2col).

  The patches are kh*kw shifted slices concatenated on the channel axis, so the forward
  pass and both gradients are slices, pads and matmuls: no convolution op reaches XLA.
  On CPU, XLA runs convolutions inside a while loop (our local-step loop) on a slow path
  (jax-ml/jax#12868) and a vmapped convolution with per-client kernels becomes a grouped
  convolution that is slower still; matmuls have neither problem. Same arithmetic as the
  convolution (a sum over the same kh*kw*C products), equal to float rounding.
  Falls back to ``lax.conv_general_dilated`` for dilation, groups or other layouts.
  With bfloat16 inputs (``half_precision``) the product is ``precision.mixed_matmul``:
  bfloat16 operands, float32 accumulation, in the forward pass and both gradients.
  """
  if preferred_element_type is not None:
    return None
  kh, kw, cin, cout = rhs.shape
  patches = image_patches(lhs, (kh, kw), window_strides, padding)
  if lhs.dtype == HALF and precision is None:  # half precision: float32 accumulation
    return mixed_matmul(patches, rhs.reshape(kh * kw * cin, cout).astype(HALF))
  return jnp.einsum("nhwk,ko->nhwo", patches, rhs.reshape(kh * kw * cin, cout), precision=precision)
